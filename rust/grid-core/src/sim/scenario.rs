//! Scenario steps of a [`Simulation`]: nodes added, joined, crashed, restarted and leaving,
//! slow nodes, partitions, loss, and recording switched on or off.

use std::net::SocketAddr;
use std::time::Duration;

use crate::driver::Driver;

use super::measure::collect;
use super::net::{self, check_probability, node_addr, SimError, MAX_NODES};
use super::node::{lock, note, Slot};
use super::queue::route;
use super::record::mix;
use super::world::Wire;
use super::{nanos, NetModel, NodeStatus, Simulation, TAG_CRASH, TAG_RESTART};

impl Simulation {
    /// Adds a node that knows nobody; [`Simulation::join`] it to a seed.
    pub fn add_node(&mut self) -> Result<u32, SimError> {
        if self.slots.len() >= MAX_NODES {
            return Err(SimError::TooManyNodes(self.slots.len() + 1));
        }
        self.ensure_ready();
        Ok(self.push_node())
    }

    /// Runs `step` on a running node's driver at the current time and sends what it sends.
    pub(super) fn act(
        &mut self,
        node: u32,
        step: impl FnOnce(&mut Driver, Duration, &mut Wire<'_>),
    ) {
        let now = self.queue.now;
        {
            let mut guard = lock(&self.slots[node as usize]);
            let Slot {
                driver,
                rng,
                seq,
                trace,
                records,
                outbox,
                seen,
                traffic,
                codec,
                ..
            } = &mut *guard;
            let Some(driver) = driver.as_mut() else {
                return;
            };
            {
                let mut wire = Wire {
                    world: &self.world,
                    from: node,
                    now,
                    rng,
                    seq,
                    trace,
                    traffic,
                    outbox,
                    seen,
                    codec,
                };
                step(driver, now, &mut wire);
            }
            for event in driver.drain_events() {
                note(event, now, false, &self.world, trace, records, seen);
            }
        }
        let mut due = Vec::new();
        route(&self.slots, node, &mut Vec::new(), &mut due);
        self.queue.learn(&mut due);
        collect(&self.world, &self.slots, &mut self.journal, node, None);
    }

    /// The node announces itself to `seeds` and syncs with one of them.
    pub fn join(&mut self, node: u32, seeds: &[u32]) -> Result<(), SimError> {
        self.check_running(node)?;
        for &seed in seeds {
            self.check_node(seed)?;
        }
        self.ensure_ready();
        let seeds: Vec<SocketAddr> = seeds.iter().map(|&s| node_addr(s)).collect();
        self.act(node, |driver, now, wire| driver.join(now, &seeds, wire));
        Ok(())
    }

    /// Stops the node dead: it handles nothing more and messages to it are lost.
    pub fn crash(&mut self, node: u32) -> Result<(), SimError> {
        self.check_running(node)?;
        self.ensure_ready();
        self.world.status[node as usize] = NodeStatus::Crashed;
        let mut slot = lock(&self.slots[node as usize]);
        slot.trace = mix(mix(slot.trace, TAG_CRASH), nanos(self.queue.now));
        slot.retire_driver();
        Ok(())
    }

    /// Brings a crashed or departed node back in its next life (a higher generation) and
    /// joins it to `seeds`.
    pub fn restart(&mut self, node: u32, seeds: &[u32]) -> Result<(), SimError> {
        self.check_node(node)?;
        if self.world.is_running(node) {
            return Err(SimError::StillRunning(node));
        }
        for &seed in seeds {
            self.check_node(seed)?;
        }
        self.ensure_ready();
        let index = node as usize;
        self.world.life[index] += 1;
        self.world.status[index] = NodeStatus::Running;
        let driver = self.new_driver(node, self.world.life[index]);
        {
            let mut slot = lock(&self.slots[index]);
            slot.driver = Some(driver);
            slot.trace = mix(mix(slot.trace, TAG_RESTART), nanos(self.queue.now));
        }
        self.join(node, seeds)
    }

    /// The node leaves on purpose: it tells its members, then stops.
    pub fn leave(&mut self, node: u32) -> Result<(), SimError> {
        self.check_running(node)?;
        self.ensure_ready();
        self.act(node, |driver, now, wire| driver.leave(now, wire));
        self.world.status[node as usize] = NodeStatus::Left;
        lock(&self.slots[node as usize]).retire_driver();
        Ok(())
    }

    /// From now on every message to `node` reaches it `extra` late, as if it were too busy
    /// to read its socket. `Duration::ZERO` makes it normal again.
    pub fn set_slow(&mut self, node: u32, extra: Duration) -> Result<(), SimError> {
        self.check_node(node)?;
        if extra > net::MAX_DELAY {
            return Err(SimError::BadDelay {
                what: "slow-node delay",
                value: extra,
            });
        }
        self.ensure_ready();
        self.world.slow[node as usize] = extra;
        Ok(())
    }

    /// Splits the network: nodes of different groups cannot reach each other; nodes in no
    /// group form one more group together.
    pub fn partition(&mut self, groups: &[Vec<u32>]) -> Result<(), SimError> {
        let mut group = vec![0u32; self.slots.len()];
        for (g, members) in groups.iter().enumerate() {
            for &node in members {
                self.check_node(node)?;
                if group[node as usize] != 0 {
                    return Err(SimError::NodeInTwoGroups(node));
                }
                group[node as usize] = g as u32 + 1;
            }
        }
        self.ensure_ready();
        self.world.group = group;
        Ok(())
    }

    /// Ends every partition.
    pub fn heal(&mut self) {
        self.ensure_ready();
        self.world.group.iter_mut().for_each(|g| *g = 0);
    }

    pub fn set_net(&mut self, net: NetModel) -> Result<(), SimError> {
        net.validate()?;
        self.ensure_ready();
        self.world.net = net;
        Ok(())
    }

    /// Loss on both directions of one link, overriding the model's.
    pub fn set_link_loss(&mut self, a: u32, b: u32, loss: f64) -> Result<(), SimError> {
        self.check_node(a)?;
        self.check_node(b)?;
        check_probability("link loss", loss)?;
        self.ensure_ready();
        self.world.link_loss.insert((a, b), loss);
        self.world.link_loss.insert((b, a), loss);
        Ok(())
    }

    /// Whether membership changes are recorded (they always count in the trace).
    pub fn set_recording(&mut self, on: bool) {
        self.world.recording = on;
    }
}
