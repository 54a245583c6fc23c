//! The item store, the layer above the wire and under the SWIM driver: broadcast lanes,
//! versioned items that piggyback on SWIM traffic as foca custom broadcasts.
//!
//! An item is named by `(origin site, lane, key)` and carries a version; only a higher
//! version of the same name is news. News is handed to the host exactly once, re-gossiped
//! to g members (through the relay queue, [`relay`]) and replaces the older version
//! waiting there at once, while items of other names are untouched; digests
//! ([`repair`]) bring what that push misses. The latest version of every name is kept in
//! an [`ItemStore`] so a push/pull sync can teach late joiners what was published before
//! they arrived. The store keeps names in one order every node shares ([`ItemName`]), so a
//! node can walk a store larger than one sync in parts, each part from whichever peer
//! answers.
//!
//! Item encoding: `origin_len u8 | origin | lane u8 | key_len u8 | key | version u64 |
//! payload | signature [64]`. The origin site signs (over
//! [`ITEM_DOMAIN`](crate::identity::auth::ITEM_DOMAIN) and everything before the
//! signature); relays and syncs pass the signature on untouched, and a node takes an item
//! only if it verifies under the key the origin's certificate proved.
//!
//! The layer's modules, each below this one: [`names`] (how an item is named), [`relay`]
//! (the relay queue), [`repair`] (the digests) and [`keys`] (the keys that sign for each
//! origin); the relay queue and the digests name
//! items, so [`names`] is below them too.
//!
//! This module's files, by concern:
//! - `encoding`: the item encoding, its checks on a local publish, and decoding;
//! - `store`: the [`ItemStore`] (latest versions, refusals, recent versions for repair,
//!   export in name order) and its bounds;
//! - `renewal`: the store's side of a certificate changing: keys trusted per origin
//!   ([`keys`]), own items signed again, renewed signatures taken, revoked keys' items
//!   dropped;
//! - `delivery`: the foca side ([`ItemHandler`]) handing news to the relay queue
//!   ([`Relays`]).

use std::fmt;
use std::sync::Arc;

pub mod keys;
pub mod names;
pub mod relay;
pub mod repair;

mod delivery;
mod encoding;
mod export;
mod renewal;
mod store;
#[cfg(test)]
mod tests;

pub use delivery::{lock, ItemHandler, Relays};
pub use encoding::{contains_private_key, encode_publish, encoded_item_len};
pub use export::{ExportEnd, ExportForm, WalkLanes};
pub use renewal::StaleOwnItem;
pub use store::{ItemStore, Refusals, Renewals, Taken, DEFAULT_ITEM_CAPACITY, MAX_ITEM_CAPACITY};

use crate::wire::{MAX_BROADCAST_HEADER_LEN, MAX_FOCA_PACKET};

/// What names an item (its lane, its name, its version's key in foca's backlog) is defined
/// in [`names`], below this module and the relay queue and digests it uses, and
/// re-exported here.
pub use crate::lanes::names::{BroadcastKey, ItemName, Lane};

/// Longest item key, in bytes.
pub const MAX_KEY_LEN: usize = 128;
/// Largest encoded item, signature included. Below what is left of a packet after the
/// largest `Broadcast` header and the item's length prefix, so an item always fits a
/// `Broadcast` message and never sits in foca's backlog forever.
pub const MAX_ITEM_LEN: usize = 1024;
const _: () = assert!(MAX_ITEM_LEN + 2 + MAX_BROADCAST_HEADER_LEN <= MAX_FOCA_PACKET);

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
