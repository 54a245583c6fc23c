//! A real SWIM node: a [`Driver`] on its own OS thread with a UDP socket, the keyring and
//! the site's credentials (a node always signs and verifies; see
//! [`crate::identity::auth`]).
//!
//! The thread owns the driver and the socket and never waits for its callers: it sleeps in
//! `poll(2)` on the socket and a wake-up eventfd until the next timer deadline, opens every
//! frame with the shared keyring (frames that fail are counted by reason and never reach
//! foca), seals every outgoing message, and publishes what callers may read — a member
//! snapshot, counters, and events on a queue ([`EventQueue`]: membership events bounded,
//! items coalesced by name) — without ever blocking on them.
//! Callers talk to it with commands; a call that needs an answer (publish, leave) waits on
//! a reply channel, which the Python binding does with the GIL released.

mod events;
mod settings;
mod sys;
mod thread;

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;

use crate::driver::config::ConfigError;
use crate::driver::{Driver, Event, MemberView};
use crate::identity::auth::Pins;
use crate::identity::{Interner, NodeId};
use crate::lanes::{Lane, PublishError};
use crate::wire::frame::{Keyring, KeyringError};

use events::EventQueue;
pub use settings::{NodeError, NodeSettings, NodeTrust};
use sys::{grow_receive_buffer, random_seed, EventFd};
use thread::{run, Command};
pub use thread::{FrameCounters, ItemToPublish, NodeStats};

const PHASE_CREATED: u8 = 0;
const PHASE_RUNNING: u8 = 1;
const PHASE_STOPPED: u8 = 2;

struct Shared {
    keyring: RwLock<Keyring>,
    events: Mutex<EventQueue>,
    events_ready: Condvar,
    event_fd: EventFd,
    waker: EventFd,
    members: ArcSwap<Vec<MemberView>>,
    local: ArcSwap<NodeId>,
    stats: Mutex<NodeStats>,
    phase: AtomicU8,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn ring(&self) -> RwLockReadGuard<'_, Keyring> {
        self.keyring
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn ring_mut(&self) -> RwLockWriteGuard<'_, Keyring> {
        self.keyring
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn running(&self) -> bool {
        self.phase.load(Ordering::Acquire) == PHASE_RUNNING
    }

    /// Marks the node stopped and wakes every waiter so none sleeps forever.
    fn mark_stopped(&self) {
        self.phase.store(PHASE_STOPPED, Ordering::Release);
        let _queue = relock(&self.events);
        self.events_ready.notify_all();
        self.event_fd.signal();
    }
}

/// What a bound node holds until it starts.
struct Unstarted {
    socket: UdpSocket,
    commands: Receiver<Command>,
    driver: Driver,
    /// The driver's `now` counts from here.
    clock: Instant,
}

/// A handle on a node; dropping it stops the node (without leaving).
pub struct Node {
    shared: Arc<Shared>,
    pending: Mutex<Option<Unstarted>>,
    commands: Sender<Command>,
    thread: Mutex<Option<JoinHandle<()>>>,
    bound: SocketAddr,
}

/// Time since the Unix epoch (a clock set before 1970 reads as the epoch).
pub fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::from_millis(1))
}

impl Node {
    /// Validates everything and binds the socket; the protocol starts with [`Node::start`].
    pub fn bind(
        settings: NodeSettings,
        keys: &[&[u8]],
        trust: NodeTrust,
    ) -> Result<Node, NodeError> {
        settings.swim.validate().map_err(NodeError::Config)?;
        let clock = Instant::now();
        let wall_offset = wall_clock();
        let authority = trust.check(&settings.site, wall_offset)?;
        let Some((primary, others)) = keys.split_first() else {
            return Err(NodeError::Keyring(KeyringError::BadKeyLength(0)));
        };
        let keyring = Keyring::new(primary, others).map_err(NodeError::Keyring)?;
        if settings.event_capacity == 0 {
            return Err(NodeError::Config(ConfigError(
                "event capacity must be at least 1".into(),
            )));
        }

        let socket = UdpSocket::bind(settings.bind).map_err(|source| NodeError::Bind {
            addr: settings.bind,
            source,
        })?;
        socket.set_nonblocking(true).map_err(NodeError::Io)?;
        grow_receive_buffer(&socket);
        let bound = socket.local_addr().map_err(NodeError::Io)?;
        let advertise = settings.advertise.unwrap_or(bound);
        if advertise.ip().is_unspecified() || advertise.port() == 0 {
            return Err(NodeError::Config(ConfigError(format!(
                "advertise address {advertise} is not reachable by peers; \
                 give a concrete address when binding to a wildcard"
            ))));
        }

        let generation = settings
            .generation
            .unwrap_or_else(|| wall_clock().as_millis() as u64);
        let identity = NodeId::new(Arc::from(settings.site.as_str()), advertise, generation);
        let driver = Driver::new(
            identity.clone(),
            settings.swim,
            random_seed(),
            Interner::default(),
            authority,
            wall_offset,
        )
        .with_item_capacity(settings.item_capacity)
        .map_err(NodeError::Config)?;
        let (commands, receiver) = mpsc::channel();
        let shared = Arc::new(Shared {
            keyring: RwLock::new(keyring),
            events: Mutex::new(EventQueue::new(settings.event_capacity)),
            events_ready: Condvar::new(),
            event_fd: EventFd::new().map_err(NodeError::Io)?,
            waker: EventFd::new().map_err(NodeError::Io)?,
            members: ArcSwap::from_pointee(Vec::new()),
            local: ArcSwap::from_pointee(identity),
            stats: Mutex::new(NodeStats::default()),
            phase: AtomicU8::new(PHASE_CREATED),
        });
        Ok(Node {
            shared,
            pending: Mutex::new(Some(Unstarted {
                socket,
                commands: receiver,
                driver,
                clock,
            })),
            commands,
            thread: Mutex::new(None),
            bound,
        })
    }

    pub fn start(&self) -> Result<(), NodeError> {
        let Some(Unstarted {
            socket,
            commands,
            driver,
            clock,
        }) = relock(&self.pending).take()
        else {
            return Err(if self.shared.running() {
                NodeError::AlreadyStarted
            } else {
                NodeError::Stopped
            });
        };
        self.shared.phase.store(PHASE_RUNNING, Ordering::Release);
        let shared = self.shared.clone();
        let name = format!("grid-swim-{}", driver.identity().site());
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run(driver, clock, &socket, &shared, &commands);
            }));
            shared.mark_stopped();
            // A panic is a bug; the node is stopped either way and callers see it.
            drop(outcome);
        });
        match spawned {
            Ok(handle) => {
                *relock(&self.thread) = Some(handle);
                Ok(())
            }
            Err(err) => {
                self.shared.mark_stopped();
                Err(NodeError::Io(err))
            }
        }
    }

    pub fn bound_addr(&self) -> SocketAddr {
        self.bound
    }

    /// This node's current identity (its generation changes if it had to rejoin).
    pub fn local(&self) -> Arc<NodeId> {
        self.shared.local.load_full()
    }

    pub fn is_running(&self) -> bool {
        self.shared.running()
    }

    pub fn join(&self, seeds: Vec<SocketAddr>) -> Result<(), NodeError> {
        self.command(Command::Join(seeds))
    }

    /// Publishes an item; blocks until the node thread took it (microseconds).
    pub fn publish(
        &self,
        lane: Lane,
        key: &str,
        version: u64,
        payload: &[u8],
    ) -> Result<bool, NodeError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.command(Command::Publish {
            lane,
            key: key.to_owned(),
            version,
            payload: payload.to_vec(),
            reply,
        })?;
        answer
            .recv()
            .map_err(|_| NodeError::Stopped)?
            .map_err(NodeError::Publish)
    }

    /// Offers many items in one exchange with the protocol thread (which handles commands
    /// between batches of received datagrams, so a caller publishing one item at a time
    /// waits a batch per item on a busy node). For each item, as [`Node::publish`]: whether
    /// it was news, or why it was refused (the others are offered all the same).
    pub fn publish_many(
        &self,
        items: Vec<ItemToPublish>,
    ) -> Result<Vec<Result<bool, PublishError>>, NodeError> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.command(Command::PublishMany { items, reply })?;
        answer.recv().map_err(|_| NodeError::Stopped)
    }

    /// Replaces the pinned certificate fingerprints; sites whose verified certificate no
    /// longer matches their pin must introduce themselves again.
    pub fn set_pins(&self, pins: Pins) -> Result<(), NodeError> {
        self.command(Command::SetPins(pins))
    }

    /// Signs and verifies with `trust` from now on, without a restart: a renewed site
    /// certificate and key, new trust anchors (a CA rotated) or pins. Checked here as
    /// [`Node::bind`] checks, for this node's site: what would be refused raises and the
    /// node keeps what it has. A new certificate is introduced to every member at once;
    /// the previous one keeps vouching for what it signed until the node has signed its
    /// own items again (docs/security.md, "Certificate renewal").
    pub fn renew(&self, trust: NodeTrust) -> Result<(), NodeError> {
        let site = self.local().site().clone();
        let authority = trust.check(&site, wall_clock())?;
        self.command(Command::Renew(Box::new(authority)))
    }

    /// Forgets these items of `site` (the host decided its records are stale); their same
    /// versions are taken, and delivered, again once the site is live and they come back.
    pub fn forget(&self, site: &str, items: Vec<(Lane, String)>) -> Result<(), NodeError> {
        self.command(Command::Forget(site.to_owned(), items))
    }

    /// Tells the cluster this node is leaving, then stops. Blocks until the thread ended.
    pub fn leave(&self) -> Result<(), NodeError> {
        self.finish(Command::Leave)
    }

    /// Stops at once without telling anyone: peers will find the node failed. Closing a
    /// stopped node does nothing.
    pub fn close(&self) -> Result<(), NodeError> {
        match self.finish(Command::Stop) {
            Err(NodeError::Stopped) => Ok(()),
            other => other,
        }
    }

    fn finish(&self, make: fn(SyncSender<()>) -> Command) -> Result<(), NodeError> {
        if relock(&self.pending).take().is_some() {
            // Never started: there is no one to tell.
            self.shared.mark_stopped();
            return Ok(());
        }
        let (reply, done) = mpsc::sync_channel(1);
        self.command(make(reply))?;
        let _ = done.recv();
        self.join_thread();
        Ok(())
    }

    fn join_thread(&self) {
        if let Some(handle) = relock(&self.thread).take() {
            let _ = handle.join();
        }
    }

    fn command(&self, command: Command) -> Result<(), NodeError> {
        if !self.shared.running() {
            return Err(NodeError::Stopped);
        }
        self.commands
            .send(command)
            .map_err(|_| NodeError::Stopped)?;
        self.shared.waker.signal();
        Ok(())
    }

    pub fn members(&self) -> Arc<Vec<MemberView>> {
        self.shared.members.load_full()
    }

    pub fn stats(&self) -> NodeStats {
        let mut stats = *relock(&self.shared.stats);
        let queue = relock(&self.shared.events);
        stats.events_dropped = queue.dropped;
        stats.items_coalesced = queue.coalesced;
        stats
    }

    /// Waits up to `timeout` (forever if `None`) for an event; `None` on timeout or once
    /// the node has stopped and every queued event was taken.
    pub fn next_event(&self, timeout: Option<Duration>) -> Option<Event> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut queue = relock(&self.shared.events);
        loop {
            if let Some(event) = queue.pop() {
                return Some(event);
            }
            if self.shared.phase.load(Ordering::Acquire) == PHASE_STOPPED {
                return None;
            }
            queue = match deadline {
                None => self
                    .shared
                    .events_ready
                    .wait(queue)
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
                Some(deadline) => {
                    let left = deadline.checked_duration_since(Instant::now())?;
                    self.shared
                        .events_ready
                        .wait_timeout(queue, left)
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .0
                }
            };
        }
    }

    /// Takes up to `max` queued events without waiting.
    pub fn poll_events(&self, max: usize) -> Vec<Event> {
        let mut queue = relock(&self.shared.events);
        std::iter::from_fn(|| queue.pop()).take(max).collect()
    }

    /// Readable while events may be queued (and once the node stops); for event loops.
    pub fn event_fd(&self) -> RawFd {
        self.shared.event_fd.as_raw_fd()
    }

    /// Resets [`Node::event_fd`]; call before draining with [`Node::poll_events`].
    pub fn clear_event_fd(&self) {
        self.shared.event_fd.drain();
    }

    pub fn install_key(&self, key: &[u8]) -> Result<String, NodeError> {
        self.shared
            .ring_mut()
            .install(key)
            .map(|id| id.to_hex())
            .map_err(NodeError::Keyring)
    }

    pub fn use_key(&self, key: &[u8]) -> Result<(), NodeError> {
        self.shared
            .ring_mut()
            .use_key(key)
            .map_err(NodeError::Keyring)
    }

    pub fn remove_key(&self, key: &[u8]) -> Result<(), NodeError> {
        self.shared
            .ring_mut()
            .remove(key)
            .map_err(NodeError::Keyring)
    }

    pub fn key_ids(&self) -> Vec<String> {
        self.shared
            .ring()
            .key_ids()
            .into_iter()
            .map(|id| id.to_hex())
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.shared.running() {
            let (reply, _done) = mpsc::sync_channel(1);
            if self.commands.send(Command::Stop(reply)).is_ok() {
                self.shared.waker.signal();
            }
        }
        self.join_thread();
    }
}
