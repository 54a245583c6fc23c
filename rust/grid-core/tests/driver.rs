//! The sans-IO driver, run as a small cluster over an in-memory network on a virtual clock.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use foca::{Codec, Header, Member, Message, State};
use grid_core::driver::config::SwimConfig;
use grid_core::driver::DriverStats;
use grid_core::driver::{
    Driver, Event, MemberState, Transmit, CATCH_UP_PAUSE, FOCA_ERROR_KINDS, MAX_ITEM_CAPACITY,
    MAX_SYNC_CHUNKS, SYNC_ANSWER_WAIT,
};
use grid_core::identity::{Interner, NodeId};
use grid_core::lanes::relay::WINDOW_ITEMS;
use grid_core::lanes::repair::{Digest, REPAIR_INTERVAL, REPAIR_SETTLE, REPAIR_WINDOW};
use grid_core::lanes::{Lane, PublishError};
use grid_core::wire::session::MESSAGE_KINDS;
use grid_core::wire::versions::ProtocolRange;
use grid_core::wire::{
    WireCodec, KIND_DIGEST, KIND_FOCA, KIND_HELLO, KIND_LEAVE, KIND_REPAIR, KIND_SYNC_REQUEST,
    MAX_MESSAGE_LEN, MAX_UNSEALED_LEN,
};
use proptest::prelude::*;

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
        }
    }

    fn add(&mut self, i: usize, generation: u64) -> SocketAddr {
        self.add_as(&format!("site-{i}"), i, generation)
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

    fn leave(&mut self, at: SocketAddr) {
        let mut out = Outbox::default();
        let now = self.now;
        self.nodes.get_mut(&at).unwrap().leave(now, &mut out);
        self.deliver(out);
    }

    fn deliver(&mut self, mut out: Outbox) {
        while !out.messages.is_empty() {
            let batch = std::mem::take(&mut out.messages);
            for (to, message) in batch {
                if self.crashed.contains(&to) {
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
                    let gossip = message[0] == KIND_FOCA;
                    if to == *deaf && gossip && message.windows(bytes.len()).any(|w| w == bytes) {
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
    let addrs: Vec<_> = (0..5).map(|i| c.add(i, 100)).collect();
    for at in &addrs[1..] {
        c.join(*at, addrs[0]);
    }
    let took = c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    // The joiners learn each other from the seed's sync answer, not one probe at a time.
    assert!(took <= config().probe_interval * 3, "converged in {took:?}");
    (c, addrs)
}

#[test]
fn five_nodes_form_one_cluster_from_a_single_seed() {
    let (mut c, addrs) = five_node_cluster();
    c.run_for(Duration::from_secs(3));
    assert!(c.all_see_all());
    c.assert_driver_healthy();
    for at in &addrs {
        let ups = c.events[at]
            .iter()
            .filter(|e| matches!(e, Event::MemberUp(_)))
            .count();
        assert_eq!(ups, 4, "{at}");
        assert!(c.nodes[at].stats().syncs_completed + c.nodes[at].stats().syncs_served > 0);
    }
}

#[test]
fn a_crashed_node_is_declared_down_everywhere_within_the_bound() {
    let (mut c, addrs) = five_node_cluster();
    let victim = addrs[3];
    c.crashed.insert(victim);
    let bound = config().detection_bound(5);
    let took = c.run_until(bound, |c| {
        c.live()
            .iter()
            .all(|v| c.state_of(*v, victim).map(|s| s.0) == Some(MemberState::Down))
    });
    assert!(took <= bound, "{took:?} > {bound:?}");
    for at in c.live() {
        assert!(c.events[&at]
            .iter()
            .any(|e| matches!(e, Event::MemberDown(id) if id.socket_addr() == victim)));
    }
    c.assert_driver_healthy();
}

#[test]
fn a_node_that_leaves_is_seen_as_left_not_down() {
    let (mut c, addrs) = five_node_cluster();
    let leaver = addrs[2];
    c.leave(leaver);
    c.run_for(Duration::from_secs(3));
    for at in c.live() {
        assert_eq!(
            c.state_of(at, leaver).unwrap().0,
            MemberState::Left,
            "at {at}"
        );
        let about: Vec<_> = c.events[&at]
            .iter()
            .filter(|e| match e {
                Event::MemberLeft(id) | Event::MemberDown(id) => id.socket_addr() == leaver,
                _ => false,
            })
            .collect();
        assert!(
            matches!(about.as_slice(), [Event::MemberLeft(_)]),
            "{about:?}"
        );
    }
}

#[test]
fn a_restarted_node_is_alive_again_with_a_higher_generation() {
    let (mut c, addrs) = five_node_cluster();
    let victim = addrs[4];
    c.crashed.insert(victim);
    c.run_for(config().detection_bound(5));
    c.add(4, 5000);
    c.join(victim, addrs[0]);
    c.run_until(Duration::from_secs(5), |c| {
        c.live()
            .iter()
            .filter(|v| **v != victim)
            .all(|v| c.state_of(*v, victim) == Some((MemberState::Alive, 5000)))
    });
    assert!(c.events[&addrs[1]].iter().any(|e| matches!(
        e,
        Event::MemberRenamed { previous, current }
            if previous.generation() == 100 && current.generation() == 5000
    )));
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
}

#[test]
fn a_node_wrongly_declared_down_rejoins_with_the_next_generation() {
    let (mut c, addrs) = five_node_cluster();
    let isolated = addrs[1];
    c.crashed.insert(isolated);
    c.run_for(config().detection_bound(5));
    c.crashed.remove(&isolated);
    c.run_until(Duration::from_secs(20), |c| {
        c.live()
            .iter()
            .filter(|v| **v != isolated)
            .all(|v| matches!(c.state_of(*v, isolated), Some((MemberState::Alive, g)) if g > 100))
    });
    assert_eq!(c.nodes[&isolated].identity().generation(), 101);
}

#[test]
fn items_reach_every_node_once_and_newer_versions_supersede() {
    let (mut c, addrs) = five_node_cluster();
    let origin = addrs[0];
    assert!(c.publish(origin, Lane::State, "provider/a", 1, b"one"));
    assert!(c.publish(origin, Lane::State, "provider/a", 2, b"two"));
    assert!(!c.publish(origin, Lane::State, "provider/a", 2, b"again"));
    assert!(!c.publish(origin, Lane::State, "provider/a", 1, b"older"));
    assert!(c.publish(origin, Lane::Gateway, "provider/a", 1, b"gw"));
    c.run_for(Duration::from_secs(4));
    for at in &addrs[1..] {
        let items = c.items_at(*at);
        let mut names: Vec<_> = items.iter().map(|i| (i.1, i.2.clone(), i.3)).collect();
        let total = names.len();
        names.sort_by_key(|n| (n.0 as u8, n.2));
        names.dedup();
        assert_eq!(names.len(), total, "duplicates at {at}: {items:?}");
        let latest_state = items
            .iter()
            .filter(|i| i.1 == Lane::State)
            .map(|i| i.3)
            .max();
        assert_eq!(latest_state, Some(2));
        assert!(items.iter().any(|i| i.1 == Lane::Gateway && i.4 == b"gw"));
        assert!(items.iter().all(|i| i.0 == "site-0"));
    }
    assert!(c.items_at(origin).is_empty(), "own items are not echoed");
}

#[test]
fn a_late_joiner_learns_items_published_before_it_arrived() {
    let (mut c, addrs) = five_node_cluster();
    for v in 1..=3 {
        c.publish(
            addrs[1],
            Lane::Metadata,
            "region",
            v,
            format!("eu-{v}").as_bytes(),
        );
    }
    c.publish(
        addrs[2],
        Lane::Cert,
        "tls",
        7,
        b"-----BEGIN CERTIFICATE-----",
    );
    // Long after foca stopped retransmitting them.
    c.run_for(Duration::from_secs(10));
    let late = c.add(9, 100);
    c.join(late, addrs[0]);
    // From the seed's answer to the join sync, well before any periodic push/pull.
    c.run_until(config().probe_interval * 2, |c| c.items_at(late).len() == 2);
    let mut items = c.items_at(late);
    items.sort_by_key(|i| i.3);
    assert_eq!(items[0].4, b"eu-3");
    assert_eq!((items[1].1, items[1].3), (Lane::Cert, 7));
}

#[test]
fn a_flood_on_one_lane_does_not_hold_back_another() {
    let (mut c, addrs) = five_node_cluster();
    for v in 1..=500 {
        c.nodes
            .get_mut(&addrs[0])
            .unwrap()
            .publish(Lane::Gateway, &format!("gw-{}", v % 5), v, &[7u8; 200])
            .unwrap();
    }
    c.publish(addrs[0], Lane::State, "provider", 1, b"urgent");
    // One delivery round, no timers: the state item went out ahead of the flood's backlog.
    for at in &addrs[1..] {
        assert!(
            c.items_at(*at).iter().any(|i| i.1 == Lane::State),
            "state item missing at {at}"
        );
    }
    // Only the latest gateway versions remain queued, and foca holds no more.
    let stats = c.nodes[&addrs[0]].stats();
    assert!(stats.relay_queue <= 6, "{stats:?}");
    assert!(
        stats.broadcast_backlog - stats.relay_queue <= 6,
        "{stats:?}"
    );
}

#[test]
fn a_burst_waits_in_the_relay_queue_and_reaches_everyone() {
    let mut c = Cluster::new();
    let addrs: Vec<_> = (0..5).map(|i| c.add(i, 100)).collect();
    for at in &addrs[1..] {
        c.join(*at, addrs[0]);
    }
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    let count = 600;
    c.publish_providers(addrs[0], count, &[7u8; 600]);
    let mut queued_max = 0;
    c.run_until(Duration::from_secs(300), |c| {
        for at in &addrs {
            let stats = c.nodes[at].stats();
            // What foca holds stays small whatever waits in the queue.
            assert!(
                stats.broadcast_backlog - stats.relay_queue <= WINDOW_ITEMS,
                "{stats:?}"
            );
            queued_max = queued_max.max(stats.relay_queue);
        }
        addrs[1..].iter().all(|at| c.items_at(*at).len() == count)
    });
    assert!(queued_max > WINDOW_ITEMS, "{queued_max}");
    // Every node made all its transmissions.
    c.run_until(Duration::from_secs(300), |c| {
        addrs
            .iter()
            .all(|at| c.nodes[at].stats().broadcast_backlog == 0)
    });
    c.assert_driver_healthy();
}

#[test]
fn private_keys_are_refused_on_publish_and_dropped_on_receive() {
    let (mut c, addrs) = five_node_cluster();
    let err = c
        .nodes
        .get_mut(&addrs[0])
        .unwrap()
        .publish(Lane::Cert, "tls", 1, b"-----BEGIN PRIVATE KEY-----")
        .unwrap_err();
    assert_eq!(err, PublishError::PrivateKey);

    // A key holder whose build skips the check: a signed sync chunk carrying a cert item
    // with a private key.
    let rogue = c.authority("site-0");
    let sender = c.nodes[&addrs[0]].identity().clone();
    let mut item = vec![6];
    item.extend_from_slice(b"site-0");
    item.push(Lane::Cert as u8);
    item.push(3);
    item.extend_from_slice(b"tls");
    item.extend_from_slice(&1u64.to_be_bytes());
    item.extend_from_slice(b"-----BEGIN EC PRIVATE KEY-----");
    item.extend_from_slice(&[0; 64]);
    let mut body = Vec::new();
    sender.encode(&mut body);
    body.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
    body.push(2);
    body.extend_from_slice(&(item.len() as u16).to_be_bytes());
    body.extend_from_slice(&item);
    let target = addrs[1];
    let chunk = forge(
        &rogue,
        KIND_SYNC_REQUEST,
        &body,
        1 << 40,
        c.wall_ms(),
        target,
    );
    c.deliver_one(target, &chunk);
    assert!(c.items_at(target).is_empty());
    assert_eq!(c.nodes[&target].stats().item_refusals.private_key, 1);
}

#[test]
fn oversized_items_are_refused_with_a_clear_error() {
    let (mut c, addrs) = five_node_cluster();
    let err = c
        .nodes
        .get_mut(&addrs[0])
        .unwrap()
        .publish(Lane::State, "big", 1, &vec![0u8; 2000])
        .unwrap_err();
    assert!(err.to_string().contains("split"), "{err}");
}

#[test]
fn syncs_between_converged_nodes_apply_nothing_new() {
    let (mut c, addrs) = five_node_cluster();
    c.run_for(config().push_pull_interval * 3);
    assert!(c.all_see_all());
    for at in &addrs {
        let stats = c.nodes[at].stats();
        assert!(stats.syncs_completed + stats.syncs_served > 0, "{stats:?}");
        // Every member entry of a sync from a converged peer is one foca already holds.
        assert!(stats.sync_entries_known > 0, "{stats:?}");
    }
    // What a sync does carry that is new is still applied: a restarted node's peers learn
    // its new life, and the restarted node the whole cluster, through its join sync.
    c.crashed.insert(addrs[4]);
    c.add(4, 101);
    c.join(addrs[4], addrs[0]);
    c.run_until(Duration::from_secs(10), |c| {
        c.state_of(addrs[0], addrs[4]) == Some((MemberState::Alive, 101)) && c.all_see_all()
    });
}

#[test]
fn retransmissions_are_retuned_as_the_cluster_grows() {
    let mut c = Cluster::new();
    let seed = c.add(0, 1);
    assert_eq!(c.nodes[&seed].stats().max_transmissions, 4);
    for i in 1..12 {
        let at = c.add(i, 1);
        c.join(at, seed);
    }
    c.run_until(Duration::from_secs(10), Cluster::all_see_all);
    for node in c.nodes.values() {
        assert_eq!(
            node.stats().max_transmissions,
            8,
            "12 nodes: 4*ceil(log10 13)"
        );
    }
    c.assert_driver_healthy();
}

#[test]
fn a_lone_node_keeps_trying_its_seed() {
    let mut c = Cluster::new();
    let lone = c.add(1, 1);
    let seed_addr = addr(0);
    c.join(lone, seed_addr);
    c.run_for(Duration::from_secs(2));
    // The seed comes up late; the joiner finds it without being told again.
    c.add(0, 1);
    c.run_until(Duration::from_secs(10), Cluster::all_see_all);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_messages_never_panic_or_change_membership(
        messages in proptest::collection::vec(
            (0u8..6, proptest::collection::vec(any::<u8>(), 0..300)), 1..40),
    ) {
        let (mut c, addrs) = five_node_cluster();
        let target = addrs[2];
        let before = c.nodes[&target].members();
        let mut out = Outbox::default();
        let now = c.now;
        for (kind, body) in messages {
            let mut message = vec![kind];
            message.extend_from_slice(&body);
            c.nodes.get_mut(&target).unwrap().handle_datagram(now, &message, &mut out);
        }
        // Random bytes do not decode into identities we know, so nothing we track changed.
        let after = c.nodes[&target].members();
        prop_assert_eq!(before, after);
    }

    #[test]
    fn mutated_real_messages_never_panic(seed in any::<u64>(), flips in 1usize..8) {
        let (mut c, addrs) = five_node_cluster();
        let captured = std::mem::take(&mut c.captured);
        let mut rng = seed;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut out = Outbox::default();
        let now = c.now;
        for _ in 0..200 {
            let mut message = captured[(next() as usize) % captured.len()].clone();
            for _ in 0..flips {
                let i = (next() as usize) % message.len();
                message[i] ^= 1 << (next() % 8);
            }
            if next() % 4 == 0 {
                let cut = (next() as usize) % message.len();
                message.truncate(cut);
            }
            c.nodes.get_mut(&addrs[3]).unwrap().handle_datagram(now, &message, &mut out);
        }
    }
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

#[test]
fn captured_messages_replayed_later_are_refused() {
    let (mut c, addrs) = five_node_cluster();
    c.publish(addrs[1], Lane::State, "p", 1, b"v1");
    c.run_for(Duration::from_secs(1));
    let capture = std::mem::take(&mut c.wire);
    assert!(capture.len() > 100, "{} messages", capture.len());
    let events_before: usize = c.events.values().map(Vec::len).sum();
    let members_before = memberships(&c);

    // Soon after: the senders' replay windows have seen every one of them.
    for (to, message) in &capture {
        c.deliver_one(*to, message);
    }
    let replayed = total(&c, |s| s.session.dropped_replayed);
    assert_eq!(replayed, capture.len() as u64);
    assert_eq!(
        c.events.values().map(Vec::len).sum::<usize>(),
        events_before
    );
    assert_eq!(memberships(&c), members_before);

    // Long after: refused as stale, whatever the windows remember.
    c.run_for(Duration::from_secs(31));
    let stale_before = total(&c, |s| s.session.dropped_stale);
    for (to, message) in &capture {
        c.deliver_one(*to, message);
    }
    assert_eq!(
        total(&c, |s| s.session.dropped_stale) - stale_before,
        capture.len() as u64
    );
    assert!(c.all_see_all());
    assert!(
        c.items_at(addrs[2]).len() == 1,
        "the item was delivered once"
    );
}

#[test]
fn a_message_for_one_node_is_refused_by_another() {
    let (mut c, addrs) = five_node_cluster();
    let (to, message) = c
        .wire
        .iter()
        .find(|(to, _)| *to == addrs[2])
        .cloned()
        .unwrap();
    assert_eq!(to, addrs[2]);
    c.deliver_one(addrs[3], &message);
    assert_eq!(c.nodes[&addrs[3]].stats().session.dropped_misdirected, 1);
}

#[test]
fn a_key_holder_cannot_announce_the_leave_of_another_site() {
    let (mut c, addrs) = five_node_cluster();
    let mallory = c.authority("site-1");
    let victim = c.nodes[&addrs[2]].identity().clone();
    let mut body = Vec::new();
    victim.encode(&mut body);
    for target in [addrs[0], addrs[3]] {
        let leave = forge(&mallory, KIND_LEAVE, &body, 1 << 50, c.wall_ms(), target);
        c.deliver_one(target, &leave);
        assert_eq!(c.nodes[&target].stats().session.dropped_bad_signature, 1);
    }
    c.run_for(Duration::from_secs(2));
    assert!(c.all_see_all());
    assert_eq!(total(&c, |s| s.leave_notices), 0);
}

#[test]
fn an_item_signed_by_another_site_is_refused_and_jams_nothing() {
    let (mut c, addrs) = five_node_cluster();
    let mallory = c.authority("site-1");
    let sender = c.nodes[&addrs[1]].identity().clone();
    // site-2's item at the highest version, signed by site-1.
    let mut item = vec![6];
    item.extend_from_slice(b"site-2");
    item.push(Lane::State as u8);
    item.push(1);
    item.extend_from_slice(b"p");
    item.extend_from_slice(&(u64::MAX - 1).to_be_bytes());
    item.extend_from_slice(b"extra model");
    let signature = mallory.sign(grid_core::identity::auth::ITEM_DOMAIN, &item);
    item.extend_from_slice(&signature);
    let mut body = Vec::new();
    sender.encode(&mut body);
    body.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 1, 2]);
    body.extend_from_slice(&(item.len() as u16).to_be_bytes());
    body.extend_from_slice(&item);
    let target = addrs[0];
    let chunk = forge(
        &mallory,
        KIND_SYNC_REQUEST,
        &body,
        1 << 50,
        c.wall_ms(),
        target,
    );
    c.deliver_one(target, &chunk);
    assert_eq!(c.nodes[&target].stats().item_refusals.bad_signature, 1);
    assert!(c.items_at(target).is_empty());
    // site-2's own next version is news everywhere.
    assert!(c.publish(addrs[2], Lane::State, "p", 5, b"real"));
    c.run_for(Duration::from_secs(1));
    for at in [addrs[0], addrs[1], addrs[3], addrs[4]] {
        assert_eq!(
            c.items_at(at),
            vec![(
                "site-2".into(),
                Lane::State,
                "p".into(),
                5,
                b"real".to_vec()
            )]
        );
    }
}

#[test]
fn an_identity_claiming_another_sites_address_takes_nothing_over() {
    let (mut c, addrs) = five_node_cluster();
    let victim = c.nodes[&addrs[2]].identity().clone();
    let mallory = c.authority("site-1");
    let squatter = NodeId::new(Arc::from("site-1"), addrs[2], u64::MAX - 1);
    let mut codec = WireCodec::new(c.interner.clone());
    for target in [addrs[0], addrs[2], addrs[3]] {
        let header = Header {
            src: squatter.clone(),
            src_incarnation: 0,
            dst: NodeId::placeholder(target),
            message: Message::Announce,
        };
        let mut body = Vec::new();
        codec.encode_header(&header, &mut body).unwrap();
        let announce = forge(&mallory, KIND_FOCA, &body, 1 << 50, c.wall_ms(), target);
        c.deliver_one(target, &announce);
    }
    c.run_for(Duration::from_secs(2));
    assert!(c.all_see_all());
    assert_eq!(
        c.nodes[&addrs[2]].identity(),
        &victim,
        "no renewal at the victim"
    );
    for at in c.live() {
        if at != addrs[2] {
            assert_eq!(
                c.state_of(at, addrs[2]),
                Some((MemberState::Alive, victim.generation()))
            );
        }
    }
    assert!(total(&c, |s| s.name_conflicts) >= 2);
}

#[test]
fn gossip_about_identities_nobody_verified_is_not_applied() {
    let (mut c, addrs) = five_node_cluster();
    let mallory = c.authority("site-1");
    let sender = c.nodes[&addrs[1]].identity().clone();
    let target = c.nodes[&addrs[0]].identity().clone();
    let ghost = NodeId::new(Arc::from("site-2"), addr(60), u64::MAX - 1);
    let mut codec = WireCodec::new(c.interner.clone());
    let header = Header {
        src: sender,
        src_incarnation: 0,
        dst: target.clone(),
        message: Message::Gossip,
    };
    let mut body = Vec::new();
    codec.encode_header(&header, &mut body).unwrap();
    body.extend_from_slice(&1u16.to_be_bytes());
    codec
        .encode_member(&Member::new(ghost.clone(), 0, State::Alive), &mut body)
        .unwrap();
    let gossip = forge(&mallory, KIND_FOCA, &body, 1 << 50, c.wall_ms(), addrs[0]);
    c.deliver_one(addrs[0], &gossip);
    assert!(c.nodes[&addrs[0]].stats().members_unverified >= 1);
    assert!(c.nodes[&addrs[0]].members().iter().all(|m| m.id != ghost));
    c.run_for(Duration::from_secs(2));
    assert!(c.all_see_all());
    // The real site-2 was never shadowed.
    assert_eq!(
        c.state_of(addrs[0], addrs[2]).map(|s| s.0),
        Some(MemberState::Alive)
    );
}

#[test]
fn a_second_node_with_a_site_name_in_use_stops_and_the_first_stays() {
    let (mut c, addrs) = five_node_cluster();
    let original = c.nodes[&addrs[0]].identity().clone();
    let twin = c.add_as("site-0", 7, 200);
    c.join(twin, addrs[1]);
    c.run_until(Duration::from_secs(5), |c| c.nodes[&twin].has_yielded());
    assert!(c.events[&twin].iter().any(|e| matches!(
        e,
        Event::NameConflict { other, yielded: true } if *other == original
    )));
    c.run_for(Duration::from_secs(3));
    for at in &addrs[1..] {
        assert_eq!(
            c.state_of(*at, addrs[0]),
            Some((MemberState::Alive, original.generation()))
        );
        assert!(c.nodes[at]
            .members()
            .iter()
            .all(|m| m.id.socket_addr() != twin));
        assert!(!c.events[at]
            .iter()
            .any(|e| matches!(e, Event::MemberDown(id) if *id == original)));
    }
}

#[test]
fn a_site_forgotten_while_away_comes_back_with_its_items() {
    let (mut c, addrs) = five_node_cluster();
    let paused = addrs[3];
    let item = [(Lane::State, "provider".to_owned())];
    assert!(c.publish(paused, Lane::State, "provider", 4, b"gpu"));
    c.run_for(Duration::from_secs(1));
    assert_eq!(c.items_at(addrs[0]).len(), 1);
    // Paused (no input, no timers) until everyone declared it down.
    c.crashed.insert(paused);
    c.run_until(config().detection_bound(5), |c| {
        c.live()
            .iter()
            .all(|v| c.state_of(*v, paused).map(|s| s.0) == Some(MemberState::Down))
    });
    // Going down forgets nothing: syncs still carry its item...
    assert_eq!(c.nodes[&addrs[0]].stats().items_stored, 1);
    // ...until the hosts decide its records are stale.
    for at in [addrs[0], addrs[1], addrs[2]] {
        assert_eq!(c.nodes.get_mut(&at).unwrap().forget("site-3", &item), 1);
    }
    // A host that has not forgotten it yet cannot bring it back while the site is down.
    c.run_for(Duration::from_secs(6));
    assert_eq!(c.items_at(addrs[0]).len(), 1);
    c.crashed.remove(&paused);
    // Resumed: its unchanged item, at the same version, is delivered again where forgotten.
    c.run_until(Duration::from_secs(10), |c| {
        [addrs[0], addrs[1], addrs[2]]
            .iter()
            .all(|at| c.items_at(*at).len() == 2)
    });
    for at in [addrs[0], addrs[1], addrs[2]] {
        let items = c.items_at(at);
        assert_eq!(items[0], items[1], "{at}");
    }
    assert_eq!(
        c.items_at(addrs[4]).len(),
        1,
        "a node that forgot nothing gets nothing twice"
    );
    assert!(c.all_see_all());
}

#[test]
fn items_the_host_forgets_are_delivered_again_when_they_come_back() {
    let (mut c, addrs) = five_node_cluster();
    assert!(c.publish(addrs[1], Lane::Gateway, "egress", 2, b"10.0.0.1"));
    c.run_for(Duration::from_secs(1));
    assert_eq!(c.items_at(addrs[0]).len(), 1);
    let forgotten = c
        .nodes
        .get_mut(&addrs[0])
        .unwrap()
        .forget("site-1", &[(Lane::Gateway, "egress".to_owned())]);
    assert_eq!(forgotten, 1);
    // site-1 is alive: the next sync that carries it (a periodic push/pull) brings it back.
    c.run_until(Duration::from_secs(20), |c| c.items_at(addrs[0]).len() == 2);
}

#[test]
fn a_late_joiner_receives_what_a_crashed_site_published() {
    let (mut c, addrs) = five_node_cluster();
    let crashed = addrs[4];
    assert!(c.publish(crashed, Lane::State, "budget/slot", 3, b"71 units"));
    c.run_for(Duration::from_secs(1));
    c.crashed.insert(crashed);
    c.run_until(config().detection_bound(5), |c| {
        c.live()
            .iter()
            .all(|v| c.state_of(*v, crashed).map(|s| s.0) == Some(MemberState::Down))
    });
    let late = c.add(9, 100);
    c.join(late, addrs[0]);
    c.run_until(config().probe_interval * 4, |c| {
        c.items_at(late)
            .iter()
            .any(|item| item.0 == "site-4" && item.4 == b"71 units")
    });
}

/// Bytes of items one sync answer carries at least: half its chunks (members may fill the
/// other half), each nearly full.
fn part_bytes() -> usize {
    MAX_SYNC_CHUNKS / 2 * (MAX_UNSEALED_LEN - 300)
}

#[test]
fn a_joiner_walks_a_store_larger_than_one_sync_part_after_part() {
    let mut c = Cluster::new();
    // Push/pull far beyond the bound: only catching up can bring the store in time.
    c.swim.push_pull_interval = Duration::from_secs(600);
    let addrs: Vec<_> = (0..3).map(|i| c.add(i, 100)).collect();
    let payload = [7u8; 900];
    let count = 1_200;
    c.publish_providers(addrs[0], count, &payload);
    let stored_bytes = count * (payload.len() + 100);
    let parts = stored_bytes.div_ceil(part_bytes());
    assert!(parts >= 3, "the store spans several syncs ({parts})");
    let bound = CATCH_UP_PAUSE * (parts as u32 + 2);
    assert!(bound * 4 < c.swim.push_pull_interval);

    let holds_all = |c: &Cluster, at: SocketAddr| c.items_at(at).len() == count;
    for at in &addrs[1..] {
        c.join(*at, addrs[0]);
    }
    c.run_until(bound, |c| addrs[1..].iter().all(|at| holds_all(c, *at)));
    // A late joiner asks another member than the origin: the walk is the same.
    let late = c.add(9, 100);
    c.join(late, addrs[2]);
    let took = c.run_until(bound, |c| holds_all(c, late));
    let stats = c.nodes[&late].stats();
    // One part per sync, at most a whole sync's worth each.
    let fewest_parts = count * payload.len() / (MAX_SYNC_CHUNKS * MAX_UNSEALED_LEN);
    assert!(
        stats.catch_up_syncs as usize + 1 >= fewest_parts,
        "{took:?} {stats:?}"
    );
    // Once a walk went round, syncs are back to the push/pull pace.
    c.run_for(CATCH_UP_PAUSE * 10);
    let after = c.nodes[&late].stats();
    assert_eq!(after.catch_up_syncs, stats.catch_up_syncs);
    assert_eq!(after.syncs_started, stats.syncs_started);
    assert!(c.items_at(late).len() == count, "each item delivered once");
    c.assert_driver_healthy();
}

#[test]
fn a_joiner_that_loses_chunks_of_an_answer_asks_for_that_part_again() {
    let mut c = Cluster::new();
    // Push/pull far beyond the bound: only catching up can bring the store in time.
    c.swim.push_pull_interval = Duration::from_secs(600);
    let origin = c.add(0, 100);
    let payload = [7u8; 900];
    let count = 400;
    c.publish_providers(origin, count, &payload);
    let parts = (count * (payload.len() + 100)).div_ceil(part_bytes());
    // A first member takes everything in, until no gossip of these items is left: only
    // syncs can bring them to the joiner.
    let first = c.add(1, 100);
    c.join(first, origin);
    c.run_until(Duration::from_secs(600), |c| {
        c.items_at(first).len() == count
            && [origin, first]
                .iter()
                .all(|at| c.nodes[at].stats().broadcast_backlog == 0)
    });
    // One datagram in 50 to the joiner is lost: most answers miss a chunk.
    let joiner = c.add(2, 100);
    c.lossy = Some((joiner, 50));
    c.join(joiner, origin);
    let bound = (CATCH_UP_PAUSE + SYNC_ANSWER_WAIT) * (4 * parts as u32 + 4);
    assert!(bound * 4 < c.swim.push_pull_interval);
    let took = c.run_until(bound, |c| c.items_at(joiner).len() == count);
    let stats = c.nodes[&joiner].stats();
    assert!(stats.syncs_incomplete > 0, "{took:?} {stats:?}");
    // The walk went round even though no answer came whole: catching up ends.
    let pause = (CATCH_UP_PAUSE + SYNC_ANSWER_WAIT) * 10;
    c.run_for(pause);
    let later = c.nodes[&joiner].stats().syncs_started;
    c.run_for(pause);
    assert_eq!(c.nodes[&joiner].stats().syncs_started, later);
    c.assert_driver_healthy();
}

#[test]
fn the_item_store_is_bounded_and_refuses_past_it_keeping_what_it_holds() {
    let mut c = Cluster::new();
    let origin = c.add(0, 100);
    let err = Driver::new(
        c.nodes[&origin].identity().clone(),
        config(),
        1,
        Interner::default(),
        c.authority("site-0"),
        WALL,
    )
    .with_item_capacity(MAX_ITEM_CAPACITY + 1)
    .err()
    .unwrap();
    assert!(err.to_string().contains("between 1 and 1048576"), "{err}");
    let capacity = 40;
    let node = c.nodes.remove(&origin).unwrap();
    c.nodes
        .insert(origin, node.with_item_capacity(capacity).unwrap());
    let small = c.add(1, 100);
    let node = c.nodes.remove(&small).unwrap();
    c.nodes
        .insert(small, node.with_item_capacity(capacity / 2).unwrap());
    c.join(small, origin);
    c.run_until(Duration::from_secs(2), Cluster::all_see_all);
    for k in 0..capacity {
        assert!(c.publish(origin, Lane::State, &format!("k{k:02}"), 1, b"v"));
    }
    let origin_node = c.nodes.get_mut(&origin).unwrap();
    assert_eq!(
        origin_node.publish(Lane::State, "one-more", 1, b"v"),
        Err(PublishError::StoreFull)
    );
    assert_eq!(
        PublishError::StoreFull.to_string(),
        "the item store is full"
    );
    // A known name still takes newer versions when the store is full.
    assert_eq!(origin_node.publish(Lane::State, "k00", 2, b"w"), Ok(true));
    assert_eq!(origin_node.stats().items_stored, capacity);
    // The smaller store takes what fits, refuses (and counts) the rest, and loses nothing
    // it took.
    c.run_for(config().push_pull_interval * 2);
    let stats = c.nodes[&small].stats();
    assert_eq!(stats.items_stored, capacity / 2);
    assert!(stats.item_refusals.store_full > 0, "{stats:?}");
    let mut held: Vec<_> = c.items_at(small).into_iter().map(|i| i.2).collect();
    held.sort();
    held.dedup();
    assert_eq!(held.len(), capacity / 2);
}

/// Five nodes syncing too rarely to matter within a test.
fn five_nodes_without_syncs() -> (Cluster, Vec<SocketAddr>) {
    let mut c = Cluster::new();
    c.swim.push_pull_interval = Duration::from_secs(600);
    let addrs: Vec<_> = (0..5).map(|i| c.add(i, 100)).collect();
    for at in &addrs[1..] {
        c.join(*at, addrs[0]);
    }
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    // Past the joiners' catch-up syncs.
    c.run_for(Duration::from_secs(3));
    (c, addrs)
}

fn holds(c: &Cluster, at: SocketAddr, key: &str, version: u64) -> bool {
    c.items_at(at).iter().any(|i| i.2 == key && i.3 == version)
}

#[test]
fn a_version_gossip_never_brought_is_repaired_within_an_interval_of_settling() {
    let (mut c, addrs) = five_nodes_without_syncs();
    let victim = addrs[3];
    c.deaf_to = Some((victim, b"missed by gossip".to_vec()));
    let syncs_before = total(&c, |s| s.syncs_completed);
    let published = c.now;
    assert!(c.publish(
        addrs[1],
        Lane::State,
        "signals-page/0",
        7,
        b"missed by gossip"
    ));
    let took = c.run_until(Duration::from_secs(3), |c| {
        holds(c, victim, "signals-page/0", 7)
    });
    assert!(
        took <= REPAIR_SETTLE + REPAIR_INTERVAL + TICK * 3,
        "repaired after {took:?}"
    );
    assert!(published + took > published + REPAIR_SETTLE);
    assert_eq!(total(&c, |s| s.syncs_completed), syncs_before);
    assert_eq!(c.nodes[&victim].stats().items_repaired, 1);
    for at in &addrs {
        if *at != victim && *at != addrs[1] {
            assert!(holds(&c, *at, "signals-page/0", 7));
            assert_eq!(c.nodes[at].stats().items_repaired, 0, "gossip reached {at}");
        }
    }
    // Delivered once, and nothing is sent again once everyone holds it.
    c.run_for(REPAIR_WINDOW);
    let copies = c.items_at(victim).iter().filter(|i| i.3 == 7).count();
    assert_eq!(copies, 1);
    let sent = total(&c, |s| s.repair_items_sent);
    c.run_for(REPAIR_WINDOW);
    assert_eq!(total(&c, |s| s.repair_items_sent), sent);
    assert!(total(&c, |s| s.digests_sent) > 5 * 16);
}

#[test]
fn members_in_step_exchange_digests_and_no_items() {
    let (mut c, addrs) = five_nodes_without_syncs();
    for v in 1..=20 {
        c.publish(
            addrs[v % 5],
            Lane::State,
            &format!("signals-page/{v}"),
            v as u64,
            b"load",
        );
        c.run_for(Duration::from_millis(100));
    }
    c.run_for(REPAIR_WINDOW);
    assert!(total(&c, |s| s.digests_sent) >= 5 * 12);
    assert_eq!(total(&c, |s| s.repair_items_sent), 0);
    assert_eq!(total(&c, |s| s.bad_messages), 0);
    // Messages are counted by kind as they leave and as they are accepted; nothing is lost
    // on this network, so every digest sent was accepted.
    let digest = MESSAGE_KINDS.iter().position(|k| *k == "digest").unwrap();
    let sent = total(&c, |s| s.session.sent[digest].messages);
    assert_eq!(sent, total(&c, |s| s.digests_sent));
    assert_eq!(total(&c, |s| s.session.accepted[digest].messages), sent);
    let repair = MESSAGE_KINDS.iter().position(|k| *k == "repair").unwrap();
    assert_eq!(total(&c, |s| s.session.sent[repair].messages), 0);
    let bytes = total(&c, |s| s.session.sent[digest].bytes);
    assert!(
        bytes > sent * 100 && bytes < sent * 400,
        "{bytes} bytes in {sent} digests"
    );
}

fn digest_from(
    c: &Cluster,
    sender: SocketAddr,
    seq: u64,
    to: SocketAddr,
    digest: &Digest,
) -> Vec<u8> {
    let site = c.nodes[&sender].identity().site().to_string();
    let mut body = Vec::new();
    c.nodes[&sender].identity().encode(&mut body);
    digest.encode(&mut body);
    forge(
        &c.ca.authority_of(&site, c.issued[&site].clone()),
        KIND_DIGEST,
        &body,
        seq,
        c.wall_ms(),
        to,
    )
}

#[test]
fn an_empty_digest_gets_a_bounded_answer_at_most_twice_an_interval() {
    let (mut c, addrs) = five_nodes_without_syncs();
    let target = addrs[0];
    let big = vec![b'x'; 900];
    for k in 0..40 {
        c.publish(addrs[2], Lane::State, &format!("provider/{k:02}"), 3, &big);
    }
    c.run_for(REPAIR_SETTLE + TICK);
    let empty = Digest::new(1, REPAIR_WINDOW, &[]);
    let before = c.nodes[&target].stats();
    c.deliver_one(target, &digest_from(&c, addrs[1], 1 << 50, target, &empty));
    let after = c.nodes[&target].stats();
    // Four messages' worth of the 40 items the digest does not name, and no more.
    let sent = after.repair_items_sent - before.repair_items_sent;
    assert!((4..=4 * 2).contains(&sent), "{sent} items sent");
    assert_eq!(after.digests_answered, before.digests_answered + 1);
    c.deliver_one(
        target,
        &digest_from(&c, addrs[1], (1 << 50) + 1, target, &empty),
    );
    let again = c.nodes[&target].stats();
    assert_eq!(again.digests_held_back, before.digests_held_back + 1);
    assert_eq!(again.repair_items_sent, after.repair_items_sent);
}

#[test]
fn malformed_digests_and_repairs_are_counted_and_change_nothing() {
    let (mut c, addrs) = five_nodes_without_syncs();
    let target = addrs[0];
    let sender = c.nodes[&addrs[1]].identity().clone();
    let mallory = c.authority("site-1");
    let mut digest = Vec::new();
    Digest::new(1, REPAIR_WINDOW, &[1, 2, 3]).encode(&mut digest);
    let mut no_hashes = digest.clone();
    no_hashes[10] = 0;
    let mut item_less = vec![0, 0, 0, 1, 0, 0, 0, 1];
    item_less.extend_from_slice(&[1, 0, 1, 0]); // a member entry in a repair
    let bodies: [(u8, &[u8]); 5] = [
        (KIND_DIGEST, &digest[..12]),
        (KIND_DIGEST, &no_hashes),
        (KIND_REPAIR, &[0, 0, 0, 1, 0, 1, 0, 1]),
        (KIND_REPAIR, &item_less),
        (KIND_REPAIR, &[0, 0, 0, 1, 0, 0, 0, 1, 2, 0, 9, 1]),
    ];
    let stored = c.nodes[&target].stats().items_stored;
    for (i, (kind, tail)) in bodies.iter().enumerate() {
        let mut body = Vec::new();
        sender.encode(&mut body);
        body.extend_from_slice(tail);
        let message = forge(
            &mallory,
            *kind,
            &body,
            (1 << 50) + i as u64,
            c.wall_ms(),
            target,
        );
        c.deliver_one(target, &message);
    }
    let stats = c.nodes[&target].stats();
    assert_eq!(stats.bad_messages, bodies.len() as u64);
    assert_eq!(stats.items_stored, stored);
    assert_eq!(stats.digests_answered, 0);
    c.run_for(Duration::from_secs(2));
    assert!(c.all_see_all());
}

fn protocol_of(c: &Cluster, viewer: SocketAddr, target: SocketAddr) -> Option<u8> {
    c.nodes[&viewer]
        .members()
        .into_iter()
        .find(|m| m.id.socket_addr() == target)
        .and_then(|m| m.protocol)
}

fn refusals_at(c: &Cluster, at: SocketAddr) -> Vec<(String, ProtocolRange, ProtocolRange)> {
    c.events[&at]
        .iter()
        .filter_map(|e| match e {
            Event::VersionRefused { peer, theirs, ours } => {
                Some((peer.site().to_string(), *theirs, *ours))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn each_pair_speaks_its_highest_shared_version_and_pairs_sharing_none_refuse_each_other() {
    let range = |min, max| ProtocolRange::new(min, max).unwrap();
    let mut c = Cluster::new();
    let hub = c.add(0, 1);
    let old = c.add(1, 1);
    let next = c.add(2, 1);
    for (at, speaks) in [(old, range(1, 1)), (next, range(2, 3))] {
        let driver = c.nodes.remove(&at).unwrap().with_protocols(speaks);
        c.nodes.insert(at, driver);
    }
    c.join(old, hub);
    c.join(next, hub);
    c.run_until(Duration::from_secs(5), |c| {
        protocol_of(c, hub, old) == Some(1) && protocol_of(c, hub, next) == Some(2)
    });
    c.run_for(Duration::from_secs(5));
    // The hub speaks with both, each at the highest version the pair shares.
    for (viewer, target, spoken) in [(hub, old, 1), (hub, next, 2), (old, hub, 1), (next, hub, 2)] {
        assert_eq!(
            c.state_of(viewer, target).map(|s| s.0),
            Some(MemberState::Alive)
        );
        assert_eq!(protocol_of(&c, viewer, target), Some(spoken));
    }
    // 1..1 and 2..3 share nothing: neither takes the other in, though the hub gossips
    // each to the other and both kept asking for introductions.
    assert_eq!(c.state_of(old, next), None);
    assert_eq!(c.state_of(next, old), None);
    for at in [old, next] {
        assert!(c.nodes[&at].stats().session.dropped_incompatible_version >= 1);
    }
    // Each refusal is reported once, naming both ranges.
    assert_eq!(
        refusals_at(&c, old),
        vec![("site-2".to_owned(), range(2, 3), range(1, 1))]
    );
    assert_eq!(
        refusals_at(&c, next),
        vec![("site-1".to_owned(), range(1, 1), range(2, 3))]
    );
    assert!(refusals_at(&c, hub).is_empty());
    assert_eq!(
        c.nodes[&hub].stats().session.dropped_incompatible_version,
        0
    );
    // Items still flow both ways through the hub, which both trust.
    c.publish(old, Lane::State, "provider/old", 1, b"from 1..1");
    c.publish(next, Lane::State, "provider/next", 1, b"from 2..3");
    c.run_until(Duration::from_secs(5), |c| {
        holds(c, hub, "provider/old", 1) && holds(c, hub, "provider/next", 1)
    });
}

#[test]
fn a_hello_without_a_range_is_heard_as_protocol_one() {
    let mut c = Cluster::new();
    let a = c.add(0, 1);
    let b = c.add(1, 1);
    c.join(b, a);
    c.run_until(Duration::from_secs(5), |c| {
        protocol_of(c, a, b) == Some(2) && protocol_of(c, b, a) == Some(2)
    });
    // A HELLO whose flags carry no range (as release 0.1.0 sends them), signed by b.
    let signer = c.authority("site-1");
    let certificate = c.issued["site-1"].cert.clone();
    let mut body = Vec::new();
    c.nodes[&b].identity().encode(&mut body);
    body.extend_from_slice(&[0x00, 1]);
    body.extend_from_slice(&(certificate.len() as u16).to_be_bytes());
    body.extend_from_slice(&certificate);
    let hello = forge(&signer, KIND_HELLO, &body, 1 << 50, c.wall_ms(), a);
    let before = c.nodes[&a].stats().session.hellos_received;
    c.deliver_one(a, &hello);
    assert_eq!(c.nodes[&a].stats().session.hellos_received, before + 1);
    assert_eq!(protocol_of(&c, a, b), Some(1));
    assert!(c.all_see_all());
}
