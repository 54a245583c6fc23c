//! What the driver reports to its host: the member view, the events, and the counters
//! (`DriverStats`) of everything it did and refused.

use crate::identity::NodeId;
use crate::lanes::{lock, Item, Refusals, Renewals};
use crate::wire::session::SessionStats;
use crate::wire::versions::ProtocolRange;

use super::walk::CatchUp;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    Alive,
    Suspect,
    Down,
    /// Down because it said it was leaving.
    Left,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Alive => "alive",
            MemberState::Suspect => "suspect",
            MemberState::Down => "down",
            MemberState::Left => "left",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    pub id: NodeId,
    pub incarnation: u16,
    pub state: MemberState,
    /// The protocol version spoken with it (the highest both sides hold); `None` until its
    /// `HELLO` was heard.
    pub protocol: Option<u8>,
}

/// What the host hears about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    MemberUp(NodeId),
    /// Declared down after failing probes (or gossip saying so).
    MemberDown(NodeId),
    /// Down because it left on purpose.
    MemberLeft(NodeId),
    /// The same address came back as a newer identity (a restart or a rejoin).
    MemberRenamed {
        previous: NodeId,
        current: NodeId,
    },
    /// A new item version from a peer; delivered once per (origin, lane, key, version).
    Item(Item),
    /// Another live identity claims this node's site. `yielded`: it is the older one, so
    /// this node stopped (it will neither send nor take anything more); otherwise this
    /// node holds the name and the other was refused.
    NameConflict {
        other: NodeId,
        yielded: bool,
    },
    /// A peer whose `HELLO` names protocol versions this node shares none of (`theirs`
    /// against `ours`): nothing from that identity is taken. Reported once per identity.
    VersionRefused {
        peer: NodeId,
        theirs: ProtocolRange,
        ours: ProtocolRange,
    },
}

/// foca error kinds, in the order of [`DriverStats::foca_errors`].
pub const FOCA_ERROR_KINDS: [&str; 12] = [
    "data_too_big",
    "not_undead",
    "same_identity",
    "not_connected",
    "incomplete_probe_cycle",
    "data_from_ourselves",
    "indirect_for_ourselves",
    "malformed_packet",
    "encode",
    "decode",
    "custom_broadcast",
    "invalid_config",
];

pub(super) fn foca_error_index(err: &foca::Error) -> usize {
    match err {
        foca::Error::DataTooBig => 0,
        foca::Error::NotUndead => 1,
        foca::Error::SameIdentity => 2,
        foca::Error::NotConnected => 3,
        foca::Error::IncompleteProbeCycle => 4,
        foca::Error::DataFromOurselves => 5,
        foca::Error::IndirectForOurselves => 6,
        foca::Error::MalformedPacket => 7,
        foca::Error::Encode(_) => 8,
        foca::Error::Decode(_) => 9,
        foca::Error::CustomBroadcast(_) => 10,
        foca::Error::InvalidConfig => 11,
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Indexed like [`FOCA_ERROR_KINDS`].
    pub foca_errors: [u64; 12],
    /// Authenticated messages of ours that do not decode (unknown kind, bad sync chunk or
    /// leave notice); nothing of them is applied.
    pub bad_messages: u64,
    pub syncs_started: u64,
    pub syncs_served: u64,
    pub syncs_completed: u64,
    /// Syncs started at once for the next part of a peer's store while catching up.
    pub catch_up_syncs: u64,
    /// Parts of heads walks asked for (each site's certificates, gateway and metadata,
    /// walked beside the whole store while catching up).
    pub heads_syncs: u64,
    /// Parts of stretch walks asked for (later stretches of a store walked from other
    /// peers beside the whole walk while this node catches up).
    pub stretch_syncs: u64,
    /// Requests for what walks' answers showed missing while catching up: the chunks lost
    /// from an answer (bounded at the next chunk received) and the items a check round
    /// lists at versions this node lacks (by name; see `holes`).
    pub hole_syncs: u64,
    /// Stretch walks ended by answers that moved them nothing twice in a row (the whole
    /// walk covers the rest of that stretch).
    pub stretches_lost: u64,
    /// Answers to this node's syncs (whole walk or stretch walk) that did not arrive whole
    /// in [`SYNC_ANSWER_WAIT`](super::SYNC_ANSWER_WAIT), or in
    /// [`ANSWER_TAIL_WAIT`](super::ANSWER_TAIL_WAIT) after their last chunk: the walk
    /// resumed after the chunks received without a gap.
    pub syncs_incomplete: u64,
    pub sync_chunks_sent: u64,
    pub sync_chunks_received: u64,
    pub leave_notices: u64,
    pub items_published: u64,
    pub items_delivered: u64,
    pub item_refusals: Refusals,
    /// What the store did with items signed by a key that is not their origin's current one.
    pub item_renewals: Renewals,
    /// Origin signatures this node checked on items from peers: one per item version
    /// taken, however many relays and syncs bring it.
    pub item_signature_checks: u64,
    /// Times this node's own certificate was renewed in place ([`Driver::renew`](super::Driver::renew)).
    pub renewals: u64,
    /// This node's own items signed again under its current key (held under an earlier
    /// one after a renewal, or taken back from peers after a restart).
    pub items_signed_again: u64,
    /// Earlier certificates of sites kept now (each vouches for items held that its key
    /// signed).
    pub earlier_certificates: usize,
    /// Live identities taken out of the membership because their site's certificate was
    /// revoked.
    pub members_revoked: u64,
    /// `HELLO`s asked of sites whose items waited for their certificate.
    pub keys_asked: u64,
    /// Whether this node has walked a peer's whole store since it joined (or found members
    /// again after having none) and no item waits for its origin's certificate: its view
    /// of the mesh's items is complete, not partial.
    pub caught_up: bool,
    /// Items waiting for their origin's certificate.
    pub items_waiting: usize,
    pub members: usize,
    /// Items waiting to be gossiped: in the relay queue and held by foca.
    pub broadcast_backlog: usize,
    /// Of those, in the relay queue (the rest foca holds).
    pub relay_queue: usize,
    pub updates_backlog: usize,
    pub items_stored: usize,
    pub max_transmissions: u8,
    /// Sync entries not applied because foca already held them.
    pub sync_entries_known: u64,
    /// Syncs (requests and answers) sent without this node's members because its view
    /// digest agreed with the peer's (see `view`).
    pub sync_members_left_out: u64,
    /// Member entries of gossip taken out before foca because they would change nothing
    /// (foca held them already, or newer news of the same member).
    pub gossip_entries_known: u64,
    /// Direct notices sent to members this node suspects, so they can refute at once.
    pub suspicion_notices: u64,
    /// Times this node was suspected and refuted it (raised its incarnation).
    pub refutations: u64,
    /// Probes of this node's that got no answer, directly or indirectly, in time.
    pub probes_failed: u64,
    /// Answers that arrived after their probe had already failed.
    pub late_answers: u64,
    /// Current local health score, 0 (healthy) to [`MAX_LOCAL_HEALTH`](super::MAX_LOCAL_HEALTH).
    pub local_health: u8,
    /// Suspicion timeouts that fired after the suspicion was refuted or settled.
    pub stale_suspicion_timers: u64,
    /// What the signed session refused and sent.
    pub session: SessionStats,
    /// Verified messages refused because another live identity holds the sender's site.
    pub name_conflicts: u64,
    /// Messages from an earlier life of this node (same site and address, older generation).
    pub dropped_superseded: u64,
    /// Gossiped member entries about identities not verified here, left out.
    pub members_unverified: u64,
    /// Gossiped member entries whose incarnation cannot be true, left out.
    pub members_implausible: u64,
    /// Other members' Down claims held as suspicions until confirmed here.
    pub down_claims_held: u64,
    /// Repair digests sent (one every [`crate::lanes::repair::REPAIR_INTERVAL`] while there
    /// are members).
    pub digests_sent: u64,
    /// Digests answered with the items they showed missing (none missing: no answer).
    pub digests_answered: u64,
    /// Digests left unanswered because the same sender's previous one was answered less
    /// than half an interval before.
    pub digests_held_back: u64,
    /// Items sent in answers to digests.
    pub repair_items_sent: u64,
    /// Items received in answers to this node's digests that were news: versions push
    /// gossip had not brought.
    pub items_repaired: u64,
}

impl super::Driver {
    /// Every member foca knows (down and left ones included), this node excluded.
    pub fn members(&self) -> Vec<MemberView> {
        self.foca
            .iter_membership_state()
            .map(|m| MemberView {
                id: m.id().clone(),
                incarnation: m.incarnation(),
                state: self.view_state(m),
                protocol: self
                    .session
                    .peer_protocols(m.id())
                    .map(|(_, spoken)| spoken),
            })
            .collect()
    }

    /// Whether membership changed (as far as notifications tell) since the last call.
    /// Suspicion is silent in foca, so hosts also refresh their member view periodically.
    pub fn take_membership_changed(&mut self) -> bool {
        std::mem::take(&mut self.membership_changed)
    }

    pub fn drain_events(&mut self) -> std::vec::Drain<'_, Event> {
        self.events.drain(..)
    }

    pub fn stats(&self) -> DriverStats {
        let store = lock(&self.store);
        let relays = lock(&self.relays);
        DriverStats {
            item_refusals: store.refusals(),
            item_renewals: store.renewals(),
            item_signature_checks: store.signature_checks(),
            items_stored: store.len(),
            members: self.foca.num_members(),
            broadcast_backlog: self.foca.custom_broadcast_backlog() + relays.queue.len(),
            relay_queue: relays.queue.len(),
            updates_backlog: self.foca.updates_backlog(),
            max_transmissions: self.tuned_for,
            local_health: self.probe.local_health,
            late_answers: self.probe.late_answers,
            session: self.session.stats(),
            earlier_certificates: self.session.sites().earlier_count(),
            caught_up: self.catch_up == CatchUp::Done && store.waiting_len() == 0,
            items_waiting: store.waiting_len(),
            ..self.stats
        }
    }

    /// The version of an item this node holds with its payload (`None` if it holds none):
    /// what a host, or a simulation, checks to tell whether a change reached this node.
    pub fn held_version(&self, origin: &str, lane: crate::lanes::Lane, key: &str) -> Option<u64> {
        lock(&self.store).held_version(origin, lane, key)
    }
}
