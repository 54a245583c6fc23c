//! Broadcast lanes: versioned items that piggyback on SWIM traffic as foca custom
//! broadcasts.
//!
//! An item is named by `(origin site, lane, key)` and carries a version; only a higher
//! version of the same name is news. News is handed to the host exactly once, re-gossiped
//! (foca retransmits it `max_transmissions` times) and replaces the older version in foca's
//! backlog at once, while items of other names are untouched. The latest version of every
//! name is kept in an [`ItemStore`] so a push/pull sync can teach late joiners what was
//! published before they arrived.
//!
//! Item encoding: `origin_len u8 | origin | lane u8 | key_len u8 | key | version u64 |
//! payload`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::BufMut;
use foca::{BroadcastHandler, Invalidates};

use crate::identity::{Interner, NodeId, MAX_SITE_LEN};
use crate::wire::{Reader, WireError, MAX_FOCA_PACKET, MAX_HEADER_LEN};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    State = 0,
    Gateway = 1,
    Cert = 2,
    Metadata = 3,
}

const LANE_COUNT: usize = 4;

impl Lane {
    pub const ALL: [Lane; LANE_COUNT] = [Lane::State, Lane::Gateway, Lane::Cert, Lane::Metadata];

    pub fn name(self) -> &'static str {
        match self {
            Lane::State => "state",
            Lane::Gateway => "gateway",
            Lane::Cert => "cert",
            Lane::Metadata => "metadata",
        }
    }

    pub fn from_name(name: &str) -> Option<Lane> {
        Lane::ALL.into_iter().find(|lane| lane.name() == name)
    }

    fn from_byte(byte: u8) -> Result<Lane, WireError> {
        Lane::ALL
            .get(usize::from(byte))
            .copied()
            .ok_or(WireError::BadLane(byte))
    }
}

/// Longest item key, in bytes.
pub const MAX_KEY_LEN: usize = 128;
/// Largest encoded item. Well below what is left of a packet after the largest foca header,
/// foca's update count and the item's length prefix, so an item always fits a `Broadcast`
/// message and never sits in foca's backlog forever.
pub const MAX_ITEM_LEN: usize = 1024;
const _: () = assert!(MAX_ITEM_LEN + 2 + 2 + MAX_HEADER_LEN <= MAX_FOCA_PACKET);

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
    1 + origin.len() + 1 + 1 + key.len() + 8 + payload.len()
}

/// Checks a local item and encodes it into `out`.
pub fn encode_publish(
    origin: &str,
    lane: Lane,
    key: &str,
    version: u64,
    payload: &[u8],
    out: &mut Vec<u8>,
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
    encode_item(origin, lane, key, version, payload, out);
    Ok(())
}

fn encode_item(
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
}

fn decode_item(data: &[u8]) -> Result<ItemView<'_>, WireError> {
    if data.len() > MAX_ITEM_LEN {
        return Err(WireError::TrailingBytes);
    }
    let mut r = Reader::new(data);
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
    })
}

/// Names an item version in foca's backlog: a higher version of the same name evicts the
/// lower one, anything else is left alone.
#[derive(Debug)]
pub struct BroadcastKey {
    origin: Arc<str>,
    lane: Lane,
    key: Arc<str>,
    version: u64,
}

impl Invalidates for BroadcastKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.lane == other.lane
            && self.version > other.version
            && self.key == other.key
            && self.origin == other.origin
    }
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
}

struct Stored {
    version: u64,
    /// Dropped once the origin is down or gone; the version stays so a late copy of an
    /// old item is not news again.
    payload: Option<Arc<[u8]>>,
}

/// The latest version of every item name this node knows.
pub struct ItemStore {
    origins: HashMap<Arc<str>, [HashMap<Arc<str>, Stored>; LANE_COUNT]>,
    len: usize,
    capacity: usize,
    interner: Interner,
    fresh: Vec<Item>,
    refused: Refusals,
    export_cursor: usize,
}

impl ItemStore {
    pub fn new(capacity: usize, interner: Interner) -> ItemStore {
        ItemStore {
            origins: HashMap::new(),
            len: 0,
            capacity,
            interner,
            fresh: Vec::new(),
            refused: Refusals::default(),
            export_cursor: 0,
        }
    }

    /// Takes an encoded item if it is news. Items from peers (`from_peer`) are also queued
    /// for the host; the node's own publications are not.
    pub fn accept(&mut self, data: &[u8], from_peer: bool) -> Option<BroadcastKey> {
        let Ok(item) = decode_item(data) else {
            self.refused.malformed += 1;
            return None;
        };
        if item.lane == Lane::Cert && contains_private_key(item.payload) {
            self.refused.private_key += 1;
            return None;
        }
        let lanes = match self.origins.get_mut(item.origin) {
            Some(lanes) => lanes,
            None => {
                if self.len >= self.capacity {
                    self.refused.store_full += 1;
                    return None;
                }
                let origin = self.interner.intern(item.origin);
                self.origins.entry(origin).or_default()
            }
        };
        let lane = &mut lanes[item.lane as usize];
        let payload: Arc<[u8]>;
        let key = match lane.get_mut(item.key) {
            Some(stored) if stored.version >= item.version => return None,
            Some(stored) => {
                payload = Arc::from(item.payload);
                stored.version = item.version;
                stored.payload = Some(payload.clone());
                let (key, _) = lane.get_key_value(item.key).expect("found just above");
                key.clone()
            }
            None => {
                if self.len >= self.capacity {
                    self.refused.store_full += 1;
                    return None;
                }
                payload = Arc::from(item.payload);
                let key: Arc<str> = Arc::from(item.key);
                lane.insert(
                    key.clone(),
                    Stored {
                        version: item.version,
                        payload: Some(payload.clone()),
                    },
                );
                self.len += 1;
                key
            }
        };
        let origin = self.interner.intern(item.origin);
        if from_peer {
            self.fresh.push(Item {
                origin: origin.clone(),
                lane: item.lane,
                key: key.clone(),
                version: item.version,
                payload,
            });
        }
        Some(BroadcastKey {
            origin,
            lane: item.lane,
            key,
            version: item.version,
        })
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

    /// Drops the payloads of a site that is down or gone; versions are kept.
    pub fn forget_payloads(&mut self, origin: &str) {
        if let Some(lanes) = self.origins.get_mut(origin) {
            for stored in lanes.iter_mut().flat_map(|lane| lane.values_mut()) {
                stored.payload = None;
            }
        }
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

    /// Encodes stored items (those with payloads) one by one into `scratch` and hands each
    /// to `emit`, until `emit` says the budget is spent. Successive calls start where the
    /// previous one stopped, so a store larger than one sync is covered over several.
    pub fn export(&mut self, scratch: &mut Vec<u8>, mut emit: impl FnMut(&[u8]) -> bool) {
        let total = self.len;
        if total == 0 {
            return;
        }
        let start = self.export_cursor % total;
        let mut sent = 0;
        let entries = self.origins.iter().flat_map(|(origin, lanes)| {
            Lane::ALL.into_iter().flat_map(move |lane| {
                lanes[lane as usize]
                    .iter()
                    .map(move |(key, stored)| (origin, lane, key, stored))
            })
        });
        let ordered = entries.clone().skip(start).chain(entries.take(start));
        for (origin, lane, key, stored) in ordered {
            let Some(payload) = &stored.payload else {
                sent += 1;
                continue;
            };
            scratch.clear();
            encode_item(origin, lane, key, stored.version, payload, scratch);
            if !emit(scratch) {
                break;
            }
            sent += 1;
        }
        self.export_cursor = start + sent;
    }
}

/// The foca side of the store: decides whether a received item is news.
pub struct ItemHandler {
    store: Arc<Mutex<ItemStore>>,
}

impl ItemHandler {
    pub fn new(store: Arc<Mutex<ItemStore>>) -> ItemHandler {
        ItemHandler { store }
    }
}

pub fn lock(store: &Mutex<ItemStore>) -> MutexGuard<'_, ItemStore> {
    store
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
        Ok(lock(&self.store).accept(data, sender.is_some()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(origin: &str, lane: Lane, key: &str, version: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_publish(origin, lane, key, version, payload, &mut out).unwrap();
        out
    }

    fn store() -> ItemStore {
        ItemStore::new(100, Interner::default())
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
            encode_publish("a", Lane::Cert, "tls", 1, pem, &mut out),
            Err(PublishError::PrivateKey)
        );
        // The marker is only refused on the cert lane.
        assert!(encode_publish("a", Lane::Metadata, "note", 1, pem, &mut out).is_ok());
        let mut raw = Vec::new();
        encode_item("a", Lane::Cert, "tls", 1, pem, &mut raw);
        let mut s = store();
        assert!(s.accept(&raw, true).is_none());
        assert_eq!(s.refusals().private_key, 1);
        assert!(!s.has_fresh());
        let rsa = b"-----BEGIN RSA PRIVATE KEY-----";
        raw.clear();
        encode_item("a", Lane::Cert, "tls", 2, rsa, &mut raw);
        assert!(s.accept(&raw, true).is_none());
        assert_eq!(s.refusals().private_key, 2);
    }

    #[test]
    fn oversized_and_bad_keys_are_refused() {
        let mut out = Vec::new();
        let big = vec![0u8; MAX_ITEM_LEN];
        assert!(matches!(
            encode_publish("a", Lane::State, "k", 1, &big, &mut out),
            Err(PublishError::TooLarge { .. })
        ));
        let fits = vec![0u8; MAX_ITEM_LEN - encoded_item_len("a", "k", b"")];
        assert!(encode_publish("a", Lane::State, "k", 1, &fits, &mut out).is_ok());
        assert_eq!(out.len(), MAX_ITEM_LEN);
        assert!(matches!(
            encode_publish("a", Lane::State, "", 1, b"", &mut out),
            Err(PublishError::BadKey(_))
        ));
        assert!(matches!(
            encode_publish(
                "a",
                Lane::State,
                &"k".repeat(MAX_KEY_LEN + 1),
                1,
                b"",
                &mut out
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
        let mut s = ItemStore::new(2, Interner::default());
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

    #[test]
    fn export_rotates_and_skips_forgotten_payloads() {
        let mut s = store();
        for key in ["1", "2", "3"] {
            s.accept(&encoded("a", Lane::State, key, 1, b"p"), true);
        }
        s.accept(&encoded("gone", Lane::State, "x", 1, b"p"), true);
        s.forget_payloads("gone");
        let mut scratch = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..3 {
            let mut budget = 2;
            s.export(&mut scratch, |item| {
                if budget == 0 {
                    return false;
                }
                budget -= 1;
                seen.push(item.to_vec());
                true
            });
        }
        let mut distinct = seen.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            3,
            "every live item is exported over a few rounds"
        );
        assert!(seen
            .iter()
            .all(|item| !item.windows(4).any(|w| w == b"gone")));
        // A forgotten payload keeps its version: an old copy is not news again.
        assert!(s
            .accept(&encoded("gone", Lane::State, "x", 1, b"p"), true)
            .is_none());
    }
}
