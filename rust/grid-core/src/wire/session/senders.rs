//! The identities a session has verified messages from: each one's replay window, when it
//! was last heard and the protocol versions its latest `HELLO` named; which identities each
//! site has; and which identity was heard last from each address.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::identity::auth::ReplayWindow;
use crate::identity::{NodeAddr, NodeId};
use crate::wire::versions::ProtocolRange;

use super::IDENTITIES_PER_SITE;

pub(super) struct Sender {
    pub(super) window: ReplayWindow,
    pub(super) last_heard: Duration,
    /// The versions its latest `HELLO` named (none heard yet: unknown).
    pub(super) protocols: Option<ProtocolRange>,
}

#[derive(Default)]
pub(super) struct Senders {
    by_id: HashMap<NodeId, Sender>,
    by_site: HashMap<Arc<str>, Vec<NodeId>>,
    /// The identity heard last from each address.
    at_address: HashMap<NodeAddr, NodeId>,
}

impl Senders {
    pub(super) fn get(&self, id: &NodeId) -> Option<&Sender> {
        self.by_id.get(id)
    }

    pub(super) fn contains(&self, id: &NodeId) -> bool {
        self.by_id.contains_key(id)
    }

    /// Whether `seq` is new to `id`'s replay window (an identity not heard yet has none).
    pub(super) fn admits(&self, id: &NodeId, seq: u64) -> bool {
        self.by_id
            .get(id)
            .map_or(true, |sender| sender.window.admits(seq))
    }

    /// The identity heard last from `addr`, and what is known of it.
    pub(super) fn latest_at(&self, addr: NodeAddr) -> Option<(&NodeId, &Sender)> {
        let id = self.at_address.get(&addr)?;
        Some((id, self.by_id.get(id)?))
    }

    /// Records a message from `id` that passed every check: its sequence number, the time,
    /// and (for a `HELLO`) the versions it names. Past [`IDENTITIES_PER_SITE`] identities of
    /// its site, the least recently heard is forgotten.
    pub(super) fn record(
        &mut self,
        now: Duration,
        id: &NodeId,
        seq: u64,
        protocols: Option<ProtocolRange>,
    ) {
        if !self.by_id.contains_key(id) {
            let known = self.by_site.entry(id.site().clone()).or_default();
            if known.len() >= IDENTITIES_PER_SITE {
                let by_id = &self.by_id;
                let oldest = known
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, id)| by_id.get(*id).map(|s| s.last_heard))
                    .map(|(index, _)| index)
                    .expect("the list is full");
                let forgotten = known.swap_remove(oldest);
                self.by_id.remove(&forgotten);
                if self.at_address.get(&forgotten.node_addr()) == Some(&forgotten) {
                    self.at_address.remove(&forgotten.node_addr());
                }
            }
            known.push(id.clone());
        }
        let entry = self.by_id.entry(id.clone()).or_insert(Sender {
            window: ReplayWindow::default(),
            last_heard: now,
            protocols: None,
        });
        entry.window.accept(seq);
        entry.last_heard = now;
        if protocols.is_some() {
            entry.protocols = protocols;
        }
        self.at_address.insert(id.node_addr(), id.clone());
    }

    /// Forgets every identity of `site`.
    pub(super) fn forget_site(&mut self, site: &str) {
        for id in self.by_site.remove(site).unwrap_or_default() {
            self.by_id.remove(&id);
            if self.at_address.get(&id.node_addr()) == Some(&id) {
                self.at_address.remove(&id.node_addr());
            }
        }
    }
}
