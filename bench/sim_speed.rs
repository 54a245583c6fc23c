//! How fast the simulator runs a converged cluster: virtual seconds per wall second.
//!
//! For each size, a converged cluster under the `grid` profile (probe 5 s, suspicion 10 s,
//! 3 gossip nodes, push/pull every 30 s scaled by cluster size) on the default network is
//! formed, warmed up for 10 virtual seconds, then run for `--span` virtual seconds (one
//! push/pull period by default, so every node syncs once in it); the speed is virtual over
//! wall time. With `--runs R` the timed span is cut into R equal parts and the median part
//! is reported beside the whole, and so is the speed per CPU second (virtual seconds over
//! the CPU time of all threads), which other load on the machine hardly moves, and the
//! syncs completed in the span beside the requests and answers sent without members (the
//! views agreed). It prints one line per size, plus the trace fingerprint
//! so that two builds can be checked for identical results. With `--loss P` every message
//! is lost with probability P from the end of forming on: the steady state of the accuracy
//! runs of `grid bench convergence`, where suspicions and refutations keep foca's update
//! backlog full and views rarely agree.
//!
//! Run: `cargo run --release -p grid-core --example sim_speed -- --sizes 1000,10000`
//! (options: `--threads T` (default 2), `--span S`, `--runs R` (default 5), `--seed N`,
//! `--loss P` (default 0)).

use std::time::{Duration, Instant};

use grid_core::driver::config::SwimConfig;
use grid_core::sim::{NetModel, SimSettings, Simulation};

const WARM_UP: Duration = Duration::from_secs(10);

struct Options {
    sizes: Vec<usize>,
    threads: usize,
    span: Option<f64>,
    runs: u32,
    seed: u64,
    loss: f64,
}

fn parse() -> Options {
    let mut options = Options {
        sizes: vec![1_000],
        threads: 2,
        span: None,
        runs: 5,
        seed: 1,
        loss: 0.0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--sizes" => {
                options.sizes = value
                    .split(',')
                    .map(|s| s.replace('_', "").parse().expect("a size"))
                    .collect();
            }
            "--threads" => options.threads = value.parse().expect("a thread count"),
            "--span" => options.span = Some(value.parse().expect("seconds")),
            "--runs" => options.runs = value.parse().expect("a run count"),
            "--seed" => options.seed = value.parse().expect("a seed"),
            "--loss" => options.loss = value.parse().expect("a probability"),
            _ => panic!("unknown option {flag}"),
        }
    }
    options
}

/// CPU seconds this process has used, all threads: unlike wall time, hardly moved by
/// other load on the machine.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// This process's peak resident memory in GiB (VmHWM; 0 where /proc is not available).
fn peak_gib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / (1024.0 * 1024.0))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let options = parse();
    for &size in &options.sizes {
        let swim = SwimConfig {
            probe_interval: Duration::from_secs(5),
            suspicion_timeout: Duration::from_secs(10),
            gossip_nodes: 3,
            push_pull_interval: Duration::from_secs(30),
        };
        let span = options
            .span
            .map_or_else(|| swim.push_pull_period(size), Duration::from_secs_f64);
        let settings = SimSettings {
            swim,
            threads: options.threads,
            ..SimSettings::default()
        };
        let formed = Instant::now();
        let form_cpu_before = cpu_seconds();
        let net = settings.net.clone();
        let mut sim = Simulation::new(size, options.seed, settings).expect("valid settings");
        if options.loss > 0.0 {
            sim.set_net(NetModel {
                loss: options.loss,
                ..net
            })
            .expect("a valid loss");
        }
        let start = sim.now();
        let form = formed.elapsed().as_secs_f64();
        let form_cpu = cpu_seconds() - form_cpu_before;
        // Said at once: a profiler may attach to the steady state from here on.
        eprintln!("size={size} formed in {form:.1} s");
        sim.run_until(start + WARM_UP).expect("forward");
        let before = sim.stats();
        let part = span / options.runs.max(1);
        let mut speeds = Vec::new();
        let whole = Instant::now();
        let cpu_before = cpu_seconds();
        for _ in 0..options.runs.max(1) {
            let tick = Instant::now();
            let now = sim.now();
            sim.run_until(now + part).expect("forward");
            speeds.push(part.as_secs_f64() / tick.elapsed().as_secs_f64());
        }
        let wall = whole.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu_before;
        let after = sim.stats();
        let events = after.events - before.events;
        let syncs = after.drivers.syncs_completed - before.drivers.syncs_completed;
        let left_out = after.drivers.sync_members_left_out - before.drivers.sync_members_left_out;
        println!(
            "size={size} loss={} form_s={form:.2} form_cpu_s={form_cpu:.2} span_s={:.0} wall_s={wall:.2} speed={:.2} \
             median_part_speed={:.2} cpu_s={cpu:.2} cpu_speed={:.2} events_per_s={:.0} \
             syncs={syncs} members_left_out={left_out} peak_gib={:.2} trace={:016x}",
            options.loss,
            span.as_secs_f64(),
            span.as_secs_f64() / wall,
            median(speeds),
            span.as_secs_f64() / cpu,
            events as f64 / wall,
            peak_gib(),
            sim.trace_hash(),
        );
    }
}
