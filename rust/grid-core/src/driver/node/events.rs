//! The queue of events a node's thread hands its host: membership events bounded, items
//! coalesced by name.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::driver::Event;
use crate::lanes::{Item, Lane};

/// `(origin, lane, key)`: what a newer version of an item replaces.
type ItemSlot = (Arc<str>, Lane, Arc<str>);

enum Queued {
    Event(Event),
    Item(ItemSlot),
}

/// Events waiting for the host, in the order they happened.
///
/// Membership events are kept up to a capacity; more are dropped and counted (the member
/// snapshot still tells the truth). Items are never dropped: an item still waiting when a
/// newer version of it arrives is replaced where it waits, so a host that falls behind is
/// handed the latest version of every item, each once, at most one per name (the item
/// store bounds the names), and sooner than if it had to read every version in between.
pub(super) struct EventQueue {
    order: VecDeque<Queued>,
    items: HashMap<ItemSlot, Item>,
    events: usize,
    capacity: usize,
    pub(super) dropped: u64,
    pub(super) coalesced: u64,
}

impl EventQueue {
    pub(super) fn new(capacity: usize) -> EventQueue {
        EventQueue {
            order: VecDeque::new(),
            items: HashMap::new(),
            events: 0,
            capacity,
            dropped: 0,
            coalesced: 0,
        }
    }

    pub(super) fn push(&mut self, event: Event) {
        match event {
            Event::Item(item) => {
                let slot = (item.origin.clone(), item.lane, item.key.clone());
                match self.items.entry(slot) {
                    Entry::Occupied(mut waiting) => {
                        // The driver hands over each name's versions in increasing order.
                        if item.version > waiting.get().version {
                            waiting.insert(item);
                        }
                        self.coalesced += 1;
                    }
                    Entry::Vacant(free) => {
                        self.order.push_back(Queued::Item(free.key().clone()));
                        free.insert(item);
                    }
                }
            }
            other if self.events < self.capacity => {
                self.events += 1;
                self.order.push_back(Queued::Event(other));
            }
            _ => self.dropped += 1,
        }
    }

    pub(super) fn pop(&mut self) -> Option<Event> {
        Some(match self.order.pop_front()? {
            Queued::Event(event) => {
                self.events -= 1;
                event
            }
            Queued::Item(slot) => Event::Item(
                self.items
                    .remove(&slot)
                    .expect("a queued name holds its item"),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::NodeId;
    use std::net::SocketAddr;

    fn item(key: &str, version: u64) -> Event {
        Event::Item(Item {
            origin: Arc::from("site-b"),
            lane: Lane::State,
            key: Arc::from(key),
            version,
            payload: Arc::from(version.to_be_bytes().as_slice()),
        })
    }

    fn member(port: u16) -> Event {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        Event::MemberUp(NodeId::new(Arc::from("site-c"), addr, 1))
    }

    fn taken(queue: &mut EventQueue) -> Vec<String> {
        std::iter::from_fn(|| queue.pop())
            .map(|event| match event {
                Event::Item(item) => format!("{}@{}", item.key, item.version),
                Event::MemberUp(id) => format!("up:{}", id.socket_addr().port()),
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn a_waiting_item_is_replaced_in_place_and_membership_events_are_bounded() {
        let mut queue = EventQueue::new(2);
        for event in [
            item("a", 1),
            member(1),
            item("b", 1),
            item("a", 2),
            member(2),
            member(3),
            item("a", 3),
        ] {
            queue.push(event);
        }
        assert_eq!((queue.dropped, queue.coalesced), (1, 2));
        assert_eq!(taken(&mut queue), ["a@3", "up:1", "b@1", "up:2"]);
        // Once taken, a name waits again at the back, and places free up.
        queue.push(item("a", 4));
        queue.push(member(4));
        assert_eq!(taken(&mut queue), ["a@4", "up:4"]);
        assert!(queue.items.is_empty() && queue.events == 0);
    }

    #[test]
    fn an_older_version_never_replaces_a_newer_one() {
        let mut queue = EventQueue::new(1);
        queue.push(item("a", 5));
        queue.push(item("a", 4));
        assert_eq!(taken(&mut queue), ["a@5"]);
    }
}
