//! The store's side of a site's certificate changing (docs/security.md, "Certificate
//! renewal"): which keys it trusts for an origin ([`super::keys`]), items taken under an
//! earlier key, a site's own items signed again under its current key, the signature of a
//! held version replaced by its origin's renewed one, earlier keys forgotten once nothing
//! held is theirs, and the items of a revoked key dropped.

use std::collections::HashSet;
use std::sync::Arc;

use super::encoding::{decode_item, ItemView};
use super::keys::{KeyId, Role};
use super::store::{ItemStore, Renewals};
use super::{BroadcastKey, Lane};
use crate::identity::auth::{PublicKey, FINGERPRINT_LEN, SIGNATURE_LEN};

/// One of this site's own items held under an earlier key: what to sign again.
pub struct StaleOwnItem {
    pub lane: Lane,
    pub key: Arc<str>,
    pub version: u64,
    pub payload: Arc<[u8]>,
}

impl ItemStore {
    /// Names this node's own site: its items held under an earlier key are signed again
    /// ([`ItemStore::take_stale_own`]).
    pub fn set_own(&mut self, site: &Arc<str>) {
        self.own = Some(site.clone());
    }

    /// Trusts `key` for the items of `origin` (its certificate was verified) as its current
    /// key or an earlier one, and takes the items of `origin` that were waiting for a key.
    pub fn trust_origin(&mut self, origin: &Arc<str>, key: PublicKey, role: Role) {
        let Some(keys) = &mut self.origin_keys else {
            return;
        };
        let was_current = keys.current(origin);
        let new = keys.trust(origin, key, role);
        if self.own.as_ref() == Some(origin) && keys.current(origin) != was_current {
            // Everything this site holds of its own is now signed by a key that is not its
            // current one.
            self.own_stale = true;
        }
        if !new {
            return;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|data| decode_item(data).is_ok_and(|item| item.origin == &**origin));
        self.waiting = waiting.into();
        self.retaking = true;
        for data in ready {
            self.accept(&data, true);
        }
        self.retaking = false;
    }

    /// Stops trusting `origin`'s keys (its pin changed); its items wait for a new one.
    pub fn distrust_origin(&mut self, origin: &str) {
        if let Some(keys) = &mut self.origin_keys {
            keys.remove_origin(origin);
        }
    }

    /// The id of `origin`'s current key (what a local publish is signed with).
    pub(super) fn current_key(&self, origin: &str) -> KeyId {
        self.origin_keys
            .as_ref()
            .and_then(|keys| keys.current(origin))
            .unwrap_or(KeyId::UNSIGNED)
    }

    /// Notes that an item of `origin` is held under `signer`: one of this site's own under
    /// an earlier key is to be signed again.
    pub(super) fn note_own_signer(&mut self, origin: &str, signer: KeyId) {
        if self.own.as_deref() == Some(origin)
            && self.origin_keys.is_some()
            && signer != self.current_key(origin)
        {
            self.own_stale = true;
        }
    }

    /// A held version received again with its origin's current key's signature while the
    /// one held was made by an earlier key: the renewed signature replaces it (same version,
    /// same payload, so nothing changes for the host) and is relayed on.
    pub(super) fn take_renewed_signature(&mut self, item: &ItemView<'_>) -> Option<BroadcastKey> {
        let keys = self.origin_keys.as_ref()?;
        let current = keys.current(item.origin)?;
        let stored = self.stored(item.origin, item.lane, item.key)?;
        let held = stored.held.as_ref()?;
        // The version as it was taken (a relay or a sync brings it again): verified then.
        if held.signer == current
            || held.signature == item.signature
            || *held.payload != *item.payload
        {
            return None;
        }
        self.signature_checks += 1;
        if !keys.is_current_signature(item.origin, item.signed, &item.signature) {
            return None;
        }
        self.replace_signature(item.origin, item.lane, item.key, item.signature);
        self.renewals.signatures_renewed += 1;
        let origin = self.origins.get_key_value(item.origin)?.0.clone();
        let lanes = &self.origins[&origin];
        let (key, _) = lanes[item.lane as usize].get_key_value(item.key)?;
        Some(BroadcastKey::new(
            origin,
            item.lane,
            key.clone(),
            item.version,
        ))
    }

    /// This site's own items held under a key that is not its current one, if any may be
    /// (each call hands them once; the driver signs them again).
    pub fn take_stale_own(&mut self) -> Vec<StaleOwnItem> {
        if !std::mem::take(&mut self.own_stale) {
            return Vec::new();
        }
        let Some(own) = self.own.clone() else {
            return Vec::new();
        };
        let current = self.current_key(&own);
        let Some(lanes) = self.origins.get(&own) else {
            return Vec::new();
        };
        Lane::ALL
            .into_iter()
            .flat_map(|lane| {
                lanes[lane as usize]
                    .iter()
                    .filter_map(move |(key, stored)| {
                        let held = stored.held.as_ref()?;
                        (held.signer != current).then(|| StaleOwnItem {
                            lane,
                            key: key.clone(),
                            version: stored.version,
                            payload: held.payload.clone(),
                        })
                    })
            })
            .collect()
    }

    /// Puts the current key's `signature` on a held version of `origin`'s item (signed
    /// again by this site, or received so signed). False if that version is not held.
    pub fn replace_signature(
        &mut self,
        origin: &str,
        lane: Lane,
        key: &str,
        signature: [u8; SIGNATURE_LEN],
    ) -> bool {
        let current = self.current_key(origin);
        let held = self
            .origins
            .get_mut(origin)
            .and_then(|lanes| lanes[lane as usize].get_mut(key))
            .and_then(|stored| stored.held.as_mut());
        let Some(held) = held else {
            return false;
        };
        held.signature = signature;
        held.signer = current;
        true
    }

    /// Stops trusting the key of `origin` whose certificate has this fingerprint (it was
    /// revoked) and drops the payloads of the items it signed, as a left site's are (their
    /// versions stay, so the same versions signed by a new key are taken again). Returns
    /// the names dropped.
    pub fn revoke_key(
        &mut self,
        origin: &str,
        fingerprint: &[u8; FINGERPRINT_LEN],
    ) -> Vec<(Lane, Arc<str>)> {
        let Some(revoked) = self
            .origin_keys
            .as_mut()
            .and_then(|keys| keys.remove(origin, fingerprint))
        else {
            return Vec::new();
        };
        let mut dropped = Vec::new();
        if let Some(lanes) = self.origins.get_mut(origin) {
            for lane in Lane::ALL {
                for (key, stored) in &mut lanes[lane as usize] {
                    if stored
                        .held
                        .as_ref()
                        .is_some_and(|held| held.signer == revoked)
                    {
                        stored.held = None;
                        dropped.push((lane, key.clone(), stored.recent));
                    }
                }
            }
        }
        self.renewals.revoked_items += dropped.len() as u64;
        dropped
            .into_iter()
            .map(|(lane, key, recent)| {
                self.no_longer_latest(recent);
                (lane, key)
            })
            .collect()
    }

    /// Stops trusting an earlier key of `origin` (its certificate expired, or no longer
    /// passes the trust policy). What it signed stays held here (it was verified when it
    /// came) but verifies nowhere new: its origin signs its own items again long before.
    pub fn forget_earlier_key(&mut self, origin: &str, fingerprint: &[u8; FINGERPRINT_LEN]) {
        let Some(keys) = &mut self.origin_keys else {
            return;
        };
        if keys
            .earlier(origin)
            .iter()
            .any(|(_, earlier)| earlier == fingerprint)
        {
            keys.remove(origin, fingerprint);
        }
    }

    /// Forgets the earlier keys that sign no held item any more; returns each with the
    /// fingerprint of its certificate (which need not be carried any longer).
    pub fn forget_unused_earlier_keys(&mut self) -> Vec<(Arc<str>, [u8; FINGERPRINT_LEN])> {
        let Some(keys) = &self.origin_keys else {
            return Vec::new();
        };
        let mut unused = Vec::new();
        for origin in keys.with_earlier() {
            let used: HashSet<KeyId> =
                self.origins
                    .get(&origin)
                    .map_or_else(HashSet::new, |lanes| {
                        lanes
                            .iter()
                            .flat_map(|lane| lane.values())
                            .filter_map(|stored| stored.held.as_ref().map(|held| held.signer))
                            .collect()
                    });
            for (id, fingerprint) in keys.earlier(&origin) {
                if !used.contains(&id) {
                    unused.push((origin.clone(), fingerprint));
                }
            }
        }
        if let Some(keys) = &mut self.origin_keys {
            for (origin, fingerprint) in &unused {
                keys.remove(origin, fingerprint);
            }
        }
        unused
    }

    /// The origins of the items waiting for a key, each once, if items were added to the
    /// waiting ones since the last call or `always`; else none.
    pub fn waiting_origins(&mut self, always: bool) -> Vec<Arc<str>> {
        if !std::mem::take(&mut self.waiting_grew) && !always {
            return Vec::new();
        }
        let mut origins: Vec<Arc<str>> = Vec::new();
        for data in &self.waiting {
            if let Ok(item) = decode_item(data) {
                if !origins.iter().any(|known| **known == *item.origin) {
                    origins.push(self.interner.intern(item.origin));
                }
            }
        }
        origins
    }

    /// How many items wait for their origin's certificate.
    pub fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    pub fn renewals(&self) -> Renewals {
        self.renewals
    }

    /// Origin signatures checked on items from peers, in all.
    pub fn signature_checks(&self) -> u64 {
        self.signature_checks
    }
}
