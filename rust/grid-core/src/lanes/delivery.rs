//! Delivery: the foca side of the store ([`ItemHandler`]), which takes received items into
//! the [`ItemStore`] and queues news for relaying, and the relay queue it shares with the
//! driver ([`Relays`]).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use foca::BroadcastHandler;

use super::{BroadcastKey, ItemStore};
use crate::identity::NodeId;
use crate::lanes::relay::RelayQueue;

/// The foca side of the store: decides whether a received item is news, and queues news
/// for relaying ([`crate::lanes::relay`]) rather than handing it to foca's backlog. foca is
/// handed items only by the driver, from that queue (this site's own items included), one
/// window at a time.
pub struct ItemHandler {
    store: Arc<Mutex<ItemStore>>,
    relays: Arc<Mutex<Relays>>,
}

impl ItemHandler {
    pub fn new(store: Arc<Mutex<ItemStore>>, relays: Arc<Mutex<Relays>>) -> ItemHandler {
        ItemHandler { store, relays }
    }
}

/// The relay queue, with what the driver and the handler pass each other through it.
pub struct Relays {
    pub queue: RelayQueue,
    /// Transmissions of each item: the members a `Broadcast` reaches (g).
    pub transmissions: u8,
    /// The item the driver is handing foca, already stored (`add_broadcast` asks the
    /// handler for its key).
    handing: Option<BroadcastKey>,
}

impl Relays {
    pub fn new(queue: RelayQueue, transmissions: u8) -> Relays {
        Relays {
            queue,
            transmissions,
            handing: None,
        }
    }

    /// Names the item the next `add_broadcast` hands foca.
    pub fn hand(&mut self, key: BroadcastKey) {
        self.handing = Some(key);
    }
}

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl BroadcastHandler<NodeId> for ItemHandler {
    type Key = BroadcastKey;
    // Bad items are counted and skipped, never an error: an error would make foca drop
    // the rest of the packet.
    type Error = Infallible;

    fn receive_item(
        &mut self,
        data: &[u8],
        sender: Option<&NodeId>,
    ) -> Result<Option<BroadcastKey>, Infallible> {
        if sender.is_none() {
            // The driver handing an item, already stored.
            return Ok(lock(&self.relays).handing.take());
        }
        let news = lock(&self.store).accept(data, true);
        if let Some(key) = news {
            lock(&self.relays).queue.push(key, data.to_vec());
        }
        Ok(None)
    }
}
