//! The state plane in the simulator: items published through the drivers reach every
//! store, a change reaches every node, and a joiner with an empty store catches up.

use std::time::Duration;

use grid_core::driver::config::SwimConfig;
use grid_core::lanes::Lane;
use grid_core::sim::{
    run_state_scenario, SimSettings, Simulation, StateScenario, StateStart, TrafficKind,
};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn small_scenario(seed: u64) -> StateScenario {
    let mut scenario = StateScenario::new(12, 10, seed);
    scenario.settings = SimSettings {
        swim: SwimConfig {
            probe_interval: secs(1.0),
            suspicion_timeout: secs(3.0),
            gossip_nodes: 3,
            push_pull_interval: secs(10.0),
        },
        ..SimSettings::default()
    };
    scenario.window = secs(20.0);
    scenario.changes = 5;
    scenario.patience = secs(120.0);
    scenario
}

#[test]
fn items_fill_every_store_changes_converge_and_a_joiner_catches_up() {
    let scenario = small_scenario(3);
    let report = run_state_scenario(&scenario).unwrap();
    // 2 certificate chunks, gateway, metadata, 10 providers, 1 page: 15 names a site.
    assert_eq!(report.items, 12 * 15);
    assert!(report.filled_after.is_some(), "{report:?}");
    assert_eq!(report.change_delays.len(), 5);
    for delay in &report.change_delays {
        let delay = delay.expect("every change reached every node");
        assert!(delay > Duration::ZERO && delay < secs(30.0), "{delay:?}");
    }
    let [catch_up] = report.catch_ups.as_slice() else {
        panic!("one join: {report:?}")
    };
    assert!(catch_up.all.is_some(), "{report:?}");
    assert_eq!(catch_up.items, report.items);
    assert!(catch_up.bytes_in > 0);
    // Items travel as broadcasts and in syncs; pages are written at every scrape.
    let broadcast = report.traffic.of(TrafficKind::Broadcast);
    assert!(broadcast.sent > 0 && broadcast.received_bytes > 0);
    assert!(report.traffic.of(TrafficKind::SyncRequest).sent_bytes > 0);
    assert!(report.traffic.of(TrafficKind::SyncResponse).sent_bytes > 0);
    assert!(report.traffic.of(TrafficKind::Swim).sent > 0);
    assert!(report.bytes_per_site_second() > 0.0);
}

#[test]
fn a_converged_start_holds_every_name_at_once_and_measures_the_same_steady_state() {
    let growing = run_state_scenario(&small_scenario(3)).unwrap();
    let mut scenario = small_scenario(3);
    scenario.start = StateStart::Converged;
    let converged = run_state_scenario(&scenario).unwrap();
    assert_eq!(converged.start, StateStart::Converged);
    assert_eq!(converged.filled_after, None, "no fill phase to time");
    assert_eq!(converged.missing_after_fill, 0);
    // The run skipped the fill: it ended well before the growing one did.
    assert!(
        converged.ended_at + growing.filled_after.unwrap() <= growing.ended_at + secs(20.0),
        "{:?} {:?}",
        converged.ended_at,
        growing.ended_at
    );
    // Steady state is the same mesh's: pages at every scrape, the same bytes per kind
    // within a tenth, every change and the joiner's catch-up as fast.
    for kind in [
        TrafficKind::Broadcast,
        TrafficKind::SyncRequest,
        TrafficKind::Digest,
    ] {
        let (a, b) = (
            growing.traffic.of(kind).sent_bytes as f64,
            converged.traffic.of(kind).sent_bytes as f64,
        );
        assert!(a > 0.0 && (a - b).abs() <= a / 10.0, "{kind:?}: {a} {b}");
    }
    assert!(converged.change_delays.iter().all(Option::is_some));
    assert_eq!(converged.catch_ups[0].items, converged.items);
    let catch_up = converged.catch_ups[0].all.expect("the joiner caught up");
    assert!(
        catch_up <= growing.catch_ups[0].all.unwrap() + secs(1.0),
        "{catch_up:?}"
    );
}

#[test]
fn a_joiner_that_leaves_joins_again_empty_in_its_next_life() {
    let mut scenario = small_scenario(4);
    scenario.start = StateStart::Converged;
    scenario.changes = 1;
    scenario.joins = 3;
    let report = run_state_scenario(&scenario).unwrap();
    assert_eq!(report.catch_ups.len(), 3);
    let first = report.catch_ups[0].bytes_in;
    for catch_up in &report.catch_ups {
        assert!(
            catch_up.all.is_some() && catch_up.items == report.items,
            "{catch_up:?}"
        );
        // Every life starts empty: each receives the whole store again, not the rest.
        assert!(
            catch_up.bytes_in >= first / 2 && catch_up.bytes_in <= first * 2,
            "{catch_up:?} against {first}"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_state_report() {
    let scenario = small_scenario(5);
    assert_eq!(
        run_state_scenario(&scenario).unwrap(),
        run_state_scenario(&scenario).unwrap()
    );
}

#[test]
fn a_published_version_is_timed_at_every_other_node_and_held_there() {
    let mut sim = Simulation::new(8, 1, SimSettings::default()).unwrap();
    let start = sim.now();
    let watch = sim.watch_item(2, Lane::State, "provider/a", 7).unwrap();
    assert!(sim
        .publish(2, Lane::State, "provider/a", 7, b"catalogue")
        .unwrap());
    // The same version again is not news.
    assert!(!sim
        .publish(2, Lane::State, "provider/a", 7, b"catalogue")
        .unwrap());
    sim.run_until(start + secs(5.0)).unwrap();
    let arrivals = sim.item_arrivals(watch);
    for node in 0..8 {
        let held = sim
            .held_version(node, 2, Lane::State, "provider/a")
            .unwrap();
        assert_eq!(held, Some(7), "node {node}");
        if node == 2 {
            assert_eq!(arrivals[2], None, "the origin takes nothing from a peer");
        } else {
            let at = arrivals[node as usize].expect("arrived");
            assert!(at > start && at < start + secs(1.0), "{at:?}");
        }
    }
    assert_eq!(sim.items_held(5).unwrap(), 1);
}

#[test]
fn a_store_too_small_refuses_what_does_not_fit() {
    let mut sim = Simulation::new(4, 1, SimSettings::default()).unwrap();
    sim.set_item_capacity(2).unwrap();
    sim.publish(0, Lane::State, "a", 1, b"x").unwrap();
    sim.publish(0, Lane::State, "b", 1, b"x").unwrap();
    assert!(sim.publish(0, Lane::State, "c", 1, b"x").is_err());
    assert!(sim.set_item_capacity(0).is_err());
}
