//! A deterministic simulator: many real [`Driver`]s on one virtual clock, over an
//! in-memory network with loss, delay, partitions, crashes, restarts, departures and slow
//! nodes.
//!
//! Each node is the same sans-IO driver the real node runs (identity, foca config, timer
//! heap, broadcast lanes, push/pull sync); only the socket and the cipher are replaced.
//! Messages are not encrypted, since encryption changes no protocol dynamics, but bytes are
//! counted as if framed.
//!
//! ## Time and determinism
//!
//! Every node has its own ordered timer heap (inside its driver) and an inbox ordered by
//! `(arrival, sender, sender's message number)`. Globally, the simulator processes events
//! in windows `[t, t + d)`, where `t` is the earliest pending event anywhere and `d` is the
//! network's fixed delay: nothing a node does within a window can reach another node
//! before the window ends, so the nodes of one window are independent and may run on
//! several threads. Within a node, events run in time order, timers before messages at the
//! same instant. Every random choice is drawn from a per-node generator seeded from the
//! simulation seed, so the outcome is the same sequential execution whatever the number
//! of threads, and the same seed always yields the same trace ([`Simulation::trace_hash`]).
//!
//! ## Converged start
//!
//! A cluster that starts converged ([`Start::Converged`]) gets there through the driver's
//! own push/pull sync path: node `i` receives a full member list (every other node alive)
//! as sync chunks at a random instant `t_i` in the first probe interval `P`, which
//! staggers the nodes' timers as in a cluster that has run for a while. No node sends
//! anything before `P` (its first probe is `P` after `t_i`, and its gossip backlog is
//! empty), so the lists are installed up front, in parallel, and the clock starts at `P`.

pub mod messages;
pub mod net;
pub mod record;

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::Duration;

use foca::{Member, State};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::auth::{Authority, SIGNATURE_LEN};
use crate::config::SwimConfig;
use crate::driver::{Driver, DriverStats, Event, MemberState, Transmit, FOCA_ERROR_KINDS};
use crate::frame::OVERHEAD;
use crate::identity::{Interner, NodeId};
use crate::wire::{
    encode_member, seal_message, state_byte, WireCodec, KIND_SYNC_RESPONSE, MAX_MESSAGE_LEN,
    MAX_UNSEALED_LEN,
};

pub use messages::{Fate, MemberUpdate, MessageKind, MessageRecord, Refutation};
pub use net::{
    check_probability, node_addr, node_index, Jitter, NetModel, SimError, MAX_NODES, SIM_PORT,
};
pub use record::{Change, Learned, Record, Suspicion, Traffic};

/// The simulated wall clock at virtual time 0 (messages carry it for freshness checks).
pub const SIM_WALL_EPOCH: Duration = Duration::from_millis(1_700_000_000_000);

use messages::{read_sent, Seen};
use record::{mix, mix_bytes};

/// How the nodes given to [`Simulation::new`] begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Every node knows every other one as alive (see the module docs).
    Converged,
    /// Nobody knows anybody; scenarios join them.
    Isolated,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SimSettings {
    pub swim: SwimConfig,
    pub net: NetModel,
    pub start: Start,
    /// Threads that share large windows (1 = everything on the calling thread). The trace
    /// does not depend on it.
    pub threads: usize,
    /// Windows with less estimated work than this (member-list scans × cluster size, a
    /// proxy for foca's linear scans) stay on one thread: below it a hand-off costs more
    /// than it saves.
    pub parallel_work: u64,
}

impl Default for SimSettings {
    fn default() -> SimSettings {
        SimSettings {
            swim: SwimConfig::default(),
            net: NetModel::default(),
            start: Start::Converged,
            threads: 1,
            parallel_work: PARALLEL_WORK,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeStatus {
    Running,
    Crashed,
    Left,
}

impl NodeStatus {
    pub fn name(self) -> &'static str {
        match self {
            NodeStatus::Running => "running",
            NodeStatus::Crashed => "crashed",
            NodeStatus::Left => "left",
        }
    }
}

/// Counters over the whole simulation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Timer firings and message deliveries handled by drivers.
    pub events: u64,
    pub windows: u64,
    /// Windows whose nodes were split across threads.
    pub parallel_windows: u64,
    /// Summed over every driver that ever ran.
    pub drivers: DriverTotals,
    pub in_flight: usize,
    pub records: usize,
    pub suspicions: usize,
    pub running: usize,
    /// Messages a driver sent while receiving its initial member list (should be none).
    pub bootstrap_sends: u64,
    /// foca's pending cluster updates, summed over running nodes and at the busiest one.
    pub updates_backlog: usize,
    pub updates_backlog_max: usize,
    /// The highest local health score among running nodes.
    pub local_health_max: u8,
    pub traffic: Traffic,
}

/// One own declaration of a member as down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declaration {
    pub at: Duration,
    pub by: u32,
    pub target: u32,
    pub generation: u64,
    /// The target was running, in that life, at the time.
    pub false_positive: bool,
}

/// Sync entry tag of a member (see `wire.rs`: `tag u8 (1 member, 2 item)`).
const ENTRY_MEMBER: u8 = 1;
/// The default of [`SimSettings::parallel_work`].
pub const PARALLEL_WORK: u64 = 200_000;
const ONE_NS: Duration = Duration::from_nanos(1);

const TAG_TIMER: u64 = 1;
const TAG_MESSAGE: u64 = 2;
const TAG_SEND: u64 = 3;
const TAG_EVENT: u64 = 4;
const TAG_CRASH: u64 = 5;
const TAG_RESTART: u64 = 6;
const OUTCOME_LOST: u64 = u64::MAX;
const OUTCOME_CUT: u64 = u64::MAX - 1;
const OUTCOME_UNDELIVERABLE: u64 = u64::MAX - 2;

/// A node's generation in its `life`-th life (0 for the first). foca's auto-rejoin adds
/// one to it, so the life is the upper half.
pub fn generation_for(life: u32) -> u64 {
    (u64::from(life) + 1) << 32
}

pub fn life_of(generation: u64) -> u32 {
    ((generation >> 32).saturating_sub(1)) as u32
}

fn nanos(at: Duration) -> u64 {
    at.as_nanos() as u64
}

/// What is shared, read-only, by every node while the simulation runs; scenario steps
/// change it between runs.
struct World {
    status: Vec<NodeStatus>,
    life: Vec<u32>,
    /// Partition group; only nodes of the same group reach each other.
    group: Vec<u32>,
    /// Extra delay on every message to this node: it handles its input late.
    slow: Vec<Duration>,
    net: NetModel,
    link_loss: HashMap<(u32, u32), f64>,
    recording: bool,
    /// The message log's limit, while it is on.
    message_log: Option<usize>,
}

impl World {
    fn is_running(&self, node: u32) -> bool {
        self.status.get(node as usize) == Some(&NodeStatus::Running)
    }

    /// Whether `generation` is the life `node` is running right now.
    fn is_alive_life(&self, node: u32, generation: u64) -> bool {
        self.is_running(node) && self.life[node as usize] == life_of(generation)
    }

    fn loss(&self, from: u32, to: u32) -> f64 {
        if self.link_loss.is_empty() {
            return self.net.loss;
        }
        self.link_loss
            .get(&(from, to))
            .copied()
            .unwrap_or(self.net.loss)
    }
}

struct Delivery {
    at: Duration,
    from: u32,
    seq: u64,
    message: Box<[u8]>,
}

impl Delivery {
    fn key(&self) -> (Duration, u32, u64) {
        (self.at, self.from, self.seq)
    }
}

impl PartialEq for Delivery {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Delivery {}

impl PartialOrd for Delivery {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Delivery {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// Everything that belongs to one node.
struct Slot {
    driver: Option<Driver>,
    inbox: BinaryHeap<Reverse<Delivery>>,
    rng: SmallRng,
    seq: u64,
    trace: u64,
    records: Vec<Record>,
    /// Records already looked at by the running watch.
    scanned: usize,
    outbox: Vec<(u32, Delivery)>,
    seen: Seen,
    traffic: Traffic,
    codec: WireCodec,
    events: u64,
    /// What the drivers of this node's earlier lives counted.
    retired: DriverTotals,
}

/// Driver counters summed over drivers (and over a node's lives).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverTotals {
    /// Indexed like [`FOCA_ERROR_KINDS`].
    pub foca_errors: [u64; FOCA_ERROR_KINDS.len()],
    pub bad_messages: u64,
    /// Push/pull syncs started, and answered (the answer's first chunk arrived).
    pub syncs_started: u64,
    pub syncs_completed: u64,
    pub sync_entries_known: u64,
    pub probes_failed: u64,
    pub late_answers: u64,
    pub suspicion_notices: u64,
    pub refutations: u64,
    pub stale_suspicion_timers: u64,
}

impl From<&DriverStats> for DriverTotals {
    fn from(stats: &DriverStats) -> DriverTotals {
        DriverTotals {
            foca_errors: stats.foca_errors,
            bad_messages: stats.bad_messages,
            syncs_started: stats.syncs_started,
            syncs_completed: stats.syncs_completed,
            sync_entries_known: stats.sync_entries_known,
            probes_failed: stats.probes_failed,
            late_answers: stats.late_answers,
            suspicion_notices: stats.suspicion_notices,
            refutations: stats.refutations,
            stale_suspicion_timers: stats.stale_suspicion_timers,
        }
    }
}

impl DriverTotals {
    fn merge(&mut self, other: &DriverTotals) {
        for (total, n) in self.foca_errors.iter_mut().zip(other.foca_errors) {
            *total += n;
        }
        self.bad_messages += other.bad_messages;
        self.syncs_started += other.syncs_started;
        self.syncs_completed += other.syncs_completed;
        self.sync_entries_known += other.sync_entries_known;
        self.probes_failed += other.probes_failed;
        self.late_answers += other.late_answers;
        self.suspicion_notices += other.suspicion_notices;
        self.refutations += other.refutations;
        self.stale_suspicion_timers += other.stale_suspicion_timers;
    }
}

impl Slot {
    fn next_time(&self) -> Option<Duration> {
        let timer = self.driver.as_ref().and_then(Driver::next_deadline);
        let message = self.inbox.peek().map(|Reverse(d)| d.at);
        match (timer, message) {
            (Some(t), Some(m)) => Some(t.min(m)),
            (t, m) => t.or(m),
        }
    }

    /// Roughly how many member-list scans the node's events before `end` cost: one per
    /// event, plus one per member entry a message may carry (about 28 bytes each).
    fn work_before(&self, end: Duration) -> u64 {
        let messages: u64 = self
            .inbox
            .iter()
            .filter(|Reverse(d)| d.at < end)
            .map(|Reverse(d)| 1 + d.message.len() as u64 / 28)
            .sum();
        messages + 1
    }

    fn retire_driver(&mut self) {
        if let Some(driver) = self.driver.take() {
            self.retired.merge(&DriverTotals::from(&driver.stats()));
        }
        self.inbox.clear();
    }
}

fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The driver's [`Transmit`]: applies the network model and queues what survives.
struct Wire<'a> {
    world: &'a World,
    from: u32,
    now: Duration,
    rng: &'a mut SmallRng,
    seq: &'a mut u64,
    trace: &'a mut u64,
    traffic: &'a mut Traffic,
    outbox: &'a mut Vec<(u32, Delivery)>,
    seen: &'a mut Seen,
    codec: &'a mut WireCodec,
}

impl Transmit for Wire<'_> {
    fn send(&mut self, to: SocketAddr, message: &[u8]) {
        self.traffic.sent += 1;
        self.traffic.sent_bytes += (message.len() + OVERHEAD) as u64;
        *self.seq += 1;
        let world = self.world;
        let reading = read_sent(
            self.codec,
            message,
            self.now,
            self.from,
            self.seen,
            world.message_log.is_some(),
        );
        let addressee = node_index(to);
        let target = addressee.filter(|&i| world.is_running(i));
        let (fate, arrival) = match target {
            None => {
                self.traffic.undeliverable += 1;
                (Fate::Undeliverable, None)
            }
            Some(to) if world.group[to as usize] != world.group[self.from as usize] => {
                self.traffic.cut += 1;
                (Fate::Cut, None)
            }
            Some(to) => {
                let loss = world.loss(self.from, to);
                if loss > 0.0 && self.rng.random::<f64>() < loss {
                    self.traffic.lost += 1;
                    (Fate::Lost, None)
                } else {
                    let at = self.now + world.net.sample_delay(self.rng) + world.slow[to as usize];
                    self.outbox.push((
                        to,
                        Delivery {
                            at,
                            from: self.from,
                            seq: *self.seq,
                            message: message.into(),
                        },
                    ));
                    (Fate::Delivered, Some(at))
                }
            }
        };
        let outcome = match (fate, arrival) {
            (_, Some(at)) => nanos(at),
            (Fate::Lost, None) => OUTCOME_LOST,
            (Fate::Cut, None) => OUTCOME_CUT,
            (Fate::Delivered | Fate::Undeliverable, None) => OUTCOME_UNDELIVERABLE,
        };
        let hash = mix_bytes(mix(*self.trace, TAG_SEND), message);
        let to_index = target.map_or(u64::MAX, u64::from);
        *self.trace = mix(mix(hash, to_index), outcome);
        if let Some(reading) = reading {
            self.seen.messages.push(MessageRecord {
                sent_at: self.now,
                from: self.from,
                to: addressee,
                seq: *self.seq,
                kind: reading.kind,
                about: reading.about,
                fate,
                arrives_at: arrival,
                bytes: (message.len() + OVERHEAD) as u32,
                updates: reading.updates,
            });
        }
    }
}

/// Turns a driver event into a record (and into the trace).
fn note(
    event: Event,
    at: Duration,
    own: bool,
    world: &World,
    trace: &mut u64,
    records: &mut Vec<Record>,
) {
    let (learned, id) = match event {
        Event::MemberUp(id) => (Learned::Up, id),
        Event::MemberDown(id) => (Learned::Down, id),
        Event::MemberLeft(id) => (Learned::Left, id),
        Event::MemberRenamed { current, .. } => (Learned::Renamed, current),
        Event::Item(_) | Event::NameConflict { .. } | Event::VersionRefused { .. } => return,
    };
    let Some(subject) = node_index(id.socket_addr()) else {
        return;
    };
    *trace = mix(
        mix(
            mix(*trace, TAG_EVENT),
            (u64::from(subject) << 8) | learned as u64,
        ),
        id.generation(),
    );
    if !world.recording {
        return;
    }
    let own = own && learned == Learned::Down;
    records.push(Record {
        at_ns: nanos(at),
        subject,
        generation: id.generation(),
        learned,
        own,
        false_positive: own && world.is_alive_life(subject, id.generation()),
    });
}

/// Runs one node's events that fall before `end`, in order.
fn advance(slot: &mut Slot, node: u32, world: &World, end: Duration) {
    let Slot {
        driver,
        inbox,
        rng,
        seq,
        trace,
        records,
        outbox,
        seen,
        traffic,
        codec,
        events,
        ..
    } = slot;
    let Some(driver) = driver.as_mut() else {
        inbox.clear();
        return;
    };
    loop {
        let timer = driver.next_deadline();
        let message = inbox.peek().map(|Reverse(d)| d.at);
        let (at, is_timer) = match (timer, message) {
            (Some(t), Some(m)) if t <= m => (t, true),
            (_, Some(m)) => (m, false),
            (Some(t), None) => (t, true),
            (None, None) => break,
        };
        if at >= end {
            break;
        }
        *events += 1;
        let delivery = if is_timer {
            *trace = mix(mix(*trace, nanos(at)), TAG_TIMER);
            None
        } else {
            let Reverse(delivery) = inbox.pop().expect("peeked above");
            traffic.received += 1;
            traffic.received_bytes += (delivery.message.len() + OVERHEAD) as u64;
            *trace = mix(
                mix(
                    mix(mix(*trace, nanos(at)), TAG_MESSAGE),
                    u64::from(delivery.from),
                ),
                delivery.seq,
            );
            Some(delivery)
        };
        {
            let mut wire = Wire {
                world,
                from: node,
                now: at,
                rng,
                seq,
                trace,
                traffic,
                outbox,
                seen,
                codec,
            };
            match &delivery {
                None => driver.handle_timers(at, &mut wire),
                Some(delivery) => {
                    driver.handle_datagram(at, &delivery.message, &mut wire);
                    driver.flush(at, &mut wire);
                }
            }
        }
        for event in driver.drain_events() {
            note(event, at, delivery.is_none(), world, trace, records);
        }
    }
}

/// Nodes' next event times, earliest first. A node may have stale entries; its true next
/// time always has one.
struct Queue {
    heap: BinaryHeap<Reverse<(Duration, u32)>>,
    /// The window a node was last taken into.
    stamp: Vec<u64>,
    window: u64,
    /// Every event at or before `now` has been handled.
    now: Duration,
}

impl Queue {
    fn push(&mut self, at: Option<Duration>, node: u32) {
        if let Some(at) = at {
            self.heap.push(Reverse((at, node)));
        }
    }

    /// The earliest pending event anywhere, dropping stale entries on the way.
    fn next_time(&mut self, slots: &[Mutex<Slot>]) -> Option<Duration> {
        while let Some(&Reverse((at, node))) = self.heap.peek() {
            if lock(&slots[node as usize]).next_time() == Some(at) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Takes every node with an event before `end`, with an estimate of its work there.
    fn take_window(&mut self, slots: &[Mutex<Slot>], end: Duration, into: &mut Vec<(u32, u64)>) {
        self.window += 1;
        into.clear();
        while let Some(&Reverse((at, node))) = self.heap.peek() {
            if at >= end {
                break;
            }
            self.heap.pop();
            let index = node as usize;
            if self.stamp[index] == self.window {
                continue;
            }
            let slot = lock(&slots[index]);
            if slot.next_time().is_some_and(|t| t < end) {
                self.stamp[index] = self.window;
                into.push((node, slot.work_before(end)));
            }
        }
        into.sort_unstable();
    }
}

/// Waits for every live node to learn one change.
struct Watch {
    subject: u32,
    life: u32,
    change: Change,
    since_ns: u64,
    learned: Vec<bool>,
    count: usize,
    needed: usize,
    last_ns: u64,
}

impl Watch {
    fn offer(&mut self, observer: u32, record: &Record) {
        if record.subject == self.subject
            && record.at_ns >= self.since_ns
            && life_of(record.generation) == self.life
            && self.change.matches(record.learned)
            && !self.learned[observer as usize]
        {
            self.learned[observer as usize] = true;
            self.count += 1;
            self.last_ns = self.last_ns.max(record.at_ns);
        }
    }

    fn done(&self) -> bool {
        self.count >= self.needed
    }
}

enum Until {
    Time,
    Learned(Watch),
    Converged { every: Duration, next: Duration },
}

/// The member lists of a converged start, handed out before the clock starts.
struct Bootstrap {
    /// Each node's member entry, encoded once.
    entries: Vec<Vec<u8>>,
    /// When each node receives its list.
    at: Vec<Duration>,
    /// Nodes below this have theirs.
    done: usize,
    /// The first probe interval: the lists all arrive within it.
    spread: Duration,
    header: Vec<u8>,
}

/// N drivers, one virtual clock, one in-memory network.
pub struct Simulation {
    seed: u64,
    swim: SwimConfig,
    interner: Interner,
    world: World,
    slots: Vec<Mutex<Slot>>,
    queue: Queue,
    journal: Journal,
    bootstrap: Option<Bootstrap>,
    threads: usize,
    parallel_work: u64,
    windows: u64,
    parallel_windows: u64,
    bootstrap_sends: u64,
}

impl Simulation {
    pub fn new(nodes: usize, seed: u64, settings: SimSettings) -> Result<Simulation, SimError> {
        if nodes > MAX_NODES {
            return Err(SimError::TooManyNodes(nodes));
        }
        settings.swim.validate()?;
        settings.net.validate()?;
        let mut sim = Simulation {
            seed,
            swim: settings.swim,
            interner: Interner::default(),
            world: World {
                status: Vec::with_capacity(nodes),
                life: Vec::with_capacity(nodes),
                group: Vec::with_capacity(nodes),
                slow: Vec::with_capacity(nodes),
                net: settings.net,
                link_loss: HashMap::new(),
                recording: true,
                message_log: None,
            },
            slots: Vec::with_capacity(nodes),
            queue: Queue {
                heap: BinaryHeap::new(),
                stamp: Vec::with_capacity(nodes),
                window: 0,
                now: Duration::ZERO,
            },
            journal: Journal::default(),
            bootstrap: None,
            threads: settings.threads.max(1),
            parallel_work: settings.parallel_work,
            windows: 0,
            parallel_windows: 0,
            bootstrap_sends: 0,
        };
        for _ in 0..nodes {
            sim.push_node();
        }
        if settings.start == Start::Converged && nodes > 1 {
            sim.bootstrap = Some(sim.plan_bootstrap());
        }
        Ok(sim)
    }

    fn identity(&self, node: u32, life: u32) -> NodeId {
        let site = self.interner.intern(&format!("n{node}"));
        NodeId::new(site, node_addr(node), generation_for(life))
    }

    fn new_driver(&self, node: u32, life: u32) -> Driver {
        let seed = mix(mix(self.seed, u64::from(node)), u64::from(life));
        // The simulator studies SWIM's dynamics, not its cryptography: messages keep their
        // layout and replay windows, with unsigned trailers.
        Driver::new(
            self.identity(node, life),
            self.swim.clone(),
            seed,
            self.interner.clone(),
            Authority::Unsigned,
            SIM_WALL_EPOCH,
        )
    }

    fn push_node(&mut self) -> u32 {
        let node = self.slots.len() as u32;
        let driver = self.new_driver(node, 0);
        self.world.status.push(NodeStatus::Running);
        self.world.life.push(0);
        self.world.group.push(0);
        self.world.slow.push(Duration::ZERO);
        self.queue.stamp.push(0);
        self.slots.push(Mutex::new(Slot {
            driver: Some(driver),
            inbox: BinaryHeap::new(),
            rng: SmallRng::seed_from_u64(mix(self.seed ^ 0x6E65_7477_6F72_6B00, u64::from(node))),
            seq: 0,
            trace: u64::from(node),
            records: Vec::new(),
            scanned: 0,
            outbox: Vec::new(),
            seen: Seen::default(),
            traffic: Traffic::default(),
            codec: WireCodec::new(self.interner.clone()),
            events: 0,
            retired: DriverTotals::default(),
        }));
        node
    }

    fn plan_bootstrap(&mut self) -> Bootstrap {
        let n = self.slots.len() as u32;
        let entries = (0..n)
            .map(|node| {
                let mut entry = Vec::new();
                let member = Member::new(self.identity(node, 0), 0, State::Alive);
                encode_member(&member, state_byte(State::Alive), &mut entry);
                entry
            })
            .collect();
        let spread = self.swim.probe_interval;
        let mut rng = SmallRng::seed_from_u64(mix(self.seed, 0x626F_6F74));
        let at = (0..n)
            .map(|_| Duration::from_nanos(rng.random_range(0..nanos(spread))))
            .collect();
        let phantom = NodeId::new(self.interner.intern("bootstrap"), net::phantom_addr(), 1);
        let mut header = vec![KIND_SYNC_RESPONSE];
        phantom.encode(&mut header);
        header.extend_from_slice(&[0; 8]);
        Bootstrap {
            entries,
            at,
            done: 0,
            spread,
            header,
        }
    }

    /// Hands the next `max_nodes` nodes of a converged start their member lists (the
    /// expensive part of setting up a large cluster: foca inserts members one by one into
    /// a list it scans linearly). Returns how many nodes still wait; at 0 the clock
    /// stands at the first probe interval and scenarios may begin.
    pub fn bootstrap(&mut self, max_nodes: usize) -> usize {
        let Some(plan) = &self.bootstrap else {
            return 0;
        };
        let start = plan.done;
        let stop = start.saturating_add(max_nodes).min(self.slots.len());
        let next = AtomicUsize::new(start);
        let sends = AtomicUsize::new(0);
        let work = || {
            let mut chunks = Vec::new();
            let mut sink = Sink::default();
            loop {
                let node = next.fetch_add(1, Ordering::Relaxed);
                if node >= stop {
                    break;
                }
                member_list_chunks(&plan.header, &plan.entries, node, &mut chunks);
                for (seq, chunk) in chunks.iter_mut().enumerate() {
                    let sent_at = (SIM_WALL_EPOCH + plan.at[node]).as_millis() as u64;
                    let to = crate::identity::NodeAddr::new(node_addr(node as u32));
                    seal_message(chunk, seq as u64 + 1, sent_at, to, |_| [0; SIGNATURE_LEN]);
                }
                let mut slot = lock(&self.slots[node]);
                let driver = slot.driver.as_mut().expect("fresh nodes run");
                for chunk in &chunks {
                    driver.handle_datagram(plan.at[node], chunk, &mut sink);
                    // Knowing the initial members is the starting point, not news. Drained
                    // chunk by chunk so the driver's event buffer never holds N events.
                    driver.drain_events().for_each(drop);
                }
            }
            sends.fetch_add(sink.sent, Ordering::Relaxed);
        };
        let threads = self.threads.min(stop - start).max(1);
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(work);
            }
            work();
        });
        self.bootstrap_sends += sends.into_inner() as u64;
        for node in start..stop {
            let at = lock(&self.slots[node]).next_time();
            self.queue.push(at, node as u32);
        }
        let remaining = self.slots.len() - stop;
        let spread = plan.spread;
        if remaining == 0 {
            self.bootstrap = None;
            self.advance_to(spread, &mut Until::Time);
        } else if let Some(plan) = &mut self.bootstrap {
            plan.done = stop;
        }
        remaining
    }

    fn ensure_ready(&mut self) {
        if self.bootstrap.is_some() {
            self.bootstrap(usize::MAX);
        }
    }

    /// Nodes waiting for their initial member list.
    pub fn pending_bootstrap(&self) -> usize {
        self.bootstrap
            .as_ref()
            .map_or(0, |plan| self.slots.len() - plan.done)
    }

    pub fn now(&mut self) -> Duration {
        self.ensure_ready();
        self.queue.now
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn swim(&self) -> &SwimConfig {
        &self.swim
    }

    pub fn net(&self) -> &NetModel {
        &self.world.net
    }

    fn check_node(&self, node: u32) -> Result<(), SimError> {
        if (node as usize) < self.slots.len() {
            Ok(())
        } else {
            Err(SimError::UnknownNode(node))
        }
    }

    fn check_running(&self, node: u32) -> Result<(), SimError> {
        self.check_node(node)?;
        if self.world.is_running(node) {
            Ok(())
        } else {
            Err(SimError::NotRunning(node))
        }
    }

    pub fn status(&self, node: u32) -> Result<NodeStatus, SimError> {
        self.check_node(node)?;
        Ok(self.world.status[node as usize])
    }

    /// The node's current generation (its life, plus foca's renewals), if it is running.
    pub fn generation(&self, node: u32) -> Result<Option<u64>, SimError> {
        self.check_node(node)?;
        Ok(lock(&self.slots[node as usize])
            .driver
            .as_ref()
            .map(|d| d.identity().generation()))
    }

    /// The counters of the node's current driver (None while it is down).
    pub fn driver_stats(&self, node: u32) -> Result<Option<DriverStats>, SimError> {
        self.check_node(node)?;
        Ok(lock(&self.slots[node as usize])
            .driver
            .as_ref()
            .map(Driver::stats))
    }

    /// Active members (alive or suspect) the node knows, itself excluded.
    pub fn members_of(&mut self, node: u32) -> Result<usize, SimError> {
        self.check_node(node)?;
        self.ensure_ready();
        Ok(lock(&self.slots[node as usize])
            .driver
            .as_ref()
            .map_or(0, Driver::num_members))
    }

    /// Adds a node that knows nobody; [`Simulation::join`] it to a seed.
    pub fn add_node(&mut self) -> Result<u32, SimError> {
        if self.slots.len() >= MAX_NODES {
            return Err(SimError::TooManyNodes(self.slots.len() + 1));
        }
        self.ensure_ready();
        Ok(self.push_node())
    }

    /// Runs `step` on a running node's driver at the current time and sends what it sends.
    fn act(&mut self, node: u32, step: impl FnOnce(&mut Driver, Duration, &mut Wire<'_>)) {
        let now = self.queue.now;
        {
            let mut guard = lock(&self.slots[node as usize]);
            let Slot {
                driver,
                rng,
                seq,
                trace,
                records,
                outbox,
                seen,
                traffic,
                codec,
                ..
            } = &mut *guard;
            let Some(driver) = driver.as_mut() else {
                return;
            };
            {
                let mut wire = Wire {
                    world: &self.world,
                    from: node,
                    now,
                    rng,
                    seq,
                    trace,
                    traffic,
                    outbox,
                    seen,
                    codec,
                };
                step(driver, now, &mut wire);
            }
            for event in driver.drain_events() {
                note(event, now, false, &self.world, trace, records);
            }
        }
        collect(
            &mut self.queue,
            &self.world,
            &self.slots,
            &mut self.journal,
            node,
            &mut Vec::new(),
            None,
        );
    }

    /// The node announces itself to `seeds` and syncs with one of them.
    pub fn join(&mut self, node: u32, seeds: &[u32]) -> Result<(), SimError> {
        self.check_running(node)?;
        for &seed in seeds {
            self.check_node(seed)?;
        }
        self.ensure_ready();
        let seeds: Vec<SocketAddr> = seeds.iter().map(|&s| node_addr(s)).collect();
        self.act(node, |driver, now, wire| driver.join(now, &seeds, wire));
        Ok(())
    }

    /// Stops the node dead: it handles nothing more and messages to it are lost.
    pub fn crash(&mut self, node: u32) -> Result<(), SimError> {
        self.check_running(node)?;
        self.ensure_ready();
        self.world.status[node as usize] = NodeStatus::Crashed;
        let mut slot = lock(&self.slots[node as usize]);
        slot.trace = mix(mix(slot.trace, TAG_CRASH), nanos(self.queue.now));
        slot.retire_driver();
        Ok(())
    }

    /// Brings a crashed or departed node back in its next life (a higher generation) and
    /// joins it to `seeds`.
    pub fn restart(&mut self, node: u32, seeds: &[u32]) -> Result<(), SimError> {
        self.check_node(node)?;
        if self.world.is_running(node) {
            return Err(SimError::StillRunning(node));
        }
        for &seed in seeds {
            self.check_node(seed)?;
        }
        self.ensure_ready();
        let index = node as usize;
        self.world.life[index] += 1;
        self.world.status[index] = NodeStatus::Running;
        let driver = self.new_driver(node, self.world.life[index]);
        {
            let mut slot = lock(&self.slots[index]);
            slot.driver = Some(driver);
            slot.trace = mix(mix(slot.trace, TAG_RESTART), nanos(self.queue.now));
        }
        self.join(node, seeds)
    }

    /// The node leaves on purpose: it tells its members, then stops.
    pub fn leave(&mut self, node: u32) -> Result<(), SimError> {
        self.check_running(node)?;
        self.ensure_ready();
        self.act(node, |driver, now, wire| driver.leave(now, wire));
        self.world.status[node as usize] = NodeStatus::Left;
        lock(&self.slots[node as usize]).retire_driver();
        Ok(())
    }

    /// From now on every message to `node` reaches it `extra` late, as if it were too busy
    /// to read its socket. `Duration::ZERO` makes it normal again.
    pub fn set_slow(&mut self, node: u32, extra: Duration) -> Result<(), SimError> {
        self.check_node(node)?;
        if extra > net::MAX_DELAY {
            return Err(SimError::BadDelay {
                what: "slow-node delay",
                value: extra,
            });
        }
        self.ensure_ready();
        self.world.slow[node as usize] = extra;
        Ok(())
    }

    /// Splits the network: nodes of different groups cannot reach each other; nodes in no
    /// group form one more group together.
    pub fn partition(&mut self, groups: &[Vec<u32>]) -> Result<(), SimError> {
        let mut group = vec![0u32; self.slots.len()];
        for (g, members) in groups.iter().enumerate() {
            for &node in members {
                self.check_node(node)?;
                if group[node as usize] != 0 {
                    return Err(SimError::NodeInTwoGroups(node));
                }
                group[node as usize] = g as u32 + 1;
            }
        }
        self.ensure_ready();
        self.world.group = group;
        Ok(())
    }

    /// Ends every partition.
    pub fn heal(&mut self) {
        self.ensure_ready();
        self.world.group.iter_mut().for_each(|g| *g = 0);
    }

    pub fn set_net(&mut self, net: NetModel) -> Result<(), SimError> {
        net.validate()?;
        self.ensure_ready();
        self.world.net = net;
        Ok(())
    }

    /// Loss on both directions of one link, overriding the model's.
    pub fn set_link_loss(&mut self, a: u32, b: u32, loss: f64) -> Result<(), SimError> {
        self.check_node(a)?;
        self.check_node(b)?;
        check_probability("link loss", loss)?;
        self.ensure_ready();
        self.world.link_loss.insert((a, b), loss);
        self.world.link_loss.insert((b, a), loss);
        Ok(())
    }

    /// Whether membership changes are recorded (they always count in the trace).
    pub fn set_recording(&mut self, on: bool) {
        self.world.recording = on;
    }

    /// Handles every event up to and including `target`.
    pub fn run_until(&mut self, target: Duration) -> Result<(), SimError> {
        self.ensure_ready();
        self.check_future(target)?;
        self.advance_to(target, &mut Until::Time);
        Ok(())
    }

    fn check_future(&self, target: Duration) -> Result<(), SimError> {
        if target < self.queue.now {
            return Err(SimError::TimeInPast {
                requested: target,
                now: self.queue.now,
            });
        }
        Ok(())
    }

    /// Runs until every running node other than `subject` has learned that the subject's
    /// current life is up (or down), counting only what was learned at or after `since`,
    /// or until `deadline`. Returns when the last of them learned it.
    pub fn run_until_learned(
        &mut self,
        subject: u32,
        change: Change,
        since: Duration,
        deadline: Duration,
    ) -> Result<Option<Duration>, SimError> {
        self.check_node(subject)?;
        self.ensure_ready();
        self.check_future(deadline)?;
        let mut watch = Watch {
            subject,
            life: self.world.life[subject as usize],
            change,
            since_ns: nanos(since),
            learned: vec![false; self.slots.len()],
            count: 0,
            needed: self.observers_of(subject).count(),
            last_ns: 0,
        };
        for (observer, slot) in self.slots.iter().enumerate() {
            let mut slot = lock(slot);
            if observer as u32 != subject && self.world.is_running(observer as u32) {
                for record in &slot.records {
                    watch.offer(observer as u32, record);
                }
            }
            slot.scanned = slot.records.len();
        }
        if watch.done() {
            return Ok(Some(Duration::from_nanos(watch.last_ns)));
        }
        let mut until = Until::Learned(watch);
        Ok(self.advance_to(deadline, &mut until))
    }

    /// Runs until every running node sees every other running node alive in its current
    /// identity, checking every `every`, or until `deadline`. Returns the first check that
    /// found the cluster converged.
    pub fn run_until_converged(
        &mut self,
        deadline: Duration,
        every: Duration,
    ) -> Result<Option<Duration>, SimError> {
        if every < ONE_NS * 1000 {
            return Err(SimError::BadDelay {
                what: "check interval",
                value: every,
            });
        }
        self.ensure_ready();
        self.check_future(deadline)?;
        let mut until = Until::Converged {
            every,
            next: self.queue.now,
        };
        Ok(self.advance_to(deadline, &mut until))
    }

    /// Whether every running node sees every other running node alive in its current
    /// identity.
    pub fn is_converged(&mut self) -> bool {
        self.ensure_ready();
        converged(&self.world, &self.slots)
    }

    fn observers_of(&self, subject: u32) -> impl Iterator<Item = u32> + '_ {
        (0..self.slots.len() as u32).filter(move |&o| o != subject && self.world.is_running(o))
    }

    /// The main loop: windows of independent node work until `target` or the condition.
    fn advance_to(&mut self, target: Duration, until: &mut Until) -> Option<Duration> {
        let lookahead = self.world.net.delay;
        let threads = self.threads.min(self.slots.len()).max(1);
        let parallel_work = self.parallel_work;
        let Simulation {
            world,
            slots,
            queue,
            journal,
            windows,
            parallel_windows,
            ..
        } = self;
        let world: &World = world;
        let slots: &[Mutex<Slot>] = slots;
        let cluster = slots.len();
        std::thread::scope(|scope| {
            let helpers: Vec<Helper> = (1..threads)
                .map(|_| Helper::spawn(scope, world, slots))
                .collect();
            let mut bins: Vec<Vec<u32>> = vec![Vec::new(); threads];
            let mut window = Vec::new();
            let mut outbox = Vec::new();
            loop {
                let next = queue.next_time(slots);
                if let Until::Converged { every, next: check } = until {
                    while *check <= target && next.map_or(true, |n| n > *check) {
                        if converged(world, slots) {
                            queue.now = queue.now.max(*check);
                            return Some(*check);
                        }
                        *check += *every;
                    }
                }
                let Some(start) = next.filter(|&n| n <= target) else {
                    break;
                };
                let mut end = (start + lookahead).min(target + ONE_NS);
                if let Until::Converged { next: check, .. } = until {
                    end = end.min(*check + ONE_NS);
                }
                queue.take_window(slots, end, &mut window);
                *windows += 1;
                let work: u64 = window.iter().map(|&(_, w)| w).sum();
                if !helpers.is_empty() && window.len() > 1 && work * cluster as u64 >= parallel_work
                {
                    *parallel_windows += 1;
                    split(&mut window, &mut bins);
                    for (helper, bin) in helpers.iter().zip(&mut bins[1..]) {
                        helper.run(std::mem::take(bin), end);
                    }
                    for &node in &bins[0] {
                        advance(&mut lock(&slots[node as usize]), node, world, end);
                    }
                    for (helper, bin) in helpers.iter().zip(&mut bins[1..]) {
                        *bin = helper.wait();
                    }
                } else {
                    for &(node, _) in &window {
                        advance(&mut lock(&slots[node as usize]), node, world, end);
                    }
                }
                let watch = match until {
                    Until::Learned(watch) => Some(watch),
                    _ => None,
                };
                let mut watch = watch;
                for &(node, _) in &window {
                    collect(
                        queue,
                        world,
                        slots,
                        journal,
                        node,
                        &mut outbox,
                        watch.as_deref_mut(),
                    );
                }
                queue.now = queue.now.max(end - ONE_NS);
                if let Some(watch) = watch {
                    if watch.done() {
                        return Some(Duration::from_nanos(watch.last_ns));
                    }
                }
            }
            queue.now = queue.now.max(target);
            None
        })
    }

    /// Every record node `observer` made, in order.
    pub fn records(&self, observer: u32) -> Result<Vec<Record>, SimError> {
        self.check_node(observer)?;
        Ok(lock(&self.slots[observer as usize]).records.clone())
    }

    /// For each running node other than `subject`, when it first learned (at or after
    /// `since`) that the subject's current life changed so: the delays after `since` of
    /// those who learned it, sorted, and how many nodes there were to learn it.
    pub fn learned_times(
        &self,
        subject: u32,
        change: Change,
        since: Duration,
    ) -> Result<(Vec<Duration>, usize), SimError> {
        self.check_node(subject)?;
        let life = self.world.life[subject as usize];
        let since_ns = nanos(since);
        let mut delays = Vec::new();
        let mut observers = 0;
        for observer in self.observers_of(subject) {
            observers += 1;
            let slot = lock(&self.slots[observer as usize]);
            let first = slot.records.iter().find(|r| {
                r.subject == subject
                    && r.at_ns >= since_ns
                    && life_of(r.generation) == life
                    && change.matches(r.learned)
            });
            if let Some(record) = first {
                delays.push(Duration::from_nanos(record.at_ns - since_ns));
            }
        }
        delays.sort_unstable();
        Ok((delays, observers))
    }

    /// When `observer` first learned (at or after `since`) that each other node is up,
    /// one delay after `since` per node, sorted.
    pub fn learned_by(&self, observer: u32, since: Duration) -> Result<Vec<Duration>, SimError> {
        self.check_node(observer)?;
        let since_ns = nanos(since);
        let mut seen = vec![false; self.slots.len()];
        let mut delays = Vec::new();
        for record in lock(&self.slots[observer as usize]).records.iter() {
            if record.at_ns >= since_ns
                && Change::Up.matches(record.learned)
                && !std::mem::replace(&mut seen[record.subject as usize], true)
            {
                delays.push(Duration::from_nanos(record.at_ns - since_ns));
            }
        }
        delays.sort_unstable();
        Ok(delays)
    }

    /// Every suspicion episode first seen at or after `since`, earliest first.
    pub fn suspicions(&self, since: Duration) -> Vec<Suspicion> {
        let mut list: Vec<Suspicion> = self
            .journal
            .suspicions
            .values()
            .filter(|s| s.first_at >= since)
            .copied()
            .collect();
        list.sort_unstable_by_key(|s| (s.first_at, s.target, s.generation, s.incarnation));
        list
    }

    /// Every refutation made at or after `since`, earliest first.
    pub fn refutations(&self, since: Duration) -> Vec<Refutation> {
        let mut list: Vec<Refutation> = self
            .journal
            .refutations
            .iter()
            .filter(|r| r.at >= since)
            .copied()
            .collect();
        list.sort_unstable_by_key(|r| (r.at, r.node));
        list
    }

    /// Starts keeping every message the network carries, at most `limit` of them (the
    /// first ones; later ones are counted as dropped), or, with `None`, stops. Either way
    /// the log starts empty. Off by default: it costs a decode of every message.
    pub fn set_message_log(&mut self, limit: Option<usize>) {
        self.world.message_log = limit;
        self.journal.messages = Vec::new();
        self.journal.messages_dropped = 0;
    }

    /// Logged messages sent in `[since, until)`, in the order they were sent (ties: by
    /// sender, then its message number).
    pub fn messages(&self, since: Duration, until: Duration) -> Vec<MessageRecord> {
        let mut list: Vec<MessageRecord> = self
            .journal
            .messages
            .iter()
            .filter(|m| m.sent_at >= since && m.sent_at < until)
            .cloned()
            .collect();
        list.sort_unstable_by_key(|m| (m.sent_at, m.from, m.seq));
        list
    }

    /// Messages the log had no room for since it was last set.
    pub fn messages_dropped(&self) -> u64 {
        self.journal.messages_dropped
    }

    /// Every time a node declared another down itself (its suspicion expired), at or after
    /// `since`, earliest first.
    pub fn declarations(&self, since: Duration) -> Vec<Declaration> {
        let since_ns = nanos(since);
        let mut list = Vec::new();
        for (by, slot) in self.slots.iter().enumerate() {
            for r in lock(slot).records.iter() {
                if r.own && r.at_ns >= since_ns {
                    list.push(Declaration {
                        at: r.at(),
                        by: by as u32,
                        target: r.subject,
                        generation: r.generation,
                        false_positive: r.false_positive,
                    });
                }
            }
        }
        list.sort_unstable_by_key(|d| (d.at, d.by, d.target));
        list
    }

    pub fn traffic(&self, node: u32) -> Result<Traffic, SimError> {
        self.check_node(node)?;
        Ok(lock(&self.slots[node as usize]).traffic)
    }

    pub fn stats(&self) -> SimStats {
        let mut stats = SimStats {
            windows: self.windows,
            parallel_windows: self.parallel_windows,
            suspicions: self.journal.suspicions.len(),
            bootstrap_sends: self.bootstrap_sends,
            ..SimStats::default()
        };
        for (node, slot) in self.slots.iter().enumerate() {
            let slot = lock(slot);
            stats.events += slot.events;
            stats.in_flight += slot.inbox.len();
            stats.records += slot.records.len();
            stats.traffic.add(&slot.traffic);
            stats.drivers.merge(&slot.retired);
            if let Some(driver) = &slot.driver {
                let live = driver.stats();
                stats.drivers.merge(&DriverTotals::from(&live));
                stats.updates_backlog += live.updates_backlog;
                stats.updates_backlog_max = stats.updates_backlog_max.max(live.updates_backlog);
                stats.local_health_max = stats.local_health_max.max(live.local_health);
            }
            if self.world.is_running(node as u32) {
                stats.running += 1;
            }
        }
        stats
    }

    /// A fingerprint of everything that happened: every timer, delivery, message (its
    /// bytes and fate) and membership event of every node, in order.
    pub fn trace_hash(&self) -> u64 {
        self.slots
            .iter()
            .fold(mix(self.seed, self.slots.len() as u64), |hash, slot| {
                mix(hash, lock(slot).trace)
            })
    }

    /// Every member `node` knows, as (member, incarnation, state, generation).
    pub fn member_view(&self, node: u32) -> Result<Vec<(u32, u16, MemberState, u64)>, SimError> {
        self.check_node(node)?;
        let slot = lock(&self.slots[node as usize]);
        Ok(slot.driver.as_ref().map_or_else(Vec::new, |driver| {
            driver
                .members()
                .into_iter()
                .filter_map(|m| {
                    let index = node_index(m.id.socket_addr())?;
                    Some((index, m.incarnation, m.state, m.id.generation()))
                })
                .collect()
        }))
    }
}

/// What the simulator gathers from every node's messages.
#[derive(Default)]
struct Journal {
    suspicions: HashMap<(u32, u64, u16), Suspicion>,
    refutations: Vec<Refutation>,
    /// In the order collected: window by window, node by node within one.
    messages: Vec<MessageRecord>,
    /// Messages the log had no room for.
    messages_dropped: u64,
}

/// After a node ran (or acted): routes what it sent, merges what its messages showed
/// into the journal, feeds the watch and requeues it.
fn collect(
    queue: &mut Queue,
    world: &World,
    slots: &[Mutex<Slot>],
    journal: &mut Journal,
    node: u32,
    outbox: &mut Vec<(u32, Delivery)>,
    watch: Option<&mut Watch>,
) {
    {
        let mut slot = lock(&slots[node as usize]);
        std::mem::swap(&mut slot.outbox, outbox);
        if let Some(watch) = watch {
            let start = slot.scanned.min(slot.records.len());
            for record in &slot.records[start..] {
                watch.offer(node, record);
            }
        }
        slot.scanned = slot.records.len();
        queue.push(slot.next_time(), node);
        let seen = &mut slot.seen;
        for seen in seen.suspects.drain(..) {
            let key = (seen.target, seen.generation, seen.incarnation);
            let candidate = Suspicion {
                first_at: seen.at,
                target: seen.target,
                generation: seen.generation,
                incarnation: seen.incarnation,
                by: node,
                target_alive: world.is_alive_life(seen.target, seen.generation),
            };
            match journal.suspicions.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(candidate);
                }
                Entry::Occupied(mut slot) => {
                    let known = slot.get();
                    if (candidate.first_at, candidate.by) < (known.first_at, known.by) {
                        slot.insert(candidate);
                    }
                }
            }
        }
        journal.refutations.append(&mut seen.refutations);
        if !seen.messages.is_empty() {
            let room = world
                .message_log
                .unwrap_or(0)
                .saturating_sub(journal.messages.len());
            let kept = seen.messages.len().min(room);
            journal.messages_dropped += (seen.messages.len() - kept) as u64;
            journal.messages.extend(seen.messages.drain(..kept));
            seen.messages.clear();
        }
    }
    for (to, delivery) in outbox.drain(..) {
        let at = delivery.at;
        lock(&slots[to as usize]).inbox.push(Reverse(delivery));
        queue.push(Some(at), to);
    }
}

fn converged(world: &World, slots: &[Mutex<Slot>]) -> bool {
    let running: Vec<u32> = (0..slots.len() as u32)
        .filter(|&n| world.is_running(n))
        .collect();
    let expected = running.len().saturating_sub(1);
    let mut generation = vec![None; slots.len()];
    for &node in &running {
        let slot = lock(&slots[node as usize]);
        let Some(driver) = &slot.driver else {
            return false;
        };
        if driver.num_members() != expected {
            return false;
        }
        generation[node as usize] = Some(driver.identity().generation());
    }
    running.iter().all(|&node| {
        let slot = lock(&slots[node as usize]);
        let Some(driver) = &slot.driver else {
            return false;
        };
        let current = driver
            .members()
            .iter()
            .filter(|m| {
                m.state == MemberState::Alive
                    && node_index(m.id.socket_addr())
                        .is_some_and(|i| generation[i as usize] == Some(m.id.generation()))
            })
            .count();
        current == expected
    })
}

/// Splits `entries` (all but `skip`) into sync-response chunks of one frame each.
/// A sync chunk's header ends with its index and count (after the sender and sync id).
fn member_list_chunks(header: &[u8], entries: &[Vec<u8>], skip: usize, chunks: &mut Vec<Vec<u8>>) {
    chunks.clear();
    for (j, entry) in entries.iter().enumerate() {
        if j == skip {
            continue;
        }
        let need = 3 + entry.len();
        if chunks
            .last()
            .map_or(true, |chunk| chunk.len() + need > MAX_UNSEALED_LEN)
        {
            let mut chunk = Vec::with_capacity(MAX_MESSAGE_LEN);
            chunk.extend_from_slice(header);
            chunks.push(chunk);
        }
        let chunk = chunks.last_mut().expect("pushed above");
        chunk.push(ENTRY_MEMBER);
        chunk.extend_from_slice(&(entry.len() as u16).to_be_bytes());
        chunk.extend_from_slice(entry);
    }
    let count = chunks.len() as u16;
    let at = header.len() - 4;
    for (index, chunk) in chunks.iter_mut().enumerate() {
        chunk[at..at + 2].copy_from_slice(&(index as u16).to_be_bytes());
        chunk[at + 2..at + 4].copy_from_slice(&count.to_be_bytes());
    }
}

/// Shares a window's nodes among the threads' bins, heaviest first to the lightest bin.
/// The split only decides who computes what, never the outcome.
fn split(window: &mut [(u32, u64)], bins: &mut [Vec<u32>]) {
    let mut loads = vec![0u64; bins.len()];
    bins.iter_mut().for_each(Vec::clear);
    window.sort_unstable_by_key(|&(node, work)| (Reverse(work), node));
    for &(node, work) in window.iter() {
        let lightest = (0..bins.len())
            .min_by_key(|&i| loads[i])
            .expect("at least one bin");
        loads[lightest] += work;
        bins[lightest].push(node);
    }
}

/// Where a driver's output goes while it receives its initial member list.
#[derive(Default)]
struct Sink {
    sent: usize,
}

impl Transmit for Sink {
    fn send(&mut self, _to: SocketAddr, _message: &[u8]) {
        self.sent += 1;
    }
}

/// A thread that runs its share of each large window.
struct Helper {
    work: mpsc::Sender<(Vec<u32>, Duration)>,
    done: mpsc::Receiver<Vec<u32>>,
}

impl Helper {
    fn spawn<'scope, 'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        world: &'env World,
        slots: &'env [Mutex<Slot>],
    ) -> Helper {
        let (work, inbox) = mpsc::channel::<(Vec<u32>, Duration)>();
        let (finished, done) = mpsc::channel();
        scope.spawn(move || {
            for (nodes, end) in inbox {
                for &node in &nodes {
                    advance(&mut lock(&slots[node as usize]), node, world, end);
                }
                if finished.send(nodes).is_err() {
                    break;
                }
            }
        });
        Helper { work, done }
    }

    /// Starts `nodes` on the helper.
    fn run(&self, nodes: Vec<u32>, end: Duration) {
        self.work
            .send((nodes, end))
            .expect("the helper lives as long as the scope");
    }

    /// Waits for the batch to finish and hands its list back for reuse.
    fn wait(&self) -> Vec<u32> {
        self.done
            .recv()
            .expect("the helper answers every batch it was given")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_lists_fit_in_frames_and_skip_the_recipient() {
        let entries: Vec<Vec<u8>> = (0..500u32)
            .map(|node| {
                let mut entry = Vec::new();
                let id = NodeId::new(
                    std::sync::Arc::from(format!("n{node}").as_str()),
                    node_addr(node),
                    generation_for(0),
                );
                encode_member(&Member::new(id, 0, State::Alive), 0, &mut entry);
                entry
            })
            .collect();
        let mut header = vec![KIND_SYNC_RESPONSE];
        NodeId::new(std::sync::Arc::from("boot"), node_addr(9), 1).encode(&mut header);
        header.extend_from_slice(&[0; 8]);
        let mut chunks = Vec::new();
        member_list_chunks(&header, &entries, 7, &mut chunks);
        assert!(chunks.len() > 1);
        let carried: usize = chunks
            .iter()
            .map(|c| {
                assert!(c.len() <= MAX_UNSEALED_LEN);
                c.len() - header.len()
            })
            .sum();
        let expected: usize =
            entries.iter().map(|e| 3 + e.len()).sum::<usize>() - 3 - entries[7].len();
        assert_eq!(carried, expected);
        let count = chunks.len() as u16;
        let at = header.len() - 4;
        for (index, chunk) in chunks.iter().enumerate() {
            assert_eq!(&chunk[at..at + 2], &(index as u16).to_be_bytes());
            assert_eq!(&chunk[at + 2..at + 4], &count.to_be_bytes());
        }
    }

    #[test]
    fn windows_split_by_work() {
        let mut window = vec![(1, 100), (2, 1), (3, 1), (4, 60), (5, 40)];
        let mut bins = vec![Vec::new(); 2];
        split(&mut window, &mut bins);
        assert_eq!(bins, [vec![1, 2], vec![4, 5, 3]]);
        let mut bins = vec![Vec::new(); 3];
        split(&mut window, &mut bins);
        assert_eq!(bins, [vec![1], vec![4], vec![5, 2, 3]]);
    }

    #[test]
    fn lives_map_onto_generations() {
        for life in [0, 1, 7, u32::MAX - 1] {
            assert_eq!(life_of(generation_for(life)), life);
            // foca's renewals bump the generation without changing the life.
            assert_eq!(life_of(generation_for(life) + 3), life);
        }
    }
}
