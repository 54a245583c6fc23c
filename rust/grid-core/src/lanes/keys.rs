//! The keys that sign for each origin's items: its current certificate's key, and earlier
//! ones still vouched for (a certificate renewed or a site restarted with a new one), so
//! that items signed before a renewal stay verifiable where they travel and nothing a site
//! published is lost when its certificate changes (docs/security.md, "Certificate
//! renewal").
//!
//! Each trusted key gets a small [`KeyId`] that the store keeps with every item it holds:
//! which key signed what decides which earlier certificates a sync must carry, which of a
//! site's own items it signs again under its current key, and what a revocation drops.

use std::collections::HashMap;
use std::sync::Arc;

use crate::identity::auth::{PublicKey, FINGERPRINT_LEN, ITEM_DOMAIN};
use crate::wire::sites::MAX_EARLIER_CERTIFICATES;

/// Keys an origin may have trusted at once: the current one and as many earlier ones as the
/// session keeps certificates for.
pub const MAX_KEYS_PER_ORIGIN: usize = 1 + MAX_EARLIER_CERTIFICATES;

/// A trusted key, named for the items it signed. `KeyId::UNSIGNED` marks items of a store
/// that takes unsigned items (simulations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyId(u32);

impl KeyId {
    pub const UNSIGNED: KeyId = KeyId(0);
}

/// Whether a key signs an origin's items from now on, or only vouches for what it signed
/// before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Current,
    Earlier,
}

/// What checking an item's signature found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// No key is trusted for the origin yet.
    NoKey,
    /// None of the origin's trusted keys made this signature.
    Forged,
    /// Signed by this trusted key.
    By(KeyId),
}

struct Trusted {
    id: KeyId,
    key: PublicKey,
}

/// The trusted keys of every origin, the current one first.
#[derive(Default)]
pub struct KeyBook {
    origins: HashMap<Arc<str>, Vec<Trusted>>,
    issued: u32,
}

impl KeyBook {
    /// Trusts `key` for `origin`'s items in `role`. A new current key moves the one it
    /// replaces to the earlier keys; a key already trusted keeps its id (and becomes
    /// current if so asked). Returns whether `key` was not trusted before.
    pub fn trust(&mut self, origin: &Arc<str>, key: PublicKey, role: Role) -> bool {
        let keys = self.origins.entry(origin.clone()).or_default();
        if let Some(at) = keys.iter().position(|known| known.key == key) {
            if role == Role::Current && at != 0 {
                let known = keys.remove(at);
                keys.insert(0, known);
            }
            return false;
        }
        self.issued += 1;
        let trusted = Trusted {
            id: KeyId(self.issued),
            key,
        };
        match role {
            Role::Current => keys.insert(0, trusted),
            Role::Earlier if keys.is_empty() => {
                // An earlier key alone still vouches for what it signed, but a current key
                // learned later must come first.
                keys.push(trusted);
            }
            Role::Earlier => keys.insert(1, trusted),
        }
        keys.truncate(MAX_KEYS_PER_ORIGIN);
        true
    }

    /// The id of `origin`'s current key.
    pub fn current(&self, origin: &str) -> Option<KeyId> {
        self.origins
            .get(origin)
            .and_then(|keys| keys.first())
            .map(|known| known.id)
    }

    /// Which trusted key of `origin` made `signature` over `signed`, the current one tried
    /// first.
    pub fn check(&self, origin: &str, signed: &[u8], signature: &[u8]) -> Checked {
        let Some(keys) = self.origins.get(origin).filter(|keys| !keys.is_empty()) else {
            return Checked::NoKey;
        };
        keys.iter()
            .find(|known| known.key.verify(ITEM_DOMAIN, signed, signature))
            .map_or(Checked::Forged, |known| Checked::By(known.id))
    }

    /// Whether `origin`'s current key made `signature`.
    pub fn is_current_signature(&self, origin: &str, signed: &[u8], signature: &[u8]) -> bool {
        self.origins
            .get(origin)
            .and_then(|keys| keys.first())
            .is_some_and(|known| known.key.verify(ITEM_DOMAIN, signed, signature))
    }

    /// The certificate fingerprint of `origin`'s key `id` if it is an earlier one (a sync
    /// carries that certificate before the items it signed).
    pub fn earlier_fingerprint(&self, origin: &str, id: KeyId) -> Option<[u8; FINGERPRINT_LEN]> {
        self.origins
            .get(origin)?
            .iter()
            .skip(1)
            .find(|known| known.id == id)
            .map(|known| known.key.fingerprint())
    }

    /// The earlier keys of `origin`: id and certificate fingerprint.
    pub fn earlier(&self, origin: &str) -> Vec<(KeyId, [u8; FINGERPRINT_LEN])> {
        self.origins.get(origin).map_or_else(Vec::new, |keys| {
            keys.iter()
                .skip(1)
                .map(|known| (known.id, known.key.fingerprint()))
                .collect()
        })
    }

    /// Origins that have earlier keys.
    pub fn with_earlier(&self) -> Vec<Arc<str>> {
        self.origins
            .iter()
            .filter(|(_, keys)| keys.len() > 1)
            .map(|(origin, _)| origin.clone())
            .collect()
    }

    /// Stops trusting the key of `origin` whose certificate has this fingerprint; returns
    /// its id if it was trusted.
    pub fn remove(&mut self, origin: &str, fingerprint: &[u8; FINGERPRINT_LEN]) -> Option<KeyId> {
        let keys = self.origins.get_mut(origin)?;
        let at = keys
            .iter()
            .position(|known| known.key.fingerprint() == *fingerprint)?;
        let removed = keys.remove(at).id;
        if keys.is_empty() {
            self.origins.remove(origin);
        }
        Some(removed)
    }

    /// Stops trusting every key of `origin`.
    pub fn remove_origin(&mut self, origin: &str) {
        self.origins.remove(origin);
    }
}
