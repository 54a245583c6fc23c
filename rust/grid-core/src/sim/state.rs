//! The state plane in a [`Simulation`]: nodes publish items through their driver's own
//! publish path (its encoder, its item store, its relay queue), and the simulation reads
//! what each store holds, when a watched version reached each node, and each node's
//! traffic by kind of message.
//!
//! None of this changes what a membership-only run does: counting by kind and watching
//! items are off until a scenario turns them on, and neither feeds the trace.

use std::sync::Arc;
use std::time::Duration;

use foca::{Codec, Message};

use super::net::SimError;
use super::node::lock;
use super::Simulation;
use crate::driver::{Driver, MAX_ITEM_CAPACITY};
use crate::lanes::{Item, Lane};
use crate::wire::{
    WireCodec, KIND_DIGEST, KIND_FOCA, KIND_REPAIR, KIND_SYNC_REQUEST, KIND_SYNC_RESPONSE,
    TRAILER_LEN,
};

/// What a datagram does for the state plane, coarser than
/// [`MessageKind`](super::MessageKind): enough to say where a site's bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrafficKind {
    /// foca's probes, acks, gossip, announces and feeds: membership.
    Swim,
    /// foca `Broadcast` messages: items pushed as news.
    Broadcast,
    /// Push/pull sync requests (the sender's member list and own items, where its walk
    /// of the peer's store resumes)...
    SyncRequest,
    /// ...and their answers: the peer's member list and the next part of its store.
    SyncResponse,
    /// Digests of recently stored versions.
    Digest,
    /// Answers to digests: the versions the digest's sender missed.
    Repair,
    /// Everything else: hellos, leaves, conflicts, handshakes.
    Other,
}

impl TrafficKind {
    pub const ALL: [TrafficKind; 7] = [
        TrafficKind::Swim,
        TrafficKind::Broadcast,
        TrafficKind::SyncRequest,
        TrafficKind::SyncResponse,
        TrafficKind::Digest,
        TrafficKind::Repair,
        TrafficKind::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TrafficKind::Swim => "swim",
            TrafficKind::Broadcast => "broadcast",
            TrafficKind::SyncRequest => "sync-request",
            TrafficKind::SyncResponse => "sync-response",
            TrafficKind::Digest => "digest",
            TrafficKind::Repair => "repair",
            TrafficKind::Other => "other",
        }
    }

    /// The kind of a sealed message, read with the drivers' own codec.
    pub(super) fn of(codec: &mut WireCodec, message: &[u8]) -> TrafficKind {
        let unsealed = &message[..message.len().saturating_sub(TRAILER_LEN)];
        let Some((&kind, mut body)) = unsealed.split_first() else {
            return TrafficKind::Other;
        };
        match kind {
            KIND_FOCA => match codec.decode_header(&mut body) {
                Ok(header) if header.message == Message::Broadcast => TrafficKind::Broadcast,
                _ => TrafficKind::Swim,
            },
            KIND_SYNC_REQUEST => TrafficKind::SyncRequest,
            KIND_SYNC_RESPONSE => TrafficKind::SyncResponse,
            KIND_DIGEST => TrafficKind::Digest,
            KIND_REPAIR => TrafficKind::Repair,
            _ => TrafficKind::Other,
        }
    }
}

/// Messages and framed bytes of one kind, sent and received by one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCount {
    pub sent: u64,
    pub sent_bytes: u64,
    pub received: u64,
    pub received_bytes: u64,
}

impl KindCount {
    pub fn add(&mut self, other: &KindCount) {
        self.sent += other.sent;
        self.sent_bytes += other.sent_bytes;
        self.received += other.received;
        self.received_bytes += other.received_bytes;
    }

    /// What was counted since `earlier` (a copy taken before).
    pub fn since(&self, earlier: &KindCount) -> KindCount {
        KindCount {
            sent: self.sent - earlier.sent,
            sent_bytes: self.sent_bytes - earlier.sent_bytes,
            received: self.received - earlier.received,
            received_bytes: self.received_bytes - earlier.received_bytes,
        }
    }
}

/// One node's traffic by [`TrafficKind`], indexed like [`TrafficKind::ALL`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindTraffic(pub [KindCount; 7]);

impl KindTraffic {
    pub fn of(&self, kind: TrafficKind) -> &KindCount {
        &self.0[kind as usize]
    }

    pub(super) fn count_sent(&mut self, kind: TrafficKind, bytes: usize) {
        let count = &mut self.0[kind as usize];
        count.sent += 1;
        count.sent_bytes += bytes as u64;
    }

    pub(super) fn count_received(&mut self, kind: TrafficKind, bytes: usize) {
        let count = &mut self.0[kind as usize];
        count.received += 1;
        count.received_bytes += bytes as u64;
    }

    pub fn add(&mut self, other: &KindTraffic) {
        for (total, count) in self.0.iter_mut().zip(&other.0) {
            total.add(count);
        }
    }

    pub fn since(&self, earlier: &KindTraffic) -> KindTraffic {
        let mut delta = KindTraffic::default();
        for ((out, now), then) in delta.0.iter_mut().zip(&self.0).zip(&earlier.0) {
            *out = now.since(then);
        }
        delta
    }

    pub fn total(&self) -> KindCount {
        let mut total = KindCount::default();
        for count in &self.0 {
            total.add(count);
        }
        total
    }
}

/// A version of one item whose arrival at every node is being timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct WatchedItem {
    pub(super) origin: Arc<str>,
    pub(super) lane: Lane,
    pub(super) key: Arc<str>,
    pub(super) version: u64,
}

/// A node took a watched version (or a newer one) from a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Arrival {
    pub(super) watch: usize,
    pub(super) at: Duration,
}

/// Notes the arrival of `item` at `at` if it is a watched version.
pub(super) fn note_arrival(
    watched: &[WatchedItem],
    item: &Item,
    at: Duration,
    arrivals: &mut Vec<Arrival>,
) {
    for (watch, w) in watched.iter().enumerate() {
        if item.version >= w.version
            && item.lane == w.lane
            && item.key == w.key
            && item.origin == w.origin
        {
            arrivals.push(Arrival { watch, at });
        }
    }
}

/// The site name node `node` runs as.
pub fn site_of(node: u32) -> String {
    format!("n{node}")
}

impl Simulation {
    /// Every node's store holds at most `capacity` item names (as `item_capacity` sets it
    /// for a real node): existing drivers now, and the drivers of nodes added or restarted
    /// later. A mesh with more names than the default needs it, as a real one does.
    pub fn set_item_capacity(&mut self, capacity: usize) -> Result<(), SimError> {
        if !(1..=MAX_ITEM_CAPACITY).contains(&capacity) {
            return Err(SimError::Config(crate::driver::config::ConfigError(
                format!("item capacity must be between 1 and {MAX_ITEM_CAPACITY}, got {capacity}"),
            )));
        }
        self.ensure_ready();
        self.item_capacity = Some(capacity);
        for slot in &self.slots {
            let mut slot = lock(slot);
            if let Some(driver) = slot.driver.take() {
                slot.driver = Some(
                    driver
                        .with_item_capacity(capacity)
                        .expect("capacity checked above"),
                );
            }
        }
        Ok(())
    }

    /// Publishes an item at a running node, now, through its driver's publish path, and
    /// sends what it sends at once (as a real node flushes after publishing). `Ok(false)`:
    /// the node already holds that version or a newer one.
    pub fn publish(
        &mut self,
        node: u32,
        lane: Lane,
        key: &str,
        version: u64,
        payload: &[u8],
    ) -> Result<bool, SimError> {
        self.check_running(node)?;
        self.ensure_ready();
        let mut outcome = Ok(false);
        self.act(node, |driver, now, wire| {
            outcome = driver.publish(lane, key, version, payload);
            driver.flush(now, wire);
        });
        outcome.map_err(SimError::Publish)
    }

    /// The converged start of a mesh: `items` (lane, key, version, payload) published at
    /// running node `site` long ago, as if it published them and every running node
    /// caught up since: every store holds them, and nothing is sent. The encoders and
    /// stores are the drivers' own; only the gossip that would have carried them is left
    /// out.
    pub fn publish_converged<'a>(
        &mut self,
        site: u32,
        items: impl IntoIterator<Item = (Lane, &'a str, u64, &'a [u8])>,
    ) -> Result<(), SimError> {
        self.check_running(site)?;
        self.ensure_ready();
        let mut encoded = Vec::new();
        {
            let mut slot = lock(&self.slots[site as usize]);
            let driver = slot.driver.as_mut().expect("checked running above");
            for (lane, key, version, payload) in items {
                if let Some(item) = driver
                    .publish_converged(lane, key, version, payload)
                    .map_err(SimError::Publish)?
                {
                    encoded.push(item);
                }
            }
        }
        for (node, slot) in self.slots.iter().enumerate() {
            if node == site as usize || !self.world.is_running(node as u32) {
                continue;
            }
            if let Some(driver) = lock(slot).driver.as_mut() {
                for item in &encoded {
                    driver.hold_converged(item);
                }
            }
        }
        Ok(())
    }

    /// The version of `origin`'s item that `node` holds, if it is running and holds one.
    pub fn held_version(
        &self,
        node: u32,
        origin: u32,
        lane: Lane,
        key: &str,
    ) -> Result<Option<u64>, SimError> {
        self.check_node(node)?;
        self.check_node(origin)?;
        let site = site_of(origin);
        Ok(lock(&self.slots[node as usize])
            .driver
            .as_ref()
            .and_then(|driver| driver.held_version(&site, lane, key)))
    }

    /// How many item names `node`'s store holds (0 while it is down).
    pub fn items_held(&self, node: u32) -> Result<usize, SimError> {
        self.check_node(node)?;
        Ok(lock(&self.slots[node as usize])
            .driver
            .as_ref()
            .map_or(0, |driver: &Driver| driver.stats().items_stored))
    }

    /// Counts every message by [`TrafficKind`] from now on (`true`), or stops counting.
    /// Off by default: it costs a decode of every foca header.
    pub fn set_kind_counting(&mut self, on: bool) {
        self.world.count_kinds = on;
    }

    pub fn kind_traffic(&self, node: u32) -> Result<KindTraffic, SimError> {
        self.check_node(node)?;
        Ok(lock(&self.slots[node as usize]).seen.kinds)
    }

    /// Starts timing when each node takes this version (or a newer one) of `origin`'s item
    /// from a peer; returns the watch's number for [`Simulation::item_arrivals`].
    pub fn watch_item(
        &mut self,
        origin: u32,
        lane: Lane,
        key: &str,
        version: u64,
    ) -> Result<usize, SimError> {
        self.check_node(origin)?;
        self.world.watched.push(WatchedItem {
            origin: Arc::from(site_of(origin)),
            lane,
            key: Arc::from(key),
            version,
        });
        Ok(self.world.watched.len() - 1)
    }

    /// For each node, when it first took the watched version from a peer (`None`: not
    /// yet, or never from a peer, as its origin).
    pub fn item_arrivals(&self, watch: usize) -> Vec<Option<Duration>> {
        self.slots
            .iter()
            .map(|slot| {
                lock(slot)
                    .seen
                    .arrivals
                    .iter()
                    .filter(|arrival| arrival.watch == watch)
                    .map(|arrival| arrival.at)
                    .min()
            })
            .collect()
    }

    /// Stops every watch and forgets their arrivals (watch numbers start again at 0).
    pub fn clear_watches(&mut self) {
        self.world.watched.clear();
        for slot in &self.slots {
            lock(slot).seen.arrivals.clear();
        }
    }
}
