//! Measurements: what the simulator gathers after each node ran ([`Journal`], filled by
//! [`collect`], which also routes the node's messages and requeues it), the [`Watch`] that
//! ends a run once a change is learned everywhere, the convergence check, and the
//! [`Simulation`]'s read-outs (records, learning delays, suspicions, refutations, the
//! message log, declarations, traffic, counters and the trace fingerprint).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::node::{lock, DriverTotals, Slot};
use super::record::mix;
use super::world::World;
use super::{
    life_of, nanos, node_index, Change, Declaration, MessageRecord, Record, Refutation, SimError,
    SimStats, Simulation, Suspicion, Traffic,
};
use crate::driver::MemberState;

/// Waits for every live node to learn one change.
pub(super) struct Watch {
    pub(super) subject: u32,
    pub(super) life: u32,
    pub(super) change: Change,
    pub(super) since_ns: u64,
    pub(super) learned: Vec<bool>,
    pub(super) count: usize,
    pub(super) needed: usize,
    pub(super) last_ns: u64,
}

impl Watch {
    pub(super) fn offer(&mut self, observer: u32, record: &Record) {
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

    pub(super) fn done(&self) -> bool {
        self.count >= self.needed
    }
}

pub(super) enum Until {
    Time,
    Learned(Watch),
    Converged { every: Duration, next: Duration },
}

impl Simulation {
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
pub(super) struct Journal {
    pub(super) suspicions: HashMap<(u32, u64, u16), Suspicion>,
    pub(super) refutations: Vec<Refutation>,
    /// In the order collected: window by window, node by node within one.
    pub(super) messages: Vec<MessageRecord>,
    /// Messages the log had no room for.
    pub(super) messages_dropped: u64,
}

/// After a node ran (or acted) and was routed ([`super::queue::route`]): merges what its
/// messages showed into the journal and feeds the watch.
pub(super) fn collect(
    world: &World,
    slots: &[Mutex<Slot>],
    journal: &mut Journal,
    node: u32,
    watch: Option<&mut Watch>,
) {
    {
        let mut slot = lock(&slots[node as usize]);
        if let Some(watch) = watch {
            let start = slot.scanned.min(slot.records.len());
            for record in &slot.records[start..] {
                watch.offer(node, record);
            }
        }
        slot.scanned = slot.records.len();
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
}

pub(super) fn converged(world: &World, slots: &[Mutex<Slot>]) -> bool {
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
