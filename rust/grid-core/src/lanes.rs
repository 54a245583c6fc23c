//! Broadcast lanes: versioned items that piggyback on SWIM traffic as foca custom
//! broadcasts.
//!
//! An item is named by `(origin site, lane, key)` and carries a version; only a higher
//! version of the same name is news. News is handed to the host exactly once, re-gossiped
//! to g members (through the relay queue, [`crate::relay`]) and replaces the older version
//! waiting there at once, while items of other names are untouched; digests
//! ([`crate::repair`]) bring what that push misses. The
//! latest version of every name is kept in an [`ItemStore`] so a push/pull sync can teach
//! late joiners what was published before they arrived. The store keeps names in one order every node shares
//! ([`ItemName`]), so a node can walk a store larger than one sync in parts, each part from
//! whichever peer answers.
//!
//! Item encoding: `origin_len u8 | origin | lane u8 | key_len u8 | key | version u64 |
//! payload | signature [64]`. The origin site signs (over [`ITEM_DOMAIN`] and everything
//! before the signature); relays and syncs pass the signature on untouched, and a node takes
//! an item only if it verifies under the key the origin's certificate proved.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::BufMut;
use foca::BroadcastHandler;

use crate::auth::{PublicKey, ITEM_DOMAIN, SIGNATURE_LEN};
use crate::identity::{validate_site, Interner, NodeId, MAX_SITE_LEN};
use crate::names::{export_rank, EXPORT_LANES, LANE_COUNT};
use crate::relay::RelayQueue;
use crate::repair::{version_hash, Digest, REPAIR_WINDOW};
use crate::wire::{Reader, WireError, MAX_BROADCAST_HEADER_LEN, MAX_FOCA_PACKET};

/// What names an item (its lane, its name, its version's key in foca's backlog) is defined
/// in [`crate::names`], below this module and the relay queue and digests it uses, and
/// re-exported here.
pub use crate::names::{BroadcastKey, ItemName, Lane};

/// How many item names a node remembers (latest version each) unless told otherwise: a
/// mesh of 100 sites with 300 providers each (two items a provider, a few more a site).
/// The store's bounds live with the store; the driver re-exports them.
pub const DEFAULT_ITEM_CAPACITY: usize = 65_536;
/// The most item names a node may be told to remember.
pub const MAX_ITEM_CAPACITY: usize = 1 << 20;

/// Longest item key, in bytes.
pub const MAX_KEY_LEN: usize = 128;
/// Largest encoded item, signature included. Below what is left of a packet after the
/// largest `Broadcast` header and the item's length prefix, so an item always fits a
/// `Broadcast` message and never sits in foca's backlog forever.
pub const MAX_ITEM_LEN: usize = 1024;
const _: () = assert!(MAX_ITEM_LEN + 2 + MAX_BROADCAST_HEADER_LEN <= MAX_FOCA_PACKET);

/// Items kept while their origin's key is unknown; the oldest give way first.
const WAITING_CAPACITY: usize = 1024;

/// Refused in a cert-lane payload: certificates travel, private keys never do.
pub const PRIVATE_KEY_MARKER: &[u8] = b"PRIVATE KEY";

/// A version of one named item.
#[derive(Clone, PartialEq, Eq)]
pub struct Item {
    pub origin: Arc<str>,
    pub lane: Lane,
    pub key: Arc<str>,
    pub version: u64,
    pub payload: Arc<[u8]>,
}

impl fmt::Debug for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Payloads are the caller's business and stay out of logs.
        write!(
            f,
            "Item({}/{}/{} v{}, {} bytes)",
            self.origin,
            self.lane.name(),
            self.key,
            self.version,
            self.payload.len()
        )
    }
}

/// Why a local publish was refused. Nothing is stored or sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishError {
    BadKey(String),
    TooLarge { len: usize, max: usize },
    PrivateKey,
    StoreFull,
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::BadKey(why) => f.write_str(why),
            PublishError::TooLarge { len, max } => write!(
                f,
                "item of {len} encoded bytes exceeds the {max}-byte limit of one packet; \
                 split the data across several keys"
            ),
            PublishError::PrivateKey => f.write_str(
                "cert-lane payload contains a private key marker ('PRIVATE KEY'); \
                 only public certificates may be broadcast",
            ),
            PublishError::StoreFull => f.write_str("the item store is full"),
        }
    }
}

impl std::error::Error for PublishError {}

pub fn contains_private_key(payload: &[u8]) -> bool {
    payload
        .windows(PRIVATE_KEY_MARKER.len())
        .any(|w| w == PRIVATE_KEY_MARKER)
}

pub fn encoded_item_len(origin: &str, key: &str, payload: &[u8]) -> usize {
    1 + origin.len() + 1 + 1 + key.len() + 8 + payload.len() + SIGNATURE_LEN
}

/// Checks a local item and encodes it into `out`, signed by `sign` (which gets the bytes
/// the signature covers, without the domain label).
pub fn encode_publish(
    origin: &str,
    lane: Lane,
    key: &str,
    version: u64,
    payload: &[u8],
    out: &mut Vec<u8>,
    sign: impl FnOnce(&[u8]) -> [u8; SIGNATURE_LEN],
) -> Result<(), PublishError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(PublishError::BadKey(format!(
            "item key must be 1 to {MAX_KEY_LEN} bytes, got {}",
            key.len()
        )));
    }
    let len = encoded_item_len(origin, key, payload);
    if len > MAX_ITEM_LEN {
        return Err(PublishError::TooLarge {
            len,
            max: MAX_ITEM_LEN,
        });
    }
    if lane == Lane::Cert && contains_private_key(payload) {
        return Err(PublishError::PrivateKey);
    }
    let start = out.len();
    encode_unsigned(origin, lane, key, version, payload, out);
    let signature = sign(&out[start..]);
    out.put_slice(&signature);
    Ok(())
}

fn encode_unsigned(
    origin: &str,
    lane: Lane,
    key: &str,
    version: u64,
    payload: &[u8],
    out: &mut impl BufMut,
) {
    debug_assert!(origin.len() <= MAX_SITE_LEN && key.len() <= MAX_KEY_LEN);
    out.put_u8(origin.len() as u8);
    out.put_slice(origin.as_bytes());
    out.put_u8(lane as u8);
    out.put_u8(key.len() as u8);
    out.put_slice(key.as_bytes());
    out.put_u64(version);
    out.put_slice(payload);
}

struct ItemView<'a> {
    origin: &'a str,
    lane: Lane,
    key: &'a str,
    version: u64,
    payload: &'a [u8],
    /// Everything the signature covers (after the domain label).
    signed: &'a [u8],
    signature: [u8; SIGNATURE_LEN],
}

fn decode_item(data: &[u8]) -> Result<ItemView<'_>, WireError> {
    if data.len() > MAX_ITEM_LEN {
        return Err(WireError::TrailingBytes);
    }
    if data.len() < SIGNATURE_LEN {
        return Err(WireError::Truncated);
    }
    let (signed, signature) = data.split_at(data.len() - SIGNATURE_LEN);
    let mut r = Reader::new(signed);
    let origin_len = usize::from(r.u8()?);
    if origin_len > MAX_SITE_LEN {
        return Err(WireError::SiteTooLong(origin_len));
    }
    let origin = std::str::from_utf8(r.bytes(origin_len)?).map_err(|_| WireError::BadUtf8)?;
    let lane = Lane::from_byte(r.u8()?)?;
    let key_len = usize::from(r.u8()?);
    if key_len == 0 {
        return Err(WireError::EmptyKey);
    }
    let key = std::str::from_utf8(r.bytes(key_len)?).map_err(|_| WireError::BadUtf8)?;
    let version = r.u64()?;
    Ok(ItemView {
        origin,
        lane,
        key,
        version,
        payload: r.rest(),
        signed,
        signature: signature.try_into().expect("split at the signature length"),
    })
}

/// Why received items were not taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Cert-lane payloads holding a private key marker.
    pub private_key: u64,
    /// Items that do not decode.
    pub malformed: u64,
    /// New names while the store was full.
    pub store_full: u64,
    /// Items from a site whose certificate this node has not verified yet (a later sync
    /// brings them again).
    pub unverified_origin: u64,
    /// Items whose signature is not their origin's: forged or altered on the way.
    pub bad_signature: u64,
}

struct Stored {
    version: u64,
    /// Dropped once the origin is down or gone; the version stays so a late copy of an
    /// old item is not news again.
    held: Option<Held>,
}

struct Held {
    payload: Arc<[u8]>,
    signature: [u8; SIGNATURE_LEN],
}

/// The latest version of every item name this node knows.
pub struct ItemStore {
    /// In [`ItemName`] order (lanes indexed by their byte, walked in [`EXPORT_LANES`] order).
    origins: BTreeMap<Arc<str>, [BTreeMap<Arc<str>, Stored>; LANE_COUNT]>,
    /// Verified keys of origin sites; `None` when items are not signed (simulations).
    origin_keys: Option<HashMap<Arc<str>, PublicKey>>,
    /// Items from origins whose key is not known yet, oldest first: taken as soon as the
    /// origin's certificate is verified, so a joiner does not wait for the next sync.
    waiting: std::collections::VecDeque<Vec<u8>>,
    /// Origins with a live member (this node's own site included): only their forgotten
    /// items are taken back at the same version, so a down site's records do not bounce
    /// between nodes that forget them at different times.
    live: std::collections::HashSet<Arc<str>>,
    len: usize,
    capacity: usize,
    interner: Interner,
    fresh: Vec<Item>,
    refused: Refusals,
    /// The versions stored in the last [`REPAIR_WINDOW`], oldest first (see
    /// [`crate::repair`]); a version no longer the latest of its name is skipped on use.
    recent: std::collections::VecDeque<Recent>,
    /// The driver's time as of its latest input: when items taken now are stored.
    clock: Duration,
}

/// A version stored lately, and when.
struct Recent {
    at: Duration,
    origin: Arc<str>,
    lane: Lane,
    key: Arc<str>,
    version: u64,
    hash: u64,
}

/// Most versions remembered as recent, whatever their age: a flood cannot grow the store's
/// memory past this.
const RECENT_CAPACITY: usize = 16_384;

impl ItemStore {
    /// A store that takes only items signed by their origin (`signed`), or any item.
    pub fn new(capacity: usize, interner: Interner, signed: bool) -> ItemStore {
        ItemStore {
            origins: BTreeMap::new(),
            origin_keys: signed.then(HashMap::new),
            waiting: std::collections::VecDeque::new(),
            live: std::collections::HashSet::new(),
            len: 0,
            capacity,
            interner,
            fresh: Vec::new(),
            refused: Refusals::default(),
            recent: std::collections::VecDeque::new(),
            clock: Duration::ZERO,
        }
    }

    /// Sets the time at which the items taken from now on are stored.
    pub fn set_clock(&mut self, now: Duration) {
        self.clock = now;
    }

    /// Trusts `key` for the items of `origin` (its certificate was verified), and takes
    /// the items of `origin` that were waiting for it.
    pub fn trust_origin(&mut self, origin: &Arc<str>, key: PublicKey) {
        let Some(keys) = &mut self.origin_keys else {
            return;
        };
        if keys.insert(origin.clone(), key.clone()) == Some(key) {
            return;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|data| decode_item(data).is_ok_and(|item| item.origin == &**origin));
        self.waiting = waiting.into();
        for data in ready {
            self.accept(&data, true);
        }
    }

    /// Stops trusting `origin`'s key (its pin changed); its items wait for a new one.
    pub fn distrust_origin(&mut self, origin: &str) {
        if let Some(keys) = &mut self.origin_keys {
            keys.remove(origin);
        }
    }

    /// Whether a received item is its origin's: checked only for news, so a known version
    /// costs no signature check.
    fn is_authentic(&mut self, item: &ItemView<'_>, data: &[u8]) -> bool {
        let Some(keys) = &self.origin_keys else {
            return true;
        };
        let Some(key) = keys.get(item.origin) else {
            self.refused.unverified_origin += 1;
            if self.waiting.len() == WAITING_CAPACITY {
                self.waiting.pop_front();
            }
            self.waiting.push_back(data.to_vec());
            return false;
        };
        if !key.verify(ITEM_DOMAIN, item.signed, &item.signature) {
            self.refused.bad_signature += 1;
            return false;
        }
        true
    }

    /// Takes an encoded item if it is news (and, from a peer, authentic). Items from peers
    /// (`from_peer`) are also queued for the host; the node's own publications are not.
    pub fn accept(&mut self, data: &[u8], from_peer: bool) -> Option<BroadcastKey> {
        let Ok(item) = decode_item(data) else {
            self.refused.malformed += 1;
            return None;
        };
        if validate_site(item.origin).is_err() {
            self.refused.malformed += 1;
            return None;
        }
        if item.lane == Lane::Cert && contains_private_key(item.payload) {
            self.refused.private_key += 1;
            return None;
        }
        let known = self
            .origins
            .get(item.origin)
            .map(|lanes| lanes[item.lane as usize].get(item.key).map(|s| s.version));
        match known {
            // The same version is news again once its payload was forgotten and its site is
            // back: forgetting a site that was away must never lose what it says.
            Some(Some(version)) if version > item.version => return None,
            Some(Some(version))
                if version == item.version
                    && (self.holds(&item) || !self.live.contains(item.origin)) =>
            {
                return None
            }
            Some(Some(_)) => {}
            _ if self.len >= self.capacity => {
                self.refused.store_full += 1;
                return None;
            }
            _ => {}
        }
        if from_peer && !self.is_authentic(&item, data) {
            return None;
        }
        let held = Held {
            payload: Arc::from(item.payload),
            signature: item.signature,
        };
        let payload = held.payload.clone();
        let origin = self.interner.intern(item.origin);
        let lane = &mut self.origins.entry(origin).or_default()[item.lane as usize];
        let key = match lane.get_mut(item.key) {
            Some(stored) => {
                stored.version = item.version;
                stored.held = Some(held);
                let (key, _) = lane.get_key_value(item.key).expect("found just above");
                key.clone()
            }
            None => {
                let key: Arc<str> = Arc::from(item.key);
                lane.insert(
                    key.clone(),
                    Stored {
                        version: item.version,
                        held: Some(held),
                    },
                );
                self.len += 1;
                key
            }
        };
        let origin = self.interner.intern(item.origin);
        self.remember_recent(&origin, item.lane, &key, item.version);
        if from_peer {
            self.fresh.push(Item {
                origin: origin.clone(),
                lane: item.lane,
                key: key.clone(),
                version: item.version,
                payload,
            });
        }
        Some(BroadcastKey::new(origin, item.lane, key, item.version))
    }

    /// Whether a local publish of this name and version would be news.
    pub fn is_newer(&self, origin: &str, lane: Lane, key: &str, version: u64) -> bool {
        self.origins
            .get(origin)
            .and_then(|lanes| lanes[lane as usize].get(key))
            .map_or(true, |stored| stored.version < version)
    }

    pub fn is_full_for(&self, origin: &str, lane: Lane, key: &str) -> bool {
        self.len >= self.capacity
            && self
                .origins
                .get(origin)
                .map_or(true, |lanes| !lanes[lane as usize].contains_key(key))
    }

    /// Items learned from peers since the last call.
    pub fn take_fresh(&mut self) -> std::vec::Drain<'_, Item> {
        self.fresh.drain(..)
    }

    pub fn has_fresh(&self) -> bool {
        !self.fresh.is_empty()
    }

    fn holds(&self, item: &ItemView<'_>) -> bool {
        self.origins
            .get(item.origin)
            .and_then(|lanes| lanes[item.lane as usize].get(item.key))
            .is_some_and(|stored| stored.held.is_some())
    }

    /// Whether some item of `origin` was forgotten (its version kept, its payload dropped).
    pub fn has_forgotten(&self, origin: &str) -> bool {
        self.origins.get(origin).is_some_and(|lanes| {
            lanes
                .iter()
                .flat_map(|lane| lane.values())
                .any(|stored| stored.held.is_none())
        })
    }

    /// Marks whether `origin` has a live member.
    pub fn set_live(&mut self, origin: &Arc<str>, live: bool) {
        if live {
            self.live.insert(origin.clone());
        } else {
            self.live.remove(origin);
        }
    }

    /// Drops the payloads of these items of `origin` (the host forgot them); versions are
    /// kept, and the same versions are taken again once `origin` is live and they come
    /// back. Returns how many were held.
    pub fn forget(&mut self, origin: &str, items: &[(Lane, String)]) -> usize {
        let Some(lanes) = self.origins.get_mut(origin) else {
            return 0;
        };
        let mut forgotten = 0;
        for (lane, key) in items {
            if let Some(stored) = lanes[*lane as usize].get_mut(key.as_str()) {
                forgotten += usize::from(stored.held.take().is_some());
            }
        }
        forgotten
    }

    pub fn refusals(&self) -> Refusals {
        self.refused
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Changes how many names the store may hold; never below what it holds.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(self.len);
    }

    fn remember_recent(&mut self, origin: &Arc<str>, lane: Lane, key: &Arc<str>, version: u64) {
        let oldest = self.clock.saturating_sub(REPAIR_WINDOW);
        while self
            .recent
            .front()
            .is_some_and(|r| r.at < oldest || self.recent.len() >= RECENT_CAPACITY)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(Recent {
            at: self.clock,
            origin: origin.clone(),
            lane,
            key: key.clone(),
            version,
            hash: version_hash(origin, lane, key, version),
        });
    }

    /// The held payload of this name if `version` is still its latest.
    fn held_latest(&self, origin: &str, lane: Lane, key: &str, version: u64) -> Option<&Held> {
        self.origins
            .get(origin)
            .and_then(|lanes| lanes[lane as usize].get(key))
            .filter(|stored| stored.version == version)
            .and_then(|stored| stored.held.as_ref())
    }

    /// The hashes of the latest versions stored since `now - window`, newest first, at most
    /// `max`; and how far back they reach (`window`, or less when `max` cut them short).
    pub fn recent_versions(
        &self,
        now: Duration,
        window: Duration,
        max: usize,
    ) -> (Vec<u64>, Duration) {
        let since = now.saturating_sub(window);
        let mut hashes = Vec::new();
        for recent in self.recent.iter().rev() {
            if recent.at < since {
                return (hashes, window);
            }
            if self
                .held_latest(&recent.origin, recent.lane, &recent.key, recent.version)
                .is_none()
            {
                continue;
            }
            if hashes.len() == max {
                return (hashes, now.saturating_sub(recent.at));
            }
            hashes.push(recent.hash);
        }
        (hashes, window)
    }

    /// Encodes, oldest first, the latest versions stored between `now - oldest` and
    /// `now - newest` that `digest` does not hold, handing each with its origin to `emit`
    /// until `emit` says the budget is spent. Returns how many were handed.
    pub fn export_missing(
        &self,
        now: Duration,
        newest: Duration,
        oldest: Duration,
        digest: &Digest,
        scratch: &mut Vec<u8>,
        mut emit: impl FnMut(&Arc<str>, &[u8]) -> bool,
    ) -> usize {
        let (from, to) = (now.saturating_sub(oldest), now.saturating_sub(newest));
        let mut handed = 0;
        for recent in &self.recent {
            if recent.at < from {
                continue;
            }
            if recent.at > to {
                break;
            }
            if digest.may_hold(recent.hash) {
                continue;
            }
            let Some(held) =
                self.held_latest(&recent.origin, recent.lane, &recent.key, recent.version)
            else {
                continue;
            };
            scratch.clear();
            encode_unsigned(
                &recent.origin,
                recent.lane,
                &recent.key,
                recent.version,
                &held.payload,
                scratch,
            );
            scratch.put_slice(&held.signature);
            if !emit(&recent.origin, scratch) {
                break;
            }
            handed += 1;
        }
        handed
    }

    /// Every stored name in [`ItemName`] order.
    fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        self.origins
            .iter()
            .flat_map(|(origin, lanes)| lane_entries(origin, lanes, None))
    }

    /// Stored names after `after`, in [`ItemName`] order.
    fn entries_after<'a>(&'a self, after: &'a ItemName) -> impl Iterator<Item = Entry<'a>> {
        use std::ops::Bound::{Included, Unbounded};
        self.origins
            .range::<str, _>((Included(&*after.origin), Unbounded))
            .flat_map(move |(origin, lanes)| {
                let from = (origin == &after.origin).then_some((after.lane, &*after.key));
                lane_entries(origin, lanes, from)
            })
    }

    /// Encodes held items (those with payloads) one by one into `scratch`, in [`ItemName`]
    /// order starting after `after` (from the first name when `None`) and wrapping round,
    /// and hands each with its origin to `emit` until `emit` says the budget is spent.
    pub fn export(
        &self,
        after: Option<&ItemName>,
        scratch: &mut Vec<u8>,
        mut emit: impl FnMut(&Arc<str>, &[u8]) -> bool,
    ) -> ExportEnd {
        fn offer<'a>(
            entry: Entry<'a>,
            last: &mut Option<Entry<'a>>,
            scratch: &mut Vec<u8>,
            emit: &mut impl FnMut(&Arc<str>, &[u8]) -> bool,
        ) -> bool {
            let (origin, lane, key, stored) = entry;
            let Some(held) = &stored.held else {
                return true;
            };
            scratch.clear();
            encode_unsigned(origin, lane, key, stored.version, &held.payload, scratch);
            scratch.put_slice(&held.signature);
            if !emit(origin, scratch) {
                return false;
            }
            *last = Some(entry);
            true
        }
        let mut last: Option<Entry<'_>> = None;
        let stopped = |last: Option<Entry<'_>>, wrapped: bool| ExportEnd::Stopped {
            resume: last
                .map(|(origin, lane, key, _)| ItemName {
                    origin: origin.clone(),
                    lane,
                    key: key.clone(),
                })
                .or_else(|| after.cloned()),
            wrapped,
        };
        let Some(after) = after else {
            for entry in self.entries() {
                if !offer(entry, &mut last, scratch, &mut emit) {
                    return stopped(last, false);
                }
            }
            return ExportEnd::Complete;
        };
        for entry in self.entries_after(after) {
            if !offer(entry, &mut last, scratch, &mut emit) {
                return stopped(last, false);
            }
        }
        let before = self
            .entries()
            .take_while(|(origin, lane, key, _)| after.cmp_to(origin, *lane, key).is_ge());
        for entry in before {
            if !offer(entry, &mut last, scratch, &mut emit) {
                return stopped(last, true);
            }
        }
        ExportEnd::Complete
    }
}

type Entry<'a> = (&'a Arc<str>, Lane, &'a Arc<str>, &'a Stored);

/// The names of one origin in [`EXPORT_LANES`] order, those after `(lane, key)` if given.
fn lane_entries<'a>(
    origin: &'a Arc<str>,
    lanes: &'a [BTreeMap<Arc<str>, Stored>; LANE_COUNT],
    from: Option<(Lane, &'a str)>,
) -> impl Iterator<Item = Entry<'a>> {
    use std::ops::Bound::{Excluded, Unbounded};
    EXPORT_LANES
        .into_iter()
        .filter(move |lane| {
            from.map_or(true, |(first, _)| export_rank(*lane) >= export_rank(first))
        })
        .flat_map(move |lane| {
            let keys = &lanes[lane as usize];
            let range = match from {
                Some((first, key)) if first == lane => {
                    keys.range::<str, _>((Excluded(key), Unbounded))
                }
                _ => keys.range::<str, _>((Unbounded, Unbounded)),
            };
            range.map(move |(key, stored)| (origin, lane, key, stored))
        })
}

/// How an [`ItemStore::export`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportEnd {
    /// Every held item was offered.
    Complete,
    /// The budget ran out: the next export resumes after `resume` (from the first name when
    /// `None`). `wrapped`: this export went past the last name.
    Stopped {
        resume: Option<ItemName>,
        wrapped: bool,
    },
}

/// The foca side of the store: decides whether a received item is news, and queues news
/// for relaying ([`crate::relay`]) rather than handing it to foca's backlog. foca is handed
/// items only by the driver, from that queue (this site's own items included), one window
/// at a time.
pub struct ItemHandler {
    store: Arc<Mutex<ItemStore>>,
    relays: Arc<Mutex<Relays>>,
}

impl ItemHandler {
    pub fn new(store: Arc<Mutex<ItemStore>>, relays: Arc<Mutex<Relays>>) -> ItemHandler {
        ItemHandler { store, relays }
    }
}

/// The relay queue, with what the driver and the handler pass each other through it.
pub struct Relays {
    pub queue: RelayQueue,
    /// Transmissions of each item: the members a `Broadcast` reaches (g).
    pub transmissions: u8,
    /// The item the driver is handing foca, already stored (`add_broadcast` asks the
    /// handler for its key).
    handing: Option<BroadcastKey>,
}

impl Relays {
    pub fn new(queue: RelayQueue, transmissions: u8) -> Relays {
        Relays {
            queue,
            transmissions,
            handing: None,
        }
    }

    /// Names the item the next `add_broadcast` hands foca.
    pub fn hand(&mut self, key: BroadcastKey) {
        self.handing = Some(key);
    }
}

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl BroadcastHandler<NodeId> for ItemHandler {
    type Key = BroadcastKey;
    // Bad items are counted and skipped, never an error: an error would make foca drop
    // the rest of the packet.
    type Error = Infallible;

    fn receive_item(
        &mut self,
        data: &[u8],
        sender: Option<&NodeId>,
    ) -> Result<Option<BroadcastKey>, Infallible> {
        if sender.is_none() {
            // The driver handing an item, already stored.
            return Ok(lock(&self.relays).handing.take());
        }
        let news = lock(&self.store).accept(data, true);
        if let Some(key) = news {
            lock(&self.relays).queue.push(key, data.to_vec());
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use foca::Invalidates;

    use super::*;

    fn unsigned(_: &[u8]) -> [u8; SIGNATURE_LEN] {
        [0; SIGNATURE_LEN]
    }

    fn encoded(origin: &str, lane: Lane, key: &str, version: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_publish(origin, lane, key, version, payload, &mut out, unsigned).unwrap();
        out
    }

    fn store() -> ItemStore {
        ItemStore::new(100, Interner::default(), false)
    }

    #[test]
    fn only_newer_versions_are_news() {
        let mut s = store();
        assert!(s
            .accept(&encoded("a", Lane::State, "k", 2, b"v2"), true)
            .is_some());
        assert!(s
            .accept(&encoded("a", Lane::State, "k", 2, b"v2"), true)
            .is_none());
        assert!(s
            .accept(&encoded("a", Lane::State, "k", 1, b"v1"), true)
            .is_none());
        assert!(s
            .accept(&encoded("a", Lane::State, "k", 3, b"v3"), true)
            .is_some());
        // Same key on another lane or from another origin is another item.
        assert!(s
            .accept(&encoded("a", Lane::Gateway, "k", 1, b"g"), true)
            .is_some());
        assert!(s
            .accept(&encoded("b", Lane::State, "k", 1, b"b"), true)
            .is_some());
        let fresh: Vec<_> = s.take_fresh().map(|i| (i.origin, i.version)).collect();
        assert_eq!(fresh.len(), 4);
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_signed_store_takes_only_items_its_origin_signed() {
        use crate::auth::{test_key, Signer};
        let (signer, key): (Signer, PublicKey) = test_key(1);
        let (forger, _) = test_key(2);
        let mut s = ItemStore::new(100, Interner::default(), true);
        let signed = |signer: &Signer, version: u64| {
            let mut out = Vec::new();
            encode_publish("a", Lane::State, "k", version, b"v", &mut out, |bytes| {
                signer.sign(ITEM_DOMAIN, bytes)
            })
            .unwrap();
            out
        };
        // Nobody vouched for "a" yet: the item waits for its origin's key.
        assert!(s.accept(&signed(&signer, 1), true).is_none());
        assert_eq!(s.refusals().unverified_origin, 1);
        s.trust_origin(&Arc::from("a"), key);
        assert_eq!(s.take_fresh().map(|i| i.version).collect::<Vec<_>>(), [1]);
        assert!(s.accept(&signed(&forger, 2), true).is_none());
        assert_eq!(s.refusals().bad_signature, 1);
        let mut altered = signed(&signer, 2);
        let at = altered.len() - SIGNATURE_LEN - 1;
        altered[at] ^= 1;
        assert!(s.accept(&altered, true).is_none());
        assert_eq!(s.refusals().bad_signature, 2);
        // A forged far-future version changes nothing: the next real one still counts.
        assert!(s.accept(&signed(&forger, u64::MAX), true).is_none());
        assert!(s.accept(&signed(&signer, 2), true).is_some());
        // Syncs re-export the origin's own signature.
        let mut exported = Vec::new();
        let mut scratch = Vec::new();
        s.export(None, &mut scratch, |_, item| {
            exported.push(item.to_vec());
            true
        });
        assert_eq!(exported, vec![signed(&signer, 2)]);
        s.distrust_origin("a");
        assert!(s.accept(&signed(&signer, 3), true).is_none());
    }

    #[test]
    fn own_items_are_stored_but_not_delivered() {
        let mut s = store();
        assert!(s
            .accept(&encoded("me", Lane::Metadata, "k", 1, b"x"), false)
            .is_some());
        assert!(!s.has_fresh());
        assert!(!s.is_newer("me", Lane::Metadata, "k", 1));
        assert!(s.is_newer("me", Lane::Metadata, "k", 2));
    }

    #[test]
    fn newer_invalidates_older_of_the_same_name_only() {
        let mut s = store();
        let k1 = s
            .accept(&encoded("a", Lane::State, "k", 1, b""), true)
            .unwrap();
        let k2 = s
            .accept(&encoded("a", Lane::State, "k", 2, b""), true)
            .unwrap();
        let other_key = s
            .accept(&encoded("a", Lane::State, "j", 3, b""), true)
            .unwrap();
        let other_lane = s
            .accept(&encoded("a", Lane::Gateway, "k", 3, b""), true)
            .unwrap();
        let other_origin = s
            .accept(&encoded("b", Lane::State, "k", 3, b""), true)
            .unwrap();
        assert!(k2.invalidates(&k1));
        assert!(!k1.invalidates(&k2));
        for other in [&other_key, &other_lane, &other_origin] {
            assert!(!other.invalidates(&k1));
            assert!(!k2.invalidates(other));
        }
    }

    #[test]
    fn private_keys_are_refused_and_counted() {
        let pem = b"-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n";
        let mut out = Vec::new();
        assert_eq!(
            encode_publish("a", Lane::Cert, "tls", 1, pem, &mut out, unsigned),
            Err(PublishError::PrivateKey)
        );
        // The marker is only refused on the cert lane.
        assert!(encode_publish("a", Lane::Metadata, "note", 1, pem, &mut out, unsigned).is_ok());
        let mut raw = Vec::new();
        encode_unsigned("a", Lane::Cert, "tls", 1, pem, &mut raw);
        raw.extend_from_slice(&[0; SIGNATURE_LEN]);
        let mut s = store();
        assert!(s.accept(&raw, true).is_none());
        assert_eq!(s.refusals().private_key, 1);
        assert!(!s.has_fresh());
        let rsa = b"-----BEGIN RSA PRIVATE KEY-----";
        raw.clear();
        encode_unsigned("a", Lane::Cert, "tls", 2, rsa, &mut raw);
        raw.extend_from_slice(&[0; SIGNATURE_LEN]);
        assert!(s.accept(&raw, true).is_none());
        assert_eq!(s.refusals().private_key, 2);
    }

    #[test]
    fn oversized_and_bad_keys_are_refused() {
        let mut out = Vec::new();
        let big = vec![0u8; MAX_ITEM_LEN];
        assert!(matches!(
            encode_publish("a", Lane::State, "k", 1, &big, &mut out, unsigned),
            Err(PublishError::TooLarge { .. })
        ));
        let fits = vec![0u8; MAX_ITEM_LEN - encoded_item_len("a", "k", b"")];
        assert!(encode_publish("a", Lane::State, "k", 1, &fits, &mut out, unsigned).is_ok());
        assert_eq!(out.len(), MAX_ITEM_LEN);
        assert!(matches!(
            encode_publish("a", Lane::State, "", 1, b"", &mut out, unsigned),
            Err(PublishError::BadKey(_))
        ));
        assert!(matches!(
            encode_publish(
                "a",
                Lane::State,
                &"k".repeat(MAX_KEY_LEN + 1),
                1,
                b"",
                &mut out,
                unsigned
            ),
            Err(PublishError::BadKey(_))
        ));
    }

    #[test]
    fn malformed_items_are_counted() {
        let mut s = store();
        let good = encoded("a", Lane::State, "k", 1, b"x");
        for cut in 0..good.len() - 1 {
            assert!(s.accept(&good[..cut], true).is_none());
        }
        let mut bad_lane = good.clone();
        bad_lane[2] = 9;
        assert!(s.accept(&bad_lane, true).is_none());
        assert_eq!(s.refusals().malformed, good.len() as u64);
        assert!(s.is_empty());
    }

    #[test]
    fn store_is_bounded() {
        let mut s = ItemStore::new(2, Interner::default(), false);
        assert!(s
            .accept(&encoded("a", Lane::State, "1", 1, b""), true)
            .is_some());
        assert!(s
            .accept(&encoded("a", Lane::State, "2", 1, b""), true)
            .is_some());
        assert!(s
            .accept(&encoded("a", Lane::State, "3", 1, b""), true)
            .is_none());
        assert!(s
            .accept(&encoded("b", Lane::State, "1", 1, b""), true)
            .is_none());
        // Updating a known name still works when full.
        assert!(s
            .accept(&encoded("a", Lane::State, "1", 2, b""), true)
            .is_some());
        assert_eq!(s.refusals().store_full, 2);
        assert!(s.is_full_for("a", Lane::State, "3"));
        assert!(!s.is_full_for("a", Lane::State, "1"));
    }

    fn name(origin: &str, lane: Lane, key: &str) -> ItemName {
        ItemName {
            origin: Arc::from(origin),
            lane,
            key: Arc::from(key),
        }
    }

    /// Exports at most `budget` items after `after`: their names and how the export ended.
    fn export_part(
        s: &ItemStore,
        after: Option<&ItemName>,
        budget: usize,
    ) -> (Vec<(String, Lane, String)>, ExportEnd) {
        let mut scratch = Vec::new();
        let mut names = Vec::new();
        let end = s.export(after, &mut scratch, |_, item| {
            if names.len() == budget {
                return false;
            }
            let view = decode_item(item).unwrap();
            names.push((view.origin.to_owned(), view.lane, view.key.to_owned()));
            true
        });
        (names, end)
    }

    #[test]
    fn the_default_store_holds_a_100_by_100_mesh_and_refuses_past_its_capacity() {
        let mut s = ItemStore::new(DEFAULT_ITEM_CAPACITY, Interner::default(), false);
        // 100 sites, each: 100 providers (catalogue and signals), gateway, metadata and a
        // certificate in three chunks.
        for site in 0..100 {
            let origin = format!("site-{site:03}");
            for provider in 0..100 {
                for key in [
                    format!("provider/p{provider}"),
                    format!("signals/p{provider}"),
                ] {
                    assert!(s
                        .accept(&encoded(&origin, Lane::State, &key, 1, b"p"), true)
                        .is_some());
                }
            }
            for (lane, key) in [(Lane::Gateway, "gateway"), (Lane::Metadata, "metadata")] {
                assert!(s
                    .accept(&encoded(&origin, lane, key, 1, b"p"), true)
                    .is_some());
            }
            for chunk in 0..3 {
                let key = format!("cert/{chunk}");
                assert!(s
                    .accept(&encoded(&origin, Lane::Cert, &key, 1, b"p"), true)
                    .is_some());
            }
        }
        assert_eq!(s.len(), 20_500);
        let mut filler = 0;
        while s.len() < DEFAULT_ITEM_CAPACITY {
            let key = format!("k{filler}");
            assert!(s
                .accept(&encoded("site-999", Lane::State, &key, 1, b"p"), true)
                .is_some());
            filler += 1;
        }
        assert!(s
            .accept(&encoded("site-999", Lane::State, "one-more", 1, b"p"), true)
            .is_none());
        assert_eq!(s.refusals().store_full, 1);
        assert!(s.is_full_for("site-999", Lane::State, "one-more"));
        assert!(s
            .accept(
                &encoded("site-000", Lane::Gateway, "gateway", 2, b"q"),
                true
            )
            .is_some());
        let mut scratch = Vec::new();
        let mut exported = 0;
        let end = s.export(None, &mut scratch, |_, _| {
            exported += 1;
            true
        });
        assert_eq!(
            (exported, end),
            (DEFAULT_ITEM_CAPACITY, ExportEnd::Complete)
        );
    }

    #[test]
    fn export_walks_names_in_one_order_from_where_it_stopped() {
        let mut s = store();
        // Inserted out of order; walked by origin, then lane (cert, gateway, metadata,
        // state), then key, whatever the insertion order.
        for (origin, lane, key) in [
            ("b", Lane::State, "1"),
            ("a", Lane::State, "2"),
            ("a", Lane::Cert, "0"),
            ("a", Lane::State, "1"),
            ("b", Lane::Gateway, "gw"),
        ] {
            s.accept(&encoded(origin, lane, key, 1, b"p"), true);
        }
        s.accept(&encoded("gone", Lane::State, "x", 1, b"p"), true);
        assert_eq!(s.forget("gone", &[(Lane::State, "x".to_owned())]), 1);
        let order = [
            ("a", Lane::Cert, "0"),
            ("a", Lane::State, "1"),
            ("a", Lane::State, "2"),
            ("b", Lane::Gateway, "gw"),
            ("b", Lane::State, "1"),
        ];
        let owned = |names: &[(&str, Lane, &str)]| -> Vec<(String, Lane, String)> {
            names
                .iter()
                .map(|(o, l, k)| (o.to_string(), *l, k.to_string()))
                .collect()
        };
        let (all, end) = export_part(&s, None, 10);
        assert_eq!(all, owned(&order), "a forgotten payload is not exported");
        assert_eq!(end, ExportEnd::Complete);

        let (first, end) = export_part(&s, None, 2);
        assert_eq!(first, owned(&order[..2]));
        let resume = name("a", Lane::State, "1");
        assert_eq!(
            end,
            ExportEnd::Stopped {
                resume: Some(resume.clone()),
                wrapped: false
            }
        );
        let (second, end) = export_part(&s, Some(&resume), 2);
        assert_eq!(second, owned(&order[2..4]));
        let resume = name("b", Lane::Gateway, "gw");
        assert_eq!(
            end,
            ExportEnd::Stopped {
                resume: Some(resume.clone()),
                wrapped: false
            }
        );
        // Past the last name the walk goes round and says so.
        let (third, end) = export_part(&s, Some(&resume), 2);
        assert_eq!(third, owned(&[order[4], order[0]]));
        assert_eq!(
            end,
            ExportEnd::Stopped {
                resume: Some(name("a", Lane::Cert, "0")),
                wrapped: true
            }
        );
        // From a name nobody holds, the walk resumes at the next one held; with room for
        // everything it goes round once and is complete.
        let (rest, end) = export_part(&s, Some(&name("a", Lane::State, "15")), 10);
        assert_eq!(
            rest,
            owned(&[order[2], order[3], order[4], order[0], order[1]])
        );
        assert_eq!(end, ExportEnd::Complete);
        // No room at all: nothing moves.
        let (none, end) = export_part(&s, Some(&resume), 0);
        assert!(none.is_empty());
        assert_eq!(
            end,
            ExportEnd::Stopped {
                resume: Some(resume),
                wrapped: false
            }
        );

        let mut encoded_name = Vec::new();
        name("site-a", Lane::Metadata, "region").encode(&mut encoded_name);
        let decoded = ItemName::decode(&mut Reader::new(&encoded_name), &Interner::default());
        assert_eq!(decoded, Ok(name("site-a", Lane::Metadata, "region")));
        // A forgotten payload keeps its version: an older copy is not news, the same version
        // is not either while its site is not live, and is taken back once it is (and then
        // held again).
        assert!(s
            .accept(&encoded("gone", Lane::State, "x", 0, b"p"), true)
            .is_none());
        assert!(s.has_forgotten("gone"));
        assert!(s
            .accept(&encoded("gone", Lane::State, "x", 1, b"p"), true)
            .is_none());
        s.set_live(&Arc::from("gone"), true);
        assert!(s
            .accept(&encoded("gone", Lane::State, "x", 1, b"p"), true)
            .is_some());
        assert!(!s.has_forgotten("gone"));
        assert!(s
            .accept(&encoded("gone", Lane::State, "x", 1, b"p"), true)
            .is_none());
    }
}
