//! The run loop: windows of independent node work on the virtual clock (see the module
//! docs of [`crate::sim`]), and the ways a caller runs it (to a time, until a change is
//! learned everywhere, until the cluster is converged).

use std::sync::Mutex;
use std::time::Duration;

use super::measure::{collect, converged, Until, Watch};
use super::node::{lock, Slot};
use super::queue::{run_nodes, split, Due, Helper};
use super::world::World;
use super::{nanos, Change, SimError, Simulation, ONE_NS};

impl Simulation {
    /// Handles every event up to and including `target`.
    pub fn run_until(&mut self, target: Duration) -> Result<(), SimError> {
        self.ensure_ready();
        self.check_future(target)?;
        self.advance_to(target, &mut Until::Time);
        Ok(())
    }

    fn check_future(&self, target: Duration) -> Result<(), SimError> {
        if target < self.queue.now {
            return Err(SimError::TimeInPast {
                requested: target,
                now: self.queue.now,
            });
        }
        Ok(())
    }

    /// Runs until every running node other than `subject` has learned that the subject's
    /// current life is up (or down), counting only what was learned at or after `since`,
    /// or until `deadline`. Returns when the last of them learned it.
    pub fn run_until_learned(
        &mut self,
        subject: u32,
        change: Change,
        since: Duration,
        deadline: Duration,
    ) -> Result<Option<Duration>, SimError> {
        self.check_node(subject)?;
        self.ensure_ready();
        self.check_future(deadline)?;
        let mut watch = Watch {
            subject,
            life: self.world.life[subject as usize],
            change,
            since_ns: nanos(since),
            learned: vec![false; self.slots.len()],
            count: 0,
            needed: self.observers_of(subject).count(),
            last_ns: 0,
        };
        for (observer, slot) in self.slots.iter().enumerate() {
            let mut slot = lock(slot);
            if observer as u32 != subject && self.world.is_running(observer as u32) {
                for record in &slot.records {
                    watch.offer(observer as u32, record);
                }
            }
            slot.scanned = slot.records.len();
        }
        if watch.done() {
            return Ok(Some(Duration::from_nanos(watch.last_ns)));
        }
        let mut until = Until::Learned(watch);
        Ok(self.advance_to(deadline, &mut until))
    }

    /// Runs until every running node sees every other running node alive in its current
    /// identity, checking every `every`, or until `deadline`. Returns the first check that
    /// found the cluster converged.
    pub fn run_until_converged(
        &mut self,
        deadline: Duration,
        every: Duration,
    ) -> Result<Option<Duration>, SimError> {
        if every < ONE_NS * 1000 {
            return Err(SimError::BadDelay {
                what: "check interval",
                value: every,
            });
        }
        self.ensure_ready();
        self.check_future(deadline)?;
        let mut until = Until::Converged {
            every,
            next: self.queue.now,
        };
        Ok(self.advance_to(deadline, &mut until))
    }

    /// Whether every running node sees every other running node alive in its current
    /// identity.
    pub fn is_converged(&mut self) -> bool {
        self.ensure_ready();
        converged(&self.world, &self.slots)
    }

    pub(super) fn observers_of(&self, subject: u32) -> impl Iterator<Item = u32> + '_ {
        (0..self.slots.len() as u32).filter(move |&o| o != subject && self.world.is_running(o))
    }

    /// The main loop: windows of independent node work until `target` or the condition.
    pub(super) fn advance_to(&mut self, target: Duration, until: &mut Until) -> Option<Duration> {
        let lookahead = self.world.net.delay;
        let threads = self.threads.min(self.slots.len()).max(1);
        let parallel_work = self.parallel_work;
        let Simulation {
            world,
            slots,
            queue,
            journal,
            windows,
            parallel_windows,
            ..
        } = self;
        let world: &World = world;
        let slots: &[Mutex<Slot>] = slots;
        let cluster = slots.len();
        std::thread::scope(|scope| {
            let helpers: Vec<Helper> = (1..threads)
                .map(|_| Helper::spawn(scope, world, slots))
                .collect();
            let mut bins: Vec<Vec<u32>> = vec![Vec::new(); threads];
            let mut dues: Vec<Due> = vec![Vec::new(); threads];
            let mut window = Vec::new();
            let mut outbox = Vec::new();
            loop {
                let next = queue.next_time(slots);
                if let Until::Converged { every, next: check } = until {
                    while *check <= target && next.map_or(true, |n| n > *check) {
                        if converged(world, slots) {
                            queue.now = queue.now.max(*check);
                            return Some(*check);
                        }
                        *check += *every;
                    }
                }
                let Some(start) = next.filter(|&n| n <= target) else {
                    break;
                };
                let mut end = (start + lookahead).min(target + ONE_NS);
                if let Until::Converged { next: check, .. } = until {
                    end = end.min(*check + ONE_NS);
                }
                queue.take_window(slots, end, &mut window);
                *windows += 1;
                let work: u64 = window.iter().map(|&(_, w)| w).sum();
                if !helpers.is_empty() && window.len() > 1 && work * cluster as u64 >= parallel_work
                {
                    *parallel_windows += 1;
                    split(&mut window, &mut bins);
                    for ((helper, bin), due) in
                        helpers.iter().zip(&mut bins[1..]).zip(&mut dues[1..])
                    {
                        helper.run(std::mem::take(bin), end, std::mem::take(due));
                    }
                    run_nodes(&bins[0], world, slots, end, &mut outbox, &mut dues[0]);
                    for ((helper, bin), due) in
                        helpers.iter().zip(&mut bins[1..]).zip(&mut dues[1..])
                    {
                        (*bin, *due) = helper.wait();
                    }
                } else {
                    bins[0].clear();
                    bins[0].extend(window.iter().map(|&(node, _)| node));
                    run_nodes(&bins[0], world, slots, end, &mut outbox, &mut dues[0]);
                }
                dues.iter_mut().for_each(|due| queue.learn(due));
                let watch = match until {
                    Until::Learned(watch) => Some(watch),
                    _ => None,
                };
                let mut watch = watch;
                for &(node, _) in &window {
                    collect(world, slots, journal, node, watch.as_deref_mut());
                }
                queue.now = queue.now.max(end - ONE_NS);
                if let Some(watch) = watch {
                    if watch.done() {
                        return Some(Duration::from_nanos(watch.last_ns));
                    }
                }
            }
            queue.now = queue.now.max(target);
            None
        })
    }
}
