//! The node's thread: the loop that reads and opens datagrams, runs the driver's timers
//! and the host's commands, seals and sends what the driver says, and publishes the member
//! snapshot, counters and events for the host.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::driver::{Driver, DriverStats, Transmit};
use crate::identity::auth::{Authority, Pins};
use crate::lanes::{Lane, PublishError};
use crate::wire::frame::{DropReason, Keyring, MAX_FRAME_LEN};
use crate::wire::MAX_MESSAGE_LEN;

use super::sys::wait_readable;
use super::{relock, Shared};

/// Datagrams read per wake-up before timers get their turn, so a flood cannot starve them.
const RECV_BATCH: usize = 256;
/// The member snapshot is refreshed at least this often while traffic flows, because foca
/// does not notify suspicion.
const VIEW_REFRESH: Duration = Duration::from_millis(100);
/// The loop wakes at least this often even when idle.
const MAX_SLEEP: Duration = Duration::from_millis(500);

/// Frame-level counters kept by the node thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameCounters {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub send_errors: u64,
    pub recv_errors: u64,
    /// Indexed like [`DropReason::ALL`].
    pub drops: [u64; DropReason::ALL.len()],
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    pub frames: FrameCounters,
    pub driver: DriverStats,
    pub events_dropped: u64,
    /// Item versions a slow reader never saw because a newer version of the same item
    /// replaced them while they waited.
    pub items_coalesced: u64,
}

/// `(lane, key, version, payload)`
pub type ItemToPublish = (Lane, String, u64, Vec<u8>);

pub(super) enum Command {
    Join(Vec<SocketAddr>),
    Publish {
        lane: Lane,
        key: String,
        version: u64,
        payload: Vec<u8>,
        reply: SyncSender<Result<bool, PublishError>>,
    },
    PublishMany {
        items: Vec<ItemToPublish>,
        reply: SyncSender<Vec<Result<bool, PublishError>>>,
    },
    SetPins(Pins),
    Renew(Box<Authority>),
    Forget(String, Vec<(Lane, String)>),
    Leave(SyncSender<()>),
    Stop(SyncSender<()>),
}

struct UdpOut<'a> {
    socket: &'a UdpSocket,
    ring: &'a Keyring,
    frame: &'a mut Vec<u8>,
    counters: &'a mut FrameCounters,
}

impl Transmit for UdpOut<'_> {
    fn send(&mut self, to: SocketAddr, message: &[u8]) {
        if message.len() > MAX_MESSAGE_LEN {
            // Cannot happen by construction (foca and sync chunks are sized to fit); a
            // frame above MAX_FRAME_LEN is never put on the wire.
            self.counters.send_errors += 1;
            return;
        }
        self.frame.clear();
        self.ring.seal_into(message, self.frame);
        debug_assert!(self.frame.len() <= MAX_FRAME_LEN);
        match self.socket.send_to(self.frame, to) {
            Ok(_) => {
                self.counters.packets_out += 1;
                self.counters.bytes_out += self.frame.len() as u64;
            }
            Err(_) => self.counters.send_errors += 1,
        }
    }
}

pub(super) fn run(
    mut driver: Driver,
    clock: Instant,
    socket: &UdpSocket,
    shared: &Shared,
    commands: &Receiver<Command>,
) {
    let mut datagram = vec![0u8; 1 << 16];
    let mut plaintext = Vec::with_capacity(MAX_FRAME_LEN);
    let mut frame = Vec::with_capacity(MAX_FRAME_LEN);
    let mut counters = FrameCounters::default();
    let mut last_view = clock;
    let mut replies = Vec::new();

    loop {
        let now = clock.elapsed();
        let mut stopping = false;
        {
            let ring = shared.ring();
            let mut out = UdpOut {
                socket,
                ring: &ring,
                frame: &mut frame,
                counters: &mut counters,
            };
            for _ in 0..RECV_BATCH {
                let len = match socket.recv_from(&mut datagram) {
                    Ok((len, _from)) => len,
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        out.counters.recv_errors += 1;
                        break;
                    }
                };
                out.counters.packets_in += 1;
                out.counters.bytes_in += len as u64;
                match ring.open_into(&datagram[..len], &mut plaintext) {
                    Ok(()) => driver.handle_datagram(now, &plaintext, &mut out),
                    Err(reason) => out.counters.drops[drop_index(reason)] += 1,
                }
            }
            driver.handle_timers(now, &mut out);
            while let Ok(command) = commands.try_recv() {
                match command {
                    Command::Join(seeds) => driver.join(now, &seeds, &mut out),
                    Command::SetPins(pins) => driver.set_pins(pins),
                    Command::Renew(authority) => {
                        // A node always signs: a bound node was checked as certified.
                        let _ = driver.renew(now, *authority, &mut out);
                    }
                    Command::Forget(site, items) => {
                        driver.forget(&site, &items);
                    }
                    Command::Publish {
                        lane,
                        key,
                        version,
                        payload,
                        reply,
                    } => {
                        let _ = reply.send(driver.publish(lane, &key, version, &payload));
                    }
                    Command::PublishMany { items, reply } => {
                        let results = items
                            .into_iter()
                            .map(|(lane, key, version, payload)| {
                                driver.publish(lane, &key, version, &payload)
                            })
                            .collect();
                        let _ = reply.send(results);
                    }
                    Command::Leave(reply) => {
                        driver.leave(now, &mut out);
                        replies.push(reply);
                        stopping = true;
                    }
                    Command::Stop(reply) => {
                        replies.push(reply);
                        stopping = true;
                    }
                }
            }
            driver.flush(now, &mut out);
        }

        // The snapshot and the counters go out before the events, so a reader woken by an
        // event never sees a member list or stats older than that event.
        let changed = driver.take_membership_changed();
        if changed || stopping || last_view.elapsed() >= VIEW_REFRESH {
            last_view = Instant::now();
            shared.members.store(Arc::new(driver.members()));
            if **shared.local.load() != *driver.identity() {
                shared.local.store(Arc::new(driver.identity().clone()));
            }
        }
        {
            let mut stats = relock(&shared.stats);
            stats.frames = counters;
            stats.driver = driver.stats();
        }
        publish_events(&mut driver, shared);
        if stopping || driver.has_yielded() {
            shared.mark_stopped();
            for reply in replies.drain(..) {
                let _ = reply.send(());
            }
            return;
        }

        let sleep = driver
            .next_deadline()
            .map_or(MAX_SLEEP, |deadline| {
                deadline.saturating_sub(clock.elapsed())
            })
            .min(MAX_SLEEP);
        wait_readable(socket.as_raw_fd(), shared.waker.as_raw_fd(), sleep);
        shared.waker.drain();
    }
}

fn publish_events(driver: &mut Driver, shared: &Shared) {
    let mut events = driver.drain_events().peekable();
    if events.peek().is_none() {
        return;
    }
    let mut queue = relock(&shared.events);
    for event in events {
        queue.push(event);
    }
    drop(queue);
    shared.events_ready.notify_all();
    shared.event_fd.signal();
}

fn drop_index(reason: DropReason) -> usize {
    DropReason::ALL
        .iter()
        .position(|r| *r == reason)
        .expect("every reason is listed")
}
