//! The simulator: determinism, and the protocol behaviours it exists to measure, at small N.

use std::time::Duration;

use grid_core::driver::config::SwimConfig;
use grid_core::sim::{
    Change, Jitter, NetModel, NodeStatus, SimError, SimSettings, Simulation, Start,
};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn fast() -> SwimConfig {
    SwimConfig {
        probe_interval: secs(1.0),
        suspicion_timeout: secs(3.0),
        gossip_nodes: 3,
        push_pull_interval: secs(10.0),
    }
}

fn settings(threads: usize) -> SimSettings {
    SimSettings {
        swim: fast(),
        threads,
        // Share every window with more than one node, so small tests exercise the threads.
        parallel_work: 0,
        ..SimSettings::default()
    }
}

fn cluster(n: usize, seed: u64) -> Simulation {
    Simulation::new(n, seed, settings(1)).unwrap()
}

/// A scenario touching every kind of event: loss, a crash, a restart, a partition.
fn eventful(seed: u64, threads: usize) -> (u64, Simulation) {
    let mut sim = Simulation::new(40, seed, settings(threads)).unwrap();
    sim.set_net(NetModel {
        loss: 0.05,
        ..NetModel::default()
    })
    .unwrap();
    let t0 = sim.now();
    sim.run_until(t0 + secs(10.0)).unwrap();
    sim.crash(3).unwrap();
    sim.set_slow(5, secs(0.4)).unwrap();
    sim.run_until(t0 + secs(20.0)).unwrap();
    sim.restart(3, &[0]).unwrap();
    sim.partition(&[(0..20).collect()]).unwrap();
    sim.run_until(t0 + secs(30.0)).unwrap();
    sim.heal();
    sim.run_until(t0 + secs(45.0)).unwrap();
    (sim.trace_hash(), sim)
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let (first, sim) = eventful(7, 1);
    let (second, _) = eventful(7, 1);
    assert_eq!(first, second);
    let stats = sim.stats();
    assert!(stats.events > 10_000, "{stats:?}");
    assert!(stats.traffic.lost > 0 && stats.traffic.cut > 0, "{stats:?}");
    assert_eq!(stats.bootstrap_sends, 0);
}

#[test]
fn another_seed_gives_another_trace() {
    assert_ne!(eventful(7, 1).0, eventful(8, 1).0);
}

#[test]
fn threads_do_not_change_the_trace() {
    let (one, sim) = eventful(11, 1);
    let (two, parallel) = eventful(11, 2);
    assert_eq!(one, two);
    assert_eq!(one, eventful(11, 3).0);
    assert_eq!(sim.stats().parallel_windows, 0);
    assert!(
        parallel.stats().parallel_windows > 1000,
        "{:?}",
        parallel.stats()
    );
    assert_eq!(sim.stats().events, parallel.stats().events);
    assert_eq!(
        sim.declarations(Duration::ZERO),
        parallel.declarations(Duration::ZERO)
    );
}

#[test]
fn a_converged_start_is_converged_and_quiet() {
    let mut sim = cluster(30, 1);
    assert_eq!(sim.pending_bootstrap(), 30);
    assert_eq!(
        sim.now(),
        secs(1.0),
        "the clock starts after the first probe interval"
    );
    assert_eq!(sim.pending_bootstrap(), 0);
    assert!(sim.is_converged());
    sim.run_until(secs(30.0)).unwrap();
    assert!(sim.is_converged());
    let stats = sim.stats();
    assert_eq!(stats.drivers.foca_errors, [0; 12], "{stats:?}");
    assert_eq!(stats.drivers.bad_messages, 0);
    assert_eq!(stats.suspicions, 0);
    assert!(sim.declarations(Duration::ZERO).is_empty());
    // Every message arrived; bytes count the 33-byte frame and our kind byte.
    assert_eq!(
        stats.traffic.sent,
        stats.traffic.received + stats.in_flight as u64
    );
    assert!(stats.traffic.sent_bytes >= stats.traffic.sent * 34);
}

#[test]
fn a_join_reaches_everyone() {
    let mut sim = cluster(60, 2);
    let joiner = sim.add_node().unwrap();
    let t0 = sim.now();
    sim.join(joiner, &[5]).unwrap();
    let done = sim
        .run_until_learned(joiner, Change::Up, t0, t0 + secs(30.0))
        .unwrap()
        .expect("every member learns of the joiner");
    let (delays, observers) = sim.learned_times(joiner, Change::Up, t0).unwrap();
    assert_eq!(observers, 60);
    assert_eq!(delays.len(), 60);
    assert_eq!(t0 + *delays.last().unwrap(), done);
    // The joiner itself learns the whole cluster from its seed's state at once.
    let known = sim.learned_by(joiner, t0).unwrap();
    assert_eq!(known.len(), 60);
    assert!(*known.last().unwrap() < secs(1.0), "{known:?}");
    sim.run_until(done + secs(5.0)).unwrap();
    assert!(sim.is_converged());
}

#[test]
fn a_crash_is_detected_by_every_survivor() {
    let config = fast();
    let mut sim = cluster(40, 3);
    let t0 = sim.now() + secs(2.0);
    sim.run_until(t0).unwrap();
    sim.crash(7).unwrap();
    assert_eq!(sim.status(7).unwrap(), NodeStatus::Crashed);
    let bound = t0 + config.detection_bound(40);
    let done = sim
        .run_until_learned(7, Change::Down, t0, bound)
        .unwrap()
        .expect("every survivor declares the crashed node down within the bound");
    let suspicions = sim.suspicions(t0);
    let first = suspicions
        .iter()
        .find(|s| s.target == 7)
        .expect("suspected first");
    assert!(!first.target_alive);
    assert!(first.first_at < done);
    let declarations = sim.declarations(t0);
    assert!(declarations.iter().any(|d| d.target == 7));
    assert!(declarations
        .iter()
        .all(|d| d.target == 7 && !d.false_positive));
    // Nobody suspected a healthy node.
    assert!(suspicions.iter().all(|s| s.target == 7), "{suspicions:?}");
}

#[test]
fn a_partition_heals_into_one_view() {
    let mut sim = cluster(30, 4);
    let t0 = sim.now();
    sim.partition(&[(0..15).collect()]).unwrap();
    sim.run_until(t0 + secs(20.0)).unwrap();
    // Each side has declared the other down.
    assert_eq!(sim.members_of(0).unwrap(), 14);
    assert_eq!(sim.members_of(29).unwrap(), 14);
    assert!(!sim.is_converged());
    let declarations = sim.declarations(t0);
    assert!(!declarations.is_empty());
    assert!(declarations.iter().all(|d| d.false_positive));
    sim.heal();
    let healed = sim.now();
    let converged = sim
        .run_until_converged(healed + secs(300.0), secs(0.1))
        .unwrap()
        .expect("one view again after the heal");
    assert!(converged > healed);
    assert!(sim.is_converged());
}

#[test]
fn leaving_is_recorded_as_left_and_restarts_as_renamed() {
    let mut sim = cluster(20, 5);
    let t0 = sim.now();
    sim.leave(4).unwrap();
    assert_eq!(sim.status(4).unwrap(), NodeStatus::Left);
    sim.run_until(t0 + secs(5.0)).unwrap();
    let (delays, observers) = sim.learned_times(4, Change::Down, t0).unwrap();
    assert_eq!((delays.len(), observers), (19, 19));
    for observer in [0, 19] {
        let records = sim.records(observer).unwrap();
        assert!(records
            .iter()
            .any(|r| r.subject == 4 && r.learned == grid_core::sim::Learned::Left));
    }
    let back = sim.now();
    sim.restart(4, &[0]).unwrap();
    assert!(sim.generation(4).unwrap().unwrap() > grid_core::sim::generation_for(0));
    let done = sim
        .run_until_learned(4, Change::Up, back, back + secs(30.0))
        .unwrap();
    assert!(done.is_some());
    assert!(sim.declarations(Duration::ZERO).is_empty());
}

#[test]
fn a_slow_node_is_suspected_while_alive() {
    let mut sim = cluster(20, 6);
    let t0 = sim.now();
    // Slower than the whole probe period: its acks always come too late.
    sim.set_slow(9, secs(1.2)).unwrap();
    sim.run_until(t0 + secs(30.0)).unwrap();
    let suspicions = sim.suspicions(t0);
    assert!(
        suspicions.iter().any(|s| s.target == 9 && s.target_alive),
        "{suspicions:?}"
    );
}

#[test]
fn nodes_started_isolated_form_a_cluster_by_joining() {
    let mut sim = Simulation::new(
        12,
        9,
        SimSettings {
            start: Start::Isolated,
            ..settings(1)
        },
    )
    .unwrap();
    assert_eq!(sim.now(), Duration::ZERO);
    assert_eq!(sim.members_of(3).unwrap(), 0);
    for node in 1..12 {
        sim.join(node, &[0]).unwrap();
    }
    let done = sim.run_until_converged(secs(60.0), secs(0.1)).unwrap();
    assert!(done.is_some());
}

#[test]
fn total_loss_on_a_link_loses_everything_on_it() {
    let mut sim = cluster(10, 10);
    sim.set_link_loss(1, 2, 1.0).unwrap();
    let t0 = sim.now();
    sim.run_until(t0 + secs(20.0)).unwrap();
    let lost = sim.traffic(1).unwrap().lost + sim.traffic(2).unwrap().lost;
    assert!(lost > 0);
    assert_eq!(sim.stats().traffic.lost, lost);
    // Indirect probes route around one broken link.
    assert!(sim.declarations(Duration::ZERO).is_empty());
}

#[test]
fn exponential_jitter_and_high_loss_run() {
    let mut sim = Simulation::new(
        30,
        12,
        SimSettings {
            net: NetModel {
                delay: Duration::from_micros(200),
                jitter: Jitter::Exponential(Duration::from_millis(2)),
                loss: 0.3,
            },
            ..settings(2)
        },
    )
    .unwrap();
    let t0 = sim.now();
    sim.run_until(t0 + secs(60.0)).unwrap();
    let stats = sim.stats();
    let lost = stats.traffic.lost as f64 / stats.traffic.sent as f64;
    assert!((0.25..0.35).contains(&lost), "{lost}");
    // 30 % loss each way overwhelms three indirect probes now and then.
    assert!(stats.suspicions > 0);
}

#[test]
fn bad_steps_are_refused_and_change_nothing() {
    let mut sim = cluster(5, 13);
    let now = sim.now();
    let hash = sim.trace_hash();
    assert_eq!(sim.crash(5), Err(SimError::UnknownNode(5)));
    assert_eq!(sim.join(0, &[9]), Err(SimError::UnknownNode(9)));
    assert_eq!(sim.restart(1, &[0]), Err(SimError::StillRunning(1)));
    assert_eq!(
        sim.partition(&[vec![0, 1], vec![1]]),
        Err(SimError::NodeInTwoGroups(1))
    );
    assert!(matches!(
        sim.set_link_loss(0, 1, -0.1),
        Err(SimError::BadProbability { .. })
    ));
    assert!(matches!(
        sim.set_slow(0, secs(120.0)),
        Err(SimError::BadDelay { .. })
    ));
    assert_eq!(sim.trace_hash(), hash);
    assert!(sim.is_converged());
    sim.run_until(now + secs(1.0)).unwrap();
    assert!(matches!(
        sim.run_until(now),
        Err(SimError::TimeInPast { .. })
    ));
    sim.crash(2).unwrap();
    assert_eq!(sim.crash(2), Err(SimError::NotRunning(2)));
    assert_eq!(sim.join(2, &[0]), Err(SimError::NotRunning(2)));
    let bad = SimSettings {
        swim: SwimConfig {
            gossip_nodes: 0,
            ..fast()
        },
        ..SimSettings::default()
    };
    let err = Simulation::new(3, 1, bad).err().unwrap();
    assert!(err.to_string().contains("gossipNodes"), "{err}");
}

#[test]
fn suspicions_under_loss_are_refuted_in_place() {
    let mut sim = Simulation::new(
        30,
        14,
        SimSettings {
            net: NetModel {
                loss: 0.15,
                ..NetModel::default()
            },
            ..settings(1)
        },
    )
    .unwrap();
    let t0 = sim.now();
    sim.run_until(t0 + secs(120.0)).unwrap();
    let suspicions = sim.suspicions(t0);
    assert!(
        suspicions.iter().any(|s| s.target_alive),
        "no suspicion to refute"
    );
    let drivers = sim.stats().drivers;
    // Each suspector told its suspect directly, and the suspects refuted.
    assert!(drivers.suspicion_notices > 0, "{drivers:?}");
    assert!(drivers.refutations > 0, "{drivers:?}");
    assert!(
        sim.declarations(t0).iter().all(|d| !d.false_positive),
        "{:?}",
        sim.declarations(t0)
    );
    // The suspicion timers of refuted suspicions expired harmlessly: nobody was made to
    // declare itself down and rejoin under a new identity.
    assert!(drivers.stale_suspicion_timers > 0, "{drivers:?}");
    for node in 0..30 {
        assert_eq!(sim.generation(node).unwrap(), Some(1 << 32), "node {node}");
    }
}

#[test]
fn a_slow_node_backs_off_instead_of_accusing_healthy_members() {
    let mut sim = cluster(20, 15);
    let t0 = sim.now();
    // More than two probe intervals late: every ack it waits for arrives after its
    // deadline, so it suspects whoever it probes unless it learns to wait longer.
    sim.set_slow(9, secs(2.5)).unwrap();
    let mut health = Vec::new();
    for second in 1..=120 {
        sim.run_until(t0 + secs(f64::from(second))).unwrap();
        health.push(sim.driver_stats(9).unwrap().unwrap().local_health);
    }
    let by_slow: Vec<_> = sim
        .declarations(t0)
        .into_iter()
        .filter(|d| d.by == 9)
        .collect();
    assert!(by_slow.is_empty(), "{by_slow:?}");
    assert!(health.iter().any(|h| *h > 0), "{health:?}");
    let healthy = sim.driver_stats(3).unwrap().unwrap();
    assert_eq!(healthy.local_health, 0, "{healthy:?}");
    // It stretched its probe period until the answers came in time: without that every
    // probe of its 120 s would have failed.
    let slow = sim.driver_stats(9).unwrap().unwrap();
    assert!(slow.late_answers > 0, "{slow:?}");
    assert!(slow.probes_failed < 30, "{slow:?}");
}

/// The traces of fixed scenarios, pinned: a change that makes the simulator faster must not
/// change what it computes. Re-pin only for a deliberate change of behaviour (the driver's
/// protocol, the network model or the order of events), and say so.
#[test]
fn the_traces_of_fixed_scenarios_are_pinned() {
    assert_eq!(eventful(7, 1).0, 11464707128902007279, "eventful, seed 7");
    let mut sim = Simulation::new(100, 3, settings(2)).unwrap();
    sim.set_net(NetModel {
        loss: 0.02,
        ..NetModel::default()
    })
    .unwrap();
    let t0 = sim.now();
    sim.run_until(t0 + secs(10.0)).unwrap();
    let joiner = sim.add_node().unwrap();
    sim.join(joiner, &[4]).unwrap();
    sim.crash(9).unwrap();
    sim.leave(20).unwrap();
    sim.run_until(t0 + secs(30.0)).unwrap();
    assert!(
        sim.stats().drivers.syncs_completed > 100,
        "{:?}",
        sim.stats()
    );
    assert_eq!(
        sim.trace_hash(),
        13081121531938643175,
        "100 members, 2 % loss, seed 3"
    );
}
