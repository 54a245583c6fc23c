//! `grid._native.Simulation`: the deterministic SWIM simulator, driven from Python.
//!
//! Scenarios (`grid.simbench`) configure events and run the clock; everything heavy (the
//! drivers, the network, the records and their aggregation) stays in Rust, and only compact
//! results (one number per node at most) cross into Python. Calls that run the clock
//! release the GIL.

use std::time::Duration;

use grid_core::driver::config::SwimConfig;
use grid_core::driver::FOCA_ERROR_KINDS;
use grid_core::sim::{
    Change, Jitter, Learned, MessageRecord, NetModel, SimError, SimSettings,
    Simulation as CoreSimulation, Start, Traffic, PARALLEL_WORK,
};
use pyo3::import_exception;
use pyo3::prelude::*;
use pyo3::types::PyDict;

import_exception!(grid.errors, SimulationError);

pub(crate) fn sim_error(err: SimError) -> PyErr {
    SimulationError::new_err(err.to_string())
}

fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        SimulationError::new_err(format!(
            "{name} must be a non-negative number of seconds, got {value}"
        ))
    })
}

pub(crate) fn positive_seconds(name: &str, value: f64) -> PyResult<Duration> {
    let duration = seconds(name, value)?;
    if duration.is_zero() {
        return Err(SimulationError::new_err(format!(
            "{name} must be a positive number of seconds, got {value}"
        )));
    }
    Ok(duration)
}

fn jitter(kind: &str, value: Duration) -> PyResult<Jitter> {
    let make = match kind {
        "uniform" => Jitter::Uniform,
        "exponential" => Jitter::Exponential,
        other => {
            return Err(SimulationError::new_err(format!(
                "jitter_kind must be 'uniform' or 'exponential', got {other:?}"
            )))
        }
    };
    Ok(if value.is_zero() {
        Jitter::None
    } else {
        make(value)
    })
}

/// The SWIM timing and the network model from a simulation's keyword arguments, checked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn swim_and_net(
    probe_interval: f64,
    suspicion_timeout: f64,
    gossip_nodes: usize,
    push_pull_interval: f64,
    delay: f64,
    jitter: f64,
    jitter_kind: &str,
    loss: f64,
) -> PyResult<(SwimConfig, NetModel)> {
    let swim = SwimConfig {
        probe_interval: positive_seconds("probe_interval", probe_interval)?,
        suspicion_timeout: positive_seconds("suspicion_timeout", suspicion_timeout)?,
        gossip_nodes,
        push_pull_interval: positive_seconds("push_pull_interval", push_pull_interval)?,
    };
    let net = NetModel {
        delay: positive_seconds("delay", delay)?,
        jitter: self::jitter(jitter_kind, seconds("jitter", jitter)?)?,
        loss,
    };
    Ok((swim, net))
}

fn change(name: &str) -> PyResult<Change> {
    match name {
        "up" => Ok(Change::Up),
        "down" => Ok(Change::Down),
        other => Err(SimulationError::new_err(format!(
            "change must be 'up' or 'down', got {other:?}"
        ))),
    }
}

/// (time, target, incarnation, suspected by, target was alive).
type SuspicionTuple = (f64, u32, u16, u32, bool);

/// (sent at, from, to, kind, fate, arrives at, about, [(subject, incarnation, state)]).
type MessageTuple = (
    f64,
    u32,
    Option<u32>,
    &'static str,
    &'static str,
    Option<f64>,
    Option<u32>,
    Vec<(u32, u16, &'static str)>,
);

fn message_tuple(message: MessageRecord) -> MessageTuple {
    (
        message.sent_at.as_secs_f64(),
        message.from,
        message.to,
        message.kind.name(),
        message.fate.name(),
        message.arrives_at.map(|at| at.as_secs_f64()),
        message.about,
        message
            .updates
            .iter()
            .map(|u| (u.subject, u.incarnation, u.state.name()))
            .collect(),
    )
}

/// (time, subject, what was learned, decided by the observer itself, a false positive).
type RecordTuple = (f64, u32, &'static str, bool, bool);

fn learned_name(learned: Learned) -> &'static str {
    match learned {
        Learned::Up => "up",
        Learned::Down => "down",
        Learned::Left => "left",
        Learned::Renamed => "renamed",
    }
}

fn as_seconds(list: Vec<Duration>) -> Vec<f64> {
    list.into_iter().map(|d| d.as_secs_f64()).collect()
}

/// N SWIM drivers on one virtual clock over an in-memory network.
#[pyclass(module = "grid._native")]
pub struct Simulation {
    inner: CoreSimulation,
}

#[pymethods]
impl Simulation {
    #[new]
    #[pyo3(signature = (
        nodes,
        seed = 0,
        *,
        probe_interval = 5.0,
        suspicion_timeout = 10.0,
        gossip_nodes = 3,
        push_pull_interval = 30.0,
        delay = 0.005,
        jitter = 0.005,
        jitter_kind = "exponential",
        loss = 0.0,
        converged = true,
        threads = None,
        parallel_work = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        nodes: usize,
        seed: u64,
        probe_interval: f64,
        suspicion_timeout: f64,
        gossip_nodes: usize,
        push_pull_interval: f64,
        delay: f64,
        jitter: f64,
        jitter_kind: &str,
        loss: f64,
        converged: bool,
        threads: Option<usize>,
        parallel_work: Option<u64>,
    ) -> PyResult<Simulation> {
        let threads = threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        if threads == 0 {
            return Err(SimulationError::new_err("threads must be at least 1"));
        }
        let (swim, net) = swim_and_net(
            probe_interval,
            suspicion_timeout,
            gossip_nodes,
            push_pull_interval,
            delay,
            jitter,
            jitter_kind,
            loss,
        )?;
        let settings = SimSettings {
            swim,
            net,
            start: if converged {
                Start::Converged
            } else {
                Start::Isolated
            },
            threads,
            parallel_work: parallel_work.unwrap_or(PARALLEL_WORK),
        };
        let inner = CoreSimulation::new(nodes, seed, settings).map_err(sim_error)?;
        Ok(Simulation { inner })
    }

    /// Virtual seconds since the start. A converged cluster forms during the first probe
    /// interval, so reading the clock first hands out any pending member lists.
    #[getter]
    fn now(&mut self, py: Python<'_>) -> f64 {
        py.detach(|| self.inner.now()).as_secs_f64()
    }

    /// Nodes in the simulation, whatever their state.
    #[getter]
    fn nodes(&self) -> usize {
        self.inner.len()
    }

    /// The SWIM settings every node runs with, and what they derive.
    fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let swim = self.inner.swim();
        let net = self.inner.net();
        let dict = PyDict::new(py);
        dict.set_item("probe_interval", swim.probe_interval.as_secs_f64())?;
        dict.set_item("suspicion_timeout", swim.suspicion_timeout.as_secs_f64())?;
        dict.set_item("gossip_nodes", swim.gossip_nodes)?;
        dict.set_item("gossip_interval", swim.gossip_interval().as_secs_f64())?;
        dict.set_item("push_pull_interval", swim.push_pull_interval.as_secs_f64())?;
        dict.set_item(
            "push_pull_period",
            swim.push_pull_period(self.inner.len()).as_secs_f64(),
        )?;
        dict.set_item(
            "max_transmissions",
            grid_core::driver::config::max_transmissions(self.inner.len()).get(),
        )?;
        dict.set_item("delay", net.delay.as_secs_f64())?;
        let (kind, spread) = match net.jitter {
            Jitter::None => ("none", Duration::ZERO),
            Jitter::Uniform(d) => ("uniform", d),
            Jitter::Exponential(d) => ("exponential", d),
        };
        dict.set_item("jitter_kind", kind)?;
        dict.set_item("jitter", spread.as_secs_f64())?;
        dict.set_item("loss", net.loss)?;
        Ok(dict)
    }

    /// Nodes still waiting for their initial member list.
    #[getter]
    fn pending_bootstrap(&self) -> usize {
        self.inner.pending_bootstrap()
    }

    /// Hands the next `max_nodes` nodes (all by default) their initial member lists;
    /// returns how many still wait. Lets a caller show progress on a large cluster.
    #[pyo3(signature = (max_nodes = None))]
    fn bootstrap(&mut self, py: Python<'_>, max_nodes: Option<usize>) -> usize {
        py.detach(|| self.inner.bootstrap(max_nodes.unwrap_or(usize::MAX)))
    }

    /// Adds a node that knows nobody yet; returns its index.
    fn add_node(&mut self, py: Python<'_>) -> PyResult<u32> {
        py.detach(|| self.inner.add_node()).map_err(sim_error)
    }

    /// The node announces itself to the seeds (node indices) and syncs with one of them.
    fn join(&mut self, py: Python<'_>, node: u32, seeds: Vec<u32>) -> PyResult<()> {
        py.detach(|| self.inner.join(node, &seeds))
            .map_err(sim_error)
    }

    /// Stops the node dead: it handles nothing more and messages to it are lost.
    fn crash(&mut self, py: Python<'_>, node: u32) -> PyResult<()> {
        py.detach(|| self.inner.crash(node)).map_err(sim_error)
    }

    /// Brings a crashed or departed node back with a higher generation, joining the seeds.
    fn restart(&mut self, py: Python<'_>, node: u32, seeds: Vec<u32>) -> PyResult<()> {
        py.detach(|| self.inner.restart(node, &seeds))
            .map_err(sim_error)
    }

    /// The node leaves on purpose: it tells its members, then stops.
    fn leave(&mut self, py: Python<'_>, node: u32) -> PyResult<()> {
        py.detach(|| self.inner.leave(node)).map_err(sim_error)
    }

    /// Every message to the node reaches it `delay` seconds late from now on (0 = normal).
    fn set_slow(&mut self, py: Python<'_>, node: u32, delay: f64) -> PyResult<()> {
        let delay = seconds("delay", delay)?;
        py.detach(|| self.inner.set_slow(node, delay))
            .map_err(sim_error)
    }

    /// Nodes of different groups cannot reach each other; nodes in no group form one more.
    fn partition(&mut self, py: Python<'_>, groups: Vec<Vec<u32>>) -> PyResult<()> {
        py.detach(|| self.inner.partition(&groups))
            .map_err(sim_error)
    }

    /// Ends every partition.
    fn heal(&mut self, py: Python<'_>) {
        py.detach(|| self.inner.heal());
    }

    /// Changes the network model for messages sent from now on; omitted parts stay.
    #[pyo3(signature = (*, delay = None, jitter = None, jitter_kind = None, loss = None))]
    fn set_network(
        &mut self,
        py: Python<'_>,
        delay: Option<f64>,
        jitter: Option<f64>,
        jitter_kind: Option<&str>,
        loss: Option<f64>,
    ) -> PyResult<()> {
        let mut net = self.inner.net().clone();
        if let Some(delay) = delay {
            net.delay = positive_seconds("delay", delay)?;
        }
        if jitter.is_some() || jitter_kind.is_some() {
            let (kind, spread) = match net.jitter {
                Jitter::None => ("exponential", Duration::ZERO),
                Jitter::Uniform(d) => ("uniform", d),
                Jitter::Exponential(d) => ("exponential", d),
            };
            let spread = jitter.map_or(Ok(spread), |j| seconds("jitter", j))?;
            net.jitter = self::jitter(jitter_kind.unwrap_or(kind), spread)?;
        }
        if let Some(loss) = loss {
            net.loss = loss;
        }
        py.detach(|| self.inner.set_net(net)).map_err(sim_error)
    }

    /// Loss probability on both directions of the link between two nodes.
    fn set_link_loss(&mut self, py: Python<'_>, a: u32, b: u32, loss: f64) -> PyResult<()> {
        py.detach(|| self.inner.set_link_loss(a, b, loss))
            .map_err(sim_error)
    }

    /// Whether membership changes are recorded from now on (off saves memory on runs that
    /// only look at convergence).
    fn set_recording(&mut self, on: bool) {
        self.inner.set_recording(on);
    }

    /// Keeps every message the network carries from now on, up to `limit` of them (later
    /// ones are counted by `messages_dropped`), or stops keeping them. Either way the log
    /// starts empty. Off by default: it costs a decode of every message.
    #[pyo3(signature = (on, limit = 100_000))]
    fn set_message_log(&mut self, on: bool, limit: usize) {
        self.inner.set_message_log(on.then_some(limit));
    }

    /// Logged messages sent at or after `since` and before `until`, in sending order:
    /// (sent at, from, to, kind, fate, arrives at, about, updates). `to` is None for an
    /// address that is no node; `fate` is "delivered", "lost", "cut" or "undeliverable";
    /// `about` is the member a ping-req, indirect ping, indirect ack or forwarded ack names;
    /// `updates` are the membership updates carried, as (subject, incarnation, state).
    #[pyo3(signature = (since = 0.0, until = None))]
    fn messages(
        &self,
        py: Python<'_>,
        since: f64,
        until: Option<f64>,
    ) -> PyResult<Vec<MessageTuple>> {
        let since = seconds("since", since)?;
        let until = until.map_or(Ok(Duration::MAX), |u| seconds("until", u))?;
        Ok(py
            .detach(|| self.inner.messages(since, until))
            .into_iter()
            .map(message_tuple)
            .collect())
    }

    /// Messages the log had no room for since it was last set.
    fn messages_dropped(&self) -> u64 {
        self.inner.messages_dropped()
    }

    /// Refutations at or after `since`: (time, node, its new incarnation).
    #[pyo3(signature = (since = 0.0))]
    fn refutations(&self, since: f64) -> PyResult<Vec<(f64, u32, u16)>> {
        let since = seconds("since", since)?;
        Ok(self
            .inner
            .refutations(since)
            .into_iter()
            .map(|r| (r.at.as_secs_f64(), r.node, r.incarnation))
            .collect())
    }

    /// What `observer` learned, in order: (time, subject, "up" | "down" | "left" |
    /// "renamed", decided by itself, a false positive).
    fn records(&self, observer: u32) -> PyResult<Vec<RecordTuple>> {
        Ok(self
            .inner
            .records(observer)
            .map_err(sim_error)?
            .into_iter()
            .map(|r| {
                (
                    r.at().as_secs_f64(),
                    r.subject,
                    learned_name(r.learned),
                    r.own,
                    r.false_positive,
                )
            })
            .collect())
    }

    /// Every member `node` knows right now: (member, incarnation, "alive" | "suspect" |
    /// "down" | "left"); empty while it is not running.
    fn member_view(&self, node: u32) -> PyResult<Vec<(u32, u16, &'static str)>> {
        Ok(self
            .inner
            .member_view(node)
            .map_err(sim_error)?
            .into_iter()
            .map(|(member, incarnation, state, _)| (member, incarnation, state.name()))
            .collect())
    }

    /// Handles every event up to and including virtual time `t`.
    fn run_until(&mut self, py: Python<'_>, t: f64) -> PyResult<()> {
        let t = seconds("t", t)?;
        py.detach(|| self.inner.run_until(t)).map_err(sim_error)
    }

    /// Runs until every running node other than `subject` has learned, at or after
    /// `since`, that the subject's current life is `change` ("up" or "down"), or until
    /// `deadline`. Returns when the last of them learned it, or None.
    fn run_until_learned(
        &mut self,
        py: Python<'_>,
        subject: u32,
        change: &str,
        since: f64,
        deadline: f64,
    ) -> PyResult<Option<f64>> {
        let change = self::change(change)?;
        let since = seconds("since", since)?;
        let deadline = seconds("deadline", deadline)?;
        py.detach(|| {
            self.inner
                .run_until_learned(subject, change, since, deadline)
        })
        .map(|done| done.map(|d| d.as_secs_f64()))
        .map_err(sim_error)
    }

    /// Runs until every running node sees every other alive in its current identity
    /// (checked every `every` seconds) or until `deadline`. Returns the first check that
    /// found it so, or None.
    #[pyo3(signature = (deadline, every = 0.1))]
    fn run_until_converged(
        &mut self,
        py: Python<'_>,
        deadline: f64,
        every: f64,
    ) -> PyResult<Option<f64>> {
        let deadline = seconds("deadline", deadline)?;
        let every = positive_seconds("every", every)?;
        py.detach(|| self.inner.run_until_converged(deadline, every))
            .map(|done| done.map(|d| d.as_secs_f64()))
            .map_err(sim_error)
    }

    fn is_converged(&mut self, py: Python<'_>) -> bool {
        py.detach(|| self.inner.is_converged())
    }

    /// "running", "crashed" or "left".
    fn status(&self, node: u32) -> PyResult<&'static str> {
        self.inner.status(node).map(|s| s.name()).map_err(sim_error)
    }

    /// The node's current generation, or None if it is not running.
    fn generation(&self, node: u32) -> PyResult<Option<u64>> {
        self.inner.generation(node).map_err(sim_error)
    }

    /// Active members (alive or suspect) the node knows, itself excluded.
    fn members_of(&mut self, py: Python<'_>, node: u32) -> PyResult<usize> {
        py.detach(|| self.inner.members_of(node)).map_err(sim_error)
    }

    /// When each running node other than `subject` first learned (at or after `since`)
    /// that the subject's current life is `change`: the delays after `since`, sorted, of
    /// those who learned it, and how many nodes there were to learn it.
    fn learned_times(
        &self,
        py: Python<'_>,
        subject: u32,
        change: &str,
        since: f64,
    ) -> PyResult<(Vec<f64>, usize)> {
        let change = self::change(change)?;
        let since = seconds("since", since)?;
        py.detach(|| self.inner.learned_times(subject, change, since))
            .map(|(delays, observers)| (as_seconds(delays), observers))
            .map_err(sim_error)
    }

    /// When `observer` first learned (at or after `since`) that each other node is up:
    /// delays after `since`, sorted, one per node.
    fn learned_by(&self, observer: u32, since: f64) -> PyResult<Vec<f64>> {
        let since = seconds("since", since)?;
        self.inner
            .learned_by(observer, since)
            .map(as_seconds)
            .map_err(sim_error)
    }

    /// Suspicion episodes first seen at or after `since`:
    /// (time, target, incarnation, suspected by, target was alive).
    #[pyo3(signature = (since = 0.0))]
    fn suspicions(&self, since: f64) -> PyResult<Vec<SuspicionTuple>> {
        let since = seconds("since", since)?;
        Ok(self
            .inner
            .suspicions(since)
            .into_iter()
            .map(|s| {
                (
                    s.first_at.as_secs_f64(),
                    s.target,
                    s.incarnation,
                    s.by,
                    s.target_alive,
                )
            })
            .collect())
    }

    /// Every own down declaration at or after `since`:
    /// (time, declared by, target, false positive).
    #[pyo3(signature = (since = 0.0))]
    fn declarations(&self, py: Python<'_>, since: f64) -> PyResult<Vec<(f64, u32, u32, bool)>> {
        let since = seconds("since", since)?;
        Ok(py
            .detach(|| self.inner.declarations(since))
            .into_iter()
            .map(|d| (d.at.as_secs_f64(), d.by, d.target, d.false_positive))
            .collect())
    }

    /// Per-node counters, one list each: sent, sent_bytes, received, received_bytes, lost,
    /// cut (by a partition) and undeliverable. Bytes count as framed (33-byte overhead).
    fn traffic<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let per_node: Vec<Traffic> = (0..self.inner.len() as u32)
            .map(|node| self.inner.traffic(node).unwrap_or_default())
            .collect();
        let dict = PyDict::new(py);
        let column = |f: fn(&Traffic) -> u64| per_node.iter().map(f).collect::<Vec<u64>>();
        dict.set_item("sent", column(|t| t.sent))?;
        dict.set_item("sent_bytes", column(|t| t.sent_bytes))?;
        dict.set_item("received", column(|t| t.received))?;
        dict.set_item("received_bytes", column(|t| t.received_bytes))?;
        dict.set_item("lost", column(|t| t.lost))?;
        dict.set_item("cut", column(|t| t.cut))?;
        dict.set_item("undeliverable", column(|t| t.undeliverable))?;
        Ok(dict)
    }

    /// Counters over the whole simulation (events, windows, foca errors by kind, ...).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = py.detach(|| self.inner.stats());
        let dict = PyDict::new(py);
        dict.set_item("events", stats.events)?;
        dict.set_item("windows", stats.windows)?;
        dict.set_item("parallel_windows", stats.parallel_windows)?;
        dict.set_item("bad_messages", stats.drivers.bad_messages)?;
        dict.set_item("in_flight", stats.in_flight)?;
        dict.set_item("records", stats.records)?;
        dict.set_item("suspicions", stats.suspicions)?;
        dict.set_item("running", stats.running)?;
        dict.set_item("bootstrap_sends", stats.bootstrap_sends)?;
        dict.set_item("syncs_started", stats.drivers.syncs_started)?;
        dict.set_item("syncs_completed", stats.drivers.syncs_completed)?;
        dict.set_item("sync_entries_known", stats.drivers.sync_entries_known)?;
        dict.set_item("sync_members_left_out", stats.drivers.sync_members_left_out)?;
        dict.set_item("probes_failed", stats.drivers.probes_failed)?;
        dict.set_item("late_answers", stats.drivers.late_answers)?;
        dict.set_item("suspicion_notices", stats.drivers.suspicion_notices)?;
        dict.set_item("refutations", stats.drivers.refutations)?;
        dict.set_item(
            "stale_suspicion_timers",
            stats.drivers.stale_suspicion_timers,
        )?;
        dict.set_item("local_health_max", stats.local_health_max)?;
        dict.set_item("updates_backlog", stats.updates_backlog)?;
        dict.set_item("updates_backlog_max", stats.updates_backlog_max)?;
        dict.set_item("sent", stats.traffic.sent)?;
        dict.set_item("sent_bytes", stats.traffic.sent_bytes)?;
        dict.set_item("received", stats.traffic.received)?;
        dict.set_item("received_bytes", stats.traffic.received_bytes)?;
        dict.set_item("lost", stats.traffic.lost)?;
        dict.set_item("cut", stats.traffic.cut)?;
        dict.set_item("undeliverable", stats.traffic.undeliverable)?;
        for (kind, count) in FOCA_ERROR_KINDS.iter().zip(stats.drivers.foca_errors) {
            dict.set_item(format!("foca_error_{kind}"), count)?;
        }
        Ok(dict)
    }

    /// A fingerprint of the whole event trace: equal seeds and steps give equal hashes.
    fn trace_hash(&self) -> u64 {
        self.inner.trace_hash()
    }

    fn __repr__(&self) -> String {
        format!(
            "Simulation(nodes={}, pending_bootstrap={})",
            self.inner.len(),
            self.inner.pending_bootstrap()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Simulation>()?;
    Ok(())
}
