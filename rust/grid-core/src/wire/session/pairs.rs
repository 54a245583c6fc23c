//! The sessions a node agreed with its peers, and its handshakes under way.
//!
//! Each session belongs to one peer identity at one address and is known here by the
//! index this node chose for it (what the peer's messages under it carry). A node sends
//! under the newest session with an address that it knows the peer holds: as initiator
//! once the response came, as responder once a message under it arrived (the initiator's
//! `HANDSHAKE_CONFIRM` right after the response, or any other). Until then, and with a
//! peer that speaks no session form, it signs.
//!
//! ```text
//!  initiator                                   responder
//!  no session ── HANDSHAKE_INIT (signed) ────▶ agreed, not confirmed: still signs (or
//!  pending                                     uses its older session)
//!  agreed, sends in session ◀── HANDSHAKE_RESPONSE (signed)
//!  HANDSHAKE_CONFIRM (session form) ─────────▶ confirmed: sends in session
//! ```
//!
//! Lost messages: no response within [`HANDSHAKE_RETRY`] and the initiator starts again
//! with a new ephemeral key at its next message to the peer; a lost confirm is made up by
//! the next message. Crossing handshakes make two sessions, both valid; each side sends
//! under the newest it may. A restart (or a new identity at the address) forgets every
//! session with the address once the new identity's `HELLO` or `HANDSHAKE_INIT`
//! verifies; a message under a session its receiver does not hold draws a `HELLO` asking
//! for one and a handshake (paced per address). Sessions are kept in memory only.

use std::collections::HashMap;
use std::time::Duration;

use crate::identity::{NodeAddr, NodeId};
use crate::wire::handshake::{Ephemeral, SessionKeys};

/// An initiator starts a new handshake once its session is this old (a responder
/// [`RESPONDER_REKEY_DELAY`] later, so that the two rarely cross).
pub const REKEY_AFTER: Duration = Duration::from_secs(120);
/// A session is neither used nor taken after this long.
pub const REJECT_AFTER: Duration = Duration::from_secs(180);
/// A session is rekeyed after this many messages sent under it...
pub const REKEY_AFTER_MESSAGES: u64 = 1 << 20;
/// ...and no longer used after this many.
pub const REJECT_AFTER_MESSAGES: u64 = 1 << 21;
/// A handshake without a response is started again after this long.
pub const HANDSHAKE_RETRY: Duration = Duration::from_secs(1);
/// How much later than the initiator a responder rekeys a session.
pub const RESPONDER_REKEY_DELAY: Duration = Duration::from_secs(15);
/// Sessions kept per address: the newest, the one before (a rekey), one crossing.
const SESSIONS_PER_ADDRESS: usize = 3;
/// Addresses with sessions or handshakes; past it, the least recently agreed goes.
const ADDRESSES: usize = 8192;

pub(super) struct Agreed {
    pub(super) peer: NodeId,
    pub(super) keys: SessionKeys,
    /// The peer's index for this session: what our messages under it carry.
    pub(super) their_index: u32,
    at: Duration,
    sent: u64,
    initiator: bool,
    /// The peer is known to hold the keys.
    confirmed: bool,
    /// A message under it came: the peer sends in the session form.
    heard: bool,
}

pub(super) struct Pending {
    pub(super) responder: NodeId,
    pub(super) index: u32,
    pub(super) ephemeral: Ephemeral,
    /// The `HANDSHAKE_INIT` as signed.
    pub(super) init: Vec<u8>,
    pub(super) at: Duration,
}

#[derive(Default)]
struct Peer {
    /// Our indices of the sessions with this address, oldest first.
    agreed: Vec<u32>,
    pending: Option<Pending>,
}

/// What sending to an address under a session needs, and whether to rekey.
pub(super) struct Sending<'a> {
    pub(super) keys: &'a SessionKeys,
    pub(super) their_index: u32,
    pub(super) rekey: bool,
}

#[derive(Default)]
pub(super) struct Pairs {
    agreed: HashMap<u32, Agreed>,
    peers: HashMap<NodeAddr, Peer>,
}

impl Pairs {
    /// The session to send to `addr` under, if there is one the peer holds; counts the
    /// message.
    pub(super) fn sending(&mut self, now: Duration, addr: NodeAddr) -> Option<Sending<'_>> {
        let index = self.sending_index(now, addr)?;
        let peer = self.peers.get(&addr)?;
        let agreed = self.agreed.get_mut(&index)?;
        agreed.sent += 1;
        let rekey_at = if agreed.initiator {
            REKEY_AFTER
        } else {
            REKEY_AFTER + RESPONDER_REKEY_DELAY
        };
        let newest = peer.agreed.last() == Some(&index);
        let rekey = newest
            && (now.saturating_sub(agreed.at) >= rekey_at || agreed.sent >= REKEY_AFTER_MESSAGES);
        Some(Sending {
            keys: &agreed.keys,
            their_index: agreed.their_index,
            rekey,
        })
    }

    /// Whether a confirmed session with `addr` is usable now: one [`Pairs::sending`] would
    /// send under.
    pub(super) fn holds(&self, now: Duration, addr: NodeAddr) -> bool {
        self.sending_index(now, addr).is_some()
    }

    /// Our index of the newest confirmed session with `addr` that is usable now.
    fn sending_index(&self, now: Duration, addr: NodeAddr) -> Option<u32> {
        let peer = self.peers.get(&addr)?;
        peer.agreed.iter().rev().copied().find(|index| {
            self.agreed
                .get(index)
                .is_some_and(|a| a.confirmed && usable(a, now))
        })
    }

    /// Whether a handshake with `addr` may start now: none under way, or the last one
    /// unanswered for [`HANDSHAKE_RETRY`].
    pub(super) fn may_start(&self, now: Duration, addr: NodeAddr) -> bool {
        self.peers
            .get(&addr)
            .and_then(|peer| peer.pending.as_ref())
            .map_or(true, |pending| {
                now.saturating_sub(pending.at) >= HANDSHAKE_RETRY
            })
    }

    pub(super) fn start(&mut self, addr: NodeAddr, pending: Pending) {
        self.make_room(addr);
        self.peers.entry(addr).or_default().pending = Some(pending);
    }

    /// The handshake under way with `addr` for our `index`, taken out of the table.
    pub(super) fn take_pending(&mut self, addr: NodeAddr, index: u32) -> Option<Pending> {
        let peer = self.peers.get_mut(&addr)?;
        if peer.pending.as_ref()?.index != index {
            return None;
        }
        peer.pending.take()
    }

    /// Whether `index` is free to name a new session.
    pub(super) fn is_free(&self, index: u32) -> bool {
        !self.agreed.contains_key(&index)
            && self
                .peers
                .values()
                .all(|peer| peer.pending.as_ref().map_or(true, |p| p.index != index))
    }

    /// Records a session agreed with `peer` under our `index`.
    pub(super) fn agree(
        &mut self,
        now: Duration,
        index: u32,
        peer: NodeId,
        keys: SessionKeys,
        their_index: u32,
        initiator: bool,
    ) {
        let addr = peer.node_addr();
        self.make_room(addr);
        let entry = self.peers.entry(addr).or_default();
        entry.agreed.push(index);
        if entry.agreed.len() > SESSIONS_PER_ADDRESS {
            let oldest = entry.agreed.remove(0);
            self.agreed.remove(&oldest);
        }
        self.agreed.insert(
            index,
            Agreed {
                peer,
                keys,
                their_index,
                at: now,
                sent: 0,
                initiator,
                confirmed: initiator,
                heard: false,
            },
        );
    }

    /// The session a message with our `index` claims, if it is held and still taken.
    pub(super) fn opening(&self, now: Duration, index: u32) -> Option<&Agreed> {
        self.agreed
            .get(&index)
            .filter(|a| now.saturating_sub(a.at) < REJECT_AFTER)
    }

    /// A message under `index` arrived: the peer holds the keys, and uses them.
    pub(super) fn heard_under(&mut self, index: u32) {
        if let Some(agreed) = self.agreed.get_mut(&index) {
            agreed.confirmed = true;
            agreed.heard = true;
        }
    }

    /// Whether `id` sends to this node under a session that is still taken: it has no
    /// reason to sign but to introduce itself, to rekey, or after it lost the session.
    /// (Until its first message under a session, what it sent before the handshake
    /// completed may still come signed.)
    pub(super) fn speaks_in_session(&self, now: Duration, id: &NodeId) -> bool {
        self.peers.get(&id.node_addr()).is_some_and(|peer| {
            peer.agreed.iter().any(|index| {
                self.agreed.get(index).is_some_and(|a| {
                    a.heard && a.peer == *id && now.saturating_sub(a.at) < REJECT_AFTER
                })
            })
        })
    }

    /// Forgets the sessions and handshake with `id`'s address that belong to another
    /// identity: the one there restarted.
    pub(super) fn forget_others_at(&mut self, id: &NodeId) {
        let addr = id.node_addr();
        let Some(peer) = self.peers.get_mut(&addr) else {
            return;
        };
        let agreed = &mut self.agreed;
        peer.agreed.retain(|index| {
            let same = agreed.get(index).is_some_and(|a| a.peer == *id);
            if !same {
                agreed.remove(index);
            }
            same
        });
        if peer
            .pending
            .as_ref()
            .is_some_and(|pending| pending.responder != *id)
        {
            peer.pending = None;
        }
    }

    /// Forgets every session and handshake with identities of `site`.
    pub(super) fn forget_site(&mut self, site: &str) {
        let addrs: Vec<NodeAddr> = self
            .agreed
            .values()
            .filter(|a| &**a.peer.site() == site)
            .map(|a| a.peer.node_addr())
            .chain(self.peers.iter().filter_map(|(addr, peer)| {
                let pending = peer.pending.as_ref()?;
                (&**pending.responder.site() == site).then_some(*addr)
            }))
            .collect();
        for addr in addrs {
            self.forget_address(addr);
        }
    }

    fn forget_address(&mut self, addr: NodeAddr) {
        if let Some(peer) = self.peers.remove(&addr) {
            for index in peer.agreed {
                self.agreed.remove(&index);
            }
        }
    }

    pub(super) fn clear(&mut self) {
        self.agreed.clear();
        self.peers.clear();
    }

    /// Sessions held (any age).
    pub(super) fn len(&self) -> usize {
        self.agreed.len()
    }

    /// Drops sessions past [`REJECT_AFTER`] and handshakes unanswered for as long.
    pub(super) fn expire(&mut self, now: Duration) {
        let agreed = &mut self.agreed;
        self.peers.retain(|_, peer| {
            peer.agreed.retain(|index| {
                let live = agreed
                    .get(index)
                    .is_some_and(|a| now.saturating_sub(a.at) < REJECT_AFTER);
                if !live {
                    agreed.remove(index);
                }
                live
            });
            if peer
                .pending
                .as_ref()
                .is_some_and(|p| now.saturating_sub(p.at) >= REJECT_AFTER)
            {
                peer.pending = None;
            }
            !peer.agreed.is_empty() || peer.pending.is_some()
        });
    }

    /// Keeps the table under [`ADDRESSES`] before `addr` is added to it.
    fn make_room(&mut self, addr: NodeAddr) {
        if self.peers.len() < ADDRESSES || self.peers.contains_key(&addr) {
            return;
        }
        let agreed = &self.agreed;
        let newest_at = |peer: &Peer| {
            peer.agreed
                .iter()
                .filter_map(|index| agreed.get(index).map(|a| a.at))
                .chain(peer.pending.as_ref().map(|p| p.at))
                .max()
        };
        if let Some(oldest) = self
            .peers
            .iter()
            .min_by_key(|(_, peer)| newest_at(peer))
            .map(|(addr, _)| *addr)
        {
            self.forget_address(oldest);
        }
    }
}

fn usable(agreed: &Agreed, now: Duration) -> bool {
    now.saturating_sub(agreed.at) < REJECT_AFTER && agreed.sent < REJECT_AFTER_MESSAGES
}
