//! The event queue and its windows: messages in flight to a node ([`Delivery`], ordered
//! by arrival, sender and sender's number), the nodes' next event times ([`Queue`]) from
//! which each window `[t, t + d)` is taken, and the helper threads that share a large
//! window's nodes ([`split`], [`Helper`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use super::node::{advance, lock, Slot};
use super::world::World;

pub(super) struct Delivery {
    pub(super) at: Duration,
    pub(super) from: u32,
    pub(super) seq: u64,
    pub(super) message: Box<[u8]>,
}

impl Delivery {
    fn key(&self) -> (Duration, u32, u64) {
        (self.at, self.from, self.seq)
    }
}

impl PartialEq for Delivery {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Delivery {}

impl PartialOrd for Delivery {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Delivery {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// Nodes' next event times, earliest first. A node may have stale entries; its true next
/// time always has one.
pub(super) struct Queue {
    pub(super) heap: BinaryHeap<Reverse<(Duration, u32)>>,
    /// The window a node was last taken into.
    pub(super) stamp: Vec<u64>,
    pub(super) window: u64,
    /// Every event at or before `now` has been handled.
    pub(super) now: Duration,
}

impl Queue {
    pub(super) fn push(&mut self, at: Option<Duration>, node: u32) {
        if let Some(at) = at {
            self.heap.push(Reverse((at, node)));
        }
    }

    /// Learns the event times routing noted ([`route`]), and empties `due`.
    pub(super) fn learn(&mut self, due: &mut Due) {
        for (at, node) in due.drain(..) {
            self.push(Some(at), node);
        }
    }

    /// The earliest pending event anywhere, dropping stale entries on the way.
    pub(super) fn next_time(&mut self, slots: &[Mutex<Slot>]) -> Option<Duration> {
        while let Some(&Reverse((at, node))) = self.heap.peek() {
            if lock(&slots[node as usize]).next_time() == Some(at) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Takes every node with an event before `end`, with an estimate of its work there.
    pub(super) fn take_window(
        &mut self,
        slots: &[Mutex<Slot>],
        end: Duration,
        into: &mut Vec<(u32, u64)>,
    ) {
        self.window += 1;
        into.clear();
        while let Some(&Reverse((at, node))) = self.heap.peek() {
            if at >= end {
                break;
            }
            self.heap.pop();
            let index = node as usize;
            if self.stamp[index] == self.window {
                continue;
            }
            let slot = lock(&slots[index]);
            if slot.next_time().is_some_and(|t| t < end) {
                self.stamp[index] = self.window;
                into.push((node, slot.work_before(end)));
            }
        }
        into.sort_unstable();
    }
}

/// Shares a window's nodes among the threads' bins, heaviest first to the lightest bin.
/// The split only decides who computes what, never the outcome.
pub(super) fn split(window: &mut [(u32, u64)], bins: &mut [Vec<u32>]) {
    let mut loads = vec![0u64; bins.len()];
    bins.iter_mut().for_each(Vec::clear);
    window.sort_unstable_by_key(|&(node, work)| (Reverse(work), node));
    for &(node, work) in window.iter() {
        let lightest = (0..bins.len())
            .min_by_key(|&i| loads[i])
            .expect("at least one bin");
        loads[lightest] += work;
        bins[lightest].push(node);
    }
}

/// Event times the queue is to learn: `(at, node)`.
pub(super) type Due = Vec<(Duration, u32)>;

/// After node `node` ran: hands what it sent to the recipients' inboxes and notes in `due`
/// the times the queue must learn (each arrival, and the node's own next event). It runs
/// on the thread that ran the node, beside the other threads' nodes: nothing sent in a
/// window arrives within it, an inbox orders its deliveries itself, and the queue takes
/// `due` afterwards, so whichever thread routes first changes nothing. One slot is locked
/// at a time.
pub(super) fn route(
    slots: &[Mutex<Slot>],
    node: u32,
    outbox: &mut Vec<(u32, Delivery)>,
    due: &mut Due,
) {
    {
        let mut slot = lock(&slots[node as usize]);
        std::mem::swap(&mut slot.outbox, outbox);
        if let Some(at) = slot.next_time() {
            due.push((at, node));
        }
    }
    for (to, delivery) in outbox.drain(..) {
        due.push((delivery.at, to));
        lock(&slots[to as usize]).inbox.push(Reverse(delivery));
    }
}

/// Runs `nodes` up to `end`, each routed as soon as it ran.
pub(super) fn run_nodes(
    nodes: &[u32],
    world: &World,
    slots: &[Mutex<Slot>],
    end: Duration,
    outbox: &mut Vec<(u32, Delivery)>,
    due: &mut Due,
) {
    for &node in nodes {
        advance(&mut lock(&slots[node as usize]), node, world, end);
        route(slots, node, outbox, due);
    }
}

/// A thread that runs its share of each large window.
pub(super) struct Helper {
    pub(super) work: mpsc::Sender<(Vec<u32>, Duration, Due)>,
    pub(super) done: mpsc::Receiver<(Vec<u32>, Due)>,
}

impl Helper {
    pub(super) fn spawn<'scope, 'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        world: &'env World,
        slots: &'env [Mutex<Slot>],
    ) -> Helper {
        let (work, inbox) = mpsc::channel::<(Vec<u32>, Duration, Due)>();
        let (finished, done) = mpsc::channel();
        scope.spawn(move || {
            let mut outbox = Vec::new();
            for (nodes, end, mut due) in inbox {
                run_nodes(&nodes, world, slots, end, &mut outbox, &mut due);
                if finished.send((nodes, due)).is_err() {
                    break;
                }
            }
        });
        Helper { work, done }
    }

    /// Starts `nodes` on the helper, its due times to go into `due`.
    pub(super) fn run(&self, nodes: Vec<u32>, end: Duration, due: Due) {
        self.work
            .send((nodes, end, due))
            .expect("the helper lives as long as the scope");
    }

    /// Waits for the batch to finish and hands its lists back.
    pub(super) fn wait(&self) -> (Vec<u32>, Due) {
        self.done
            .recv()
            .expect("the helper answers every batch it was given")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_split_by_work() {
        let mut window = vec![(1, 100), (2, 1), (3, 1), (4, 60), (5, 40)];
        let mut bins = vec![Vec::new(); 2];
        split(&mut window, &mut bins);
        assert_eq!(bins, [vec![1, 2], vec![4, 5, 3]]);
        let mut bins = vec![Vec::new(); 3];
        split(&mut window, &mut bins);
        assert_eq!(bins, [vec![1], vec![4], vec![5, 2, 3]]);
    }
}
