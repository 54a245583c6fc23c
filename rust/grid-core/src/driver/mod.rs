//! The SWIM driver, the layer above the item store and the wire, under the simulator:
//! the sans-IO [`Driver`] (this module), its one ordered timer queue ([`timers`]),
//! `GridNetwork.spec.swim` mapped onto foca ([`config`]) and a real node running the
//! driver on its own thread with a UDP socket ([`node`]).
//!
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
//!
//! The driver's concerns live in submodules, each adding `impl Driver` blocks and the
//! private types it needs: `swim` (driving foca, screening gossiped members, probe
//! health), `suspicions` (the suspicions held, the Downs they confirm and the notices to
//! suspects), `membership` (site holders and conflicts, joining and leaving, events), `sync`
//! (push/pull syncs and taking their chunks), `carry` (what a sync carries and to whom),
//! `view` (the view digest that lets a sync leave out members the peer sees alike),
//! `answer` (reading a walk's answer as its chunks arrive), `walk` (the walk through
//! peers' stores and catching up), `heads`, `stretches` and `holes` (the walks beside it
//! while catching up, and the lost chunks of its answers asked for apart), `repair` (digests and repair answers), `chunks` (the chunk format syncs
//! and repairs share), `renewal` (pins, the node's certificate renewed in place, its own
//! items signed again, earlier certificates forgotten), `publish` (this site's own items)
//! and `report` (the member view, events and counters handed to the host). This file
//! holds the [`Driver`] itself, its constants and the host loop entry points.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foca::{Foca, OwnedNotification, State, Timer};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::driver::config::{ConfigError, SwimConfig};
use crate::driver::timers::{TimerEvent, TimerHeap};
use crate::identity::auth::Authority;
use crate::identity::{Interner, NodeId, SiteAddr};
use crate::lanes::keys::Role;
use crate::lanes::relay::RelayQueue;
use crate::lanes::{lock, ItemHandler, ItemName, ItemStore, Relays};
use crate::wire::session::{Session, Verdict};
use crate::wire::versions::ProtocolRange;
use crate::wire::{
    WireCodec, WireError, KIND_CONFLICT, KIND_DIGEST, KIND_FOCA, KIND_HANDSHAKE_CONFIRM,
    KIND_HANDSHAKE_INIT, KIND_HANDSHAKE_RESPONSE, KIND_HELLO, KIND_LEAVE, KIND_REPAIR,
    KIND_SYNC_REQUEST, KIND_SYNC_RESPONSE, MAX_MESSAGE_LEN,
};

/// Bounds of the item store, defined with it in [`crate::lanes`]; re-exported here because
/// hosts set them through [`Driver::with_item_capacity`].
pub use crate::lanes::{DEFAULT_ITEM_CAPACITY, MAX_ITEM_CAPACITY};
/// Defined by the session, which signs and sends every message (the driver is above it);
/// re-exported here because hosts implement it for the driver.
pub use crate::wire::session::Transmit;

pub mod config;
pub mod node;
pub mod timers;

mod answer;
mod carry;
mod chunks;
mod heads;
mod holes;
mod known;
mod membership;
mod positions;
mod publish;
mod renewal;
mod repair;
mod report;
mod stretches;
mod suspicions;
mod swim;
mod sync;
mod view;
mod walk;

pub use renewal::Unsigned;
pub use report::{DriverStats, Event, MemberState, MemberView, FOCA_ERROR_KINDS};
pub use stretches::STRETCH_WALKS;

use answer::PullAnswer;
use carry::WalkSpan;
use heads::HeadsWalk;
use holes::Holes;
use membership::Holders;
use positions::Positions;
use stretches::Stretch;
use swim::ProbeHealth;
use walk::CatchUp;

type GridFoca = Foca<NodeId, WireCodec, SmallRng, ItemHandler>;

/// A sync never sends more chunks than this; the rest waits for the next sync.
pub const MAX_SYNC_CHUNKS: usize = 256;
/// ...nor more than this to a peer that speaks the session form but holds no session with
/// this node yet ([`Session::awaits_session`]): each datagram to it goes signed (about
/// 23 µs to sign here, 75 µs to check there, ECDSA P-256) until the handshake the first one
/// started completes, a round trip later. A joiner's first answers are all signed
/// otherwise: 256 signatures from each peer it asks first.
pub const SIGNED_ANSWER_CHUNKS: usize = 4;
/// While a node catches up (it just joined, or found members again after having none), it
/// asks for the next part of a peer's store this long after each answer, instead of
/// waiting for the next push/pull: long enough for the answering peer's own work (an
/// answer costs it a few milliseconds) to go first.
pub const CATCH_UP_PAUSE: Duration = Duration::from_millis(100);
/// A catch-up walk that went round while it brought names this node did not hold (the
/// peer it walked may itself have been catching up) goes round once more, from another
/// member, up to this many rounds in all.
pub const MAX_CATCH_UP_ROUNDS: u8 = 3;
/// How long the answer to a sync may take to arrive whole (its chunks leave in one burst).
/// The walk never moves past a chunk still missing then: the next sync resumes after the
/// chunks received from the first without a gap.
pub const SYNC_ANSWER_WAIT: Duration = Duration::from_secs(2);
/// How long an answer whose last chunk arrived may still take to come whole: the chunks
/// still missing then were lost (or overtaken by far), and the walk moves on past the
/// chunks received without a gap at once rather than after [`SYNC_ANSWER_WAIT`].
pub const ANSWER_TAIL_WAIT: Duration = Duration::from_millis(200);
/// Ceiling of the local health score: probing slows down to at most this many + 1 times
/// the configured pace (Lifeguard's awareness multiplier, as memberlist bounds it).
pub const MAX_LOCAL_HEALTH: u8 = 8;

pub struct Driver {
    foca: GridFoca,
    config: SwimConfig,
    interner: Interner,
    store: Arc<Mutex<ItemStore>>,
    /// Items waiting to be gossiped (this site's and relayed), handed to foca a window at a
    /// time: see [`crate::lanes::relay`].
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
    holders: Holders,
    /// The latest unverified identity gossip named for each site: asked for its `HELLO`
    /// while items of its site wait for a certificate.
    introductions: HashMap<Arc<str>, NodeId>,
    /// An [`TimerEvent::AskForKeys`] is pending.
    ask_armed: bool,
    /// Identities already reported in an [`Event::NameConflict`].
    conflicts: std::collections::HashSet<NodeId>,
    /// When this node began to hold each member suspect, and at which incarnation (a
    /// refutation raises it, which ends that suspicion).
    suspected: HashMap<NodeId, (Duration, u16)>,
    broadcast_pending: bool,
    membership_changed: bool,
    tuned_for: u8,
    positions: Positions,
    /// Where peers resume their answers to this node's next sync: successive syncs walk
    /// the whole store, whichever peers answer.
    pull_resume: Option<ItemName>,
    /// The sync whose answer moves `pull_resume`: the last one this node started.
    pull_sync: Option<u32>,
    /// What that sync asked: where its answer resumes, the bound it stops before (where a
    /// stretch another walk covers begins), if any, and its form.
    pull_asked: WalkSpan,
    /// The chunks of that answer received so far: the walk moves on once all are in.
    pull_answer: Option<PullAnswer>,
    /// Where this node's own items resume in the next sync it starts.
    push_resume: Option<ItemName>,
    /// This node's view digest when a peer's last agreed with it (None: the last one
    /// compared differed): while its digest has not moved since, its sync requests leave
    /// their members out (see `view`).
    view_agreed: Option<u64>,
    catch_up: CatchUp,
    /// The catch-up round under way (1 first) and the item names held when it began.
    catch_up_round: (u8, usize),
    /// Answers to the walk's syncs in a row that came in part without moving it on (see
    /// [`Driver::answer_due`]).
    fruitless_answers: u8,
    /// Answers to the walk's syncs in a row that did not come at all.
    silent_answers: u8,
    /// The item names held when the last sync this node started began.
    pull_held_at_start: usize,
    /// The names its answer listed (names and versions), and those of them this node
    /// does not hold.
    pull_listed: (usize, usize),
    /// The walk of every site's certificates, gateway and metadata beside the catch-up.
    heads: Option<HeadsWalk>,
    /// A heads walk ended in this catch-up: every site's certificates are in (unless it
    /// lost an answer), so its members are known.
    heads_ended: bool,
    /// Later stretches of the store, walked from other peers in the first catch-up round.
    stretches: Vec<Stretch>,
    /// Stretch walks began in this catch-up (they begin once).
    stretches_started: bool,
    /// The chunks lost from walks' answers in this catch-up, asked for apart.
    holes: Holes,
    /// A stretch walk lost an answer in this round, or a hole was given up: another round
    /// follows.
    stretch_gap: bool,
    /// The whole walk went round while stretch walks (or holes) were under way: its peer,
    /// for the next round once they are done.
    round_waits: Option<NodeId>,
    probe: ProbeHealth,
    /// Encodes the foca messages the driver writes itself (suspicion notices).
    codec: WireCodec,
    stats: DriverStats,
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
        items.set_own(identity.site());
        if let Authority::Certified { credentials, .. } = &authority {
            // Our own items can come back from peers (published by an earlier life).
            items.trust_origin(
                identity.site(),
                credentials.public_key().clone(),
                Role::Current,
            );
        }
        items.set_live(&identity, true);
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
            holders: Holders::default(),
            introductions: HashMap::new(),
            ask_armed: false,
            conflicts: std::collections::HashSet::new(),
            suspected: HashMap::new(),
            broadcast_pending: false,
            membership_changed: false,
            tuned_for,
            positions: Positions::default(),
            pull_resume: None,
            pull_sync: None,
            pull_asked: WalkSpan::items(None, None),
            pull_answer: None,
            push_resume: None,
            view_agreed: None,
            catch_up: CatchUp::Due,
            catch_up_round: (0, 0),
            fruitless_answers: 0,
            silent_answers: 0,
            pull_held_at_start: 0,
            pull_listed: (0, 0),
            heads: None,
            heads_ended: false,
            stretches: Vec::new(),
            stretches_started: false,
            holes: Holes::default(),
            stretch_gap: false,
            round_waits: None,
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
            Verdict::UnknownSession(sender) => {
                self.session.answer_lost_session(now, &sender, out);
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
        if !self.admit_sender(now, &envelope.sender, out) {
            self.settle(now);
            return;
        }
        match envelope.kind {
            KIND_HANDSHAKE_INIT => return self.session.answer_handshake(now, &envelope, out),
            KIND_HANDSHAKE_RESPONSE => return self.session.complete_handshake(now, &envelope, out),
            // Its work is done: the session it came under is confirmed.
            KIND_HANDSHAKE_CONFIRM => return,
            _ => {}
        }
        let (kind, sender, body) = (envelope.kind, envelope.sender, envelope.body);
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
        self.ask_for_waiting_keys(now, false, out);
        self.settle(now);
    }

    /// Runs every timer due at `now`, in order.
    pub fn handle_timers<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        lock(&self.store).set_clock(now);
        while let Some(event) = self.timers.pop_due(now) {
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
                TimerEvent::PushPull => {
                    self.session.expire_sessions(now);
                    self.push_pull(now, out)
                }
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
                TimerEvent::HeadsPart => self.heads_part_due(now, out),
                TimerEvent::StretchPart(index) => self.stretch_part_due(now, index, out),
                TimerEvent::AskForKeys => self.ask_again(now, out),
                TimerEvent::SuspicionNotice {
                    target,
                    incarnation,
                    left,
                } => self.notify_suspect(now, target, incarnation, left, out),
            }
            self.settle(now);
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
}
