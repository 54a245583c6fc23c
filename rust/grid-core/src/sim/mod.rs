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

//!
//! ## Files
//!
//! - [`net`]: the network model (addresses, loss, delay, jitter) and the errors of a step;
//! - `world`: what running nodes share (partitions, slow nodes, link loss) and the
//!   [`Transmit`](crate::driver::Transmit) that applies the model to every message;
//! - `node`: one node's state and how it runs a window's events;
//! - `queue`: messages in flight, the nodes' event queue, windows and helper threads;
//! - `run`: the run loop, and running to a time, a change learned or convergence;
//! - `bootstrap`: the member lists of a converged start;
//! - `measure`: what is gathered after each node ran, watches, convergence and read-outs;
//! - `scenario`: the steps a scenario takes (add, join, crash, restart, leave, slow nodes,
//!   partitions, loss);
//! - [`messages`], [`record`]: what is read off the wire and what is remembered;
//! - [`state`]: the state plane: items published through the drivers, what each store
//!   holds, when a watched version reached each node, traffic by kind;
//! - [`workload`], `state_run`: what each site publishes, and the state-plane scenario
//!   (fill, steady traffic, changes, a joiner's catch-up).

mod bootstrap;
mod measure;
pub mod messages;
pub mod net;
mod node;
mod queue;
pub mod record;
mod run;
mod scenario;
pub mod state;
mod state_run;
pub mod workload;
mod world;

use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::driver::config::SwimConfig;
use crate::driver::{Driver, DriverStats};
use crate::identity::auth::Authority;
use crate::identity::{Interner, NodeAddr, NodeId};
use crate::wire::WireCodec;

pub use messages::{Fate, MemberUpdate, MessageKind, MessageRecord, Refutation};
pub use net::{
    check_probability, node_addr, node_index, Jitter, NetModel, SimError, MAX_NODES, SIM_PORT,
};
pub use node::DriverTotals;
pub use record::{Change, Learned, Record, Suspicion, Traffic};
pub use state::{KindCount, KindTraffic, TrafficKind};
pub use state_run::{run_state_scenario, CatchUp, StateReport, StateScenario, StateStart};
pub use workload::SiteLoad;

/// The simulated wall clock at virtual time 0 (messages carry it for freshness checks).
pub const SIM_WALL_EPOCH: Duration = Duration::from_millis(1_700_000_000_000);

use bootstrap::Bootstrap;
use measure::Journal;
use messages::Seen;
use node::{lock, Slot};
use queue::Queue;
use record::mix;
use world::World;

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

/// Sync entry tag of a member (see `wire/mod.rs`: `tag u8 (1 member, 2 item)`).
const ENTRY_MEMBER: u8 = 1;
/// Interners the nodes share (see [`Simulation`]'s `interners`).
const INTERNER_SHARDS: usize = 16;
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

/// N drivers, one virtual clock, one in-memory network.
pub struct Simulation {
    seed: u64,
    swim: SwimConfig,
    /// Site names and places, shared by the nodes of one shard (node index modulo
    /// [`INTERNER_SHARDS`]): every decoded identity passes through one, and a single table
    /// for all nodes would have the threads queue on its lock (and on the reference counts
    /// of its places: one table shared by the threads was measured slower). Which shard an
    /// identity comes from changes nothing but memory.
    interners: Vec<Interner>,
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
    /// Set by [`Simulation::set_item_capacity`] for every driver made since.
    item_capacity: Option<usize>,
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
            interners: (0..INTERNER_SHARDS).map(|_| Interner::default()).collect(),
            world: World {
                status: Vec::with_capacity(nodes),
                life: Vec::with_capacity(nodes),
                group: Vec::with_capacity(nodes),
                slow: Vec::with_capacity(nodes),
                net: settings.net,
                link_loss: HashMap::new(),
                recording: true,
                message_log: None,
                count_kinds: false,
                watched: Vec::new(),
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
            item_capacity: None,
        };
        for _ in 0..nodes {
            sim.push_node();
        }
        if settings.start == Start::Converged && nodes > 1 {
            sim.bootstrap = Some(sim.plan_bootstrap());
        }
        Ok(sim)
    }

    fn interner(&self, node: u32) -> &Interner {
        &self.interners[node as usize % INTERNER_SHARDS]
    }

    fn identity(&self, node: u32, life: u32) -> NodeId {
        self.interner(node).node_id(
            &format!("n{node}"),
            NodeAddr::new(node_addr(node)),
            generation_for(life),
        )
    }

    fn new_driver(&self, node: u32, life: u32) -> Driver {
        let seed = mix(mix(self.seed, u64::from(node)), u64::from(life));
        // The simulator studies SWIM's dynamics, not its cryptography: messages keep their
        // layout and replay windows, with unsigned trailers.
        let driver = Driver::new(
            self.identity(node, life),
            self.swim.clone(),
            seed,
            self.interner(node).clone(),
            Authority::Unsigned,
            SIM_WALL_EPOCH,
        );
        match self.item_capacity {
            Some(capacity) => driver
                .with_item_capacity(capacity)
                .expect("checked by set_item_capacity"),
            None => driver,
        }
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
            codec: WireCodec::new(self.interner(node).clone()),
            events: 0,
            retired: DriverTotals::default(),
        }));
        node
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lives_map_onto_generations() {
        for life in [0, 1, 7, u32::MAX - 1] {
            assert_eq!(life_of(generation_for(life)), life);
            // foca's renewals bump the generation without changing the life.
            assert_eq!(life_of(generation_for(life) + 3), life);
        }
    }
}
