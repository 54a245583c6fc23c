//! The item store: the latest version of every item name this node knows, what it refused
//! and why ([`Refusals`]), and the versions stored lately (for digests,
//! [`crate::lanes::repair`]); with its bounds. Walking it for syncs is
//! [`super::export`]'s.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::BufMut;

use super::encoding::{contains_private_key, decode_item, encode_unsigned, ItemView};
use super::keys::{Checked, KeyBook, KeyId};
use super::{BroadcastKey, Item, Lane};
use crate::identity::auth::SIGNATURE_LEN;
use crate::identity::{validate_site, Interner, NodeId, SiteName};
use crate::lanes::names::LANE_COUNT;
use crate::lanes::repair::{version_hash, Digest, REPAIR_WINDOW};

/// How many item names a node remembers (latest version each) unless told otherwise: a
/// mesh of 100 sites with 300 providers each (two items a provider, a few more a site).
/// The store's bounds live with the store; the driver re-exports them.
pub const DEFAULT_ITEM_CAPACITY: usize = 65_536;
/// The most item names a node may be told to remember.
pub const MAX_ITEM_CAPACITY: usize = 1 << 20;

/// Items kept while their origin's key is unknown; the oldest give way first.
const WAITING_CAPACITY: usize = 1024;

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

/// What the store did with items signed by a key that is not their origin's current one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Renewals {
    /// Items taken on the word of an earlier certificate of their origin.
    pub earlier_key_items: u64,
    /// Held items whose signature was replaced by their origin's current key's (same
    /// version, same payload: the origin signed it again after a renewal).
    pub signatures_renewed: u64,
    /// Held items dropped because the only key that signed them was revoked.
    pub revoked_items: u64,
}

pub(super) struct Stored {
    pub(super) version: u64,
    /// Dropped once the origin is down or gone; the version stays so a late copy of an
    /// old item is not news again.
    pub(super) held: Option<Held>,
    /// The number of this version's entry among the recent versions (gone from them once
    /// it is older than their window).
    pub(super) recent: u64,
}

pub(super) struct Held {
    pub(super) payload: Arc<[u8]>,
    pub(super) signature: [u8; SIGNATURE_LEN],
    /// The key that made `signature`.
    pub(super) signer: KeyId,
}

impl Held {
    /// Encodes this payload under its name and version into `out` (cleared first), with
    /// the origin's signature as it came.
    pub(super) fn encode(
        &self,
        origin: &str,
        lane: Lane,
        key: &str,
        version: u64,
        out: &mut Vec<u8>,
    ) {
        out.clear();
        encode_unsigned(origin, lane, key, version, &self.payload, out);
        out.put_slice(&self.signature);
    }
}

/// The latest version of every item name this node knows.
pub struct ItemStore {
    /// In [`super::ItemName`] order (lanes indexed by their byte, walked in
    /// [`crate::lanes::names::EXPORT_LANES`] order).
    pub(super) origins: BTreeMap<Arc<str>, [BTreeMap<Arc<str>, Stored>; LANE_COUNT]>,
    /// Verified keys of origin sites; `None` when items are not signed (simulations).
    pub(super) origin_keys: Option<KeyBook>,
    /// This node's own site: its items held under an earlier key are signed again.
    pub(super) own: Option<Arc<str>>,
    /// Some of the own site's items are held under a key that is not its current one.
    pub(super) own_stale: bool,
    /// Items from origins whose key is not known yet, oldest first: taken as soon as the
    /// origin's certificate is verified, so a joiner does not wait for the next sync.
    pub(super) waiting: VecDeque<Vec<u8>>,
    /// Waiting items are being taken again (a key of their origin was just trusted).
    pub(super) retaking: bool,
    /// Items were added to the waiting ones since the driver last asked for their keys.
    pub(super) waiting_grew: bool,
    /// Origins with a live member (this node's own site included): only their forgotten
    /// items are taken back at the same version, so a down site's records do not bounce
    /// between nodes that forget them at different times.
    live: HashSet<SiteName>,
    len: usize,
    capacity: usize,
    pub(super) interner: Interner,
    fresh: Vec<Item>,
    refused: Refusals,
    pub(super) renewals: Renewals,
    /// Origin signatures checked on items from peers: once per version taken (and once
    /// more for a renewed signature), never for a version already held as it came.
    pub(super) signature_checks: u64,
    /// The versions stored in the last [`REPAIR_WINDOW`], oldest first (see
    /// [`crate::lanes::repair`]), each numbered: the first is `recent_first`.
    recent: VecDeque<Recent>,
    recent_first: u64,
    /// The driver's time as of its latest input: when items taken now are stored.
    clock: Duration,
}

/// Why a peer's copy of a name would be taken (see [`ItemStore::would_take`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// No version of the name is stored.
    Unknown,
    /// An older version is stored, or this one forgotten while its origin was away.
    Newer,
}

/// A version stored lately, and when.
struct Recent {
    at: Duration,
    origin: Arc<str>,
    lane: Lane,
    key: Arc<str>,
    version: u64,
    hash: u64,
    /// Still the latest version of its name, and held: a newer version, or dropping its
    /// payload (`forget`, a revoked key), clears it.
    latest: bool,
}

/// Most versions remembered as recent, whatever their age: a flood cannot grow the store's
/// memory past this.
const RECENT_CAPACITY: usize = 16_384;

impl ItemStore {
    /// A store that takes only items signed by their origin (`signed`), or any item.
    pub fn new(capacity: usize, interner: Interner, signed: bool) -> ItemStore {
        ItemStore {
            origins: BTreeMap::new(),
            origin_keys: signed.then(KeyBook::default),
            own: None,
            own_stale: false,
            waiting: VecDeque::new(),
            retaking: false,
            waiting_grew: false,
            live: HashSet::new(),
            len: 0,
            capacity,
            interner,
            fresh: Vec::new(),
            refused: Refusals::default(),
            renewals: Renewals::default(),
            signature_checks: 0,
            recent: VecDeque::new(),
            recent_first: 0,
            clock: Duration::ZERO,
        }
    }

    /// Sets the time at which the items taken from now on are stored.
    pub fn set_clock(&mut self, now: Duration) {
        self.clock = now;
    }

    /// Which trusted key of the origin signed a received item: checked only for news, so
    /// a known version costs no signature check. `None` (counted) if no trusted key did.
    /// An item waits for a key of its origin that this node has not learned yet, when the
    /// origin has none, and also when none of its keys made the signature: forged, or
    /// signed by a renewed certificate whose `HELLO` is still on its way.
    fn signer_of(&mut self, item: &ItemView<'_>, data: &[u8]) -> Option<KeyId> {
        let Some(keys) = &self.origin_keys else {
            return Some(KeyId::UNSIGNED);
        };
        self.signature_checks += 1;
        match keys.check(item.origin, item.signed, &item.signature) {
            Checked::By(signer) => {
                if keys.current(item.origin) != Some(signer) {
                    self.renewals.earlier_key_items += 1;
                }
                Some(signer)
            }
            // Counted when it came; a new key of its origin did not make it either.
            Checked::Forged if self.retaking => None,
            Checked::Forged => {
                self.refused.bad_signature += 1;
                self.wait(data);
                None
            }
            Checked::NoKey => {
                self.refused.unverified_origin += 1;
                self.wait(data);
                None
            }
        }
    }

    fn wait(&mut self, data: &[u8]) {
        if self.waiting.len() == WAITING_CAPACITY {
            self.waiting.pop_front();
        }
        self.waiting.push_back(data.to_vec());
        self.waiting_grew = true;
    }

    /// Takes an encoded item if it is news (and, from a peer, authentic). Items from peers
    /// (`from_peer`) are also queued for the host; the node's own publications are not.
    pub fn accept(&mut self, data: &[u8], from_peer: bool) -> Option<BroadcastKey> {
        let decoded = decode_item(data).ok();
        let Some(item) = decoded.filter(|item| validate_site(item.origin).is_ok()) else {
            self.refused.malformed += 1;
            return None;
        };
        if item.lane == Lane::Cert && contains_private_key(item.payload) {
            self.refused.private_key += 1;
            return None;
        }
        let known = self
            .stored(item.origin, item.lane, item.key)
            .map(|s| s.version);
        match known {
            // The same version is news again once its payload was forgotten and its site is
            // back: forgetting a site that was away must never lose what it says.
            Some(version) if version > item.version => return None,
            Some(version) if version == item.version && self.holds(&item) => {
                // Not news, but perhaps its origin's signature again under a renewed key.
                return if from_peer {
                    self.take_renewed_signature(&item)
                } else {
                    None
                };
            }
            Some(version) if version == item.version && !self.live.contains(item.origin) => {
                return None
            }
            Some(_) => {}
            _ if self.len >= self.capacity => {
                self.refused.store_full += 1;
                return None;
            }
            _ => {}
        }
        let signer = if from_peer {
            self.signer_of(&item, data)?
        } else {
            self.current_key(item.origin)
        };
        self.note_own_signer(item.origin, signer);
        let held = Held {
            payload: Arc::from(item.payload),
            signature: item.signature,
            signer,
        };
        let payload = held.payload.clone();
        let origin = self.interner.intern(item.origin);
        let recent = self.next_recent();
        let lane = &mut self.origins.entry(origin.clone()).or_default()[item.lane as usize];
        let (key, before) = match lane.get_mut(item.key) {
            Some(stored) => {
                stored.version = item.version;
                stored.held = Some(held);
                let before = std::mem::replace(&mut stored.recent, recent);
                let (key, _) = lane.get_key_value(item.key).expect("found just above");
                (key.clone(), Some(before))
            }
            None => {
                let key: Arc<str> = Arc::from(item.key);
                lane.insert(
                    key.clone(),
                    Stored {
                        version: item.version,
                        held: Some(held),
                        recent,
                    },
                );
                self.len += 1;
                (key, None)
            }
        };
        if let Some(before) = before {
            self.no_longer_latest(before);
        }
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
        self.stored(origin, lane, key)
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

    /// The version of this name held with its payload, if any (a forgotten one is not
    /// held).
    pub fn held_version(&self, origin: &str, lane: Lane, key: &str) -> Option<u64> {
        self.stored(origin, lane, key)
            .filter(|stored| stored.held.is_some())
            .map(|stored| stored.version)
    }

    /// Whether a peer's copy of this name at `version` would be taken (see
    /// [`ItemStore::accept`]), and why: the name is not stored at all, or only an older
    /// version of it (or this version, forgotten, of an origin that is back). None if it
    /// would not: this version or a newer one is held, or this one was forgotten while its
    /// origin is away (asking for it again would bring what is dropped on arrival).
    pub fn would_take(&self, origin: &str, lane: Lane, key: &str, version: u64) -> Option<Taken> {
        let Some(stored) = self.stored(origin, lane, key) else {
            return Some(Taken::Unknown);
        };
        let newer = stored.version < version
            || (stored.version == version && stored.held.is_none() && self.live.contains(origin));
        newer.then_some(Taken::Newer)
    }

    /// The stored version of this name, if any.
    pub(super) fn stored(&self, origin: &str, lane: Lane, key: &str) -> Option<&Stored> {
        self.origins
            .get(origin)
            .and_then(|lanes| lanes[lane as usize].get(key))
    }

    fn holds(&self, item: &ItemView<'_>) -> bool {
        self.stored(item.origin, item.lane, item.key)
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

    /// Marks whether the site of `origin` has a live member (one word a site: every node
    /// keeps one per member).
    pub fn set_live(&mut self, origin: &NodeId, live: bool) {
        if live {
            self.live.insert(origin.site_name());
        } else {
            self.live.remove(&**origin.site());
        }
    }

    /// Drops the payloads of these items of `origin` (the host forgot them); versions are
    /// kept, and the same versions are taken again once `origin` is live and they come
    /// back. Returns how many were held.
    pub fn forget(&mut self, origin: &str, items: &[(Lane, String)]) -> usize {
        let Some(lanes) = self.origins.get_mut(origin) else {
            return 0;
        };
        let mut dropped = Vec::new();
        for (lane, key) in items {
            if let Some(stored) = lanes[*lane as usize].get_mut(key.as_str()) {
                if stored.held.take().is_some() {
                    dropped.push(stored.recent);
                }
            }
        }
        for recent in &dropped {
            self.no_longer_latest(*recent);
        }
        dropped.len()
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

    /// Forgets the recent versions older than the window (and the oldest past
    /// [`RECENT_CAPACITY`]); the number the next one stored takes.
    fn next_recent(&mut self) -> u64 {
        let oldest = self.clock.saturating_sub(REPAIR_WINDOW);
        while self
            .recent
            .front()
            .is_some_and(|r| r.at < oldest || self.recent.len() >= RECENT_CAPACITY)
        {
            self.recent.pop_front();
            self.recent_first += 1;
        }
        self.recent_first + self.recent.len() as u64
    }

    /// The recent version numbered `recent`, if still among them, is no longer its name's
    /// latest held one: digests stop describing it.
    pub(super) fn no_longer_latest(&mut self, recent: u64) {
        if let Some(entry) = recent
            .checked_sub(self.recent_first)
            .and_then(|index| self.recent.get_mut(index as usize))
        {
            entry.latest = false;
        }
    }

    /// Remembers a version just stored under the number [`ItemStore::next_recent`] gave.
    fn remember_recent(&mut self, origin: &Arc<str>, lane: Lane, key: &Arc<str>, version: u64) {
        self.recent.push_back(Recent {
            at: self.clock,
            origin: origin.clone(),
            lane,
            key: key.clone(),
            version,
            hash: version_hash(origin, lane, key, version),
            latest: true,
        });
    }

    /// The held payload of this name if `version` is still its latest.
    fn held_latest(&self, origin: &str, lane: Lane, key: &str, version: u64) -> Option<&Held> {
        self.stored(origin, lane, key)
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
            if !recent.latest {
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
            if !recent.latest || digest.may_hold(recent.hash) {
                continue;
            }
            let Some(held) =
                self.held_latest(&recent.origin, recent.lane, &recent.key, recent.version)
            else {
                continue;
            };
            held.encode(
                &recent.origin,
                recent.lane,
                &recent.key,
                recent.version,
                scratch,
            );
            if !emit(&recent.origin, scratch) {
                break;
            }
            handed += 1;
        }
        handed
    }
}
