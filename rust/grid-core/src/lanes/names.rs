//! How broadcast items are named: their [`Lane`], an [`ItemName`] (origin site, lane, key)
//! in the order every node walks a store, and the [`BroadcastKey`] of one version in
//! foca's backlog.
//!
//! The item store ([`crate::lanes`]) keeps items under these names, and it holds a relay
//! queue ([`crate::lanes::relay`]) and describes its recent versions in digests
//! ([`crate::lanes::repair`]), both of which name items too. The names live here, below
//! all three, so that neither the relay queue nor the digests depend back on the store
//! that uses them; [`crate::lanes`] re-exports them.

use std::cmp::Ordering;
use std::sync::Arc;

use foca::Invalidates;

use crate::identity::{Interner, MAX_SITE_LEN};
use crate::reader::{Reader, WireError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    State = 0,
    Gateway = 1,
    Cert = 2,
    Metadata = 3,
}

pub(crate) const LANE_COUNT: usize = 4;

/// The order of lanes within one origin in a sync: what a receiver needs to trust and reach
/// a site comes before its records.
pub(crate) const EXPORT_LANES: [Lane; LANE_COUNT] =
    [Lane::Cert, Lane::Gateway, Lane::Metadata, Lane::State];

pub(crate) fn export_rank(lane: Lane) -> usize {
    match lane {
        Lane::Cert => 0,
        Lane::Gateway => 1,
        Lane::Metadata => 2,
        Lane::State => 3,
    }
}

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

    pub(crate) fn from_byte(byte: u8) -> Result<Lane, WireError> {
        Lane::ALL
            .get(usize::from(byte))
            .copied()
            .ok_or(WireError::BadLane(byte))
    }
}

/// An item's name, in the order syncs walk a store: by origin, then lane (certificates,
/// gateway, metadata, state), then key, bytewise.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ItemName {
    pub origin: Arc<str>,
    pub lane: Lane,
    pub key: Arc<str>,
}

impl Ord for ItemName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.cmp_to(&other.origin, other.lane, &other.key)
    }
}

impl PartialOrd for ItemName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl ItemName {
    /// How this name compares to `(origin, lane, key)` in sync order.
    pub(crate) fn cmp_to(&self, origin: &str, lane: Lane, key: &str) -> Ordering {
        (&*self.origin, export_rank(self.lane), &*self.key).cmp(&(origin, export_rank(lane), key))
    }

    /// `origin_len u8 | origin | lane u8 | key_len u8 | key`
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.origin.len() as u8);
        out.extend_from_slice(self.origin.as_bytes());
        out.push(self.lane as u8);
        out.push(self.key.len() as u8);
        out.extend_from_slice(self.key.as_bytes());
    }

    pub fn decode(r: &mut Reader<'_>, interner: &Interner) -> Result<ItemName, WireError> {
        // Only a position in the order: a name nobody holds resumes at the next one held.
        let (origin, lane, key) = read_name(r)?;
        Ok(ItemName {
            origin: interner.intern(origin),
            lane,
            key: Arc::from(key),
        })
    }
}

/// Reads `origin_len u8 | origin | lane u8 | key_len u8 | key` in place: the head of an
/// item and a name in a sync entry are the same bytes.
pub(crate) fn read_name<'a>(r: &mut Reader<'a>) -> Result<(&'a str, Lane, &'a str), WireError> {
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
    Ok((origin, lane, key))
}

/// Names an item version in foca's backlog: a higher version of the same name evicts the
/// lower one, anything else is left alone.
#[derive(Clone, Debug)]
pub struct BroadcastKey {
    origin: Arc<str>,
    lane: Lane,
    key: Arc<str>,
    version: u64,
}

impl BroadcastKey {
    pub(crate) fn new(origin: Arc<str>, lane: Lane, key: Arc<str>, version: u64) -> BroadcastKey {
        BroadcastKey {
            origin,
            lane,
            key,
            version,
        }
    }

    pub fn name(&self) -> ItemName {
        ItemName {
            origin: self.origin.clone(),
            lane: self.lane,
            key: self.key.clone(),
        }
    }
}

impl Invalidates for BroadcastKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.lane == other.lane
            && self.version > other.version
            && self.key == other.key
            && self.origin == other.origin
    }
}
