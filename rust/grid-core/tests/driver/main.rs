//! The sans-IO driver, run as a small cluster over an in-memory network on a virtual clock.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use foca::{Codec, Header, Member, Message, State};
use grid_core::driver::config::SwimConfig;
use grid_core::driver::DriverStats;
use grid_core::driver::{
    Driver, Event, MemberState, Transmit, CATCH_UP_PAUSE, FOCA_ERROR_KINDS, MAX_CATCH_UP_ROUNDS,
    MAX_ITEM_CAPACITY, MAX_SYNC_CHUNKS, SIGNED_ANSWER_CHUNKS, SYNC_ANSWER_WAIT,
};
use grid_core::identity::{Interner, NodeId};
use grid_core::lanes::relay::WINDOW_ITEMS;
use grid_core::lanes::repair::{Digest, REPAIR_INTERVAL, REPAIR_SETTLE, REPAIR_WINDOW};
use grid_core::lanes::{Lane, PublishError};
use grid_core::wire::session::MESSAGE_KINDS;
use grid_core::wire::versions::ProtocolRange;
use grid_core::wire::{
    WireCodec, KIND_DIGEST, KIND_FOCA, KIND_HELLO, KIND_LEAVE, KIND_REPAIR, KIND_SYNC_REQUEST,
    KIND_SYNC_RESPONSE, MAX_MESSAGE_LEN, MAX_UNSEALED_LEN, SESSION_FORM,
};
use proptest::prelude::*;

#[path = "../support/mod.rs"]
mod support;
use support::{forge, Issued, TestCa, WALL};

const TICK: Duration = Duration::from_millis(10);

fn config() -> SwimConfig {
    SwimConfig {
        probe_interval: Duration::from_millis(200),
        suspicion_timeout: Duration::from_millis(600),
        gossip_nodes: 3,
        push_pull_interval: Duration::from_secs(2),
    }
}

fn addr(i: usize) -> SocketAddr {
    format!("127.0.0.1:{}", 7000 + i).parse().unwrap()
}

#[derive(Default)]
struct Outbox {
    messages: Vec<(SocketAddr, Vec<u8>)>,
}

impl Transmit for Outbox {
    fn send(&mut self, to: SocketAddr, message: &[u8]) {
        assert!(
            message.len() <= MAX_MESSAGE_LEN,
            "{} bytes exceed one frame",
            message.len()
        );
        self.messages.push((to, message.to_vec()));
    }
}

/// A message and where it goes.
type Datagram = (SocketAddr, Vec<u8>);

struct Cluster {
    ca: TestCa,
    /// Each site's certificate and key, so a test can sign as the site does.
    issued: HashMap<String, Issued>,
    now: Duration,
    nodes: HashMap<SocketAddr, Driver>,
    crashed: HashSet<SocketAddr>,
    events: HashMap<SocketAddr, Vec<Event>>,
    interner: Interner,
    /// Every message delivered, for replaying mutated copies.
    captured: Vec<Vec<u8>>,
    /// The first messages delivered, with their destination, for replaying as they were.
    wire: Vec<(SocketAddr, Vec<u8>)>,
    /// The settings of nodes added from now on.
    swim: SwimConfig,
    /// Every n-th datagram to this node is lost.
    lossy: Option<(SocketAddr, usize)>,
    sent_to_lossy: usize,
    /// Gossip (foca) messages to this node holding these bytes are lost.
    deaf_to: Option<(SocketAddr, Vec<u8>)>,
    /// Messages of any kind to this node holding these bytes are lost.
    blocked: Option<(SocketAddr, Vec<u8>)>,
    /// Sync requests to this node are lost: it syncs only by the requests it starts.
    requests_lost_to: Option<SocketAddr>,
    /// The next this many messages of this kind (either form), to anyone, are lost.
    lose_kind: Option<(u8, usize)>,
    /// Messages of this kind are held back here until a test delivers them.
    held: Option<(u8, Vec<Datagram>)>,
    /// The first datagram of this kind to this node in each batch is lost (the first chunk
    /// of every answer it is sent).
    first_lost: Option<(SocketAddr, u8)>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            ca: TestCa::new(),
            issued: HashMap::new(),
            now: Duration::from_secs(1),
            nodes: HashMap::new(),
            crashed: HashSet::new(),
            events: HashMap::new(),
            interner: Interner::default(),
            captured: Vec::new(),
            wire: Vec::new(),
            swim: config(),
            lossy: None,
            sent_to_lossy: 0,
            deaf_to: None,
            blocked: None,
            requests_lost_to: None,
            lose_kind: None,
            held: None,
            first_lost: None,
        }
    }

    fn add(&mut self, i: usize, generation: u64) -> SocketAddr {
        self.add_as(&format!("site-{i}"), i, generation)
    }

    /// Adds nodes `0..n` of `generation`; every one but the first joins through the first.
    fn add_joined(&mut self, n: usize, generation: u64) -> Vec<SocketAddr> {
        let addrs: Vec<_> = (0..n).map(|i| self.add(i, generation)).collect();
        for at in &addrs[1..] {
            self.join(*at, addrs[0]);
        }
        addrs
    }

    /// Makes the node at `at` speak only `range` (a release before or after this one).
    fn speaking(&mut self, at: SocketAddr, range: ProtocolRange) {
        let driver = self.nodes.remove(&at).unwrap().with_protocols(range);
        self.nodes.insert(at, driver);
    }

    fn add_as(&mut self, site: &str, i: usize, generation: u64) -> SocketAddr {
        let at = addr(i);
        let id = NodeId::new(Arc::from(site), at, generation);
        let driver = Driver::new(
            id,
            self.swim.clone(),
            i as u64 * 7919 + generation,
            self.interner.clone(),
            self.authority(site),
            WALL,
        );
        self.nodes.insert(at, driver);
        self.crashed.remove(&at);
        at
    }

    /// What signs for `site`: the same certificate and key every time.
    fn authority(&mut self, site: &str) -> grid_core::identity::auth::Authority {
        let ca = &self.ca;
        let issued = self
            .issued
            .entry(site.to_owned())
            .or_insert_with(|| ca.issue(site))
            .clone();
        self.ca.authority_of(site, issued)
    }

    /// Wall-clock milliseconds now, as the drivers see it.
    fn wall_ms(&self) -> u64 {
        (WALL + self.now).as_millis() as u64
    }

    fn deliver_one(&mut self, to: SocketAddr, message: &[u8]) {
        let mut out = Outbox::default();
        let now = self.now;
        self.nodes
            .get_mut(&to)
            .unwrap()
            .handle_datagram(now, message, &mut out);
        self.deliver(out);
    }

    fn join(&mut self, at: SocketAddr, seed: SocketAddr) {
        let mut out = Outbox::default();
        let now = self.now;
        self.nodes
            .get_mut(&at)
            .unwrap()
            .join(now, &[seed], &mut out);
        self.deliver(out);
    }

    fn publish(
        &mut self,
        at: SocketAddr,
        lane: Lane,
        key: &str,
        version: u64,
        payload: &[u8],
    ) -> bool {
        let accepted = self
            .nodes
            .get_mut(&at)
            .unwrap()
            .publish(lane, key, version, payload)
            .unwrap();
        let mut out = Outbox::default();
        let now = self.now;
        self.nodes.get_mut(&at).unwrap().flush(now, &mut out);
        self.deliver(out);
        accepted
    }

    /// `count` state items `provider/00000`... at version 1 from `at`, published without
    /// a flush: they go out with the node's next messages.
    fn publish_providers(&mut self, at: SocketAddr, count: usize, payload: &[u8]) {
        let node = self.nodes.get_mut(&at).unwrap();
        for k in 0..count {
            node.publish(Lane::State, &format!("provider/{k:05}"), 1, payload)
                .unwrap();
        }
    }

    /// `at` signs and verifies with `authority` from now on (a renewal in place); what
    /// it sends is delivered.
    fn renew(&mut self, at: SocketAddr, authority: grid_core::identity::auth::Authority) {
        let mut out = Outbox::default();
        let now = self.now;
        self.nodes
            .get_mut(&at)
            .unwrap()
            .renew(now, authority, &mut out)
            .unwrap();
        self.deliver(out);
    }

    fn leave(&mut self, at: SocketAddr) {
        let mut out = Outbox::default();
        let now = self.now;
        self.nodes.get_mut(&at).unwrap().leave(now, &mut out);
        self.deliver(out);
    }

    fn deliver(&mut self, mut out: Outbox) {
        while !out.messages.is_empty() {
            let batch = std::mem::take(&mut out.messages);
            let mut first_lost = self.first_lost;
            for (to, message) in batch {
                if self.crashed.contains(&to) {
                    continue;
                }
                if first_lost
                    .is_some_and(|(at, kind)| to == at && message[0] & !SESSION_FORM == kind)
                {
                    first_lost = None;
                    continue;
                }
                if let Some((lossy, every)) = self.lossy {
                    if to == lossy {
                        self.sent_to_lossy += 1;
                        if self.sent_to_lossy % every == 0 {
                            continue;
                        }
                    }
                }
                if let Some((deaf, bytes)) = &self.deaf_to {
                    let gossip = message[0] & !SESSION_FORM == KIND_FOCA;
                    if to == *deaf && gossip && message.windows(bytes.len()).any(|w| w == bytes) {
                        continue;
                    }
                }
                if let Some((kind, left)) = &mut self.lose_kind {
                    if *left > 0 && message[0] & !SESSION_FORM == *kind {
                        *left -= 1;
                        continue;
                    }
                }
                if let Some((kind, held)) = &mut self.held {
                    if message[0] & !SESSION_FORM == *kind {
                        held.push((to, message));
                        continue;
                    }
                }
                if self.requests_lost_to == Some(to)
                    && message[0] & !SESSION_FORM == KIND_SYNC_REQUEST
                {
                    continue;
                }
                if let Some((blocked, bytes)) = &self.blocked {
                    if to == *blocked && message.windows(bytes.len()).any(|w| w == bytes) {
                        continue;
                    }
                }
                if self.captured.len() < 5000 {
                    self.captured.push(message.clone());
                    self.wire.push((to, message.clone()));
                }
                if let Some(node) = self.nodes.get_mut(&to) {
                    node.handle_datagram(self.now, &message, &mut out);
                    node.flush(self.now, &mut out);
                }
            }
        }
        self.collect();
    }

    fn collect(&mut self) {
        for (at, node) in &mut self.nodes {
            self.events
                .entry(*at)
                .or_default()
                .extend(node.drain_events());
        }
    }

    fn step(&mut self) {
        self.now += TICK;
        let mut out = Outbox::default();
        for (at, node) in &mut self.nodes {
            if !self.crashed.contains(at) {
                node.handle_timers(self.now, &mut out);
                node.flush(self.now, &mut out);
            }
        }
        self.deliver(out);
    }

    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Cluster) -> bool) -> Duration {
        let start = self.now;
        while !done(self) {
            assert!(self.now - start < limit, "not done within {limit:?}");
            self.step();
        }
        self.now - start
    }

    fn run_for(&mut self, duration: Duration) {
        let end = self.now + duration;
        while self.now < end {
            self.step();
        }
    }

    fn state_of(&self, viewer: SocketAddr, target: SocketAddr) -> Option<(MemberState, u64)> {
        self.nodes[&viewer]
            .members()
            .into_iter()
            .find(|m| m.id.socket_addr() == target)
            .map(|m| (m.state, m.id.generation()))
    }

    fn live(&self) -> Vec<SocketAddr> {
        let mut live: Vec<_> = self
            .nodes
            .keys()
            .filter(|a| !self.crashed.contains(a) && !self.nodes[a].has_left())
            .copied()
            .collect();
        live.sort();
        live
    }

    fn all_see_all(&self) -> bool {
        let live = self.live();
        live.iter().all(|viewer| {
            live.iter()
                .filter(|t| *t != viewer)
                .all(|t| matches!(self.state_of(*viewer, *t), Some((MemberState::Alive, _))))
        })
    }

    fn assert_driver_healthy(&self) {
        for node in self.nodes.values() {
            let stats = node.stats();
            for kind in [
                "not_connected",
                "incomplete_probe_cycle",
                "encode",
                "invalid_config",
            ] {
                let i = FOCA_ERROR_KINDS.iter().position(|k| *k == kind).unwrap();
                assert_eq!(stats.foca_errors[i], 0, "{kind} at {:?}", node.identity());
            }
        }
    }

    fn items_at(&self, at: SocketAddr) -> Vec<(String, Lane, String, u64, Vec<u8>)> {
        self.events[&at]
            .iter()
            .filter_map(|e| match e {
                Event::Item(item) => Some((
                    item.origin.to_string(),
                    item.lane,
                    item.key.to_string(),
                    item.version,
                    item.payload.to_vec(),
                )),
                _ => None,
            })
            .collect()
    }
}

fn five_node_cluster() -> (Cluster, Vec<SocketAddr>) {
    let mut c = Cluster::new();
    let addrs = c.add_joined(5, 100);
    let took = c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    // The joiners learn each other from the seed's sync answer, not one probe at a time.
    assert!(took <= config().probe_interval * 3, "converged in {took:?}");
    (c, addrs)
}

/// Four nodes of generation 1, the last speaking only protocol 2 (the release before),
/// all seeing all: the nodes and the old one's address.
fn four_nodes_one_of_protocol_2() -> (Cluster, Vec<SocketAddr>, SocketAddr) {
    let mut c = Cluster::new();
    let addrs: Vec<_> = (0..4).map(|i| c.add(i, 1)).collect();
    let old = addrs[3];
    c.speaking(old, ProtocolRange::new(2, 2).unwrap());
    for at in &addrs[1..] {
        c.join(*at, addrs[0]);
    }
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    (c, addrs, old)
}

fn total(c: &Cluster, stat: impl Fn(&DriverStats) -> u64) -> u64 {
    c.nodes.values().map(|n| stat(&n.stats())).sum()
}

fn memberships(c: &Cluster) -> Vec<Vec<(String, SocketAddr, u64, &'static str)>> {
    let mut all: Vec<_> = c
        .nodes
        .values()
        .map(|n| {
            let mut view: Vec<_> = n
                .members()
                .into_iter()
                .map(|m| {
                    let id = &m.id;
                    (
                        id.site().to_string(),
                        id.socket_addr(),
                        id.generation(),
                        m.state.name(),
                    )
                })
                .collect();
            view.sort();
            view
        })
        .collect();
    all.sort();
    all
}

fn holds(c: &Cluster, at: SocketAddr, key: &str, version: u64) -> bool {
    c.items_at(at).iter().any(|i| i.2 == key && i.3 == version)
}

mod heads;
mod membership;
mod renewal;
mod security;
mod sessions;
mod store;
mod stretches;
mod versions;
