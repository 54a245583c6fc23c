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

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;

use crate::driver::config::{ConfigError, SwimConfig};
use crate::driver::{Driver, DriverStats, Event, MemberView, Transmit};
use crate::identity::auth::{
    AuthError, Authority, Pins, SiteCredentials, TrustPolicy, FINGERPRINT_LEN,
};
use crate::identity::{validate_site, Interner, NodeId, SiteNameError};
use crate::lanes::{Item, Lane, PublishError};
use crate::wire::frame::{DropReason, Keyring, KeyringError, MAX_FRAME_LEN};
use crate::wire::{MAX_MESSAGE_LEN, MAX_UNSEALED_LEN};

/// Datagrams read per wake-up before timers get their turn, so a flood cannot starve them.
const RECV_BATCH: usize = 256;
/// The member snapshot is refreshed at least this often while traffic flows, because foca
/// does not notify suspicion.
const VIEW_REFRESH: Duration = Duration::from_millis(100);
/// The loop wakes at least this often even when idle.
const MAX_SLEEP: Duration = Duration::from_millis(500);
/// Asked of the kernel for the receive buffer; a sync arrives as a burst of chunks.
const RECV_BUFFER_BYTES: libc::c_int = 4 << 20;

#[derive(Clone, Debug)]
pub struct NodeSettings {
    pub bind: SocketAddr,
    /// What peers use to reach us; defaults to the bound address.
    pub advertise: Option<SocketAddr>,
    pub site: String,
    /// Defaults to wall-clock milliseconds, so a restart wins over the previous life.
    pub generation: Option<u64>,
    pub swim: SwimConfig,
    /// Membership events kept for a slow reader; more are dropped and counted. Items are
    /// never dropped (see [`EventQueue`]).
    pub event_capacity: usize,
    /// Item names the node remembers (1 to [`crate::driver::MAX_ITEM_CAPACITY`]).
    pub item_capacity: usize,
}

/// What a node signs with and trusts.
#[derive(Clone)]
pub struct NodeTrust {
    /// The site certificate (DER), then any intermediates.
    pub chain: Vec<Vec<u8>>,
    /// The certificate's private key, PKCS#8 DER.
    pub private_key: Vec<u8>,
    /// The network CA certificates (DER).
    pub anchors: Vec<Vec<u8>>,
    /// Pinned SHA-256 fingerprints of site certificates, by site name.
    pub pins: Pins,
    /// SHA-256 fingerprints of revoked site certificates.
    pub revoked: Vec<[u8; FINGERPRINT_LEN]>,
}

impl fmt::Debug for NodeTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTrust")
            .field("chain", &self.chain.len())
            .field("anchors", &self.anchors.len())
            .field("pins", &self.pins.len())
            .field("revoked", &self.revoked.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub enum NodeError {
    Config(ConfigError),
    Site(SiteNameError),
    Keyring(KeyringError),
    /// The site's certificate, key or trust anchors cannot work; nothing was bound.
    Credentials(AuthError),
    Bind {
        addr: SocketAddr,
        source: io::Error,
    },
    Io(io::Error),
    Publish(PublishError),
    /// The node is not running (never started, left or closed).
    Stopped,
    AlreadyStarted,
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Config(err) => err.fmt(f),
            NodeError::Site(err) => err.fmt(f),
            NodeError::Keyring(err) => err.fmt(f),
            NodeError::Credentials(err) => write!(f, "site credentials: {err}"),
            NodeError::Bind { addr, source } => write!(f, "cannot bind UDP {addr}: {source}"),
            NodeError::Io(err) => write!(f, "socket setup failed: {err}"),
            NodeError::Publish(err) => err.fmt(f),
            NodeError::Stopped => f.write_str("the SWIM node is not running"),
            NodeError::AlreadyStarted => f.write_str("the SWIM node was already started"),
        }
    }
}

impl std::error::Error for NodeError {}

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

const PHASE_CREATED: u8 = 0;
const PHASE_RUNNING: u8 = 1;
const PHASE_STOPPED: u8 = 2;

/// `(lane, key, version, payload)`
pub type ItemToPublish = (Lane, String, u64, Vec<u8>);

enum Command {
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
struct EventQueue {
    order: VecDeque<Queued>,
    items: HashMap<ItemSlot, Item>,
    events: usize,
    capacity: usize,
    dropped: u64,
    coalesced: u64,
}

impl EventQueue {
    fn new(capacity: usize) -> EventQueue {
        EventQueue {
            order: VecDeque::new(),
            items: HashMap::new(),
            events: 0,
            capacity,
            dropped: 0,
            coalesced: 0,
        }
    }

    fn push(&mut self, event: Event) {
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

    fn pop(&mut self) -> Option<Event> {
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

impl NodeTrust {
    /// The credentials and policy a node of `site` would sign and verify with, checked as
    /// [`Node::bind`] checks them, at wall-clock time `now`.
    pub fn check(self, site: &str, now: Duration) -> Result<Authority, NodeError> {
        validate_site(site).map_err(NodeError::Site)?;
        let policy = TrustPolicy::new(&self.anchors, self.pins)
            .map_err(NodeError::Credentials)?
            .with_revoked(self.revoked);
        let credentials = SiteCredentials::new(site, self.chain, &self.private_key, &policy, now)
            .map_err(NodeError::Credentials)?;
        let hello_len = 1
            + crate::identity::MAX_IDENTITY_LEN
            + 2
            + credentials
                .chain()
                .iter()
                .map(|der| 2 + der.len())
                .sum::<usize>();
        if hello_len > MAX_UNSEALED_LEN {
            return Err(NodeError::Config(ConfigError(format!(
                "the site certificate chain takes {hello_len} bytes in a HELLO message, more \
                 than the {MAX_UNSEALED_LEN} one frame can carry; present the leaf alone or \
                 use smaller certificates"
            ))));
        }
        Ok(Authority::Certified {
            credentials: Box::new(credentials),
            policy,
        })
    }
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

fn run(
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

fn random_seed() -> u64 {
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).expect("the OS RNG is available");
    u64::from_le_bytes(seed)
}

fn grow_receive_buffer(socket: &UdpSocket) {
    let size = RECV_BUFFER_BYTES;
    // Best effort: the kernel caps it at net.core.rmem_max, which is fine.
    // SAFETY: a valid socket fd and a correctly sized int option value.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Sleeps until the socket or the waker is readable, or `timeout` passes.
fn wait_readable(socket: RawFd, waker: RawFd, timeout: Duration) {
    let mut fds = [
        libc::pollfd {
            fd: socket,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: waker,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // Round up so a timer is never polled for before it is due.
    let millis = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, millis);
    }
}

/// A non-blocking Linux eventfd: `signal` makes it readable, `drain` resets it.
struct EventFd(RawFd);

impl EventFd {
    fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventFd(fd))
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own fd. A full counter (EAGAIN)
        // already means readable, so the result needs no handling.
        unsafe {
            libc::write(self.0, (&one as *const u64).cast(), 8);
        }
    }

    fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from our own fd; EAGAIN means already 0.
        unsafe {
            libc::read(self.0, (&mut value as *mut u64).cast(), 8);
        }
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: we own the fd and close it once.
        unsafe {
            libc::close(self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::NodeId;

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
