//! The relay queue: items waiting to be gossiped wait here rather than in foca's backlog.
//!
//! foca keeps its custom broadcasts in a heap and, for every message it sends, takes every
//! one of them out to find those that fit the room left, then puts back the rest: the cost
//! of a message grows with the backlog. A site of a large mesh relays more than its messages
//! carry (at 100 sites x 100 providers some 4,000 items wait), and that scan was most of
//! its SWIM thread's time. So items (this site's own and those it relays alike) wait here,
//! and foca is handed a small window at a time; the queue counts the transmissions left.
//! News goes first, handed for its first g transmissions at once (g: the members a
//! `Broadcast` reaches, each sent the item, as foca's own backlog did); then the rest, one
//! transmission at a time, as foca orders it (most transmissions left first, so every item
//! makes its next transmission before any makes the one after; then newest).
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

/// Bytes of transmissions handed to foca at once (an item's size times the transmissions it
/// is handed for; the first item whatever its size): about what one `Broadcast` round
/// carries (a message to each of a few members), so that news waits for a few messages at
/// most.
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

/// An item handed to foca for `transmissions` of its transmissions.
#[derive(Debug)]
pub struct Handed {
    pub key: BroadcastKey,
    pub data: Vec<u8>,
    pub transmissions: u8,
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

    /// The next items to hand foca, first first: news for the rest of its burst at once,
    /// any other item for one transmission; at most `max_items`, and no more than
    /// `max_bytes` of transmissions (size times transmissions) but the first item's. Each
    /// stays queued with the transmissions it has left, or leaves with its last; a window
    /// holds a name once.
    pub fn take_window(&mut self, max_items: usize, max_bytes: usize) -> Vec<Handed> {
        let mut window = Vec::new();
        let mut again = Vec::new();
        let mut bytes = 0;
        while window.len() < max_items {
            let Some(entry) = self.order.last_entry() else {
                break;
            };
            let priority = *entry.key();
            let transmissions = priority.burst.max(1);
            let size = self.waiting[entry.get()].data.len() * usize::from(transmissions);
            if !window.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            let name = entry.remove();
            let waiting = self.waiting.get_mut(&name).expect("ordered names wait");
            window.push(Handed {
                key: waiting.key.clone(),
                data: waiting.data.clone(),
                transmissions,
            });
            if priority.remaining == transmissions {
                self.waiting.remove(&name);
            } else {
                waiting.priority.remaining -= transmissions;
                waiting.priority.burst = 0;
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
    fn every_transmission_goes_out_once_most_left_first() {
        let mut q = RelayQueue::default();
        q.push(key("x", 1), b"x1".to_vec(), 2, 0);
        q.push(key("y", 1), b"y1".to_vec(), 3, 0);
        assert_eq!(names(&q.take_window(1, 100)), ["y:y1x1"]);
        // y has two left, x two: the newest first.
        assert_eq!(names(&q.take_window(8, 100)), ["y:y1x1", "x:x1x1"]);
        assert_eq!(names(&q.take_window(8, 100)), ["y:y1x1", "x:x1x1"]);
        assert!(q.take_window(8, 100).is_empty());
        assert!(q.is_empty());
    }

    #[test]
    fn news_goes_first_for_its_whole_burst_at_once() {
        let mut q = RelayQueue::default();
        q.push(key("old", 1), b"".to_vec(), 4, 0);
        q.push(key("news", 1), b"".to_vec(), 4, 3);
        assert_eq!(names(&q.take_window(8, 100)), ["news:x3", "old:x1"]);
        // Past its burst, news is one of the others: "old" has more left.
        assert_eq!(names(&q.take_window(8, 100)), ["old:x1", "news:x1"]);
    }

    #[test]
    fn a_window_counts_each_transmission_and_always_holds_one_item() {
        let mut q = RelayQueue::default();
        q.push(key("a", 1), vec![0; 500], 1, 0);
        q.push(key("b", 1), vec![0; 60], 2, 2);
        q.push(key("c", 1), vec![0; 60], 1, 0);
        // "b" is news: 120 bytes for its two transmissions.
        assert_eq!(names(&q.take_window(8, 100)).len(), 1);
        assert_eq!(q.take_window(8, 60).len(), 1);
        assert_eq!(q.take_window(8, 60).len(), 1);
        assert!(q.is_empty());
    }

    #[test]
    fn a_newer_version_takes_the_place_of_the_older_as_news() {
        let mut q = RelayQueue::default();
        q.push(key("x", 1), b"v1".to_vec(), 4, 2);
        assert_eq!(names(&q.take_window(8, 100)), ["x:v1x2"]);
        q.push(key("x", 2), b"v2".to_vec(), 4, 2);
        assert_eq!(q.len(), 1);
        assert_eq!(names(&q.take_window(8, 100)), ["x:v2x2"]);
        assert_eq!(names(&q.take_window(8, 100)), ["x:v2x1"]);
        assert_eq!(names(&q.take_window(8, 100)), ["x:v2x1"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_window_holds_a_name_once_and_no_transmission_is_nothing() {
        let mut q = RelayQueue::default();
        q.push(key("x", 1), b"".to_vec(), 4, 0);
        q.push(key("none", 1), b"".to_vec(), 0, 0);
        assert_eq!(names(&q.take_window(8, 100)), ["x:x1"]);
        assert_eq!(q.len(), 1);
    }
}
