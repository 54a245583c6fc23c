//! The state-plane scenario: every site publishes what a real site publishes
//! ([`SiteLoad`]) through its driver, and the run reports what the state plane costs and
//! how fast it moves:
//!
//! 1. **fill**: sites start publishing at instants spread over [`start_spread`] (as a mesh
//!    grows), each its certificate, gateway, metadata, catalogue and signals pages; the
//!    run waits until every store holds every name;
//! 2. **traffic**: over a window of steady state (pages written again at every scrape),
//!    each node's messages and bytes by kind;
//! 3. **changes**: one at a time, a site publishes a new version of one of its providers'
//!    catalogue items; how long until every other running node took it;
//! 4. **catch-up**: a node with an empty store joins; how long until it holds 99 % of the
//!    names, and every name.
//!
//! Everything is virtual time and deterministic for a seed; phases give up after
//! [`StateScenario::patience`] and say so (`None`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::record::mix;
use super::state::site_of;
use super::workload::{payload, LoadItem, SiteLoad};
use super::{KindTraffic, SimError, SimSettings, Simulation};
use crate::driver::DEFAULT_ITEM_CAPACITY;

/// Sites start (and write their pages) on this grid of instants within a scrape interval.
const PUBLISH_GRID: Duration = Duration::from_millis(100);
/// How often the fill phase checks whether every store is full.
const FILL_CHECK: Duration = Duration::from_secs(1);
/// How often a change's spread and a joiner's store are checked; arrivals are timed
/// exactly, so this only bounds how long a run goes on after the last one.
const CHANGE_CHECK: Duration = Duration::from_millis(100);
const CATCH_UP_CHECK: Duration = Duration::from_millis(250);

#[derive(Clone, Debug, PartialEq)]
pub struct StateScenario {
    pub sites: usize,
    pub load: SiteLoad,
    pub seed: u64,
    pub settings: SimSettings,
    /// Steady-state traffic is measured over this long, once every store is full.
    pub window: Duration,
    /// New names a second, mesh-wide, while sites start: sites start one after the other
    /// (as a mesh grows) so that their first publications come at about this rate. A push
    /// reaches a node with probability about 1 - e^-g and digests repair only what was
    /// stored in their last window, so names published faster than digests repair wait
    /// for the sync walk (see docs/scale.md).
    pub start_rate: f64,
    /// Catalogue changes timed, one after the other.
    pub changes: usize,
    /// Each phase gives up after this long.
    pub patience: Duration,
}

impl StateScenario {
    pub fn new(sites: usize, providers: usize, seed: u64) -> StateScenario {
        StateScenario {
            sites,
            load: SiteLoad {
                providers,
                ..SiteLoad::default()
            },
            seed,
            settings: SimSettings::default(),
            window: Duration::from_secs(60),
            start_rate: 25.0,
            changes: 20,
            patience: Duration::from_secs(600),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StateReport {
    pub sites: usize,
    /// Item names every store holds once full (every site's items).
    pub items: usize,
    /// From the first publication until every store held every name.
    pub filled_after: Option<Duration>,
    /// Names missing from stores (summed over nodes) when the fill phase ended.
    pub missing_after_fill: usize,
    pub window: Duration,
    /// Summed over every site during the window.
    pub traffic: KindTraffic,
    /// The most bytes (sent and received) one site moved during the window.
    pub busiest_site_bytes: u64,
    /// For each change, from its publication until every other running node took it.
    pub change_delays: Vec<Option<Duration>>,
    /// From the joiner's join until it held 99 % of the names, and every name.
    pub catch_up_most: Option<Duration>,
    pub catch_up: Option<Duration>,
    /// Names the joiner held at the end.
    pub joiner_items: usize,
    /// The virtual time at the end, and the events the drivers handled.
    pub ended_at: Duration,
    pub events: u64,
}

impl StateReport {
    /// Bytes (sent plus received) per site and second during the window.
    pub fn bytes_per_site_second(&self) -> f64 {
        let total = self.traffic.total();
        (total.sent_bytes + total.received_bytes) as f64
            / self.sites as f64
            / self.window.as_secs_f64()
    }
}

/// Sites start over this long: at least a scrape interval, and long enough that their
/// first publications arrive at [`StateScenario::start_rate`] at most.
pub fn start_spread(scenario: &StateScenario) -> Duration {
    let names = (scenario.sites * scenario.load.items_per_site()) as f64;
    let spread = Duration::try_from_secs_f64(names / scenario.start_rate).unwrap_or(Duration::MAX);
    scenario.load.scrape_interval.max(spread)
}

/// How a joiner caught up: when it held 99 % of the names, when all, and how many at the
/// end.
#[derive(Default)]
struct CatchUp {
    most: Option<Duration>,
    all: Option<Duration>,
    items: usize,
}

/// The run: the simulation and the sites' publication schedule.
struct StateRun {
    sim: Simulation,
    load: SiteLoad,
    items: Vec<LoadItem>,
    pages: Vec<LoadItem>,
    /// When each site publishes next: everything the first time, its pages afterwards.
    schedule: BinaryHeap<Reverse<(Duration, u32)>>,
    /// Times each site wrote its pages (their version is this).
    rounds: Vec<u64>,
    catalogue: HashMap<(u32, usize), u64>,
    rng: SmallRng,
}

pub fn run_state_scenario(scenario: &StateScenario) -> Result<StateReport, SimError> {
    let sites = scenario.sites;
    let mut run = StateRun::new(scenario)?;
    let items = sites * scenario.load.items_per_site();
    let start = run.sim.now();
    let filled_after = run.fill(items, start + start_spread(scenario) + scenario.patience)?;
    let missing_after_fill = run.missing(items)?;
    let before = run.kind_traffic()?;
    let window_start = run.sim.now();
    run.run_to(window_start + scenario.window)?;
    let after = run.kind_traffic()?;
    let mut traffic = KindTraffic::default();
    let mut busiest_site_bytes = 0;
    for (now, then) in after.iter().zip(&before) {
        let delta = now.since(then);
        let total = delta.total();
        busiest_site_bytes = busiest_site_bytes.max(total.sent_bytes + total.received_bytes);
        traffic.add(&delta);
    }
    let change_delays = (0..scenario.changes)
        .map(|_| run.change(scenario.patience))
        .collect::<Result<Vec<_>, _>>()?;
    let catch_up = run.join_empty(items, scenario.patience)?;
    Ok(StateReport {
        sites,
        items,
        filled_after: filled_after.map(|at| at - start),
        missing_after_fill,
        window: scenario.window,
        traffic,
        busiest_site_bytes,
        change_delays,
        catch_up_most: catch_up.most,
        catch_up: catch_up.all,
        joiner_items: catch_up.items,
        ended_at: run.sim.now(),
        events: run.sim.stats().events,
    })
}

impl StateRun {
    fn new(scenario: &StateScenario) -> Result<StateRun, SimError> {
        let mut sim = Simulation::new(scenario.sites, scenario.seed, scenario.settings.clone())?;
        let names = scenario.sites * scenario.load.items_per_site();
        if names > DEFAULT_ITEM_CAPACITY {
            // What a real mesh this large sets too (`item_capacity`), with room to grow.
            sim.set_item_capacity(names + names / 4)?;
        }
        sim.set_kind_counting(true);
        let start = sim.now();
        let mut rng = SmallRng::seed_from_u64(mix(scenario.seed, 0x7374_6174_6500));
        let slots = (start_spread(scenario).as_nanos() / PUBLISH_GRID.as_nanos()).max(1);
        let schedule = (0..scenario.sites as u32)
            .map(|site| {
                let slot = rng.random_range(0..slots) as u32;
                Reverse((start + PUBLISH_GRID * slot, site))
            })
            .collect();
        Ok(StateRun {
            sim,
            items: scenario.load.site_items(),
            pages: scenario.load.page_items(),
            load: scenario.load.clone(),
            schedule,
            rounds: vec![0; scenario.sites],
            catalogue: HashMap::new(),
            rng,
        })
    }

    /// Runs to `target`, each site publishing when its turn comes.
    fn run_to(&mut self, target: Duration) -> Result<(), SimError> {
        while let Some(&Reverse((at, site))) = self.schedule.peek() {
            if at > target {
                break;
            }
            self.schedule.pop();
            self.sim.run_until(at)?;
            self.publish_turn(site)?;
            self.schedule
                .push(Reverse((at + self.load.scrape_interval, site)));
        }
        self.sim.run_until(target)
    }

    /// A site's turn: everything the first time, a new version of every page afterwards.
    fn publish_turn(&mut self, site: u32) -> Result<(), SimError> {
        if !self.sim.world.is_running(site) {
            return Ok(());
        }
        let round = &mut self.rounds[site as usize];
        *round += 1;
        let version = *round;
        let items = if version == 1 {
            &self.items
        } else {
            &self.pages
        };
        let name = site_of(site);
        for item in items {
            let body = payload(&name, &item.key, version, item.bytes);
            self.sim
                .publish(site, item.lane, &item.key, version, &body)?;
        }
        Ok(())
    }

    fn kind_traffic(&self) -> Result<Vec<KindTraffic>, SimError> {
        (0..self.sim.len() as u32)
            .map(|node| self.sim.kind_traffic(node))
            .collect()
    }

    /// Names running nodes' stores lack, summed.
    fn missing(&self, items: usize) -> Result<usize, SimError> {
        let mut missing = 0;
        for node in 0..self.sim.len() as u32 {
            if self.sim.world.is_running(node) {
                missing += items.saturating_sub(self.sim.items_held(node)?);
            }
        }
        Ok(missing)
    }

    /// Runs until every running node holds `items` names; when that was first seen.
    fn fill(&mut self, items: usize, deadline: Duration) -> Result<Option<Duration>, SimError> {
        let mut at = self.sim.now();
        while at <= deadline {
            self.run_to(at)?;
            let missing = self.missing(items)?;
            if missing == 0 {
                return Ok(Some(at));
            }
            at += FILL_CHECK;
        }
        Ok(None)
    }

    /// One catalogue change at a random running site: how long until every other running
    /// node took it.
    fn change(&mut self, patience: Duration) -> Result<Option<Duration>, SimError> {
        let running: Vec<u32> = (0..self.sim.len() as u32)
            .filter(|&node| self.sim.world.is_running(node) && self.rounds[node as usize] > 0)
            .collect();
        let site = running[self.rng.random_range(0..running.len())];
        let provider = self.rng.random_range(0..self.load.providers.max(1));
        let version = self.catalogue.entry((site, provider)).or_insert(1);
        *version += 1;
        let version = *version;
        let item = self.load.provider_item(provider);
        let body = payload(&site_of(site), &item.key, version, item.bytes);
        let start = self.sim.now();
        let watch = self.sim.watch_item(site, item.lane, &item.key, version)?;
        self.sim
            .publish(site, item.lane, &item.key, version, &body)?;
        let others: Vec<u32> = running.into_iter().filter(|&n| n != site).collect();
        let mut at = start;
        let delay = loop {
            let arrivals = self.sim.item_arrivals(watch);
            let latest = others
                .iter()
                .map(|&node| arrivals[node as usize])
                .try_fold(start, |latest, arrival| arrival.map(|a| latest.max(a)));
            if let Some(latest) = latest {
                break Some(latest - start);
            }
            if at >= start + patience {
                break None;
            }
            at += CHANGE_CHECK;
            self.run_to(at)?;
        };
        self.sim.clear_watches();
        Ok(delay)
    }

    /// A node with an empty store joins through node 0: how long until it holds 99 % of
    /// `items` names and all of them, and how many it held at the end.
    fn join_empty(&mut self, items: usize, patience: Duration) -> Result<CatchUp, SimError> {
        let joiner = self.sim.add_node()?;
        self.rounds.push(0);
        let start = self.sim.now();
        self.sim.join(joiner, &[0])?;
        let most = items - items / 100;
        let mut catch_up = CatchUp::default();
        let mut at = start;
        loop {
            catch_up.items = self.sim.items_held(joiner)?;
            if catch_up.items >= most && catch_up.most.is_none() {
                catch_up.most = Some(at - start);
            }
            if catch_up.items >= items {
                catch_up.all = Some(at - start);
                return Ok(catch_up);
            }
            if at >= start + patience {
                return Ok(catch_up);
            }
            at += CATCH_UP_CHECK;
            self.run_to(at)?;
        }
    }
}
