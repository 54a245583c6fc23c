//! One node of the cluster: everything that belongs to it ([`Slot`]: its driver, inbox,
//! random generator, trace, records and counters, [`DriverTotals`] over its lives), and how
//! it runs the events of a window in order ([`advance`]), turning driver events into
//! records ([`note`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::SmallRng;

use super::messages::Seen;
use super::queue::Delivery;
use super::record::mix;
use super::state::{note_arrival, TrafficKind};
use super::world::{Wire, World};
use super::{nanos, node_index, Learned, Record, Traffic, TAG_EVENT, TAG_MESSAGE, TAG_TIMER};
use crate::driver::{Driver, DriverStats, Event, FOCA_ERROR_KINDS};
use crate::wire::frame::OVERHEAD;
use crate::wire::WireCodec;

/// Everything that belongs to one node.
pub(super) struct Slot {
    pub(super) driver: Option<Driver>,
    pub(super) inbox: BinaryHeap<Reverse<Delivery>>,
    pub(super) rng: SmallRng,
    pub(super) seq: u64,
    pub(super) trace: u64,
    pub(super) records: Vec<Record>,
    /// Records already looked at by the running watch.
    pub(super) scanned: usize,
    pub(super) outbox: Vec<(u32, Delivery)>,
    pub(super) seen: Seen,
    pub(super) traffic: Traffic,
    pub(super) codec: WireCodec,
    pub(super) events: u64,
    /// What the drivers of this node's earlier lives counted.
    pub(super) retired: DriverTotals,
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
    /// Syncs sent without members because the two views agreed.
    pub sync_members_left_out: u64,
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
            sync_members_left_out: stats.sync_members_left_out,
            probes_failed: stats.probes_failed,
            late_answers: stats.late_answers,
            suspicion_notices: stats.suspicion_notices,
            refutations: stats.refutations,
            stale_suspicion_timers: stats.stale_suspicion_timers,
        }
    }
}

impl DriverTotals {
    pub(super) fn merge(&mut self, other: &DriverTotals) {
        for (total, n) in self.foca_errors.iter_mut().zip(other.foca_errors) {
            *total += n;
        }
        self.bad_messages += other.bad_messages;
        self.syncs_started += other.syncs_started;
        self.syncs_completed += other.syncs_completed;
        self.sync_entries_known += other.sync_entries_known;
        self.sync_members_left_out += other.sync_members_left_out;
        self.probes_failed += other.probes_failed;
        self.late_answers += other.late_answers;
        self.suspicion_notices += other.suspicion_notices;
        self.refutations += other.refutations;
        self.stale_suspicion_timers += other.stale_suspicion_timers;
    }
}

impl Slot {
    pub(super) fn next_time(&self) -> Option<Duration> {
        let timer = self.driver.as_ref().and_then(Driver::next_deadline);
        let message = self.inbox.peek().map(|Reverse(d)| d.at);
        match (timer, message) {
            (Some(t), Some(m)) => Some(t.min(m)),
            (t, m) => t.or(m),
        }
    }

    /// Roughly how many member-list scans the node's events before `end` cost: one per
    /// event, plus one per member entry a message may carry (about 28 bytes each).
    pub(super) fn work_before(&self, end: Duration) -> u64 {
        let messages: u64 = self
            .inbox
            .iter()
            .filter(|Reverse(d)| d.at < end)
            .map(|Reverse(d)| 1 + d.message.len() as u64 / 28)
            .sum();
        messages + 1
    }

    pub(super) fn retire_driver(&mut self) {
        if let Some(driver) = self.driver.take() {
            self.retired.merge(&DriverTotals::from(&driver.stats()));
        }
        self.inbox.clear();
    }
}

pub(super) fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Turns a driver event into a record (and into the trace).
pub(super) fn note(
    event: Event,
    at: Duration,
    own: bool,
    world: &World,
    trace: &mut u64,
    records: &mut Vec<Record>,
    seen: &mut Seen,
) {
    let (learned, id) = match event {
        Event::MemberUp(id) => (Learned::Up, id),
        Event::MemberDown(id) => (Learned::Down, id),
        Event::MemberLeft(id) => (Learned::Left, id),
        Event::MemberRenamed { current, .. } => (Learned::Renamed, current),
        Event::Item(item) => {
            if !world.watched.is_empty() {
                note_arrival(&world.watched, &item, at, &mut seen.arrivals);
            }
            return;
        }
        Event::NameConflict { .. } | Event::VersionRefused { .. } => return,
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
pub(super) fn advance(slot: &mut Slot, node: u32, world: &World, end: Duration) {
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
            if world.count_kinds {
                let kind = TrafficKind::of(codec, &delivery.message);
                seen.kinds
                    .count_received(kind, delivery.message.len() + OVERHEAD);
            }
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
            note(event, at, delivery.is_none(), world, trace, records, seen);
        }
    }
}
