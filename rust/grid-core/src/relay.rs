//! The relay queue: items waiting to be gossiped wait here rather than in foca's backlog.
//!
//! foca keeps its custom broadcasts in a heap and, for every message it sends, takes every
//! one of them out to find those that fit the room left, then puts back the rest: the cost
//! of a message grows with the backlog. A site of a large mesh relays more than its messages
//! carry (at 100 sites x 100 providers some 4,000 items wait), and that scan was most of
//! its SWIM thread's time. So items (this site's own and those it relays alike) wait here,
//! and foca is handed a small window at a time, each item for one transmission; the queue
//! counts the rest. Order: news first, for its first g transmissions (g: the members a
//! `Broadcast` reaches, so that news fans out at once, one member per window); then the
//! rest as foca orders it (most transmissions left first, so every item makes its next
//! transmission before any makes the one after; then newest).
//!
//! foca holds nothing but what it was handed, and is handed the next window only once it
//! has sent everything it holds: a name is never in foca twice, and every transmission
//! counted went out.
//!
//! Only the latest version of a name waits: a newer one takes its place, with every
//! transmission to make again. Only news is queued, and news is stored first, so the queue
//! never holds more names than the item store (bounded, docs/swim.md): nothing waiting is
//! ever dropped.

use std::collections::{BTreeMap, HashMap};

use crate::lanes::{BroadcastKey, ItemName};

/// Items handed to foca at most at once.
pub const WINDOW_ITEMS: usize = 16;

/// Bytes of items handed to foca at once (the first item whatever its size): about what
/// one round of gossip carries (a message to each of a few members), so that news waits for
/// a few messages at most.
pub const WINDOW_BYTES: usize = 4096;

/// The order in which items go out (the greatest first): most of its first burst left, then
/// most transmissions left, then newest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Priority {
    burst: u8,
    remaining: u8,
    seq: u64,
}

struct Waiting {
    key: BroadcastKey,
    data: Vec<u8>,
    priority: Priority,
}

/// Items waiting to be gossiped, and how many times each still goes out.
#[derive(Default)]
pub struct RelayQueue {
    order: BTreeMap<Priority, ItemName>,
    waiting: HashMap<ItemName, Waiting>,
    next_seq: u64,
}

impl RelayQueue {
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Queues an item version for `transmissions` transmissions (none when 0), the first
    /// `burst` of them ahead of every item past its own burst, replacing an older version
    /// of the same name.
    pub fn push(&mut self, key: BroadcastKey, data: Vec<u8>, transmissions: u8, burst: u8) {
        if transmissions == 0 {
            return;
        }
        let name = key.name();
        if let Some(old) = self.waiting.remove(&name) {
            self.order.remove(&old.priority);
        }
        self.next_seq += 1;
        let priority = Priority {
            burst: burst.min(transmissions),
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

    /// The next items to go out once each, first first: at most `max_items`, and no more
    /// than `max_bytes` of them but the first. Each stays queued with one transmission
    /// less, or leaves with its last; a window holds a name once.
    pub fn take_window(
        &mut self,
        max_items: usize,
        max_bytes: usize,
    ) -> Vec<(BroadcastKey, Vec<u8>)> {
        let mut window = Vec::new();
        let mut again = Vec::new();
        let mut bytes = 0;
        while window.len() < max_items {
            let Some(entry) = self.order.last_entry() else {
                break;
            };
            let size = self.waiting[entry.get()].data.len();
            if !window.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            let (priority, name) = entry.remove_entry();
            if priority.remaining == 1 {
                let waiting = self.waiting.remove(&name).expect("ordered names wait");
                window.push((waiting.key, waiting.data));
            } else {
                let waiting = self.waiting.get_mut(&name).expect("ordered names wait");
                window.push((waiting.key.clone(), waiting.data.clone()));
                waiting.priority.remaining -= 1;
                waiting.priority.burst = waiting.priority.burst.saturating_sub(1);
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

    fn names(window: &[(BroadcastKey, Vec<u8>)]) -> Vec<String> {
        window
            .iter()
            .map(|(key, data)| format!("{}:{}", key.name().key, String::from_utf8_lossy(data)))
            .collect()
    }

    #[test]
    fn every_transmission_goes_out_once_first_transmissions_first() {
        let mut q = RelayQueue::default();
        q.push(key("x", 1), b"x1".to_vec(), 2, 0);
        q.push(key("y", 1), b"y1".to_vec(), 3, 0);
        assert_eq!(names(&q.take_window(1, 100)), ["y:y1"]);
        // y has two left, x two: the newest first.
        assert_eq!(names(&q.take_window(8, 100)), ["y:y1", "x:x1"]);
        assert_eq!(names(&q.take_window(8, 100)), ["y:y1", "x:x1"]);
        assert!(q.take_window(8, 100).is_empty());
        assert!(q.is_empty());
    }

    #[test]
    fn news_goes_before_items_that_went_out_already() {
        let mut q = RelayQueue::default();
        q.push(key("old", 1), b"".to_vec(), 4, 0);
        q.take_window(8, 100);
        q.push(key("new", 1), b"".to_vec(), 4, 0);
        assert_eq!(names(&q.take_window(1, 100)), ["new:"]);
        // Both have three left: the newest first.
        assert_eq!(names(&q.take_window(8, 100)), ["new:", "old:"]);
    }

    #[test]
    fn a_window_stops_at_its_bytes_but_always_holds_one_item() {
        let mut q = RelayQueue::default();
        q.push(key("a", 1), vec![0; 60], 1, 0);
        q.push(key("b", 1), vec![0; 60], 1, 0);
        q.push(key("c", 1), vec![0; 500], 1, 0);
        assert_eq!(q.take_window(8, 100).len(), 1);
        assert_eq!(q.take_window(8, 130).len(), 2);
        assert!(q.is_empty());
    }

    #[test]
    fn news_makes_its_burst_ahead_of_items_past_theirs() {
        let mut q = RelayQueue::default();
        q.push(key("old", 1), b"".to_vec(), 4, 0);
        q.push(key("news", 1), b"".to_vec(), 4, 2);
        assert_eq!(names(&q.take_window(1, 100)), ["news:"]);
        // One of its burst left: still ahead of "old", which has more transmissions left.
        assert_eq!(names(&q.take_window(1, 100)), ["news:"]);
        assert_eq!(names(&q.take_window(8, 100)), ["old:", "news:"]);
    }

    #[test]
    fn a_newer_version_takes_the_place_of_the_older() {
        let mut q = RelayQueue::default();
        q.push(key("x", 1), b"v1".to_vec(), 2, 0);
        q.take_window(8, 100);
        q.push(key("x", 2), b"v2".to_vec(), 2, 0);
        assert_eq!(q.len(), 1);
        assert_eq!(names(&q.take_window(8, 100)), ["x:v2"]);
        assert_eq!(names(&q.take_window(8, 100)), ["x:v2"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_window_holds_a_name_once_and_no_transmission_is_nothing() {
        let mut q = RelayQueue::default();
        q.push(key("x", 1), b"".to_vec(), 4, 0);
        q.push(key("none", 1), b"".to_vec(), 0, 0);
        assert_eq!(names(&q.take_window(8, 100)), ["x:"]);
        assert_eq!(q.len(), 1);
    }
}
