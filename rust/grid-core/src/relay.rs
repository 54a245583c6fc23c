//! The relay queue: items waiting to be gossiped wait here rather than in foca's backlog.
//!
//! foca keeps its custom broadcasts in a heap and, for every message it sends, takes every
//! one of them out to find those that fit the room left, then puts back the rest: the cost
//! of a message grows with the backlog. A site of a large mesh relays more than its messages
//! carry (at 100 sites x 100 providers some 4,000 items wait), and that scan was most of
//! its SWIM thread's time. So items (this site's own and those it relays alike) wait here,
//! ordered as foca orders them (most transmissions left first, then newest), and foca is
//! handed a few at a time, each for a few of its transmissions ([`Handed::transmissions`]);
//! the queue counts the rest.
//!
//! foca holds nothing but what it was handed, so the driver knows what went out: it hands
//! items never handed before (news) whenever foca holds fewer than [`MAX_HANDED`], and a
//! window of the others only once foca has sent everything it holds and no news waits. A
//! name is never in foca twice, and every transmission counted went out.
//!
//! Only the latest version of a name waits: a newer one takes its place, with every
//! transmission to make again. The queue holds at most `capacity` names; past it, the one
//! that would go out last (fewest transmissions left, oldest) is dropped: it is in the
//! store, and syncs carry it.

use std::collections::{BTreeMap, HashMap};

use crate::lanes::{BroadcastKey, ItemName};

/// Items handed to foca for their further transmissions once it holds nothing: small, so
/// that what foca holds is always near the front of the queue, and enough for a round of
/// gossip (a message to each of a few members).
pub const RELAY_WINDOW: usize = 4;

/// foca holds at most this many items: news beyond it waits here.
pub const MAX_HANDED: usize = 16;

/// Names waiting at most, by default.
pub const DEFAULT_RELAY_CAPACITY: usize = 8192;

/// The order in which items go out: never handed first, then most transmissions left,
/// then newest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Priority {
    fresh: bool,
    remaining: u8,
    seq: u64,
}

struct Waiting {
    key: BroadcastKey,
    data: Vec<u8>,
    priority: Priority,
}

/// An item handed to foca for `transmissions` of its transmissions.
#[derive(Debug)]
pub struct Handed {
    pub key: BroadcastKey,
    pub data: Vec<u8>,
    pub transmissions: u8,
}

/// Items waiting to be gossiped, and how many times each still goes out.
pub struct RelayQueue {
    order: BTreeMap<Priority, ItemName>,
    waiting: HashMap<ItemName, Waiting>,
    next_seq: u64,
    capacity: usize,
    dropped: u64,
}

impl RelayQueue {
    pub fn new(capacity: usize) -> RelayQueue {
        RelayQueue {
            order: BTreeMap::new(),
            waiting: HashMap::new(),
            next_seq: 0,
            capacity: capacity.max(1),
            dropped: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Names dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Queues an item version for `transmissions` transmissions (none when 0), replacing
    /// an older version of the same name.
    pub fn push(&mut self, key: BroadcastKey, data: Vec<u8>, transmissions: u8) {
        if transmissions == 0 {
            return;
        }
        let name = key.name();
        if let Some(old) = self.waiting.remove(&name) {
            self.order.remove(&old.priority);
        }
        if self.waiting.len() >= self.capacity {
            if let Some((_, last)) = self.order.pop_first() {
                self.waiting.remove(&last);
                self.dropped += 1;
            }
        }
        self.next_seq += 1;
        let priority = Priority {
            fresh: true,
            remaining: transmissions,
            seq: self.next_seq,
        };
        self.order.insert(priority, name.clone());
        self.waiting.insert(
            name,
            Waiting {
                key,
                data,
                priority,
            },
        );
    }

    /// The next `max` items to hand foca, first first, each for up to `burst` of its
    /// transmissions (at most one version of a name); each stays queued with the
    /// transmissions it has left, or leaves with its last. `fresh_only`: only items never
    /// handed before (foca may still hold the others).
    pub fn take_window(&mut self, max: usize, burst: u8, fresh_only: bool) -> Vec<Handed> {
        let burst = burst.max(1);
        let mut window = Vec::with_capacity(max.min(self.waiting.len()));
        let mut again = Vec::new();
        while window.len() < max {
            let Some(entry) = self.order.last_entry() else {
                break;
            };
            if fresh_only && !entry.key().fresh {
                break;
            }
            let (priority, name) = entry.remove_entry();
            let transmissions = priority.remaining.min(burst);
            let remaining = priority.remaining - transmissions;
            if remaining == 0 {
                let waiting = self.waiting.remove(&name).expect("ordered names wait");
                window.push(Handed {
                    key: waiting.key,
                    data: waiting.data,
                    transmissions,
                });
            } else {
                let waiting = self.waiting.get_mut(&name).expect("ordered names wait");
                window.push(Handed {
                    key: waiting.key.clone(),
                    data: waiting.data.clone(),
                    transmissions,
                });
                waiting.priority.fresh = false;
                waiting.priority.remaining = remaining;
                again.push((waiting.priority, name));
            }
        }
        // Put back after the window is full, so that one window holds a name only once.
        self.order.extend(again);
        window
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lanes::Lane;

    fn key(name: &str, version: u64) -> BroadcastKey {
        BroadcastKey::new(Arc::from("b"), Lane::State, Arc::from(name), version)
    }

    fn names(window: &[Handed]) -> Vec<String> {
        window
            .iter()
            .map(|handed| {
                let data = String::from_utf8_lossy(&handed.data);
                format!("{}:{data}x{}", handed.key.name().key, handed.transmissions)
            })
            .collect()
    }

    #[test]
    fn every_transmission_asked_is_handed_once_most_left_first() {
        let mut q = RelayQueue::new(100);
        q.push(key("x", 1), b"x1".to_vec(), 2);
        q.push(key("y", 1), b"y1".to_vec(), 5);
        assert_eq!(names(&q.take_window(8, 2, false)), ["y:y1x2", "x:x1x2"]);
        assert_eq!(names(&q.take_window(8, 2, false)), ["y:y1x2"]);
        assert_eq!(names(&q.take_window(8, 2, false)), ["y:y1x1"]);
        assert!(q.take_window(8, 2, false).is_empty());
        assert!(q.is_empty());
    }

    #[test]
    fn never_handed_first_then_newest_among_equals() {
        let mut q = RelayQueue::new(100);
        q.push(key("handed", 1), b"".to_vec(), 4);
        q.take_window(1, 1, false);
        q.push(key("old", 1), b"".to_vec(), 2);
        q.push(key("new", 1), b"".to_vec(), 2);
        // "handed" has three left, more than the others, but foca may still hold it.
        assert_eq!(names(&q.take_window(2, 1, true)), ["new:x1", "old:x1"]);
        assert!(q.take_window(2, 1, true).is_empty());
        assert_eq!(names(&q.take_window(1, 1, false)), ["handed:x1"]);
    }

    #[test]
    fn a_newer_version_takes_the_place_of_the_older() {
        let mut q = RelayQueue::new(100);
        q.push(key("x", 1), b"v1".to_vec(), 2);
        q.take_window(8, 1, false);
        q.push(key("x", 2), b"v2".to_vec(), 2);
        assert_eq!(q.len(), 1);
        assert_eq!(names(&q.take_window(8, 1, true)), ["x:v2x1"]);
        assert_eq!(names(&q.take_window(8, 1, false)), ["x:v2x1"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_full_queue_drops_what_would_go_out_last() {
        let mut q = RelayQueue::new(2);
        q.push(key("a", 1), b"".to_vec(), 1);
        q.push(key("b", 1), b"".to_vec(), 3);
        q.push(key("c", 1), b"".to_vec(), 3);
        assert_eq!(q.dropped(), 1);
        assert_eq!(names(&q.take_window(8, 1, false)), ["c:x1", "b:x1"]);
        // Replacing a waiting name is not growth: nothing more is dropped.
        q.push(key("c", 2), b"".to_vec(), 3);
        assert_eq!(q.dropped(), 1);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_window_holds_a_name_once_and_no_transmission_is_nothing() {
        let mut q = RelayQueue::new(100);
        q.push(key("x", 1), b"".to_vec(), 4);
        q.push(key("none", 1), b"".to_vec(), 0);
        assert_eq!(names(&q.take_window(8, 1, false)), ["x:x1"]);
        assert_eq!(q.len(), 1);
    }
}
