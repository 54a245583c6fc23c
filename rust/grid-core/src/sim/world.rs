//! The network as the running nodes meet it: what they share while a window runs
//! ([`World`]: who is running in which life, partitions, slow nodes, loss per link) and the
//! drivers' [`Transmit`] ([`Wire`]) that applies it, with the network model's loss and delay,
//! to every message sent; and the [`Sink`] a driver sends into while it is bootstrapped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;

use super::messages::{read_sent, Seen};
use super::queue::Delivery;
use super::record::{mix, mix_bytes};
use super::state::{TrafficKind, WatchedItem};
use super::{
    life_of, nanos, node_index, Fate, MessageRecord, NetModel, NodeStatus, Traffic, OUTCOME_CUT,
    OUTCOME_LOST, OUTCOME_UNDELIVERABLE, TAG_SEND,
};
use crate::driver::Transmit;
use crate::wire::frame::OVERHEAD;
use crate::wire::WireCodec;

/// What is shared, read-only, by every node while the simulation runs; scenario steps
/// change it between runs.
pub(super) struct World {
    pub(super) status: Vec<NodeStatus>,
    pub(super) life: Vec<u32>,
    /// Partition group; only nodes of the same group reach each other.
    pub(super) group: Vec<u32>,
    /// Extra delay on every message to this node: it handles its input late.
    pub(super) slow: Vec<Duration>,
    pub(super) net: NetModel,
    pub(super) link_loss: HashMap<(u32, u32), f64>,
    pub(super) recording: bool,
    /// The message log's limit, while it is on.
    pub(super) message_log: Option<usize>,
    /// Messages are counted by [`TrafficKind`] (see [`super::state`]).
    pub(super) count_kinds: bool,
    /// Item versions whose arrival at each node is timed.
    pub(super) watched: Vec<WatchedItem>,
}

impl World {
    pub(super) fn is_running(&self, node: u32) -> bool {
        self.status.get(node as usize) == Some(&NodeStatus::Running)
    }

    /// Whether `generation` is the life `node` is running right now.
    pub(super) fn is_alive_life(&self, node: u32, generation: u64) -> bool {
        self.is_running(node) && self.life[node as usize] == life_of(generation)
    }

    pub(super) fn loss(&self, from: u32, to: u32) -> f64 {
        if self.link_loss.is_empty() {
            return self.net.loss;
        }
        self.link_loss
            .get(&(from, to))
            .copied()
            .unwrap_or(self.net.loss)
    }
}

/// The driver's [`Transmit`]: applies the network model and queues what survives.
pub(super) struct Wire<'a> {
    pub(super) world: &'a World,
    pub(super) from: u32,
    pub(super) now: Duration,
    pub(super) rng: &'a mut SmallRng,
    pub(super) seq: &'a mut u64,
    pub(super) trace: &'a mut u64,
    pub(super) traffic: &'a mut Traffic,
    pub(super) outbox: &'a mut Vec<(u32, Delivery)>,
    pub(super) seen: &'a mut Seen,
    pub(super) codec: &'a mut WireCodec,
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
        if world.count_kinds {
            let kind = TrafficKind::of(self.codec, message);
            self.seen.kinds.count_sent(kind, message.len() + OVERHEAD);
        }
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

/// Where a driver's output goes while it receives its initial member list.
#[derive(Default)]
pub(super) struct Sink {
    pub(super) sent: usize,
}

impl Transmit for Sink {
    fn send(&mut self, _to: SocketAddr, _message: &[u8]) {
        self.sent += 1;
    }
}
