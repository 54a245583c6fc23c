//! This site's own items: publishing them (encoded, signed, stored and queued for relay),
//! the simulator's converged start, and forgetting the items of a site the host judged
//! stale.
//!
//! Held apart because it is the host's one way into the item store, beside everything
//! that arrives from peers.

use crate::identity::auth::ITEM_DOMAIN;
use crate::lanes::{encode_publish, lock, BroadcastKey, Lane, PublishError};

use super::Driver;

impl Driver {
    /// Offers a local item. `Ok(false)` when this node already holds that version or a
    /// newer one of the same (lane, key). Items go out on the next [`Driver::flush`].
    pub fn publish(
        &mut self,
        lane: Lane,
        key: &str,
        version: u64,
        payload: &[u8],
    ) -> Result<bool, PublishError> {
        let Some(key) = self.store_own(lane, key, version, payload)? else {
            return Ok(false);
        };
        lock(&self.relays).queue.push(key, self.scratch.clone());
        self.stats.items_published += 1;
        self.broadcast_pending = true;
        Ok(true)
    }

    /// The simulator's converged start: stores a local item as one published long ago
    /// (stored, not relayed) and returns its encoding, for the other nodes'
    /// [`Driver::hold_converged`]. `Ok(None)` as [`Driver::publish`]'s `Ok(false)`.
    pub(crate) fn publish_converged(
        &mut self,
        lane: Lane,
        key: &str,
        version: u64,
        payload: &[u8],
    ) -> Result<Option<Vec<u8>>, PublishError> {
        Ok(self
            .store_own(lane, key, version, payload)?
            .map(|_| self.scratch.clone()))
    }

    /// The simulator's converged start: another site's item, as
    /// [`Driver::publish_converged`] encoded it, stored as if a sync had brought it long
    /// ago: not relayed and not handed to the host as news.
    pub(crate) fn hold_converged(&mut self, encoded: &[u8]) {
        let mut store = lock(&self.store);
        store.accept(encoded, true);
        store.take_fresh().for_each(drop);
    }

    /// Encodes (into `scratch`), signs and stores a local item; its relay key if it is
    /// news.
    fn store_own(
        &mut self,
        lane: Lane,
        key: &str,
        version: u64,
        payload: &[u8],
    ) -> Result<Option<BroadcastKey>, PublishError> {
        let origin = self.foca.identity().site().clone();
        self.scratch.clear();
        let authority = self.session.authority();
        encode_publish(
            &origin,
            lane,
            key,
            version,
            payload,
            &mut self.scratch,
            |signed| authority.sign(ITEM_DOMAIN, signed),
        )?;
        let mut store = lock(&self.store);
        if !store.is_newer(&origin, lane, key, version) {
            return Ok(None);
        }
        if store.is_full_for(&origin, lane, key) {
            return Err(PublishError::StoreFull);
        }
        Ok(store.accept(&self.scratch, false))
    }

    /// Forgets these items of `site` (the host decided its records are stale): versions
    /// are kept, payloads dropped (syncs stop carrying them), and the same versions are
    /// taken and delivered again once the site is live and they come back. The host owns
    /// what is forgotten: a site going down forgets nothing here.
    pub fn forget(&mut self, site: &str, items: &[(Lane, String)]) -> usize {
        lock(&self.store).forget(site, items)
    }
}
