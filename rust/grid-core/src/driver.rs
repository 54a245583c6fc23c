//! The sans-IO SWIM driver: foca plus everything Grid adds around it.
//!
//! A [`Driver`] owns one foca instance, the node's single ordered timer queue, the broadcast
//! item store, push/pull sync state, the signed [`Session`] and the live re-tuning of foca's
//! config. It is fed the time (`now`, a `Duration` since any fixed epoch) and decrypted
//! messages, and it answers with signed plaintext messages for a [`Transmit`] and with
//! [`Event`]s. It touches no socket, thread, clock or cipher, so the real node and a
//! simulator run the same code.
//!
//! What a verified sender may do (see `docs/security.md`):
//!
//! - speak only as itself: every message's body starts with the identity that signed it
//!   (the foca source, the sync sender, the leaver);
//! - one live identity per site: while a site's identity is alive here, another identity
//!   claiming that site is refused (a restart at the same address is the same site's next
//!   life) and told which identity holds the name (`CONFLICT`); a node that meets an older
//!   live identity of its own site stops and reports [`Event::NameConflict`];
//! - member entries gossiped by others about identities this node has not verified itself
//!   are not applied: the identity is sent a `HELLO` asking for one back, and joins foca's
//!   view when its own signed answer arrives.
//!
//! Host loop, once per wake-up: [`Driver::handle_datagram`] for each message received,
//! [`Driver::handle_timers`], any [`Driver::publish`]/[`Driver::join`]/[`Driver::leave`],
//! then [`Driver::flush`]; sleep until [`Driver::next_deadline`] or the next input.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BufMut;
use foca::{
    Codec, Foca, Header, Member, Message, Notification, OwnedNotification, Runtime, State, Timer,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::auth::{Authority, ITEM_DOMAIN};
use crate::config::{max_transmissions, ConfigError, SwimConfig};
use crate::identity::{validate_site, Interner, NodeId, SiteAddr, MAX_SITE_LEN};
use crate::lanes::{
    encode_publish, lock, ExportEnd, Item, ItemHandler, ItemName, ItemStore, Lane, PublishError,
    Refusals, Relays, MAX_KEY_LEN,
};
use crate::relay::{RelayQueue, WINDOW_BYTES, WINDOW_ITEMS};
use crate::repair::{
    Digest, MAX_DIGEST_ENTRIES, MAX_REPAIR_CHUNKS, REPAIR_INTERVAL, REPAIR_SETTLE, REPAIR_WINDOW,
};
use crate::session::{hello_wants_reply, Session, SessionStats, Verdict};
use crate::timers::{TimerEvent, TimerHeap};
use crate::versions::ProtocolRange;
use crate::wire::{
    decode_member, encode_member, state_byte, Reader, WireCodec, WireError, KIND_CONFLICT,
    KIND_DIGEST, KIND_FOCA, KIND_HELLO, KIND_LEAVE, KIND_REPAIR, KIND_SYNC_REQUEST,
    KIND_SYNC_RESPONSE, MAX_MESSAGE_LEN, MAX_UNSEALED_LEN, STATE_LEFT,
};

/// Bounds of the item store, defined with it in [`crate::lanes`]; re-exported here because
/// hosts set them through [`Driver::with_item_capacity`].
pub use crate::lanes::{DEFAULT_ITEM_CAPACITY, MAX_ITEM_CAPACITY};
/// Defined by the session, which signs and sends every message (the driver is above it);
/// re-exported here because hosts implement it for the driver.
pub use crate::session::Transmit;

type GridFoca = Foca<NodeId, WireCodec, SmallRng, ItemHandler>;

/// A sync never sends more chunks than this; the rest waits for the next sync.
pub const MAX_SYNC_CHUNKS: usize = 256;
/// Member entries fill at most this many chunks of a sync (the rest of the view is covered
/// over several syncs), so items always have room.
const MAX_MEMBER_CHUNKS: usize = MAX_SYNC_CHUNKS / 2;
/// While a node catches up (it just joined, or found members again after having none), it
/// asks for the next part of a peer's store this long after each answer, instead of
/// waiting for the next push/pull.
pub const CATCH_UP_PAUSE: Duration = Duration::from_secs(1);
/// How long the answer to a sync may take to arrive whole (its chunks leave in one burst).
/// The walk never moves past a chunk still missing then: the next sync resumes after the
/// chunks received from the first without a gap.
pub const SYNC_ANSWER_WAIT: Duration = Duration::from_secs(2);
/// Senders whose last digest answer is remembered (for the one answer per half interval);
/// past it, those answered more than an interval ago are forgotten.
const DIGEST_SENDERS_REMEMBERED: usize = 4096;
/// Leave notices remembered (one per address); the oldest are forgotten first.
const LEFT_CAPACITY: usize = 4096;
/// What screening does with one gossiped member entry.
enum Screened {
    Apply(Member<NodeId>),
    /// A Down claim held as a suspicion (see [`Driver::screen_member`]).
    AsSuspect(Member<NodeId>),
    Drop,
}

/// How far above what this node knows a member's gossiped incarnation may be.
const MAX_INCARNATION_STEP: u16 = 16;
/// Name conflicts remembered, so each is reported once.
const CONFLICTS_REMEMBERED: usize = 1024;

const ENTRY_MEMBER: u8 = 1;
const ENTRY_ITEM: u8 = 2;
/// A site's certificate chain: `site_len u8 | site | count u8 | (len u16 | der)*`, so a
/// node can verify the items of sites it never heard from itself (a crashed one, say).
const ENTRY_CERTIFICATE: u8 = 3;
/// First entry of a request: the item name after which the answer's items start (empty:
/// from the first name). Every node orders names alike ([`ItemName`]).
const ENTRY_RESUME: u8 = 4;
/// In an answer's first chunk: where its items ended, `end u8 | name?` (see `WALK_*`).
const ENTRY_WALK_END: u8 = 5;
/// Every held item was sent.
const WALK_COMPLETE: u8 = 0;
/// The budget ran out after the name that follows (none: before the first).
const WALK_STOPPED: u8 = 1;
/// The same, after going past the last name (the walk went round once).
const WALK_WRAPPED: u8 = 2;
/// Room an answer's first chunk keeps for its walk end entry.
const WALK_END_ROOM: usize = 3 + 2 + MAX_SITE_LEN + 2 + MAX_KEY_LEN;
/// Where a sync chunk's index and count sit: after the kind, the sender and the sync id.
fn chunk_counts_at(sender: &NodeId) -> usize {
    1 + sender.encoded_len() + 4
}
/// Ceiling of the local health score: probing slows down to at most this many + 1 times
/// the configured pace (Lifeguard's awareness multiplier, as memberlist bounds it).
pub const MAX_LOCAL_HEALTH: u8 = 8;

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

fn foca_error_index(err: &foca::Error) -> usize {
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
    /// Answers to this node's syncs that did not arrive whole in [`SYNC_ANSWER_WAIT`]: the
    /// walk resumed after the chunks received without a gap.
    pub syncs_incomplete: u64,
    pub sync_chunks_sent: u64,
    pub sync_chunks_received: u64,
    pub leave_notices: u64,
    pub items_published: u64,
    pub items_delivered: u64,
    pub item_refusals: Refusals,
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
    /// Direct notices sent to members this node suspects, so they can refute at once.
    pub suspicion_notices: u64,
    /// Times this node was suspected and refuted it (raised its incarnation).
    pub refutations: u64,
    /// Probes of this node's that got no answer, directly or indirectly, in time.
    pub probes_failed: u64,
    /// Answers that arrived after their probe had already failed.
    pub late_answers: u64,
    /// Current local health score, 0 (healthy) to [`MAX_LOCAL_HEALTH`].
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
    /// Repair digests sent (one every [`REPAIR_INTERVAL`] while there are members).
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

struct Rt<'a, O: Transmit + ?Sized> {
    now: Duration,
    timers: &'a mut TimerHeap,
    notes: &'a mut Vec<OwnedNotification<NodeId>>,
    probe: &'a mut ProbeHealth,
    session: &'a mut Session,
    scratch: &'a mut Vec<u8>,
    out: &'a mut O,
}

impl<O: Transmit + ?Sized> Runtime<NodeId> for Rt<'_, O> {
    fn notify(&mut self, notification: Notification<'_, NodeId>) {
        match notification {
            Notification::ProbeFailed(number, id) => {
                self.probe.failed.push(id.clone());
                self.probe.given_up = Some((id.clone(), number));
            }
            Notification::DataSent(header) => {
                self.probe.incarnation = self.probe.incarnation.max(header.src_incarnation);
            }
            Notification::DataReceived(header) => self.probe.note_answer(header),
            other => self.notes.push(other.to_owned()),
        }
    }

    fn send_to(&mut self, to: NodeId, data: &[u8]) {
        self.scratch.clear();
        self.scratch.push(KIND_FOCA);
        self.scratch.extend_from_slice(data);
        self.session
            .send(self.now, to.socket_addr(), self.scratch, self.out);
    }

    fn submit_after(&mut self, event: Timer<NodeId>, after: Duration) {
        let after = match event {
            // Lifeguard's local health awareness: a node whose own probes keep failing,
            // or who keeps being suspected, is more likely slow itself than surrounded by
            // dead peers, so it probes less often, waits longer for answers and gives the
            // members it suspects longer to refute.
            Timer::ProbeRandomMember(_)
            | Timer::SendIndirectProbe { .. }
            | Timer::ChangeSuspectToDown { .. } => after * (1 + u32::from(self.probe.local_health)),
            _ => after,
        };
        self.timers.push(self.now + after, TimerEvent::Foca(event));
    }
}

/// What foca lets a host see of its own probing, and the local health score built on it.
///
/// The score follows Lifeguard's signals that the fault is ours rather than the peers':
/// being suspected (we had to refute), and answers that arrive for a probe we had already
/// given up on (our deadlines are shorter than our own processing). A plain failed probe
/// does not count: a dead peer or a partition looks the same, and slowing down then would
/// only delay detection.
#[derive(Default)]
struct ProbeHealth {
    /// Members whose probe just failed (foca's `ProbeFailed`), not yet acted on.
    failed: Vec<NodeId>,
    /// The last probe that failed, in case its answer still comes.
    given_up: Option<(NodeId, u8)>,
    /// Answers that came after their probe had failed.
    late_answers: u64,
    /// Our incarnation as our last message carried it; it rises when we refute.
    incarnation: u16,
    /// Lifeguard's local health multiplier: up on a refutation or a late answer, down on
    /// a probe round without failure.
    local_health: u8,
}

impl ProbeHealth {
    fn note_answer(&mut self, header: &Header<NodeId>) {
        let Some((target, number)) = &self.given_up else {
            return;
        };
        let late = match &header.message {
            Message::Ack(n) => &header.src == target && n == number,
            Message::ForwardedAck {
                origin,
                probe_number,
            } => origin == target && probe_number == number,
            _ => false,
        };
        if late {
            self.given_up = None;
            self.late_answers += 1;
            self.worse();
        }
    }

    fn worse(&mut self) {
        self.local_health = (self.local_health + 1).min(MAX_LOCAL_HEALTH);
    }

    fn better(&mut self) {
        self.local_health = self.local_health.saturating_sub(1);
    }
}

pub struct Driver {
    foca: GridFoca,
    config: SwimConfig,
    interner: Interner,
    store: Arc<Mutex<ItemStore>>,
    /// Items waiting to be gossiped (this site's and relayed), handed to foca a window at a
    /// time: see [`crate::relay`].
    relays: Arc<Mutex<Relays>>,
    /// foca's config as tuned for the cluster's size (handing relays changes it for a
    /// moment).
    foca_config: foca::Config,
    timers: TimerHeap,
    rng: SmallRng,
    notes: Vec<OwnedNotification<NodeId>>,
    events: Vec<Event>,
    scratch: Vec<u8>,
    seeds: Vec<SocketAddr>,
    /// Backoff exponent of the armed join retry, if one is armed.
    join_retry: Option<u32>,
    push_pull_armed: bool,
    repair_armed: bool,
    /// When each sender's last digest was answered: one answer per half interval each.
    digests_answered_at: HashMap<SiteAddr, Duration>,
    /// Site and address → generation of members that announced they are leaving.
    left: HashMap<SiteAddr, u64>,
    left_order: std::collections::VecDeque<SiteAddr>,
    has_left: bool,
    /// Stopped because an older live identity holds this node's site name.
    yielded: bool,
    session: Session,
    /// The live identity of each site, as foca reported it up.
    holders: HashMap<Arc<str>, NodeId>,
    /// Identities already reported in an [`Event::NameConflict`].
    conflicts: std::collections::HashSet<NodeId>,
    /// When this node began to hold each member suspect, and at which incarnation (a
    /// refutation raises it, which ends that suspicion).
    suspected: HashMap<NodeId, (Duration, u16)>,
    broadcast_pending: bool,
    membership_changed: bool,
    tuned_for: u8,
    /// foca's member states as of the first chunk of the sync being received.
    sync_baseline: Option<SyncBaseline>,
    /// Where peers resume their answers to this node's next sync: successive syncs walk
    /// the whole store, whichever peers answer.
    pull_resume: Option<ItemName>,
    /// The sync whose answer moves `pull_resume`: the last one this node started.
    pull_sync: Option<u32>,
    /// The chunks of that answer received so far: the walk moves on once all are in.
    pull_answer: Option<PullAnswer>,
    /// Where this node's own items resume in the next sync it starts.
    push_resume: Option<ItemName>,
    catch_up: CatchUp,
    probe: ProbeHealth,
    /// Encodes the foca messages the driver writes itself (suspicion notices).
    codec: WireCodec,
    stats: DriverStats,
}

/// Whether a node walks peers' stores part after part, one part every [`CATCH_UP_PAUSE`],
/// until a walk goes round once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CatchUp {
    /// Caught up: syncs keep the push/pull pace.
    Done,
    /// To catch up, from the next sync on (a new node, or one that was alone).
    Due,
    /// Walking: each answer's end asks for the next part.
    Walking,
}

/// The answer to this node's last sync, as its chunks arrive. Chunks carry items in walk
/// order, so the chunks received from the first on, without a gap, cover one stretch of
/// the walk: when some chunk is lost, the next sync resumes after that stretch.
struct PullAnswer {
    sync_id: u32,
    /// Where the answer was asked to start.
    start: Option<ItemName>,
    chunks: Vec<Option<ChunkItems>>,
    missing: usize,
    end: Option<ExportEnd>,
}

/// The items of one received chunk, by name: its first and last, and whether the walk
/// wrapped (went past the last name and on from the first) within it.
#[derive(Clone, Default)]
struct ChunkItems {
    first: Option<ItemName>,
    last: Option<ItemName>,
    wrapped: bool,
}

/// How far a sync's answer took the walk.
enum WalkStep {
    /// Whole: what the answer said.
    Ended(ExportEnd),
    /// Some chunk is missing: resume after this name (None: where the answer started);
    /// `wrapped` if the stretch received went past the last name.
    Partial {
        resume: Option<ItemName>,
        wrapped: bool,
    },
}

impl PullAnswer {
    fn new(sync_id: u32, start: Option<ItemName>, count: u16) -> PullAnswer {
        PullAnswer {
            sync_id,
            start,
            chunks: vec![None; usize::from(count)],
            missing: usize::from(count),
            end: None,
        }
    }

    /// Notes chunk `index`; true once every chunk is in.
    fn note(&mut self, index: u16, items: ChunkItems, end: Option<ExportEnd>) -> bool {
        if let Some(slot) = self.chunks.get_mut(usize::from(index)) {
            if slot.is_none() {
                *slot = Some(items);
                self.missing -= 1;
            }
        }
        if end.is_some() {
            self.end = end;
        }
        self.missing == 0 && self.end.is_some()
    }

    /// How far the walk got: the answer's own end when it is whole, else the stretch
    /// covered by the chunks received from the first without a gap.
    fn step(&mut self) -> WalkStep {
        if self.missing == 0 {
            if let Some(end) = self.end.take() {
                return WalkStep::Ended(end);
            }
        }
        let mut resume = self.start.clone();
        let mut wrapped = false;
        let mut previous = self.start.clone();
        for chunk in self.chunks.iter().map_while(Option::as_ref) {
            if let Some(first) = &chunk.first {
                wrapped |= chunk.wrapped || previous.as_ref().is_some_and(|p| first <= p);
                previous = chunk.last.clone();
                resume = chunk.last.clone();
            }
        }
        WalkStep::Partial { resume, wrapped }
    }
}

impl ChunkItems {
    fn of(items: &[&[u8]], interner: &Interner) -> ChunkItems {
        let mut names = items
            .iter()
            .filter_map(|item| ItemName::decode(&mut Reader::new(item), interner).ok());
        let Some(first) = names.next() else {
            return ChunkItems::default();
        };
        let mut last = first.clone();
        let mut wrapped = false;
        for name in names {
            wrapped |= name <= last;
            last = name;
        }
        ChunkItems {
            first: Some(first),
            last: Some(last),
            wrapped,
        }
    }
}

/// What foca held when the chunks of one incoming sync began to arrive. A converged peer
/// sends mostly what foca already has, and every apply is a linear scan of foca's member
/// list, so entries found here unchanged are not applied again: a sync costs O(N) instead
/// of O(N²). foca only moves a member's state forward (newer identity, higher incarnation,
/// Alive → Suspect → Down at one incarnation), so an entry equal to an earlier state is a
/// no-op even if foca has moved on since.
struct SyncBaseline {
    sync_id: u32,
    sender: SiteAddr,
    chunks_left: u16,
    states: HashMap<SiteAddr, (NodeId, u16, State)>,
}

impl SyncBaseline {
    fn holds(&self, member: &Member<NodeId>) -> bool {
        self.states
            .get(&member.id().site_addr())
            .is_some_and(|(id, incarnation, state)| {
                id == member.id()
                    && *incarnation == member.incarnation()
                    && *state == member.state()
            })
    }
}

impl Driver {
    /// A driver for `identity`, signing and verifying as `authority` says. `seed` seeds
    /// every random choice (foca's and ours), so a simulation is reproducible; `interner`
    /// may be shared by many drivers in one process; `wall_offset` is the wall-clock time
    /// (since the Unix epoch) at `now` = 0.
    pub fn new(
        identity: NodeId,
        config: SwimConfig,
        seed: u64,
        interner: Interner,
        authority: Authority,
        wall_offset: Duration,
    ) -> Driver {
        let mut items = ItemStore::new(
            DEFAULT_ITEM_CAPACITY,
            interner.clone(),
            !authority.is_unsigned(),
        );
        if let Authority::Certified { credentials, .. } = &authority {
            // Our own items can come back from peers (published by an earlier life).
            items.trust_origin(identity.site(), credentials.public_key().clone());
        }
        items.set_live(identity.site(), true);
        let store = Arc::new(Mutex::new(items));
        let session = Session::new(identity.clone(), authority, interner.clone(), wall_offset);
        let foca_config = config.foca_config(1);
        let tuned_for = foca_config.max_transmissions.get();
        let fanout = u8::try_from(foca_config.num_indirect_probes.get()).unwrap_or(u8::MAX);
        let relays = Arc::new(Mutex::new(Relays::new(RelayQueue::default(), fanout)));
        let mut rng = SmallRng::seed_from_u64(seed);
        let foca = Foca::with_custom_broadcast(
            identity,
            foca_config.clone(),
            SmallRng::seed_from_u64(rng.random()),
            WireCodec::new(interner.clone()),
            ItemHandler::new(store.clone(), relays.clone()),
        );
        Driver {
            foca,
            config,
            codec: WireCodec::new(interner.clone()),
            interner,
            store,
            relays,
            foca_config,
            timers: TimerHeap::default(),
            rng,
            notes: Vec::new(),
            events: Vec::new(),
            scratch: Vec::with_capacity(MAX_MESSAGE_LEN),
            seeds: Vec::new(),
            join_retry: None,
            push_pull_armed: false,
            repair_armed: false,
            digests_answered_at: HashMap::new(),
            left: HashMap::new(),
            left_order: std::collections::VecDeque::new(),
            has_left: false,
            yielded: false,
            session,
            holders: HashMap::new(),
            conflicts: std::collections::HashSet::new(),
            suspected: HashMap::new(),
            broadcast_pending: false,
            membership_changed: false,
            tuned_for,
            sync_baseline: None,
            pull_resume: None,
            pull_sync: None,
            pull_answer: None,
            push_resume: None,
            catch_up: CatchUp::Due,
            probe: ProbeHealth::default(),
            stats: DriverStats::default(),
        }
    }

    /// The same driver remembering at most `capacity` item names (1 to
    /// [`MAX_ITEM_CAPACITY`]; [`DEFAULT_ITEM_CAPACITY`] otherwise). Past it, new names are
    /// refused ([`PublishError::StoreFull`] on publish, counted on receipt) and nothing
    /// held is dropped.
    pub fn with_item_capacity(self, capacity: usize) -> Result<Driver, ConfigError> {
        if !(1..=MAX_ITEM_CAPACITY).contains(&capacity) {
            return Err(ConfigError(format!(
                "item capacity must be between 1 and {MAX_ITEM_CAPACITY}, got {capacity}"
            )));
        }
        lock(&self.store).set_capacity(capacity);
        Ok(self)
    }

    /// The same driver speaking (and announcing) `protocols` instead of this build's
    /// range: simulations and tests of meshes that mix releases use it.
    pub fn with_protocols(mut self, protocols: ProtocolRange) -> Driver {
        self.session.set_protocols(protocols);
        self
    }

    /// The protocol versions this node speaks.
    pub fn protocols(&self) -> ProtocolRange {
        self.session.protocols()
    }

    pub fn identity(&self) -> &NodeId {
        self.foca.identity()
    }

    pub fn config(&self) -> &SwimConfig {
        &self.config
    }

    pub fn has_left(&self) -> bool {
        self.has_left
    }

    /// Replaces the pinned certificate fingerprints. A site whose verified certificate no
    /// longer matches its pin is forgotten: its messages and items are refused until it
    /// introduces itself with a certificate that passes.
    pub fn set_pins(&mut self, pins: crate::auth::Pins) {
        for site in self.session.set_pins(pins) {
            lock(&self.store).distrust_origin(&site);
        }
    }

    /// Whether this node stopped because an older live identity holds its site name.
    pub fn has_yielded(&self) -> bool {
        self.yielded
    }

    /// Whether the node takes no more input: it left, or yielded its name.
    fn stopped(&self) -> bool {
        self.has_left || self.yielded
    }

    /// Active members (alive or suspect), this node excluded.
    pub fn num_members(&self) -> usize {
        self.foca.num_members()
    }

    pub fn next_deadline(&self) -> Option<Duration> {
        self.timers.next_deadline()
    }

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
            items_stored: store.len(),
            members: self.foca.num_members(),
            broadcast_backlog: self.foca.custom_broadcast_backlog() + relays.queue.len(),
            relay_queue: relays.queue.len(),
            updates_backlog: self.foca.updates_backlog(),
            max_transmissions: self.tuned_for,
            local_health: self.probe.local_health,
            late_answers: self.probe.late_answers,
            session: self.session.stats(),
            ..self.stats
        }
    }

    /// Announces to the seeds and asks one of them for its full state. While no member is
    /// known the announcement is repeated with backoff.
    pub fn join<O: Transmit + ?Sized>(&mut self, now: Duration, seeds: &[SocketAddr], out: &mut O) {
        if self.stopped() {
            return;
        }
        let own = self.identity().socket_addr();
        self.seeds.clear();
        for seed in seeds {
            if *seed != own && !self.seeds.contains(seed) {
                self.seeds.push(*seed);
            }
        }
        self.contact_seeds(now, out);
        if self.join_retry.is_none() && !self.seeds.is_empty() {
            self.join_retry = Some(0);
            self.timers
                .push(now + self.config.probe_interval, TimerEvent::JoinRetry);
        }
        self.settle(now);
    }

    /// Handles one decrypted message. Anything malformed, stale, replayed, unsigned or
    /// forged is counted and dropped without changing state.
    pub fn handle_datagram<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        message: &[u8],
        out: &mut O,
    ) {
        if self.stopped() {
            return;
        }
        lock(&self.store).set_clock(now);
        let envelope = match self.session.open(now, message) {
            Verdict::Accepted(envelope) => envelope,
            Verdict::UnknownSender(sender) => {
                // Ask it to introduce itself; its next messages will then verify.
                let to = sender.socket_addr();
                if self.session.may_answer(now, to) {
                    self.session.send_hello(now, to, true, out);
                }
                return;
            }
            Verdict::Incompatible {
                sender,
                theirs,
                first,
                wants_reply,
            } => {
                // Our own HELLO in return, if asked for, says why: the peer then refuses
                // us too and reports both ranges, instead of asking again and again.
                let to = sender.socket_addr();
                if wants_reply && self.session.may_answer(now, to) {
                    self.session.send_hello(now, to, false, out);
                }
                if first {
                    self.events.push(Event::VersionRefused {
                        peer: sender,
                        theirs,
                        ours: self.session.protocols(),
                    });
                }
                return;
            }
            Verdict::Dropped => return,
        };
        let (kind, sender, body) = (envelope.kind, envelope.sender, envelope.body);
        if !self.admit_sender(now, &sender, out) {
            self.settle(now);
            return;
        }
        let handled = match kind {
            KIND_FOCA => self.handle_foca(now, body, out),
            KIND_SYNC_REQUEST | KIND_SYNC_RESPONSE => {
                self.handle_sync(now, kind, &sender, body, out)
            }
            KIND_LEAVE => self.handle_leave(now, sender, body, out),
            KIND_HELLO => {
                self.handle_hello(now, sender, body, out);
                Ok(())
            }
            KIND_CONFLICT => self.handle_conflict(now, body, out),
            KIND_DIGEST => self.handle_digest(now, &sender, body, out),
            KIND_REPAIR => self.handle_repair(body),
            _ => Err(WireError::BadMessage(kind)),
        };
        if handled.is_err() {
            self.stats.bad_messages += 1;
        }
        self.settle(now);
    }

    /// Whether a verified sender may be heard: it must not contest a site name that another
    /// live identity holds. Reports and answers conflicts.
    fn admit_sender<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sender: &NodeId,
        out: &mut O,
    ) -> bool {
        let me = self.foca.identity().clone();
        if sender.site() == me.site() {
            if *sender == me {
                return false;
            }
            if sender.node_addr() == me.node_addr() && sender.generation() < me.generation() {
                self.stats.dropped_superseded += 1;
                return false;
            }
            self.stats.name_conflicts += 1;
            // The identity that started first keeps the name; a tie goes by address so
            // both sides agree.
            let yielded =
                (sender.generation(), sender.node_addr()) < (me.generation(), me.node_addr());
            if yielded {
                self.yielded = true;
                self.membership_changed = true;
            } else if self.session.may_answer(now, sender.socket_addr()) {
                // Show the newcomer, with our own signature, that the name is taken.
                self.session
                    .send_hello(now, sender.socket_addr(), false, out);
            }
            self.report_conflict(sender, yielded);
            return false;
        }
        let Some(holder) = self.contested_by(sender) else {
            return true;
        };
        self.stats.name_conflicts += 1;
        let to = sender.socket_addr();
        if self.session.may_answer(now, to) {
            let mut notice = Vec::with_capacity(MAX_MESSAGE_LEN);
            notice.push(KIND_CONFLICT);
            self.foca.identity().encode(&mut notice);
            holder.encode(&mut notice);
            self.session.send(now, to, &mut notice, out);
        }
        false
    }

    /// The live identity holding `id`'s site, if it is another one than `id` and `id` is
    /// not its next life at the same address.
    fn contested_by(&self, id: &NodeId) -> Option<NodeId> {
        let holder = self.holders.get(id.site())?;
        let successor =
            holder.node_addr() == id.node_addr() && holder.generation() <= id.generation();
        (!successor).then(|| holder.clone())
    }

    fn report_conflict(&mut self, other: &NodeId, yielded: bool) {
        if self.conflicts.len() >= CONFLICTS_REMEMBERED {
            self.conflicts.clear();
        }
        if self.conflicts.insert(other.clone()) || yielded {
            self.events.push(Event::NameConflict {
                other: other.clone(),
                yielded,
            });
        }
    }

    fn handle_foca<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        let screened = self.screen_foca(now, body, out)?;
        let packet = screened.as_deref().unwrap_or(body);
        self.foca_call(now, out, |foca, rt| foca.handle_data(packet, rt));
        if lock(&self.store).has_fresh() {
            // Relay news at once rather than at the next gossip tick.
            self.broadcast_pending = true;
        }
        Ok(())
    }

    /// A foca packet as foca may see it: `None` to take it as it is, or a rewrite without
    /// the member entries this node may not apply, and with a seed placeholder as
    /// destination of an `Announce` replaced by our identity (foca matches announces by
    /// site and address, and the joiner cannot know our site yet).
    fn screen_foca<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        body: &[u8],
        out: &mut O,
    ) -> Result<Option<Vec<u8>>, WireError> {
        let mut rest = body;
        let mut header = self.codec.decode_header(&mut rest)?;
        let header_len = body.len() - rest.len();
        let mut rewrite = false;
        if header.message == Message::Announce && header.dst.is_placeholder() {
            if header.dst.node_addr() != self.foca.identity().node_addr() {
                return Err(WireError::BadMessage(KIND_FOCA));
            }
            header.dst = self.foca.identity().clone();
            rewrite = true;
        }
        if !rewrite && self.session.authority().is_unsigned() {
            // Every identity counts as verified in a simulation: nothing to screen.
            return Ok(None);
        }
        let mut kept: Vec<Cow<'_, [u8]>> = Vec::new();
        let mut count = None;
        if rest.len() >= 2 && header.message != Message::Broadcast {
            let mut r = Reader::new(rest);
            let total = r.u16()?;
            let mut entries = r.rest();
            for _ in 0..total {
                let before = entries;
                let member = self.codec.decode_member(&mut entries)?;
                let bytes = &before[..before.len() - entries.len()];
                match self.screen_member(now, member, out) {
                    Screened::Apply(_) => kept.push(Cow::Borrowed(bytes)),
                    Screened::AsSuspect(member) => {
                        let mut encoded = Vec::with_capacity(bytes.len());
                        self.codec.encode_member(&member, &mut encoded)?;
                        kept.push(Cow::Owned(encoded));
                        rewrite = true;
                    }
                    Screened::Drop => rewrite = true,
                }
            }
            count = Some(total);
            rest = entries;
        }
        if !rewrite {
            return Ok(None);
        }
        let mut packet = Vec::with_capacity(body.len());
        if header.dst.site() == self.foca.identity().site() && header.message == Message::Announce {
            self.codec.encode_header(&header, &mut packet)?;
        } else {
            packet.extend_from_slice(&body[..header_len]);
        }
        if count.is_some() {
            packet.put_u16(kept.len() as u16);
            for bytes in kept {
                packet.extend_from_slice(&bytes);
            }
        }
        packet.extend_from_slice(rest);
        Ok(Some(packet))
    }

    /// What becomes of a member entry gossiped by someone else: applied as it is, applied
    /// as a suspicion, or dropped ([`Driver::may_apply`]).
    ///
    /// Another member's word that a live member is down is a suspicion here until this
    /// node has held that member suspect for half the suspicion timeout (a real failure is
    /// suspected by its prober, and that news spreads, well before the prober declares it
    /// down); if the suspect has not refuted by the end of its suspicion timeout counted
    /// from then, this node declares it down itself. So one lying member cannot take a live
    /// site down: the site refutes in time.
    fn screen_member<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        member: Member<NodeId>,
        out: &mut O,
    ) -> Screened {
        if !self.may_apply(now, &member, out) {
            return Screened::Drop;
        }
        let id = member.id().clone();
        if id == *self.foca.identity() {
            return Screened::Apply(member);
        }
        let Some((known, state)) = self.member_state(&id) else {
            return Screened::Apply(member);
        };
        if state == State::Down {
            return Screened::Apply(member); // foca keeps what it has
        }
        match member.state() {
            State::Suspect => {
                if member.incarnation() >= known {
                    self.note_suspicion(now, &id, member.incarnation());
                }
                Screened::Apply(member)
            }
            State::Down => {
                // foca takes Down at any incarnation; an older one than we know (the
                // member refuted since) is a suspicion of the current one here.
                let incarnation = member.incarnation().max(known);
                let since = self.note_suspicion(now, &id, incarnation);
                if state == State::Suspect
                    && known == incarnation
                    && now.saturating_sub(since) >= self.config.suspicion_timeout / 2
                {
                    return Screened::Apply(Member::new(id, incarnation, State::Down));
                }
                self.stats.down_claims_held += 1;
                self.timers.push(
                    since + self.config.suspicion_timeout,
                    TimerEvent::ConfirmDown {
                        member: id.clone(),
                        incarnation,
                    },
                );
                Screened::AsSuspect(Member::new(id, incarnation, State::Suspect))
            }
            State::Alive => Screened::Apply(member),
        }
    }

    /// When this node began to hold `id` suspect at `incarnation` (now, if it did not).
    fn note_suspicion(&mut self, now: Duration, id: &NodeId, incarnation: u16) -> Duration {
        match self.suspected.get(id) {
            Some(&(since, held)) if held == incarnation => since,
            _ => {
                self.suspected.insert(id.clone(), (now, incarnation));
                now
            }
        }
    }

    /// The end of a suspicion another member's Down claim started here: still suspect, not
    /// refuted, so down.
    fn confirm_down<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        member: NodeId,
        incarnation: u16,
        out: &mut O,
    ) {
        if self.member_state(&member) != Some((incarnation, State::Suspect)) {
            return;
        }
        let down = Member::new(member, incarnation, State::Down);
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(std::iter::once(down), true, rt)
        });
    }

    /// Whether a member entry gossiped by someone else may reach foca: it concerns us, the
    /// live holder of a site, or an identity that proved itself to us and contests no
    /// site. Anything else alive is asked to introduce itself.
    fn may_apply<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        member: &Member<NodeId>,
        out: &mut O,
    ) -> bool {
        let id = member.id();
        if !self.plausible_incarnation(member) {
            self.stats.members_implausible += 1;
            return false;
        }
        if id == self.foca.identity() || self.holders.get(id.site()) == Some(id) {
            return true;
        }
        if self.session.is_verified(id)
            && self.contested_by(id).is_none()
            && id.site() != self.foca.identity().site()
        {
            return true;
        }
        self.stats.members_unverified += 1;
        if member.state() == State::Alive
            && !self.session.is_verified(id)
            && !self.session.is_refused(id)
            && validate_site(id.site()).is_ok()
            && self.session.may_answer(now, id.socket_addr())
        {
            self.session.send_hello(now, id.socket_addr(), true, out);
        }
        false
    }

    /// Whether a gossiped entry's incarnation could be true. A member's incarnation only
    /// rises when it refutes a suspicion, one step at a time: nobody can have heard of ours
    /// above the one we carry, and another member's can only be a few steps above what we
    /// know. A claim far ahead (a suspicion at the last incarnation, which cannot be
    /// refuted) would force its subject to rejoin under a new identity.
    fn plausible_incarnation(&self, member: &Member<NodeId>) -> bool {
        let id = member.id();
        if id == self.foca.identity() {
            return member.incarnation() <= self.probe.incarnation;
        }
        let known = self
            .member_state(id)
            .map_or(0, |(incarnation, _)| incarnation);
        member.incarnation() <= known.saturating_add(MAX_INCARNATION_STEP)
    }

    /// A verified `HELLO` is its sender's own signed word that it is alive: foca learns it
    /// as a member (as from an announce), and the sender's items can now be verified.
    fn handle_hello<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sender: NodeId,
        body: &[u8],
        out: &mut O,
    ) {
        if let Some(key) = self.session.key(sender.site()) {
            lock(&self.store).trust_origin(sender.site(), key.clone());
        }
        if hello_wants_reply(body, &self.interner)
            && self.session.may_answer(now, sender.socket_addr())
        {
            self.session
                .send_hello(now, sender.socket_addr(), false, out);
        }
        let alive = Member::new(sender, 0, State::Alive);
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(std::iter::once(alive), true, rt)
        });
    }

    /// A peer says another identity holds our site name: ask that identity for its
    /// `HELLO`; if it answers, [`Driver::admit_sender`] settles which of us keeps the name.
    fn handle_conflict<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        let mut r = Reader::new(body);
        NodeId::decode(&mut r, &self.interner)?;
        let holder = NodeId::decode(&mut r, &self.interner)?;
        if !r.is_empty() {
            return Err(WireError::TrailingBytes);
        }
        let me = self.foca.identity();
        if holder.site() == me.site() && holder != *me {
            let to = holder.socket_addr();
            if self.session.may_answer(now, to) {
                self.session.send_hello(now, to, true, out);
            }
        }
        Ok(())
    }

    /// Runs every timer due at `now`, in order.
    pub fn handle_timers<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        lock(&self.store).set_clock(now);
        while let Some(event) = self.timers.pop_due(now) {
            // Timers change foca's state in ways the baseline cannot follow; it is only
            // meant to span the burst of one sync's chunks.
            self.sync_baseline = None;
            match event {
                TimerEvent::Foca(Timer::ChangeSuspectToDown {
                    ref member_id,
                    incarnation,
                    ..
                }) if self.member_state(member_id) != Some((incarnation, State::Suspect)) => {
                    // Refuted (or settled otherwise) before the timeout. foca 1.0 would
                    // change nothing here but still send the member a `TurnUndead`, which
                    // makes an alive member that just refuted declare itself down and
                    // rejoin under a new identity; so the stale timer stops here.
                    self.stats.stale_suspicion_timers += 1;
                }
                TimerEvent::Foca(timer) => {
                    let probe_round = matches!(timer, Timer::ProbeRandomMember(_));
                    let failed_before = self.stats.probes_failed;
                    self.foca_call(now, out, |foca, rt| foca.handle_timer(timer, rt));
                    if probe_round && self.stats.probes_failed == failed_before {
                        self.probe.better();
                    }
                }
                TimerEvent::PushPull => self.push_pull(now, out),
                TimerEvent::Repair => self.send_digest(now, out),
                TimerEvent::JoinRetry => self.join_retry(now, out),
                TimerEvent::ConfirmDown {
                    member,
                    incarnation,
                } => self.confirm_down(now, member, incarnation, out),
                TimerEvent::SyncWith(peer) => {
                    if !self.stopped() {
                        self.start_sync(now, peer.socket_addr(), out);
                    }
                }
                TimerEvent::SyncAnswerDue(sync_id) => self.answer_due(now, sync_id, out),
                TimerEvent::SuspicionNotice {
                    target,
                    incarnation,
                    left,
                } => self.notify_suspect(now, target, incarnation, left, out),
            }
            self.settle(now);
        }
    }

    /// Offers a local item. `Ok(false)` when this node already holds that version or a
    /// newer one of the same (lane, key). Items go out on the next [`Driver::flush`].
    pub fn publish(
        &mut self,
        lane: Lane,
        key: &str,
        version: u64,
        payload: &[u8],
    ) -> Result<bool, PublishError> {
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
        let news = {
            let mut store = lock(&self.store);
            if !store.is_newer(&origin, lane, key, version) {
                return Ok(false);
            }
            if store.is_full_for(&origin, lane, key) {
                return Err(PublishError::StoreFull);
            }
            store.accept(&self.scratch, false)
        };
        let Some(key) = news else {
            return Ok(false);
        };
        lock(&self.relays).queue.push(key, self.scratch.clone());
        self.stats.items_published += 1;
        self.broadcast_pending = true;
        Ok(true)
    }

    /// Hands foca the next window of the relay queue once foca has sent everything it
    /// holds (see [`crate::relay`]), each item for g transmissions.
    fn hand_relays(&mut self) {
        if self.foca.custom_broadcast_backlog() > 0 {
            return;
        }
        let (window, transmissions) = {
            let mut relays = lock(&self.relays);
            let transmissions = relays.transmissions;
            let window = relays
                .queue
                .take_window(transmissions, WINDOW_ITEMS, WINDOW_BYTES);
            (window, transmissions)
        };
        let Some(transmissions) = std::num::NonZeroU8::new(transmissions) else {
            return;
        };
        if window.is_empty() {
            return;
        }
        let mut handing = self.foca_config.clone();
        handing.max_transmissions = transmissions;
        if let Err(err) = self.foca.set_config(handing) {
            self.stats.foca_errors[foca_error_index(&err)] += 1;
        }
        for handed in window {
            lock(&self.relays).hand(handed.key);
            if let Err(err) = self.foca.add_broadcast(&handed.data) {
                self.stats.foca_errors[foca_error_index(&err)] += 1;
            }
        }
        if let Err(err) = self.foca.set_config(self.foca_config.clone()) {
            self.stats.foca_errors[foca_error_index(&err)] += 1;
        }
    }

    /// Sends what the last inputs made pending: news goes out at once in `Broadcast`
    /// messages. Up to g rounds, each handing foca the next window of the relay queue if it
    /// holds nothing and sending what it holds to g members (items are handed for g
    /// transmissions, so one round takes each to g distinct members).
    pub fn flush<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        if std::mem::take(&mut self.broadcast_pending) && !self.stopped() {
            for _ in 0..self.foca_config.num_indirect_probes.get() {
                self.foca_call(now, out, |foca, rt| foca.broadcast(rt));
                if self.foca.custom_broadcast_backlog() == 0 && lock(&self.relays).queue.is_empty()
                {
                    break;
                }
            }
            self.settle(now);
        }
    }

    /// Leaves on purpose: tells every active member first (so they record `left`, not
    /// `down`), then lets foca gossip its own Down. The driver ignores input afterwards.
    pub fn leave<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        if self.stopped() {
            return;
        }
        let peers: Vec<_> = self
            .foca
            .iter_members()
            .map(|member| member.id().socket_addr())
            .collect();
        let mut notice = Vec::with_capacity(MAX_MESSAGE_LEN);
        for peer in peers {
            notice.clear();
            notice.push(KIND_LEAVE);
            self.foca.identity().encode(&mut notice);
            self.session.send(now, peer, &mut notice, out);
        }
        self.foca_call(now, out, |foca, rt| foca.leave_cluster(rt));
        self.has_left = true;
        self.settle(now);
    }

    fn foca_call<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        out: &mut O,
        call: impl FnOnce(&mut GridFoca, &mut Rt<'_, O>) -> Result<(), foca::Error>,
    ) {
        self.hand_relays();
        let incarnation = self.probe.incarnation;
        let mut rt = Rt {
            now,
            timers: &mut self.timers,
            notes: &mut self.notes,
            probe: &mut self.probe,
            session: &mut self.session,
            scratch: &mut self.scratch,
            out,
        };
        if let Err(err) = call(&mut self.foca, &mut rt) {
            self.stats.foca_errors[foca_error_index(&err)] += 1;
        }
        // foca renews our identity when it rejoins; messages must follow at once.
        self.session.set_local(self.foca.identity());
        if self.probe.incarnation > incarnation {
            self.stats.refutations += 1;
            self.probe.worse();
        }
        for target in std::mem::take(&mut self.probe.failed) {
            self.stats.probes_failed += 1;
            if let Some((incarnation, State::Suspect)) = self.member_state(&target) {
                self.note_suspicion(now, &target, incarnation);
                let notices = self.config.suspicion_notices();
                self.notify_suspect(now, target, incarnation, notices, out);
            }
        }
    }

    /// foca's current view of one member: O(N), for rare events only.
    fn member_state(&self, id: &NodeId) -> Option<(u16, State)> {
        self.foca
            .iter_membership_state()
            .find(|m| m.id() == id)
            .map(|m| (m.incarnation(), m.state()))
    }

    /// Lifeguard's buddy system: tells a member we suspect so, directly, in a foca `Ping`
    /// that carries the suspicion. If it is alive it refutes at once and its `Ack` brings
    /// the refutation straight back, instead of waiting for the suspicion to reach it by
    /// gossip while every member's suspicion timer runs. Repeated once per gossip interval
    /// (`left` more times) while we still hold the same suspicion.
    fn notify_suspect<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        target: NodeId,
        incarnation: u16,
        left: u8,
        out: &mut O,
    ) {
        if left == 0
            || self.stopped()
            || self.member_state(&target) != Some((incarnation, State::Suspect))
        {
            return;
        }
        let header = Header {
            src: self.foca.identity().clone(),
            src_incarnation: self.probe.incarnation,
            dst: target.clone(),
            message: Message::Ping(self.rng.random()),
        };
        let suspicion = Member::new(target.clone(), incarnation, State::Suspect);
        self.scratch.clear();
        self.scratch.push(KIND_FOCA);
        let encoded = self
            .codec
            .encode_header(&header, &mut self.scratch)
            .and_then(|()| {
                self.scratch.put_u16(1);
                self.codec.encode_member(&suspicion, &mut self.scratch)
            });
        if encoded.is_ok() {
            self.stats.suspicion_notices += 1;
            let mut notice = std::mem::take(&mut self.scratch);
            self.session
                .send(now, target.socket_addr(), &mut notice, out);
            self.scratch = notice;
        }
        self.timers.push(
            now + self.config.gossip_interval(),
            TimerEvent::SuspicionNotice {
                target,
                incarnation,
                left: left - 1,
            },
        );
    }

    fn view_state(&self, member: &Member<NodeId>) -> MemberState {
        match member.state() {
            State::Alive => MemberState::Alive,
            State::Suspect => MemberState::Suspect,
            State::Down if self.is_left(member.id()) => MemberState::Left,
            State::Down => MemberState::Down,
        }
    }

    fn is_left(&self, id: &NodeId) -> bool {
        self.left.get(&id.site_addr()) == Some(&id.generation())
    }

    /// Records a leave notice; false if it was known already.
    fn remember_left(&mut self, id: &NodeId) -> bool {
        let addr = id.site_addr();
        match self.left.insert(addr, id.generation()) {
            Some(previous) if previous == id.generation() => false,
            Some(_) => true,
            None => {
                self.left_order.push_back(addr);
                if self.left_order.len() > LEFT_CAPACITY {
                    if let Some(oldest) = self.left_order.pop_front() {
                        self.left.remove(&oldest);
                    }
                }
                true
            }
        }
    }

    /// Turns foca's notifications and newly received items into events, arms timers that
    /// depend on connectivity and re-tunes the retransmit budget to the cluster size.
    fn settle(&mut self, now: Duration) {
        let mut notes = std::mem::take(&mut self.notes);
        for note in notes.drain(..) {
            match note {
                OwnedNotification::MemberUp(id) => {
                    self.membership_changed = true;
                    self.suspected.remove(&id);
                    self.holders.insert(id.site().clone(), id.clone());
                    lock(&self.store).set_live(id.site(), true);
                    self.recover_items_of(now, &id);
                    if self.catch_up == CatchUp::Due {
                        // The first member found (say, a joiner reaching this seed): walk
                        // its store now rather than at the next push/pull.
                        self.catch_up = CatchUp::Walking;
                        self.timers.push(now, TimerEvent::SyncWith(id.clone()));
                    }
                    self.events.push(Event::MemberUp(id));
                }
                OwnedNotification::MemberDown(id) => {
                    self.membership_changed = true;
                    self.suspected.remove(&id);
                    if self.holders.get(id.site()) == Some(&id) {
                        self.holders.remove(id.site());
                        lock(&self.store).set_live(id.site(), false);
                    }
                    if self.is_left(&id) {
                        self.events.push(Event::MemberLeft(id));
                    } else {
                        self.events.push(Event::MemberDown(id));
                    }
                }
                OwnedNotification::Rename(previous, current) => {
                    self.membership_changed = true;
                    self.holders.insert(current.site().clone(), current.clone());
                    lock(&self.store).set_live(current.site(), true);
                    self.recover_items_of(now, &current);
                    self.events.push(Event::MemberRenamed { previous, current });
                }
                OwnedNotification::Active => {
                    if !self.push_pull_armed {
                        self.push_pull_armed = true;
                        // A random phase, so nodes that come up together (a fleet restart)
                        // do not all sync in the same instant, period after period.
                        let period = self.config.push_pull_period(self.foca.num_members() + 1);
                        let phase = period.mul_f64(self.rng.random::<f64>());
                        self.timers.push(now + phase, TimerEvent::PushPull);
                    }
                    if !self.repair_armed {
                        self.repair_armed = true;
                        let phase = REPAIR_INTERVAL.mul_f64(self.rng.random::<f64>());
                        self.timers.push(now + phase, TimerEvent::Repair);
                    }
                }
                OwnedNotification::Idle => {
                    // Alone: whatever happened meanwhile is learned by walking a peer's
                    // store from the start once members are found again.
                    self.catch_up = CatchUp::Due;
                    self.pull_resume = None;
                    if self.join_retry.is_none() && !self.seeds.is_empty() && !self.stopped() {
                        self.join_retry = Some(0);
                        self.timers
                            .push(now + self.config.probe_interval, TimerEvent::JoinRetry);
                    }
                }
                OwnedNotification::Rejoin(_) => self.membership_changed = true,
                // Probe and traffic notices are taken in `Rt::notify`, never queued.
                OwnedNotification::Defunct
                | OwnedNotification::DataReceived(_)
                | OwnedNotification::DataSent(_)
                | OwnedNotification::ProbeFailed(..) => {}
            }
        }
        self.notes = notes;

        let mut store = lock(&self.store);
        for item in store.take_fresh() {
            self.stats.items_delivered += 1;
            self.events.push(Event::Item(item));
        }
        drop(store);

        let wanted = max_transmissions(self.foca.num_members() + 1).get();
        if wanted != self.tuned_for {
            let config = self.config.foca_config(self.foca.num_members() + 1);
            match self.foca.set_config(config.clone()) {
                Ok(()) => {
                    self.tuned_for = wanted;
                    self.foca_config = config;
                }
                Err(err) => self.stats.foca_errors[foca_error_index(&err)] += 1,
            }
        }
    }

    /// A member is up: if this node forgot its site's items while it was away, a sync with
    /// it brings them back now.
    fn recover_items_of(&mut self, now: Duration, back: &NodeId) {
        if lock(&self.store).has_forgotten(back.site()) {
            self.timers.push(now, TimerEvent::SyncWith(back.clone()));
        }
    }

    /// Forgets these items of `site` (the host decided its records are stale): versions
    /// are kept, payloads dropped (syncs stop carrying them), and the same versions are
    /// taken and delivered again once the site is live and they come back. The host owns
    /// what is forgotten: a site going down forgets nothing here.
    pub fn forget(&mut self, site: &str, items: &[(Lane, String)]) -> usize {
        lock(&self.store).forget(site, items)
    }

    fn contact_seeds<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        if self.seeds.is_empty() {
            return;
        }
        for seed in self.seeds.clone() {
            self.foca_call(now, out, |foca, rt| {
                foca.announce(NodeId::placeholder(seed), rt)
            });
        }
        let seed = self.seeds[self.rng.random_range(0..self.seeds.len())];
        self.start_sync(now, seed, out);
    }

    fn join_retry<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        let Some(attempt) = self.join_retry else {
            return;
        };
        if self.stopped() || self.foca.num_members() > 0 || self.seeds.is_empty() {
            self.join_retry = None;
            return;
        }
        self.contact_seeds(now, out);
        let next = (attempt + 1).min(4);
        self.join_retry = Some(next);
        self.timers.push(
            now + self.config.probe_interval * (1 << next),
            TimerEvent::JoinRetry,
        );
    }

    fn push_pull<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        let count = self.foca.num_members();
        if self.stopped() || count == 0 {
            self.push_pull_armed = false;
            return;
        }
        if let Some(peer) = self.random_member() {
            self.start_sync(now, peer, out);
        }
        let period = self.config.push_pull_period(count + 1);
        self.timers.push(now + period, TimerEvent::PushPull);
    }

    /// Tells a random member which item versions this node stored lately (see
    /// [`crate::repair`]), and arms the next digest.
    fn send_digest<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        if self.stopped() || self.foca.num_members() == 0 {
            self.repair_armed = false;
            return;
        }
        self.timers.push(now + REPAIR_INTERVAL, TimerEvent::Repair);
        let Some(peer) = self.random_member() else {
            return;
        };
        let (versions, window) =
            lock(&self.store).recent_versions(now, REPAIR_WINDOW, MAX_DIGEST_ENTRIES);
        let mut message = Vec::with_capacity(MAX_MESSAGE_LEN);
        message.push(KIND_DIGEST);
        self.foca.identity().encode(&mut message);
        Digest::new(self.rng.random(), window, &versions).encode(&mut message);
        self.stats.digests_sent += 1;
        self.session.send(now, peer, &mut message, out);
    }

    /// Answers a digest with the versions this node stored in its window (the last quarter
    /// of it left out: the sender may have stored those a little earlier than this node),
    /// held long enough that push gossip's copies would have arrived, which it lacks.
    fn handle_digest<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sender: &NodeId,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        let mut r = Reader::new(body);
        NodeId::decode(&mut r, &self.interner)?;
        let digest = Digest::decode(&mut r)?;
        let from = sender.site_addr();
        if let Some(&at) = self.digests_answered_at.get(&from) {
            if now < at + REPAIR_INTERVAL / 2 {
                self.stats.digests_held_back += 1;
                return Ok(());
            }
        }
        if self.digests_answered_at.len() >= DIGEST_SENDERS_REMEMBERED {
            let stale = now.saturating_sub(REPAIR_INTERVAL);
            self.digests_answered_at.retain(|_, at| *at >= stale);
        }
        self.digests_answered_at.insert(from, now);
        let me = self.foca.identity().clone();
        let mut chunks = ChunkWriter::new(KIND_REPAIR, self.rng.random(), &me, 0);
        let oldest = digest.window() - digest.window() / 4;
        let mut entry = Vec::with_capacity(MAX_MESSAGE_LEN);
        let sent = lock(&self.store).export_missing(
            now,
            REPAIR_SETTLE,
            oldest,
            &digest,
            &mut entry,
            |_, item| chunks.push(ENTRY_ITEM, item, MAX_REPAIR_CHUNKS),
        );
        if sent == 0 {
            return Ok(());
        }
        self.stats.digests_answered += 1;
        self.stats.repair_items_sent += sent as u64;
        for mut chunk in chunks.finish(&[]) {
            self.session
                .send(now, sender.socket_addr(), &mut chunk, out);
        }
        Ok(())
    }

    /// Takes the items of an answer to a digest (any chunk alone: they are independent).
    fn handle_repair(&mut self, body: &[u8]) -> Result<(), WireError> {
        let mut r = Reader::new(body);
        read_chunk_header(&mut r, &self.interner)?;
        let mut items = Vec::new();
        while !r.is_empty() {
            let (tag, body) = read_entry(&mut r)?;
            if tag != ENTRY_ITEM {
                return Err(WireError::BadEntry(tag));
            }
            items.push(body);
        }
        let mut store = lock(&self.store);
        for item in items {
            if store.accept(item, true).is_some() {
                self.stats.items_repaired += 1;
            }
        }
        Ok(())
    }

    /// The answer to sync `sync_id` should be whole by now. If it is not, the walk moves
    /// on only past the chunks received from the first without a gap, and the rest is
    /// asked for (from any member: they all walk in the same order) at once while catching
    /// up, or by the next push/pull otherwise.
    fn answer_due<O: Transmit + ?Sized>(&mut self, now: Duration, sync_id: u32, out: &mut O) {
        if self.pull_sync != Some(sync_id) {
            return;
        }
        self.stats.syncs_incomplete += 1;
        self.pull_sync = None;
        if let Some(WalkStep::Partial { resume, wrapped }) =
            self.pull_answer.take().map(|mut answer| answer.step())
        {
            self.pull_resume = resume;
            if wrapped {
                self.catch_up = CatchUp::Done;
            }
        }
        if self.catch_up == CatchUp::Walking && !self.stopped() {
            if let Some(peer) = self.random_member() {
                self.stats.catch_up_syncs += 1;
                self.start_sync(now, peer, out);
            }
        }
    }

    fn random_member(&mut self) -> Option<SocketAddr> {
        let count = self.foca.num_members();
        if count == 0 {
            return None;
        }
        let pick = self.rng.random_range(0..count);
        self.foca
            .iter_members()
            .nth(pick)
            .map(|m| m.id().socket_addr())
    }

    fn start_sync<O: Transmit + ?Sized>(&mut self, now: Duration, peer: SocketAddr, out: &mut O) {
        let sync_id = self.rng.random();
        self.stats.syncs_started += 1;
        self.pull_sync = Some(sync_id);
        self.pull_answer = None;
        self.timers
            .push(now + SYNC_ANSWER_WAIT, TimerEvent::SyncAnswerDue(sync_id));
        if self.catch_up == CatchUp::Due {
            self.catch_up = CatchUp::Walking;
        }
        self.send_state(now, KIND_SYNC_REQUEST, sync_id, peer, None, out);
    }

    /// An answer to this node's last sync said where its items ended: the next sync
    /// resumes there. While catching up, the next part is asked for soon, from the same
    /// peer, until the walk has gone round once.
    fn follow_walk(&mut self, now: Duration, end: ExportEnd, peer: &NodeId) {
        self.pull_sync = None;
        self.pull_answer = None;
        let went_round = match end {
            ExportEnd::Complete => {
                self.pull_resume = None;
                true
            }
            ExportEnd::Stopped { resume, wrapped } => {
                self.pull_resume = resume;
                wrapped
            }
        };
        if went_round {
            self.catch_up = CatchUp::Done;
        } else if self.catch_up == CatchUp::Walking && !self.stopped() {
            self.stats.catch_up_syncs += 1;
            self.timers
                .push(now + CATCH_UP_PAUSE, TimerEvent::SyncWith(peer.clone()));
        }
    }

    /// Sends this node's view, chunked: itself, members (starting at a random one, so a
    /// view larger than [`MAX_MEMBER_CHUNKS`] is covered over several syncs) and items,
    /// each origin's certificate chain before its first item. A request starts with where
    /// its answer's items should resume and carries this node's own items from where the
    /// last request stopped (none while catching up: it asks, the answers teach). An answer
    /// (`answer_after` set) carries the items after the name the request gave, and says in
    /// its first chunk where they ended.
    fn send_state<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        kind: u8,
        sync_id: u32,
        peer: SocketAddr,
        answer_after: Option<Option<ItemName>>,
        out: &mut O,
    ) {
        let me = self.foca.identity().clone();
        let reserve = if answer_after.is_some() {
            WALK_END_ROOM
        } else {
            0
        };
        let mut chunks = ChunkWriter::new(kind, sync_id, &me, reserve);
        let mut entry = Vec::with_capacity(MAX_MESSAGE_LEN);

        if answer_after.is_none() {
            if let Some(name) = &self.pull_resume {
                name.encode(&mut entry);
            }
            chunks.push(ENTRY_RESUME, &entry, MAX_SYNC_CHUNKS);
        }
        entry.clear();
        encode_member(
            &Member::new(me, 0, State::Alive),
            state_byte(State::Alive),
            &mut entry,
        );
        chunks.push(ENTRY_MEMBER, &entry, MAX_SYNC_CHUNKS);

        let total = self.foca.iter_membership_state().len();
        let start = if total == 0 {
            0
        } else {
            self.rng.random_range(0..total)
        };
        let ordered = self
            .foca
            .iter_membership_state()
            .skip(start)
            .chain(self.foca.iter_membership_state().take(start));
        for member in ordered {
            entry.clear();
            let state = if member.state() == State::Down && self.is_left(member.id()) {
                STATE_LEFT
            } else {
                state_byte(member.state())
            };
            encode_member(member, state, &mut entry);
            if !chunks.push(ENTRY_MEMBER, &entry, MAX_MEMBER_CHUNKS) {
                break;
            }
        }

        let after = match &answer_after {
            Some(after) => after.as_ref(),
            None if self.catch_up != CatchUp::Done => None,
            None => self.push_resume.as_ref(),
        };
        let end = if answer_after.is_none() && self.catch_up != CatchUp::Done {
            None
        } else {
            let session = &self.session;
            let mut chain_entry = Vec::new();
            let mut last_origin: Option<Arc<str>> = None;
            let end = lock(&self.store).export(after, &mut entry, |origin, item| {
                if last_origin.as_ref() != Some(origin) {
                    last_origin = Some(origin.clone());
                    if let Some(chain) = session.certificate_chain(origin) {
                        encode_certificate_entry(origin, chain, &mut chain_entry);
                        if !chunks.push(ENTRY_CERTIFICATE, &chain_entry, MAX_SYNC_CHUNKS) {
                            return false;
                        }
                    }
                }
                chunks.push(ENTRY_ITEM, item, MAX_SYNC_CHUNKS)
            });
            Some(end)
        };

        let mut walk_end = Vec::new();
        match (answer_after.is_some(), end) {
            (true, Some(end)) => encode_walk_end(&end, &mut walk_end),
            (false, Some(end)) => {
                self.push_resume = match end {
                    ExportEnd::Complete => None,
                    ExportEnd::Stopped { resume, .. } => resume,
                }
            }
            (_, None) => {}
        }
        for mut chunk in chunks.finish(&walk_end) {
            self.stats.sync_chunks_sent += 1;
            self.session.send(now, peer, &mut chunk, out);
        }
    }

    fn handle_sync<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        kind: u8,
        sender: &NodeId,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        // Decode the whole chunk before applying any of it.
        let mut r = Reader::new(body);
        let ChunkHeader {
            id: sync_id,
            index,
            count,
        } = read_chunk_header(&mut r, &self.interner)?;
        let sender = sender.clone();
        let mut loud = Vec::new();
        let mut quiet = Vec::new();
        let mut left = Vec::new();
        let mut items = Vec::new();
        let mut certificates = Vec::new();
        let mut resume = None;
        let mut walk_end = None;
        while !r.is_empty() {
            let (tag, body) = read_entry(&mut r)?;
            match tag {
                ENTRY_MEMBER => {
                    let mut er = Reader::new(body);
                    let (member, mut is_left) = decode_member(&mut er, &self.interner, true)?;
                    if !er.is_empty() {
                        return Err(WireError::TrailingBytes);
                    }
                    let member = if member.id() == &sender {
                        member
                    } else {
                        match self.screen_member(now, member, out) {
                            Screened::Apply(member) => member,
                            Screened::AsSuspect(member) => {
                                is_left = false;
                                member
                            }
                            Screened::Drop => continue,
                        }
                    };
                    if is_left {
                        left.push(member.id().clone());
                    }
                    // News about the sender itself and about failures is re-gossiped;
                    // the liveness of third parties is theirs to spread.
                    if member.id() == &sender || member.state() != State::Alive {
                        loud.push(member);
                    } else {
                        quiet.push(member);
                    }
                }
                ENTRY_ITEM => items.push(body),
                ENTRY_CERTIFICATE => certificates.push(decode_certificate_entry(body)?),
                ENTRY_RESUME if kind == KIND_SYNC_REQUEST && index == 0 && resume.is_none() => {
                    resume = Some(decode_resume(body, &self.interner)?);
                }
                ENTRY_WALK_END
                    if kind == KIND_SYNC_RESPONSE && index == 0 && walk_end.is_none() =>
                {
                    walk_end = Some(decode_walk_end(body, &self.interner)?);
                }
                other => return Err(WireError::BadEntry(other)),
            }
        }
        self.stats.sync_chunks_received += 1;
        for id in &left {
            self.remember_left(id);
        }
        let baseline = self.sync_baseline_for(sync_id, sender.site_addr(), count);
        let received = loud.len() + quiet.len();
        loud.retain(|member| !baseline.holds(member));
        quiet.retain(|member| !baseline.holds(member));
        baseline.chunks_left = baseline.chunks_left.saturating_sub(1);
        if baseline.chunks_left == 0 {
            self.sync_baseline = None;
        }
        self.stats.sync_entries_known += (received - loud.len() - quiet.len()) as u64;
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(loud.into_iter(), true, rt)
        });
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(quiet.into_iter(), false, rt)
        });
        for (site, chain) in certificates {
            let site = self.interner.intern(site);
            if let Some(key) = self.session.learn_certificate(now, &site, &chain) {
                lock(&self.store).trust_origin(&site, key);
            }
        }
        {
            let mut store = lock(&self.store);
            for item in &items {
                store.accept(item, true);
            }
        }
        if index == 0 {
            if kind == KIND_SYNC_REQUEST {
                self.stats.syncs_served += 1;
                let after = Some(resume.flatten());
                self.send_state(
                    now,
                    KIND_SYNC_RESPONSE,
                    sync_id,
                    sender.socket_addr(),
                    after,
                    out,
                );
            } else {
                self.stats.syncs_completed += 1;
            }
        }
        if kind == KIND_SYNC_RESPONSE && self.pull_sync == Some(sync_id) {
            let chunk = ChunkItems::of(&items, &self.interner);
            let start = self.pull_resume.clone();
            let answer = match &mut self.pull_answer {
                Some(answer) if answer.sync_id == sync_id => answer,
                slot => slot.insert(PullAnswer::new(sync_id, start, count)),
            };
            if answer.note(index, chunk, walk_end) {
                if let WalkStep::Ended(end) = answer.step() {
                    self.follow_walk(now, end, &sender);
                }
            }
        }
        Ok(())
    }

    /// The baseline for this sync's chunks, taken from foca on its first chunk to arrive.
    fn sync_baseline_for(
        &mut self,
        sync_id: u32,
        sender: SiteAddr,
        count: u16,
    ) -> &mut SyncBaseline {
        let current = self
            .sync_baseline
            .as_ref()
            .is_some_and(|b| b.sync_id == sync_id && b.sender == sender);
        if !current {
            let states = self
                .foca
                .iter_membership_state()
                .map(|m| {
                    (
                        m.id().site_addr(),
                        (m.id().clone(), m.incarnation(), m.state()),
                    )
                })
                .collect();
            self.sync_baseline = Some(SyncBaseline {
                sync_id,
                sender,
                chunks_left: count,
                states,
            });
        }
        self.sync_baseline.as_mut().expect("set above")
    }

    /// A leave notice: its body is the sender's own identity, so only a site's key holder
    /// can say that site is leaving.
    fn handle_leave<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        leaver: NodeId,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        let mut r = Reader::new(body);
        NodeId::decode(&mut r, &self.interner)?;
        if !r.is_empty() {
            return Err(WireError::TrailingBytes);
        }
        if !self.remember_left(&leaver) {
            return Ok(());
        }
        self.stats.leave_notices += 1;
        let known_down = self
            .foca
            .iter_membership_state()
            .any(|m| m.id() == &leaver && m.state() == State::Down);
        if known_down {
            // It was declared down before its notice arrived: correct the record.
            self.membership_changed = true;
            self.events.push(Event::MemberLeft(leaver));
            return Ok(());
        }
        let down = Member::new(leaver, 0, State::Down);
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(std::iter::once(down), true, rt)
        });
        Ok(())
    }
}

/// What a sync or repair chunk says of itself, after its sender's identity.
struct ChunkHeader {
    id: u32,
    index: u16,
    count: u16,
}

/// Reads a chunk's sender identity, id, index and count (what [`ChunkWriter`] writes); an
/// index past the count makes the chunk malformed.
fn read_chunk_header(r: &mut Reader<'_>, interner: &Interner) -> Result<ChunkHeader, WireError> {
    NodeId::decode(r, interner)?;
    let header = ChunkHeader {
        id: r.u32()?,
        index: r.u16()?,
        count: r.u16()?,
    };
    if header.index >= header.count {
        return Err(WireError::TrailingBytes);
    }
    Ok(header)
}

/// Reads one chunk entry: `tag u8 | len u16 | body`.
fn read_entry<'a>(r: &mut Reader<'a>) -> Result<(u8, &'a [u8]), WireError> {
    let tag = r.u8()?;
    let len = usize::from(r.u16()?);
    Ok((tag, r.bytes(len)?))
}

fn encode_certificate_entry(site: &str, chain: &[Vec<u8>], out: &mut Vec<u8>) {
    out.clear();
    out.push(site.len() as u8);
    out.extend_from_slice(site.as_bytes());
    out.push(chain.len() as u8);
    for der in chain {
        out.put_u16(der.len() as u16);
        out.extend_from_slice(der);
    }
}

fn decode_resume(body: &[u8], interner: &Interner) -> Result<Option<ItemName>, WireError> {
    if body.is_empty() {
        return Ok(None);
    }
    let mut r = Reader::new(body);
    let name = ItemName::decode(&mut r, interner)?;
    if !r.is_empty() {
        return Err(WireError::TrailingBytes);
    }
    Ok(Some(name))
}

fn encode_walk_end(end: &ExportEnd, out: &mut Vec<u8>) {
    match end {
        ExportEnd::Complete => out.push(WALK_COMPLETE),
        ExportEnd::Stopped { resume, wrapped } => {
            out.push(if *wrapped { WALK_WRAPPED } else { WALK_STOPPED });
            if let Some(name) = resume {
                name.encode(out);
            }
        }
    }
}

fn decode_walk_end(body: &[u8], interner: &Interner) -> Result<ExportEnd, WireError> {
    let mut r = Reader::new(body);
    let end = r.u8()?;
    let resume = decode_resume(r.rest(), interner)?;
    match end {
        WALK_COMPLETE if resume.is_none() => Ok(ExportEnd::Complete),
        WALK_STOPPED | WALK_WRAPPED => Ok(ExportEnd::Stopped {
            resume,
            wrapped: end == WALK_WRAPPED,
        }),
        _ => Err(WireError::BadEntry(ENTRY_WALK_END)),
    }
}

/// A sync's certificate entry: the site and its chain, leaf first.
fn decode_certificate_entry(body: &[u8]) -> Result<(&str, Vec<&[u8]>), WireError> {
    let mut r = Reader::new(body);
    let len = usize::from(r.u8()?);
    let site = std::str::from_utf8(r.bytes(len)?).map_err(|_| WireError::BadUtf8)?;
    if validate_site(site).is_err() {
        return Err(WireError::BadEntry(ENTRY_CERTIFICATE));
    }
    let count = usize::from(r.u8()?);
    if count == 0 || count > crate::auth::MAX_CHAIN_LEN {
        return Err(WireError::BadEntry(ENTRY_CERTIFICATE));
    }
    let chain = (0..count)
        .map(|_| {
            let len = usize::from(r.u16()?);
            r.bytes(len)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !r.is_empty() {
        return Err(WireError::TrailingBytes);
    }
    Ok((site, chain))
}

/// Packs sync entries into as few chunks as possible, each within one frame.
struct ChunkWriter {
    header: Vec<u8>,
    counts_at: usize,
    /// Room the first chunk keeps for the entry [`ChunkWriter::finish`] adds.
    reserve: usize,
    chunks: Vec<Vec<u8>>,
}

impl ChunkWriter {
    fn new(kind: u8, sync_id: u32, sender: &NodeId, reserve: usize) -> ChunkWriter {
        let mut header = Vec::with_capacity(chunk_counts_at(sender) + 4);
        header.push(kind);
        sender.encode(&mut header);
        header.put_u32(sync_id);
        header.put_u16(0);
        header.put_u16(0);
        ChunkWriter {
            header,
            counts_at: chunk_counts_at(sender),
            reserve,
            chunks: Vec::new(),
        }
    }

    /// Adds an entry, opening a chunk only while there are fewer than `max_chunks`; false
    /// once that budget is spent.
    fn push(&mut self, tag: u8, body: &[u8], max_chunks: usize) -> bool {
        let need = 3 + body.len();
        let room = |index: usize| MAX_UNSEALED_LEN - if index == 0 { self.reserve } else { 0 };
        let fits = self
            .chunks
            .last()
            .is_some_and(|chunk| chunk.len() + need <= room(self.chunks.len() - 1));
        if !fits {
            if self.chunks.len() >= max_chunks.min(MAX_SYNC_CHUNKS)
                || self.header.len() + need > room(self.chunks.len())
            {
                return false;
            }
            let mut chunk = Vec::with_capacity(MAX_MESSAGE_LEN);
            chunk.extend_from_slice(&self.header);
            self.chunks.push(chunk);
        }
        let chunk = self.chunks.last_mut().expect("pushed above");
        chunk.push(tag);
        chunk.put_u16(body.len() as u16);
        chunk.extend_from_slice(body);
        true
    }

    /// The chunks, numbered, with `last_word` (if not empty) as the first chunk's last
    /// entry, in the room kept for it.
    fn finish(mut self, last_word: &[u8]) -> Vec<Vec<u8>> {
        if !last_word.is_empty() {
            debug_assert!(last_word.len() + 3 <= self.reserve);
            if self.chunks.is_empty() {
                self.chunks.push(self.header.clone());
            }
            let first = &mut self.chunks[0];
            first.push(ENTRY_WALK_END);
            first.put_u16(last_word.len() as u16);
            first.extend_from_slice(last_word);
        }
        let count = self.chunks.len() as u16;
        let at = self.counts_at;
        for (index, chunk) in self.chunks.iter_mut().enumerate() {
            chunk[at..at + 2].copy_from_slice(&(index as u16).to_be_bytes());
            chunk[at + 2..at + 4].copy_from_slice(&count.to_be_bytes());
        }
        self.chunks
    }
}
