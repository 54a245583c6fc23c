//! A converged start: every node's full member list, built once ([`Bootstrap`]), chunked
//! into sync responses ([`member_list_chunks`]) and handed to the nodes, in parallel, at a
//! random instant of the first probe interval before the clock starts (see the module docs
//! of [`crate::sim`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use foca::{Member, State};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::measure::Until;
use super::node::lock;
use super::record::mix;
use super::world::Sink;
use super::{nanos, net, node_addr, Simulation, ENTRY_MEMBER, SIM_WALL_EPOCH};
use crate::identity::auth::SIGNATURE_LEN;
use crate::identity::NodeId;
use crate::wire::{
    encode_member, seal_message, state_byte, KIND_SYNC_RESPONSE, MAX_MESSAGE_LEN, MAX_UNSEALED_LEN,
};

/// The member lists of a converged start, handed out before the clock starts.
pub(super) struct Bootstrap {
    /// Each node's member entry, encoded once.
    pub(super) entries: Vec<Vec<u8>>,
    /// When each node receives its list.
    pub(super) at: Vec<Duration>,
    /// Nodes below this have theirs.
    pub(super) done: usize,
    /// The first probe interval: the lists all arrive within it.
    pub(super) spread: Duration,
    pub(super) header: Vec<u8>,
}

impl Simulation {
    pub(super) fn plan_bootstrap(&mut self) -> Bootstrap {
        let n = self.slots.len() as u32;
        let entries = (0..n)
            .map(|node| {
                let mut entry = Vec::new();
                let member = Member::new(self.identity(node, 0), 0, State::Alive);
                encode_member(&member, state_byte(State::Alive), &mut entry);
                entry
            })
            .collect();
        let spread = self.swim.probe_interval;
        let mut rng = SmallRng::seed_from_u64(mix(self.seed, 0x626F_6F74));
        let at = (0..n)
            .map(|_| Duration::from_nanos(rng.random_range(0..nanos(spread))))
            .collect();
        let phantom = NodeId::new(self.interner(0).intern("bootstrap"), net::phantom_addr(), 1);
        let mut header = vec![KIND_SYNC_RESPONSE];
        phantom.encode(&mut header);
        header.extend_from_slice(&[0; 8]);
        Bootstrap {
            entries,
            at,
            done: 0,
            spread,
            header,
        }
    }

    /// Hands the next `max_nodes` nodes of a converged start their member lists (the
    /// expensive part of setting up a large cluster: foca inserts members one by one into
    /// a list it scans linearly). Returns how many nodes still wait; at 0 the clock
    /// stands at the first probe interval and scenarios may begin.
    pub fn bootstrap(&mut self, max_nodes: usize) -> usize {
        let Some(plan) = &self.bootstrap else {
            return 0;
        };
        let start = plan.done;
        let stop = start.saturating_add(max_nodes).min(self.slots.len());
        let next = AtomicUsize::new(start);
        let sends = AtomicUsize::new(0);
        let work = || {
            let mut chunks = Vec::new();
            let mut sink = Sink::default();
            loop {
                let node = next.fetch_add(1, Ordering::Relaxed);
                if node >= stop {
                    break;
                }
                member_list_chunks(&plan.header, &plan.entries, node, &mut chunks);
                for (seq, chunk) in chunks.iter_mut().enumerate() {
                    let sent_at = (SIM_WALL_EPOCH + plan.at[node]).as_millis() as u64;
                    let to = crate::identity::NodeAddr::new(node_addr(node as u32));
                    seal_message(chunk, seq as u64 + 1, sent_at, to, |_| [0; SIGNATURE_LEN]);
                }
                let mut slot = lock(&self.slots[node]);
                let driver = slot.driver.as_mut().expect("fresh nodes run");
                for chunk in &chunks {
                    driver.handle_datagram(plan.at[node], chunk, &mut sink);
                    // Knowing the initial members is the starting point, not news. Drained
                    // chunk by chunk so the driver's event buffer never holds N events.
                    driver.drain_events().for_each(drop);
                }
            }
            sends.fetch_add(sink.sent, Ordering::Relaxed);
        };
        let threads = self.threads.min(stop - start).max(1);
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(work);
            }
            work();
        });
        self.bootstrap_sends += sends.into_inner() as u64;
        for node in start..stop {
            let at = lock(&self.slots[node]).next_time();
            self.queue.push(at, node as u32);
        }
        let remaining = self.slots.len() - stop;
        let spread = plan.spread;
        if remaining == 0 {
            self.bootstrap = None;
            self.advance_to(spread, &mut Until::Time);
        } else if let Some(plan) = &mut self.bootstrap {
            plan.done = stop;
        }
        remaining
    }

    pub(super) fn ensure_ready(&mut self) {
        if self.bootstrap.is_some() {
            self.bootstrap(usize::MAX);
        }
    }

    /// Nodes waiting for their initial member list.
    pub fn pending_bootstrap(&self) -> usize {
        self.bootstrap
            .as_ref()
            .map_or(0, |plan| self.slots.len() - plan.done)
    }
}

/// Splits `entries` (all but `skip`) into sync-response chunks of one frame each.
/// A sync chunk's header ends with its index and count (after the sender and sync id).
pub(super) fn member_list_chunks(
    header: &[u8],
    entries: &[Vec<u8>],
    skip: usize,
    chunks: &mut Vec<Vec<u8>>,
) {
    chunks.clear();
    for (j, entry) in entries.iter().enumerate() {
        if j == skip {
            continue;
        }
        let need = 3 + entry.len();
        if chunks
            .last()
            .map_or(true, |chunk| chunk.len() + need > MAX_UNSEALED_LEN)
        {
            let mut chunk = Vec::with_capacity(MAX_MESSAGE_LEN);
            chunk.extend_from_slice(header);
            chunks.push(chunk);
        }
        let chunk = chunks.last_mut().expect("pushed above");
        chunk.push(ENTRY_MEMBER);
        chunk.extend_from_slice(&(entry.len() as u16).to_be_bytes());
        chunk.extend_from_slice(entry);
    }
    let count = chunks.len() as u16;
    let at = header.len() - 4;
    for (index, chunk) in chunks.iter_mut().enumerate() {
        chunk[at..at + 2].copy_from_slice(&(index as u16).to_be_bytes());
        chunk[at + 2..at + 4].copy_from_slice(&count.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::generation_for;

    #[test]
    fn member_lists_fit_in_frames_and_skip_the_recipient() {
        let entries: Vec<Vec<u8>> = (0..500u32)
            .map(|node| {
                let mut entry = Vec::new();
                let id = NodeId::new(
                    std::sync::Arc::from(format!("n{node}").as_str()),
                    node_addr(node),
                    generation_for(0),
                );
                encode_member(&Member::new(id, 0, State::Alive), 0, &mut entry);
                entry
            })
            .collect();
        let mut header = vec![KIND_SYNC_RESPONSE];
        NodeId::new(std::sync::Arc::from("boot"), node_addr(9), 1).encode(&mut header);
        header.extend_from_slice(&[0; 8]);
        let mut chunks = Vec::new();
        member_list_chunks(&header, &entries, 7, &mut chunks);
        assert!(chunks.len() > 1);
        let carried: usize = chunks
            .iter()
            .map(|c| {
                assert!(c.len() <= MAX_UNSEALED_LEN);
                c.len() - header.len()
            })
            .sum();
        let expected: usize =
            entries.iter().map(|e| 3 + e.len()).sum::<usize>() - 3 - entries[7].len();
        assert_eq!(carried, expected);
        let count = chunks.len() as u16;
        let at = header.len() - 4;
        for (index, chunk) in chunks.iter().enumerate() {
            assert_eq!(&chunk[at..at + 2], &(index as u16).to_be_bytes());
            assert_eq!(&chunk[at + 2..at + 4], &count.to_be_bytes());
        }
    }
}
