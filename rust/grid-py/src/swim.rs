//! `grid._native.SwimNode`: the Python handle on a SWIM node thread.
//!
//! Every call that waits (publish's round trip, leave, close, next_event) releases the GIL;
//! the node thread itself never touches Python. Events and members cross as plain tuples;
//! `grid.membership` turns them into typed objects.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use grid_core::driver::config::SwimConfig;
use grid_core::driver::node::{wall_clock, Node, NodeError, NodeSettings, NodeTrust};
use grid_core::driver::{Event, DEFAULT_ITEM_CAPACITY, FOCA_ERROR_KINDS};
use grid_core::identity::auth::{Pins, FINGERPRINT_LEN};
use grid_core::identity::NodeId;
use grid_core::lanes::{Lane, PublishError, MAX_ITEM_LEN, MAX_KEY_LEN};
use grid_core::wire::frame::DropReason;
use grid_core::wire::session::MESSAGE_KINDS;
use grid_core::wire::versions::ProtocolRange;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::errors::{
    BindError, BroadcastRefused, InvalidKeyError, NodeStateError, NodeStopped, PayloadTooLarge,
    PrivateKeyMaterial, SiteCredentialsError, SwimConfigError,
};

/// Blocking waits are cut into slices this long so Ctrl-C still interrupts them.
const WAIT_SLICE: Duration = Duration::from_millis(100);

fn node_error(err: NodeError) -> PyErr {
    let message = err.to_string();
    match err {
        NodeError::Config(_) | NodeError::Site(_) => SwimConfigError::new_err(message),
        NodeError::Keyring(_) => InvalidKeyError::new_err(message),
        NodeError::Credentials(_) => SiteCredentialsError::new_err(message),
        NodeError::Bind { .. } | NodeError::Io(_) => BindError::new_err(message),
        NodeError::Publish(PublishError::TooLarge { .. }) => PayloadTooLarge::new_err(message),
        NodeError::Publish(PublishError::PrivateKey) => PrivateKeyMaterial::new_err(message),
        NodeError::Publish(_) => BroadcastRefused::new_err(message),
        NodeError::Stopped => NodeStopped::new_err(message),
        NodeError::AlreadyStarted => NodeStateError::new_err(message),
    }
}

fn parse_addr(what: &str, text: &str) -> PyResult<SocketAddr> {
    text.parse().map_err(|_| {
        SwimConfigError::new_err(format!(
            "{what} {text:?} is not an IP:port address (IPv6 as [addr]:port)"
        ))
    })
}

fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            SwimConfigError::new_err(format!(
                "{name} must be a positive number of seconds, got {value}"
            ))
        })
}

/// A SHA-256 certificate fingerprint; `what` names it in the error.
fn fingerprint(bytes: &[u8], what: impl FnOnce() -> String) -> PyResult<[u8; FINGERPRINT_LEN]> {
    <[u8; FINGERPRINT_LEN]>::try_from(bytes).map_err(|_| {
        SiteCredentialsError::new_err(format!(
            "{} must be a {FINGERPRINT_LEN}-byte SHA-256, got {} bytes",
            what(),
            bytes.len()
        ))
    })
}

fn pins(pins: HashMap<String, Vec<Vec<u8>>>) -> PyResult<Pins> {
    pins.into_iter()
        .map(|(site, pins)| {
            let pins = pins
                .iter()
                .map(|pin| fingerprint(pin, || format!("a pin of site {site:?}")))
                .collect::<PyResult<Vec<_>>>()?;
            Ok((site, pins))
        })
        .collect()
}

/// What a node signs with and trusts, as Python hands it over (the constructor, `renew`
/// and `check_site_credentials` take the same five).
fn node_trust(
    chain: Vec<Vec<u8>>,
    private_key: Vec<u8>,
    anchors: Vec<Vec<u8>>,
    pinned: HashMap<String, Vec<Vec<u8>>>,
    revoked: Vec<Vec<u8>>,
) -> PyResult<NodeTrust> {
    let revoked = revoked
        .iter()
        .map(|revoked| fingerprint(revoked, || "a revoked certificate's fingerprint".to_owned()))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(NodeTrust {
        chain,
        private_key,
        anchors,
        pins: pins(pinned)?,
        revoked,
    })
}

fn lane(name: &str) -> PyResult<Lane> {
    Lane::from_name(name).ok_or_else(|| {
        BroadcastRefused::new_err(format!(
            "unknown lane {name:?}; lanes are state, gateway, cert and metadata"
        ))
    })
}

type MemberTuple = (String, String, &'static str, u64);

fn member_fields(id: &NodeId) -> (String, String, u64) {
    (
        id.site().to_string(),
        id.socket_addr().to_string(),
        id.generation(),
    )
}

fn event_to_py(py: Python<'_>, event: Event) -> PyResult<Py<PyAny>> {
    let member = |kind: &'static str, id: &NodeId| {
        let (site, addr, generation) = member_fields(id);
        (kind, site, addr, generation).into_py_any(py)
    };
    match event {
        Event::MemberUp(id) => member("member_up", &id),
        Event::MemberDown(id) => member("member_down", &id),
        Event::MemberLeft(id) => member("member_left", &id),
        Event::MemberRenamed { previous, current } => {
            let (site, addr, generation) = member_fields(&current);
            (
                "member_renamed",
                site,
                addr,
                generation,
                previous.generation(),
            )
                .into_py_any(py)
        }
        Event::Item(item) => (
            "item",
            item.origin.to_string(),
            item.lane.name(),
            item.key.to_string(),
            item.version,
            pyo3::types::PyBytes::new(py, &item.payload),
        )
            .into_py_any(py),
        Event::NameConflict { other, yielded } => {
            let (site, addr, generation) = member_fields(&other);
            ("name_conflict", site, addr, generation, yielded).into_py_any(py)
        }
        Event::VersionRefused { peer, theirs, ours } => {
            let (site, addr, generation) = member_fields(&peer);
            (
                "version_refused",
                site,
                addr,
                generation,
                (theirs.min(), theirs.max()),
                (ours.min(), ours.max()),
            )
                .into_py_any(py)
        }
    }
}

/// A SWIM node: foca over AES-256-GCM UDP on its own thread.
#[pyclass(frozen, module = "grid._native")]
pub struct SwimNode {
    node: Node,
}

#[pymethods]
impl SwimNode {
    #[new]
    #[pyo3(signature = (
        bind,
        site,
        keys,
        *,
        certificate_chain,
        private_key,
        trust_anchors = Vec::new(),
        pins = HashMap::new(),
        revoked = Vec::new(),
        advertise = None,
        probe_interval = 5.0,
        suspicion_timeout = 10.0,
        gossip_nodes = 3,
        push_pull_interval = 30.0,
        event_capacity = 4096,
        generation = None,
        item_capacity = DEFAULT_ITEM_CAPACITY,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        bind: &str,
        site: &str,
        keys: Vec<Vec<u8>>,
        certificate_chain: Vec<Vec<u8>>,
        private_key: Vec<u8>,
        trust_anchors: Vec<Vec<u8>>,
        pins: HashMap<String, Vec<Vec<u8>>>,
        revoked: Vec<Vec<u8>>,
        advertise: Option<&str>,
        probe_interval: f64,
        suspicion_timeout: f64,
        gossip_nodes: usize,
        push_pull_interval: f64,
        event_capacity: usize,
        generation: Option<u64>,
        item_capacity: usize,
    ) -> PyResult<SwimNode> {
        let settings = NodeSettings {
            bind: parse_addr("bind address", bind)?,
            advertise: advertise
                .map(|a| parse_addr("advertise address", a))
                .transpose()?,
            site: site.to_owned(),
            generation,
            swim: SwimConfig {
                probe_interval: seconds("probe_interval", probe_interval)?,
                suspicion_timeout: seconds("suspicion_timeout", suspicion_timeout)?,
                gossip_nodes,
                push_pull_interval: seconds("push_pull_interval", push_pull_interval)?,
            },
            event_capacity,
            item_capacity,
        };
        let trust = node_trust(certificate_chain, private_key, trust_anchors, pins, revoked)?;
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let node = Node::bind(settings, &keys, trust).map_err(node_error)?;
        Ok(SwimNode { node })
    }

    /// Replaces the pinned certificate fingerprints (site name → SHA-256 of its DER).
    fn set_pins(&self, pins: HashMap<String, Vec<Vec<u8>>>) -> PyResult<()> {
        self.node.set_pins(self::pins(pins)?).map_err(node_error)
    }

    /// Signs and verifies with these credentials from now on, without a restart (a renewed
    /// site certificate and key, a new CA bundle, new pins, revoked certificates); raises
    /// `SiteCredentialsError` as the constructor would, and the node keeps its current
    /// credentials then.
    #[pyo3(signature = (certificate_chain, private_key, trust_anchors = Vec::new(), pins = HashMap::new(), revoked = Vec::new()))]
    fn renew(
        &self,
        certificate_chain: Vec<Vec<u8>>,
        private_key: Vec<u8>,
        trust_anchors: Vec<Vec<u8>>,
        pins: HashMap<String, Vec<Vec<u8>>>,
        revoked: Vec<Vec<u8>>,
    ) -> PyResult<()> {
        let trust = node_trust(certificate_chain, private_key, trust_anchors, pins, revoked)?;
        self.node.renew(trust).map_err(node_error)
    }

    /// Forgets these (lane, key) items of `site`: their versions are kept, their payloads
    /// dropped, and the same versions are delivered again once the site is live and they
    /// come back.
    fn forget(&self, site: &str, items: Vec<(String, String)>) -> PyResult<()> {
        let items = items
            .into_iter()
            .map(|(lane_name, key)| Ok((lane(&lane_name)?, key)))
            .collect::<PyResult<Vec<_>>>()?;
        self.node.forget(site, items).map_err(node_error)
    }

    /// Starts the protocol thread.
    fn start(&self) -> PyResult<()> {
        self.node.start().map_err(node_error)
    }

    /// Announces to the seeds ("IP:port") and asks one for its full state.
    fn join(&self, seeds: Vec<String>) -> PyResult<()> {
        let seeds = seeds
            .iter()
            .map(|s| parse_addr("seed", s))
            .collect::<PyResult<Vec<_>>>()?;
        self.node.join(seeds).map_err(node_error)
    }

    /// Tells the cluster this node leaves, then stops the thread.
    fn leave(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.node.leave()).map_err(node_error)
    }

    /// Stops at once without telling the cluster (peers will see a failure).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.node.close()).map_err(node_error)
    }

    /// Every known member except this node: (site, address, state, generation).
    fn members(&self) -> Vec<MemberTuple> {
        self.node
            .members()
            .iter()
            .map(|m| {
                let (site, addr, generation) = member_fields(&m.id);
                (site, addr, m.state.name(), generation)
            })
            .collect()
    }

    /// The protocol version spoken with each member whose `HELLO` was heard: (site,
    /// address, generation, version). Apart from `members()`, whose tuples stay as they
    /// were for hosts written before versions.
    fn protocols(&self) -> Vec<(String, String, u64, u8)> {
        self.node
            .members()
            .iter()
            .filter_map(|m| {
                let (site, addr, generation) = member_fields(&m.id);
                Some((site, addr, generation, m.protocol?))
            })
            .collect()
    }

    /// Offers an item; False when this node already has this version or a newer one.
    fn publish(
        &self,
        py: Python<'_>,
        lane_name: &str,
        key: &str,
        version: u64,
        payload: &[u8],
    ) -> PyResult<bool> {
        let lane = lane(lane_name)?;
        let key = key.to_owned();
        let payload = payload.to_vec();
        py.detach(|| self.node.publish(lane, &key, version, &payload))
            .map_err(node_error)
    }

    /// Offers many `(lane, key, version, payload)` items in one exchange with the protocol
    /// thread. For each: True when news, False when this node already has that version or a
    /// newer one, or the refusal as a message (nothing of that item is stored or sent; the
    /// others are offered all the same).
    fn publish_many(
        &self,
        py: Python<'_>,
        items: Vec<(String, String, u64, Vec<u8>)>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let items = items
            .into_iter()
            .map(|(lane_name, key, version, payload)| {
                Ok((lane(&lane_name)?, key, version, payload))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let results = py
            .detach(|| self.node.publish_many(items))
            .map_err(node_error)?;
        results
            .into_iter()
            .map(|result| match result {
                Ok(news) => news.into_py_any(py),
                Err(refused) => refused.to_string().into_py_any(py),
            })
            .collect()
    }

    /// Counters and gauges, flat: frame drops by reason, foca errors by kind, and more.
    fn stats(&self) -> HashMap<String, u64> {
        let stats = self.node.stats();
        let f = stats.frames;
        let d = stats.driver;
        let mut out: HashMap<String, u64> = [
            ("packets_in", f.packets_in),
            ("bytes_in", f.bytes_in),
            ("packets_out", f.packets_out),
            ("bytes_out", f.bytes_out),
            ("send_errors", f.send_errors),
            ("recv_errors", f.recv_errors),
            ("bad_messages", d.bad_messages),
            ("syncs_started", d.syncs_started),
            ("syncs_served", d.syncs_served),
            ("syncs_done", d.syncs_completed),
            ("catch_up_syncs", d.catch_up_syncs),
            ("heads_syncs", d.heads_syncs),
            ("stretch_syncs", d.stretch_syncs),
            ("hole_syncs", d.hole_syncs),
            ("stretches_lost", d.stretches_lost),
            ("syncs_incomplete", d.syncs_incomplete),
            ("sync_chunks_sent", d.sync_chunks_sent),
            ("sync_chunks_received", d.sync_chunks_received),
            ("digests_sent", d.digests_sent),
            ("digests_answered", d.digests_answered),
            ("digests_held_back", d.digests_held_back),
            ("repair_items_sent", d.repair_items_sent),
            ("items_repaired", d.items_repaired),
            ("leave_notices", d.leave_notices),
            ("items_published", d.items_published),
            ("items_delivered", d.items_delivered),
            ("private_key_drops", d.item_refusals.private_key),
            ("items_malformed", d.item_refusals.malformed),
            ("items_store_full", d.item_refusals.store_full),
            ("items_unverified_origin", d.item_refusals.unverified_origin),
            ("items_bad_signature", d.item_refusals.bad_signature),
            ("items_earlier_key", d.item_renewals.earlier_key_items),
            (
                "items_signatures_renewed",
                d.item_renewals.signatures_renewed,
            ),
            ("items_revoked", d.item_renewals.revoked_items),
            ("item_signature_checks", d.item_signature_checks),
            ("items_signed_again", d.items_signed_again),
            ("renewals", d.renewals),
            ("earlier_certificates", d.earlier_certificates as u64),
            ("members_revoked", d.members_revoked),
            ("keys_asked", d.keys_asked),
            ("caught_up", u64::from(d.caught_up)),
            ("items_waiting", d.items_waiting as u64),
            ("previous_key_messages", d.session.previous_key_messages),
            ("name_conflicts", d.name_conflicts),
            ("members_unverified", d.members_unverified),
            ("members_implausible", d.members_implausible),
            ("down_claims_held", d.down_claims_held),
            ("hellos_sent", d.session.hellos_sent),
            ("hellos_received", d.session.hellos_received),
            ("answers_withheld", d.session.answers_withheld),
            ("session_messages_sent", d.session.session_messages_sent),
            (
                "session_messages_accepted",
                d.session.session_messages_accepted,
            ),
            ("handshakes_started", d.session.handshakes_started),
            ("handshakes_completed", d.session.handshakes_completed),
            ("handshakes_refused", d.session.handshakes_refused),
            ("sessions", d.session.sessions),
            ("events_dropped", stats.events_dropped),
            ("items_coalesced", stats.items_coalesced),
            ("members", d.members as u64),
            ("broadcast_backlog", d.broadcast_backlog as u64),
            ("relay_queue", d.relay_queue as u64),
            ("updates_backlog", d.updates_backlog as u64),
            ("items_stored", d.items_stored as u64),
            ("max_transmissions", u64::from(d.max_transmissions)),
            ("sync_entries_known", d.sync_entries_known),
            ("sync_members_left_out", d.sync_members_left_out),
            ("gossip_entries_known", d.gossip_entries_known),
            ("probes_failed", d.probes_failed),
            ("late_answers", d.late_answers),
            ("suspicion_notices", d.suspicion_notices),
            ("refutations", d.refutations),
            ("stale_suspicion_timers", d.stale_suspicion_timers),
            ("local_health", u64::from(d.local_health)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let mut dropped_total = 0;
        let session = d.session;
        let message_drops = [
            ("malformed", session.dropped_malformed),
            ("bad_identity", session.dropped_bad_identity),
            ("misdirected", session.dropped_misdirected),
            ("stale", session.dropped_stale),
            ("replayed", session.dropped_replayed),
            ("unknown_sender", session.dropped_unknown_sender),
            ("bad_signature", session.dropped_bad_signature),
            (
                "untrusted_certificate",
                session.dropped_untrusted_certificate,
            ),
            ("incompatible_version", session.dropped_incompatible_version),
            ("over_budget", session.dropped_over_budget),
            ("unknown_session", session.dropped_unknown_session),
            ("bad_tag", session.dropped_bad_tag),
            ("superseded", d.dropped_superseded),
        ];
        let frame_drops = DropReason::ALL.iter().map(|r| r.as_str()).zip(f.drops);
        for (reason, count) in frame_drops.chain(message_drops) {
            dropped_total += count;
            out.insert(format!("dropped_{reason}"), count);
        }
        out.insert("dropped".to_owned(), dropped_total);
        for (kind, count) in FOCA_ERROR_KINDS.iter().zip(d.foca_errors) {
            out.insert(format!("foca_error_{kind}"), count);
        }
        let session = d.session;
        for (i, kind) in MESSAGE_KINDS.iter().enumerate() {
            out.insert(format!("messages_sent_{kind}"), session.sent[i].messages);
            out.insert(format!("message_bytes_sent_{kind}"), session.sent[i].bytes);
            out.insert(
                format!("messages_accepted_{kind}"),
                session.accepted[i].messages,
            );
            out.insert(
                format!("message_bytes_accepted_{kind}"),
                session.accepted[i].bytes,
            );
        }
        out
    }

    /// Installs a key that may open frames; returns its public id.
    fn install_key(&self, key: &[u8]) -> PyResult<String> {
        self.node.install_key(key).map_err(node_error)
    }

    /// Makes an installed key the one that seals.
    fn use_key(&self, key: &[u8]) -> PyResult<()> {
        self.node.use_key(key).map_err(node_error)
    }

    fn remove_key(&self, key: &[u8]) -> PyResult<()> {
        self.node.remove_key(key).map_err(node_error)
    }

    /// Public ids of the keys, primary first.
    fn key_ids(&self) -> Vec<String> {
        self.node.key_ids()
    }

    /// Waits up to `timeout` seconds (forever if None) for the next event; None on timeout
    /// or when the node has stopped and no event is left.
    #[pyo3(signature = (timeout = None))]
    fn next_event(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        let deadline = match timeout {
            None => None,
            Some(t) if t <= 0.0 => Some(Instant::now()),
            Some(t) => Some(
                Instant::now()
                    + Duration::try_from_secs_f64(t).map_err(|_| {
                        SwimConfigError::new_err(format!("timeout must be finite, got {t}"))
                    })?,
            ),
        };
        loop {
            let slice = deadline.map_or(WAIT_SLICE, |d| {
                d.saturating_duration_since(Instant::now()).min(WAIT_SLICE)
            });
            if let Some(event) = py.detach(|| self.node.next_event(Some(slice))) {
                return event_to_py(py, event).map(Some);
            }
            let expired = deadline.is_some_and(|d| Instant::now() >= d);
            if expired || !self.node.is_running() {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    /// Takes up to `max_events` queued events without waiting.
    #[pyo3(signature = (max_events = 1024))]
    fn poll_events(&self, py: Python<'_>, max_events: usize) -> PyResult<Vec<Py<PyAny>>> {
        self.node
            .poll_events(max_events)
            .into_iter()
            .map(|e| event_to_py(py, e))
            .collect()
    }

    /// A file descriptor that is readable while events may be queued, for event loops.
    fn event_fd(&self) -> i32 {
        self.node.event_fd()
    }

    /// Resets `event_fd()`; call it before draining with `poll_events()`.
    fn clear_event_fd(&self) {
        self.node.clear_event_fd();
    }

    #[getter]
    fn running(&self) -> bool {
        self.node.is_running()
    }

    /// The advertised address peers use.
    #[getter]
    fn address(&self) -> String {
        self.node.local().socket_addr().to_string()
    }

    /// The local socket address (differs from `address` when advertising another one).
    #[getter]
    fn bound_address(&self) -> String {
        self.node.bound_addr().to_string()
    }

    #[getter]
    fn site(&self) -> String {
        self.node.local().site().to_string()
    }

    /// The current generation (bumped if the node had to rejoin).
    #[getter]
    fn generation(&self) -> u64 {
        self.node.local().generation()
    }

    fn __repr__(&self) -> String {
        let local = self.node.local();
        format!(
            "SwimNode(site={:?}, address={}, generation={}, running={})",
            local.site().as_ref(),
            local.socket_addr(),
            local.generation(),
            self.node.is_running()
        )
    }
}

/// Checks that a node of `site` would sign with these credentials and trust its peers as
/// they say: raises `SiteCredentialsError` (or `SwimConfigError` for a bad site name) as
/// `SwimNode` would, without binding anything.
#[pyfunction]
#[pyo3(signature = (site, certificate_chain, private_key, trust_anchors = Vec::new(), pins = HashMap::new(), revoked = Vec::new()))]
fn check_site_credentials(
    site: &str,
    certificate_chain: Vec<Vec<u8>>,
    private_key: Vec<u8>,
    trust_anchors: Vec<Vec<u8>>,
    pins: HashMap<String, Vec<Vec<u8>>>,
    revoked: Vec<Vec<u8>>,
) -> PyResult<()> {
    node_trust(certificate_chain, private_key, trust_anchors, pins, revoked)?
        .check(site, wall_clock())
        .map(drop)
        .map_err(node_error)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SwimNode>()?;
    m.add_function(wrap_pyfunction!(check_site_credentials, m)?)?;
    m.add("MAX_ITEM_LEN", MAX_ITEM_LEN)?;
    m.add("MAX_KEY_LEN", MAX_KEY_LEN)?;
    m.add("LANES", Lane::ALL.map(Lane::name).to_vec())?;
    let protocols = ProtocolRange::CURRENT;
    m.add("PROTOCOLS", (protocols.min(), protocols.max()))?;
    Ok(())
}
