//! The relay queue: items waiting to be gossiped wait here rather than in foca's backlog.
//!
//! foca keeps its custom broadcasts in a heap and, for every message it sends, takes every
//! one of them out to find those that fit the room left, then puts back the rest: the cost
//! of a message grows with the backlog. A site of a large mesh takes in bursts of items (a
//! peer's thousands of catalogues when it joins), and that scan was most of its SWIM
//! thread's time. So items (this site's own and those it relays alike) wait here, and foca
//! is handed a small window at a time, newest first: a load change just taken in goes out
//! ahead of a backlog of catalogues.
//!
//! Each item is handed once, for g transmissions (g: the members a `Broadcast` reaches):
//! one `Broadcast` round takes it to g distinct members. A node sends each version it takes
//! in to g members and no more; what that push misses, the receivers' digests ask for
//! ([`crate::lanes::repair`]), which costs a few hundred bytes a second instead of relaying
//! every version `max_transmissions` times.
//!
//! foca holds nothing but what it was handed, and is handed the next window only once it
//! has sent everything it holds: a name is never in foca twice, and every transmission
//! counted went out.
//!
//! Only the latest version of a name waits: a newer one takes the older one's place, as
//! the newest item. Only news is queued, and news is stored first, so the queue never holds more
//! names than the item store (bounded, docs/swim.md): nothing waiting is ever dropped.

use std::collections::{BTreeMap, HashMap};

use crate::lanes::names::{BroadcastKey, ItemName};

/// Items handed to foca at most at once.
pub const WINDOW_ITEMS: usize = 16;

/// Bytes of transmissions handed to foca at once (an item's size times its
/// transmissions; the first item whatever its size): about what one `Broadcast` round
/// carries (a message to each of a few members), so that news waits for a few messages at
/// most.
pub const WINDOW_BYTES: usize = 4096;

struct Waiting {
    key: BroadcastKey,
    data: Vec<u8>,
    /// Its place in the queue: the greatest goes first.
    seq: u64,
}

/// An item handed to foca.
#[derive(Debug)]
pub struct Handed {
    pub key: BroadcastKey,
    pub data: Vec<u8>,
}

/// Items waiting to be gossiped, newest first.
#[derive(Default)]
pub struct RelayQueue {
    order: BTreeMap<u64, ItemName>,
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

    /// Queues an item version as the newest, replacing an older version of the same name.
    pub fn push(&mut self, key: BroadcastKey, data: Vec<u8>) {
        let name = key.name();
        if let Some(old) = self.waiting.remove(&name) {
            self.order.remove(&old.seq);
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        self.order.insert(seq, name.clone());
        self.waiting.insert(name, Waiting { key, data, seq });
    }

    /// The next items to hand foca, newest first, each for `transmissions`: at most
    /// `max_items`, and no more than `max_bytes` of transmissions (size times
    /// transmissions) but the first item's. Each leaves the queue.
    pub fn take_window(
        &mut self,
        transmissions: u8,
        max_items: usize,
        max_bytes: usize,
    ) -> Vec<Handed> {
        let mut window = Vec::new();
        let mut bytes = 0;
        while window.len() < max_items {
            let Some(entry) = self.order.last_entry() else {
                break;
            };
            let size = self.waiting[entry.get()].data.len() * usize::from(transmissions);
            if !window.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            let name = entry.remove();
            let waiting = self.waiting.remove(&name).expect("ordered names wait");
            window.push(Handed {
                key: waiting.key,
                data: waiting.data,
            });
        }
        window
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lanes::names::Lane;

    fn key(name: &str, version: u64) -> BroadcastKey {
        BroadcastKey::new(Arc::from("b"), Lane::State, Arc::from(name), version)
    }

    fn names(window: &[Handed]) -> Vec<String> {
        window
            .iter()
            .map(|handed| {
                let data = String::from_utf8_lossy(&handed.data);
                format!("{}:{data}", handed.key.name().key)
            })
            .collect()
    }

    #[test]
    fn items_go_out_once_newest_first() {
        let mut q = RelayQueue::default();
        q.push(key("x", 1), b"x1".to_vec());
        q.push(key("y", 1), b"y1".to_vec());
        q.push(key("z", 1), b"z1".to_vec());
        assert_eq!(names(&q.take_window(3, 1, 100)), ["z:z1"]);
        assert_eq!(names(&q.take_window(3, 8, 100)), ["y:y1", "x:x1"]);
        assert!(q.take_window(3, 8, 100).is_empty());
        assert!(q.is_empty());
    }

    #[test]
    fn a_window_counts_each_transmission_and_always_holds_one_item() {
        let mut q = RelayQueue::default();
        q.push(key("c", 1), vec![0; 30]);
        q.push(key("b", 1), vec![0; 30]);
        q.push(key("a", 1), vec![0; 500]);
        // 1,000 bytes for a's two transmissions: alone, though over the budget.
        assert_eq!(q.take_window(2, 8, 100).len(), 1);
        // 60 bytes each: b and c together need 120.
        assert_eq!(q.take_window(2, 8, 100).len(), 1);
        assert_eq!(q.take_window(2, 8, 100).len(), 1);
        assert!(q.is_empty());
    }

    #[test]
    fn a_newer_version_takes_the_older_ones_place_as_the_newest() {
        let mut q = RelayQueue::default();
        q.push(key("x", 1), b"v1".to_vec());
        q.push(key("y", 1), b"y1".to_vec());
        q.push(key("x", 2), b"v2!".to_vec());
        assert_eq!(q.len(), 2);
        assert_eq!(names(&q.take_window(3, 8, 100)), ["x:v2!", "y:y1"]);
        q.push(key("x", 3), b"v3".to_vec());
        assert_eq!(names(&q.take_window(3, 8, 100)), ["x:v3"]);
        assert!(q.is_empty());
    }
}
