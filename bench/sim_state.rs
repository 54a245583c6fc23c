//! The state-plane scenario of the simulator at one size, printed: fill time, traffic per
//! site by kind, change convergence and a joiner's catch-up, with the wall time it took.
//!
//! Run: `cargo run --release -p grid-core --example sim_state -- [--converged] [--joins=N]
//! SITES PROVIDERS [THREADS [START_RATE [SCRAPE_SECONDS]]]` (defaults: 1 thread, 25 names
//! a second, 15 s). `--converged`: every store holds every site's items from the start (no
//! fill phase); `--joins=N`: the joiner joins N times (default 1).

use std::time::Instant;

use grid_core::sim::{run_state_scenario, StateScenario, StateStart, TrafficKind};

fn main() {
    let (flags, args): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a.starts_with("--"));
    let args: Vec<usize> = args
        .iter()
        .map(|a| a.parse().expect("SITES PROVIDERS [THREADS]"))
        .collect();
    let (sites, providers) = (args[0], args[1]);
    let mut scenario = StateScenario::new(sites, providers, 1);
    scenario.settings.threads = args.get(2).copied().unwrap_or(1);
    for flag in &flags {
        if flag == "--converged" {
            scenario.start = StateStart::Converged;
        } else if let Some(joins) = flag.strip_prefix("--joins=") {
            scenario.joins = joins.parse().expect("--joins=N");
        } else {
            panic!("unknown flag {flag}");
        }
    }
    if let Some(rate) = args.get(3) {
        scenario.start_rate = *rate as f64;
    }
    if let Some(scrape) = args.get(4) {
        scenario.load.scrape_interval = std::time::Duration::from_secs(*scrape as u64);
    }
    let wall = Instant::now();
    let report = run_state_scenario(&scenario).expect("scenario runs");
    let per = |bytes: u64| bytes as f64 / sites as f64 / report.window.as_secs_f64();
    println!(
        "{sites} sites x {providers} providers, {} names a store",
        report.items
    );
    println!(
        "filled after {:?}, {} names missing then",
        report.filled_after, report.missing_after_fill
    );
    for kind in TrafficKind::ALL {
        let count = report.traffic.of(kind);
        println!(
            "{:>10}: {:>9.0} B/s out {:>9.0} B/s in {:>7.1} msg/s out",
            kind.name(),
            per(count.sent_bytes),
            per(count.received_bytes),
            per(count.sent)
        );
    }
    println!("per site: {:.0} B/s in+out", report.bytes_per_site_second());
    let mut delays: Vec<_> = report.change_delays.iter().flatten().collect();
    delays.sort();
    println!(
        "changes converged: {} of {}, {:?}",
        delays.len(),
        report.change_delays.len(),
        delays
    );
    for catch_up in &report.catch_ups {
        println!(
            "catch-up 99% {:?}, all {:?} ({} names, {} bytes in)",
            catch_up.most, catch_up.all, catch_up.items, catch_up.bytes_in
        );
    }
    println!(
        "virtual {:?}, events {}, wall {:?}",
        report.ended_at,
        report.events,
        wall.elapsed()
    );
}
