//! The state-plane scenario: every site publishes what a real site publishes
//! ([`SiteLoad`]) through its driver, and the run reports what the state plane costs and
//! how fast it moves:
//!
//! 1. **fill**: sites start publishing at instants spread over [`start_spread`] (as a mesh
//!    grows), each its certificate, gateway, metadata, catalogue and signals pages; the
//!    run waits until every store holds every name. With [`StateStart::Converged`] every
//!    store holds them from the start instead, and the run waits one scrape interval
//!    (every site writes its pages again);
//! 2. **traffic**: over a window of steady state (pages written again at every scrape),
//!    each node's messages and bytes by kind;
//! 3. **changes**: one at a time, a site publishes a new version of one of its providers'
//!    catalogue items; how long until every other running node took it;
//! 4. **catch-up**: a node with an empty store joins; how long until it holds 99 % of the
//!    names, and every name, and how many bytes it received meanwhile; then it leaves and,
//!    [`StateScenario::joins`] times in all, joins again in its next life (as
//!    `grid bench mesh --others-join` does).
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
/// Between a joiner's departure and its next life's join: the mesh takes the departure in.
const JOIN_GAP: Duration = Duration::from_secs(5);

/// How a state-plane run begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StateStart {
    /// Sites start one after the other at [`StateScenario::start_rate`], and the run times
    /// until every store holds every name.
    #[default]
    Growing,
    /// Every store holds every site's first publications from the start, as in a mesh
    /// that converged long ago: no fill phase, so that meshes too large to grow within a
    /// run's time are measured in steady state, on changes and on a joiner's catch-up.
    Converged,
}

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
    pub start: StateStart,
    /// Catalogue changes timed, one after the other.
    pub changes: usize,
    /// Lives of the joiner: each joins with an empty store, catches up and leaves.
    pub joins: usize,
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
            start: StateStart::Growing,
            changes: 20,
            joins: 1,
            patience: Duration::from_secs(600),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StateReport {
    pub sites: usize,
    /// Item names every store holds once full (every site's items).
    pub items: usize,
    pub start: StateStart,
    /// From the first publication until every store held every name (`None`: not within
    /// the patience, or not measured: a converged start).
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
    /// Each of the joiner's lives, in order.
    pub catch_ups: Vec<CatchUp>,
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

/// How one life of the joiner caught up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatchUp {
    /// From its join until it held 99 % of the names, and every name (`None`: not within
    /// the patience).
    pub most: Option<Duration>,
    pub all: Option<Duration>,
    /// Names it held when it caught up or gave up.
    pub items: usize,
    /// Framed bytes it received meanwhile.
    pub bytes_in: u64,
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
    let filled_after = match scenario.start {
        StateStart::Growing => {
            run.fill(items, start + start_spread(scenario) + scenario.patience)?
        }
        StateStart::Converged => {
            run.run_to(start + scenario.load.scrape_interval)?;
            None
        }
    };
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
    let catch_ups = run.joins(items, scenario.joins, scenario.patience)?;
    Ok(StateReport {
        sites,
        items,
        start: scenario.start,
        filled_after: filled_after.map(|at| at - start),
        missing_after_fill,
        window: scenario.window,
        traffic,
        busiest_site_bytes,
        change_delays,
        catch_ups,
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
        // Growing, sites first publish over the start's spread; converged, they write
        // their pages again within a scrape interval.
        let spread = match scenario.start {
            StateStart::Growing => start_spread(scenario),
            StateStart::Converged => scenario.load.scrape_interval,
        };
        let slots = (spread.as_nanos() / PUBLISH_GRID.as_nanos()).max(1);
        let schedule = (0..scenario.sites as u32)
            .map(|site| {
                let slot = rng.random_range(0..slots) as u32;
                Reverse((start + PUBLISH_GRID * slot, site))
            })
            .collect();
        let mut run = StateRun {
            sim,
            items: scenario.load.site_items(),
            pages: scenario.load.page_items(),
            load: scenario.load.clone(),
            schedule,
            rounds: vec![0; scenario.sites],
            catalogue: HashMap::new(),
            rng,
        };
        if scenario.start == StateStart::Converged {
            run.converge()?;
        }
        Ok(run)
    }

    /// Every site's first publications, held by every store (see
    /// [`Simulation::publish_converged`]).
    fn converge(&mut self) -> Result<(), SimError> {
        for site in 0..self.rounds.len() as u32 {
            let name = site_of(site);
            let bodies: Vec<Vec<u8>> = self
                .items
                .iter()
                .map(|item| payload(&name, &item.key, 1, item.bytes))
                .collect();
            let items = self
                .items
                .iter()
                .zip(&bodies)
                .map(|(item, body)| (item.lane, item.key.as_str(), 1, body.as_slice()));
            self.sim.publish_converged(site, items)?;
            self.rounds[site as usize] = 1;
        }
        Ok(())
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

    /// A node with an empty store joins through node 0 and catches up, then leaves, and
    /// again in its next life, `joins` times: how each life caught up.
    fn joins(
        &mut self,
        items: usize,
        joins: usize,
        patience: Duration,
    ) -> Result<Vec<CatchUp>, SimError> {
        let joiner = self.sim.add_node()?;
        self.rounds.push(0);
        let mut catch_ups = Vec::with_capacity(joins);
        for life in 0..joins {
            if life == 0 {
                self.sim.join(joiner, &[0])?;
            } else {
                self.sim.restart(joiner, &[0])?;
            }
            catch_ups.push(self.catch_up(joiner, items, patience)?);
            if life + 1 < joins {
                self.sim.leave(joiner)?;
                let next = self.sim.now() + JOIN_GAP;
                self.run_to(next)?;
            }
        }
        Ok(catch_ups)
    }

    /// How `joiner`, joined just now with an empty store, catches up to `items` names.
    fn catch_up(
        &mut self,
        joiner: u32,
        items: usize,
        patience: Duration,
    ) -> Result<CatchUp, SimError> {
        let start = self.sim.now();
        let received = |run: &Self| -> Result<u64, SimError> {
            Ok(run.sim.kind_traffic(joiner)?.total().received_bytes)
        };
        let before = received(self)?;
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
                break;
            }
            if at >= start + patience {
                break;
            }
            at += CATCH_UP_CHECK;
            self.run_to(at)?;
        }
        catch_up.bytes_in = received(self)? - before;
        Ok(catch_up)
    }
}
