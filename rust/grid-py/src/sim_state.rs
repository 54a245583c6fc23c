//! `grid._native.run_state_scenario`: the simulator's state-plane scenario (sites publish
//! items through their drivers; fill, steady traffic by kind, changes, a joiner's
//! catch-up), run whole in Rust with the GIL released, its report as one dict.

use grid_core::sim::{
    run_state_scenario as run_scenario, SimSettings, Start, StateScenario, StateStart, TrafficKind,
    PARALLEL_WORK,
};
use pyo3::import_exception;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::sim::{positive_seconds, sim_error, swim_and_net};

import_exception!(grid.errors, SimulationError);

/// Runs the state-plane scenario at `sites` × `providers` and returns its report: `items`
/// (names a full store holds), `start` (as given), `filled_after` (seconds from the first
/// publication until every store was full, or None; sites start over `items / start_rate`
/// seconds; always None with `start="converged"`: every store holds every site's items
/// from the start),
/// `missing_after_fill`, `window` (seconds of steady
/// state measured), `traffic` (kind → sent, sent_bytes, received, received_bytes summed
/// over sites in the window), `busiest_site_bytes`, `change_delays` (seconds each change
/// took to reach every other node, None if it did not), `catch_ups` (one dict for each of
/// the joiner's `joins` lives: `catch_up_99` and `catch_up`, seconds until it held 99 %
/// and all of the names, or None; `items` it held then; `bytes_in` it received), `ended_at`
/// (virtual seconds) and `events`.
#[pyfunction]
#[pyo3(signature = (
    sites,
    providers,
    seed = 1,
    *,
    probe_interval = 5.0,
    suspicion_timeout = 10.0,
    gossip_nodes = 3,
    push_pull_interval = 30.0,
    delay = 0.005,
    jitter = 0.005,
    jitter_kind = "exponential",
    loss = 0.0,
    scrape_interval = 15.0,
    window = 60.0,
    start_rate = 25.0,
    start = "growing",
    changes = 20,
    joins = 1,
    patience = 600.0,
    threads = 1,
))]
#[allow(clippy::too_many_arguments)]
fn run_state_scenario<'py>(
    py: Python<'py>,
    sites: usize,
    providers: usize,
    seed: u64,
    probe_interval: f64,
    suspicion_timeout: f64,
    gossip_nodes: usize,
    push_pull_interval: f64,
    delay: f64,
    jitter: f64,
    jitter_kind: &str,
    loss: f64,
    scrape_interval: f64,
    window: f64,
    start_rate: f64,
    start: &str,
    changes: usize,
    joins: usize,
    patience: f64,
    threads: usize,
) -> PyResult<Bound<'py, PyDict>> {
    if sites < 2 {
        return Err(SimulationError::new_err("sites must be at least 2"));
    }
    if threads == 0 {
        return Err(SimulationError::new_err("threads must be at least 1"));
    }
    let mut scenario = StateScenario::new(sites, providers, seed);
    let (swim, net) = swim_and_net(
        probe_interval,
        suspicion_timeout,
        gossip_nodes,
        push_pull_interval,
        delay,
        jitter,
        jitter_kind,
        loss,
    )?;
    scenario.settings = SimSettings {
        swim,
        net,
        start: Start::Converged,
        threads,
        parallel_work: PARALLEL_WORK,
    };
    scenario.load.scrape_interval = positive_seconds("scrape_interval", scrape_interval)?;
    scenario.window = positive_seconds("window", window)?;
    if !(start_rate > 0.0 && start_rate.is_finite()) {
        return Err(SimulationError::new_err(format!(
            "start_rate must be a positive number of names a second, got {start_rate}"
        )));
    }
    scenario.start_rate = start_rate;
    scenario.start = match start {
        "growing" => StateStart::Growing,
        "converged" => StateStart::Converged,
        _ => {
            return Err(SimulationError::new_err(format!(
                "start must be \"growing\" or \"converged\", got {start:?}"
            )))
        }
    };
    scenario.changes = changes;
    if joins == 0 {
        return Err(SimulationError::new_err("joins must be at least 1"));
    }
    scenario.joins = joins;
    scenario.patience = positive_seconds("patience", patience)?;
    let report = py.detach(|| run_scenario(&scenario)).map_err(sim_error)?;
    let secs = |d: Option<std::time::Duration>| d.map(|d| d.as_secs_f64());
    let dict = PyDict::new(py);
    dict.set_item("sites", report.sites)?;
    dict.set_item("providers", providers)?;
    dict.set_item("items", report.items)?;
    dict.set_item("start", start)?;
    dict.set_item("filled_after", secs(report.filled_after))?;
    dict.set_item("missing_after_fill", report.missing_after_fill)?;
    dict.set_item("window", report.window.as_secs_f64())?;
    let traffic = PyDict::new(py);
    for kind in TrafficKind::ALL {
        let count = report.traffic.of(kind);
        let row = PyDict::new(py);
        row.set_item("sent", count.sent)?;
        row.set_item("sent_bytes", count.sent_bytes)?;
        row.set_item("received", count.received)?;
        row.set_item("received_bytes", count.received_bytes)?;
        traffic.set_item(kind.name(), row)?;
    }
    dict.set_item("traffic", traffic)?;
    dict.set_item("busiest_site_bytes", report.busiest_site_bytes)?;
    let delays: Vec<Option<f64>> = report.change_delays.iter().map(|d| secs(*d)).collect();
    dict.set_item("change_delays", delays)?;
    let catch_ups = PyList::empty(py);
    for catch_up in &report.catch_ups {
        let row = PyDict::new(py);
        row.set_item("catch_up_99", secs(catch_up.most))?;
        row.set_item("catch_up", secs(catch_up.all))?;
        row.set_item("items", catch_up.items)?;
        row.set_item("bytes_in", catch_up.bytes_in)?;
        catch_ups.append(row)?;
    }
    dict.set_item("catch_ups", catch_ups)?;
    dict.set_item("ended_at", report.ended_at.as_secs_f64())?;
    dict.set_item("events", report.events)?;
    Ok(dict)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_state_scenario, m)?)?;
    Ok(())
}
