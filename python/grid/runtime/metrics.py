"""Grid's Prometheus families, the same in both shells, read from the running networks at
scrape time (their engines, SWIM drivers and nodes, and observation loops): nothing is
counted twice, a scrape only reads.

One family per quantity, in base units (seconds, bytes), counters ending ``_total``;
:data:`FAMILIES` is the catalog of the families both shells expose and
:data:`SWIM_STATS` maps every counter and gauge of a SWIM node's ``stats()`` to one of
them. Labels carry names of networks, sites, gateways, namespaces, resources and lanes,
and values from small fixed sets (states, phases, reasons, outcomes): never a key, a
token, an address or anything read from a Secret.
"""

from __future__ import annotations

import bisect
import importlib.metadata
import platform
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from grid import _native
from grid.errors import GridError
from grid.models.budgets import TenantBudget
from grid.models.network import GridNetworkStatus

if TYPE_CHECKING:
    from grid.engine import GatewayOverlay, SiteEngine
    from grid.membership import SwimNode


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: ``name`` as it is exposed (a counter's ends ``_total``, an info
    family's ``_info``), its type, help text and label names, and a histogram's buckets."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def unit(self) -> str:
        """The base unit the name ends with (``""`` for counts)."""
        base = self.name.removesuffix("_total")
        for unit in ("seconds", "bytes"):
            if base.endswith("_" + unit):
                return unit
        return ""

    def metric(self) -> Metric:
        """An empty family of this type, ready for samples."""
        labels = list(self.labels)
        if self.kind is Kind.COUNTER:
            return CounterMetricFamily(self.name, self.help, labels=labels, unit=self.unit)
        if self.kind is Kind.GAUGE:
            return GaugeMetricFamily(self.name, self.help, labels=labels, unit=self.unit)
        if self.kind is Kind.HISTOGRAM:
            return HistogramMetricFamily(self.name, self.help, labels=labels, unit=self.unit)
        return InfoMetricFamily(self.name.removesuffix("_info"), self.help, labels=labels)


# Request durations (health checks, scrapes, TLS handshakes on a LAN or a WAN): 5 ms to the
# longest timeout a resource may set.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Suspicion to down: about the suspicion timeout (10 s by default, scaled with the mesh).
SUSPICION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0, 300.0)

_N = ("network",)
_GATEWAY = ("network", "gateway_namespace", "gateway")


def _counter(name: str, help: str, *labels: str) -> Family:
    return Family(name, Kind.COUNTER, help, _N + labels)


def _gauge(name: str, help: str, *labels: str) -> Family:
    return Family(name, Kind.GAUGE, help, _N + labels)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "grid_build_info",
            Kind.INFO,
            "Always 1: the build serving this endpoint. shell: agent or operator; version: "
            "the grid-mesh package; native: the Rust extension; python: the interpreter.",
            ("shell", "version", "native", "python"),
        ),
        # -- membership -------------------------------------------------------------------
        _gauge("grid_swim_running", "1 while the network's SWIM node runs, else 0."),
        _gauge(
            "grid_swim_problem",
            "1 while the SWIM node does not run as configured for this reason: start (it "
            "could not start), credentials (new site credentials refused; the old ones are "
            "kept), rotation (a key rotation failed), name_conflict (an older node holds "
            "this site's name), key_file (the agent's key file is unusable).",
            "problem",
        ),
        _gauge("grid_swim_keys", "Keys in the running node's keyring (the primary and others)."),
        _gauge(
            "grid_swim_members",
            "Peers by state as the engine last heard of them (alive, suspect, down, left).",
            "state",
        ),
        _gauge(
            "grid_swim_peers_by_protocol",
            "Live peers (alive or suspect) of the SWIM node by the protocol version spoken "
            "with them (the highest both speak; unknown before a peer's HELLO): while a mesh "
            "is upgraded, the peers still on the release before.",
            "protocol",
        ),
        Family(
            "grid_swim_suspicion_to_down_seconds",
            Kind.HISTOGRAM,
            "From this site seeing a peer suspected (at its refresh tick) to the peer being "
            "declared down, for peers that did not refute.",
            _N,
            SUSPICION_BUCKETS,
        ),
        _counter(
            "grid_swim_name_conflicts_total",
            "Other live nodes claiming this site's name: refused, or yielded to (this node "
            "stopped).",
            "outcome",
        ),
        # -- the SWIM node (every counter since the node started) ---------------------------
        _counter("grid_swim_received_packets_total", "UDP packets received."),
        _counter("grid_swim_received_bytes_total", "UDP payload bytes received."),
        _counter("grid_swim_sent_packets_total", "UDP packets sent."),
        _counter("grid_swim_sent_bytes_total", "UDP payload bytes sent."),
        _counter("grid_swim_socket_errors_total", "Socket errors by operation.", "operation"),
        _counter(
            "grid_swim_dropped_frames_total",
            "Frames dropped before any message was read, by reason: too_short, too_long, "
            "bad_magic, unknown_version, auth_failed (no key of the ring opens it).",
            "reason",
        ),
        _counter(
            "grid_swim_refused_messages_total",
            "Opened messages refused, by reason: malformed, bad_identity, misdirected, stale "
            "(sent further than the allowed clock skew from this clock), replayed, "
            "unknown_sender, bad_signature, untrusted_certificate, incompatible_version (from "
            "a node that speaks no SWIM protocol version this one speaks), superseded (an "
            "earlier life of a node), name_conflict, undecodable, over_budget (signed, past "
            "the second's budget of signature checks for its sender), unknown_session (under "
            "a session this node does not hold; answered with a handshake), bad_tag (under a "
            "session, with a tag its key did not make).",
            "reason",
        ),
        _counter(
            "grid_swim_ignored_member_updates_total",
            "Gossiped member entries left out: unverified (identity not verified here) or "
            "implausible (an incarnation that cannot be true).",
            "reason",
        ),
        _counter(
            "grid_swim_down_claims_held_total",
            "Other members' down claims held as suspicions until confirmed here.",
        ),
        _counter("grid_swim_probes_failed_total", "Probes that got no answer in time."),
        _counter(
            "grid_swim_late_probe_answers_total", "Answers that came after their probe failed."
        ),
        _counter(
            "grid_swim_suspicion_notices_sent_total",
            "Direct notices sent to suspected members so that they can refute.",
        ),
        _counter("grid_swim_refutations_total", "Times this node was suspected and refuted it."),
        _counter(
            "grid_swim_stale_suspicion_timers_total",
            "Suspicion timeouts that fired after the suspicion was settled.",
        ),
        _counter("grid_swim_syncs_started_total", "Push/pull syncs this node started."),
        _counter("grid_swim_syncs_completed_total", "Push/pull syncs this node completed."),
        _counter("grid_swim_syncs_served_total", "Push/pull syncs this node answered."),
        _counter(
            "grid_swim_catch_up_syncs_total",
            "Syncs started at once for the next part of a peer's store while catching up.",
        ),
        _counter(
            "grid_swim_heads_syncs_total",
            "Parts of heads walks (every site's certificates, gateway and metadata) asked for "
            "beside the whole store while catching up.",
        ),
        _counter(
            "grid_swim_stretch_syncs_total",
            "Parts of stretch walks (later stretches of the store, from other peers) asked for "
            "beside the whole walk while catching up.",
        ),
        _counter(
            "grid_swim_hole_syncs_total",
            "Requests for what a catch-up walk's answers showed missing: chunks lost from an "
            "answer, and items a check round lists at versions this node lacks.",
        ),
        _counter(
            "grid_swim_stretches_lost_total",
            "Stretch walks ended by two answers in a row that moved them nothing (the whole "
            "walk covers the rest of the stretch).",
        ),
        _counter(
            "grid_swim_syncs_incomplete_total",
            "Answers to this node's syncs that did not arrive whole in time (the walk moves "
            "on past what came without a gap).",
        ),
        _counter("grid_swim_sync_chunks_sent_total", "Sync chunks sent."),
        _counter("grid_swim_repair_digests_sent_total", "Repair digests sent to a member."),
        _counter(
            "grid_swim_repair_digests_answered_total",
            "Members' repair digests answered with items they lacked.",
        ),
        _counter(
            "grid_swim_repair_digests_held_back_total",
            "Repair digests not answered: the same member's previous one was answered just before.",
        ),
        _counter("grid_swim_repair_items_sent_total", "Items sent in answers to repair digests."),
        _counter(
            "grid_swim_items_repaired_total",
            "Items received in answers to this node's digests that were news: push gossip missed"
            " them.",
        ),
        _counter("grid_swim_sync_chunks_received_total", "Sync chunks received."),
        _counter(
            "grid_swim_sync_entries_known_total",
            "Sync entries not applied because the node already held them.",
        ),
        _counter(
            "grid_swim_sync_members_left_out_total",
            "Syncs sent without this node's members because its view digest agreed with the"
            " peer's.",
        ),
        _counter(
            "grid_swim_gossip_entries_known_total",
            "Member entries of gossip not handed to foca because they would change nothing"
            " (the node held them already, or newer news of the same member).",
        ),
        _counter("grid_swim_leave_notices_total", "Leave notices received."),
        _counter(
            "grid_swim_certificate_renewals_total",
            "Times this site's SWIM node took renewed credentials in place (no restart).",
        ),
        _counter(
            "grid_swim_renewal_items_total",
            "Items handled because a site's certificate changed, by what: earlier_key (taken "
            "on the word of an earlier certificate of their origin), signature_renewed (a held "
            "version's signature replaced by its origin's renewed one), signed_again (this "
            "site's own, signed again under its current key), revoked (dropped: the only key "
            "that signed them was revoked).",
            "what",
        ),
        _gauge(
            "grid_swim_earlier_certificates",
            "Earlier certificates of sites kept to vouch for items their keys signed.",
        ),
        _counter(
            "grid_swim_item_signature_checks_total",
            "Origin signatures checked on items from peers: one per item version taken, "
            "however many relays and syncs bring it again.",
        ),
        _counter(
            "grid_swim_session_messages_total",
            "Messages sent and accepted in the session form (authenticated under a key agreed "
            "with the peer instead of signed), by direction: sent, accepted.",
            "direction",
        ),
        _counter(
            "grid_swim_handshakes_total",
            "Session handshakes, by outcome: started (by this node), completed (its response "
            "came), refused (a handshake message not taken).",
            "outcome",
        ),
        _gauge(
            "grid_swim_sessions",
            "Sessions this node holds with peers (about one per peer speaking sessions; two "
            "while a rekey or a crossing handshake overlaps).",
        ),
        _counter(
            "grid_swim_previous_key_messages_total",
            "Messages taken under the key their site signed with before its latest HELLO "
            "(within 10 s of the switch).",
        ),
        _gauge(
            "grid_swim_caught_up",
            "1 once the node has walked a peer's whole store since it joined and no item waits "
            "for its origin's certificate (its view of the mesh's items is complete), else 0.",
        ),
        _gauge(
            "grid_swim_items_waiting",
            "Items held back until their origin's certificate is verified.",
        ),
        _counter(
            "grid_swim_certificate_requests_total",
            "HELLOs asked of sites whose items waited for their certificate.",
        ),
        _counter(
            "grid_swim_members_revoked_total",
            "Live members taken out of the membership because their certificate was revoked.",
        ),
        _counter("grid_swim_hellos_sent_total", "HELLO messages (certificate chains) sent."),
        _counter("grid_swim_hellos_received_total", "HELLO messages received."),
        _counter(
            "grid_swim_answers_withheld_total",
            "On-demand answers not sent because the second's budget was spent.",
        ),
        _counter(
            "grid_swim_events_dropped_total",
            "Membership events dropped because the shell read them too slowly.",
        ),
        _counter(
            "grid_swim_items_coalesced_total",
            "Item versions replaced by a newer one while waiting for the shell.",
        ),
        _counter(
            "grid_swim_protocol_errors_total",
            "Errors the SWIM protocol (foca) reported, by kind.",
            "kind",
        ),
        _counter(
            "grid_swim_messages_total",
            "Messages sent, and accepted (verified) on receipt, by kind.",
            "direction",
            "kind",
        ),
        _counter(
            "grid_swim_message_bytes_total",
            "Bytes of those messages (signed, before encryption), by kind.",
            "direction",
            "kind",
        ),
        _gauge(
            "grid_swim_broadcast_backlog",
            "Items waiting to be gossiped: in the relay queue, and handed to the protocol.",
        ),
        _gauge("grid_swim_relay_queue", "Items waiting in the relay queue."),
        _gauge("grid_swim_membership_backlog", "Membership updates waiting to be gossiped."),
        _gauge("grid_swim_stored_items", "Items the node holds for syncs and re-gossip."),
        _gauge(
            "grid_swim_max_transmissions",
            "Times each update is gossiped at the current mesh size.",
        ),
        _gauge(
            "grid_swim_local_health",
            "Local health score: 0 when healthy, higher when this node's own probes fail "
            "(it then probes more slowly).",
        ),
        # -- items ------------------------------------------------------------------------
        _counter("grid_items_published_total", "This site's items handed to SWIM.", "lane"),
        _counter(
            "grid_items_publish_refused_total",
            "This site's items SWIM refused to send, by error (PayloadTooLarge, "
            "PrivateKeyMaterial, BroadcastRefused).",
            "reason",
        ),
        _counter(
            "grid_items_received_total",
            "Items delivered by SWIM, by lane and outcome (applied, unchanged, refused).",
            "lane",
            "outcome",
        ),
        _counter(
            "grid_items_refused_total",
            "Items from peers refused, by stage and reason. stage swim (before delivery): "
            "private_key, malformed, store_full, unverified_origin, bad_signature; stage "
            "engine (after delivery): forged, malformed, limit.",
            "stage",
            "reason",
        ),
        # -- trust, overlays, resources ------------------------------------------------------
        _gauge(
            "grid_site_trusted",
            "1 while a peer site's GridSite is Active here (its certificate matched its pin, "
            "its providers are routable), else 0.",
            "site",
        ),
        _gauge(
            "grid_site_certificate_expiry_timestamp_seconds",
            "When a site's leaf certificate expires (its notAfter, Unix time): this site's own "
            "and each peer's advertised one; a peer's goes when the peer is forgotten.",
            "site",
        ),
        Family(
            "grid_overlay_candidates",
            Kind.GAUGE,
            "Candidates in the gateway's current overlay.",
            _GATEWAY,
        ),
        Family(
            "grid_overlay_render_refused",
            Kind.GAUGE,
            "1 while the gateway's last render (or, in the operator, its ConfigMap write) was "
            "refused and the previous overlay is kept, else 0.",
            _GATEWAY,
        ),
        Family(
            "grid_overlay_last_rendered_timestamp_seconds",
            Kind.GAUGE,
            "When the gateway's current overlay revision was rendered (Unix time); absent "
            "while the gateway has no overlay.",
            _GATEWAY,
        ),
        _gauge(
            "grid_provider_credential_expiry_timestamp_seconds",
            "When the access token this site minted for a provider lapses (Unix time); none "
            "while no valid token is in place.",
            "provider",
        ),
        _gauge(
            "grid_resource_phase",
            "1 for the current phase of each resource (other phases have no sample).",
            "kind",
            "name",
            "phase",
        ),
        # -- observations --------------------------------------------------------------------
        Family(
            "grid_provider_health_check_duration_seconds",
            Kind.HISTOGRAM,
            "Health checks of this site's providers, by outcome (ok or failed).",
            ("network", "provider", "outcome"),
            REQUEST_BUCKETS,
        ),
        Family(
            "grid_provider_scrape_duration_seconds",
            Kind.HISTOGRAM,
            "Metrics scrapes of this site's providers, by outcome (ok or failed).",
            ("network", "provider", "outcome"),
            REQUEST_BUCKETS,
        ),
        Family(
            "grid_site_probe_duration_seconds",
            Kind.HISTOGRAM,
            "Probes of peer sites' egress (connect and TLS handshake), by egress mode "
            "(mutual_tls, tls, plaintext) and outcome (ok or failed).",
            ("network", "mode", "outcome"),
            REQUEST_BUCKETS,
        ),
        Family(
            "grid_site_egress_read_duration_seconds",
            Kind.HISTOGRAM,
            "Readings of the object this site's egress address comes from "
            "(spec.egress.from), by kind (service, gateway) and outcome (ok: read; failed: "
            "missing or unreadable).",
            ("network", "kind", "outcome"),
            REQUEST_BUCKETS,
        ),
        Family(
            "grid_spend_source_scrape_duration_seconds",
            Kind.HISTOGRAM,
            "Scrapes of the spend sources this site reads (spec.spendSources), by outcome "
            "(ok or failed).",
            ("network", "source", "outcome"),
            REQUEST_BUCKETS,
        ),
        # -- budgets ------------------------------------------------------------------------
        _gauge(
            "grid_budget_spent",
            "A tenant's spend in its budget's current window as this site knows it (every "
            "site's slots it has heard of: a lower bound while a partition hides some), in "
            "the budget's unit. window: the budget's window as written (24h; month in "
            "Europe/Paris; 24h rolling by 1h).",
            "tenant",
            "window",
        ),
        _gauge("grid_budget_cap", "A tenant's budget per window, in its unit.", "tenant", "window"),
        _gauge(
            "grid_budget_remaining",
            "The cap less the known spend, 0 once exhausted.",
            "tenant",
            "window",
        ),
        _gauge(
            "grid_budget_allowance",
            "An escrowed budget (enforcement: escrow): what this site's gateways may grant "
            "of the tenant in the current window, in the budget's unit (no sample for "
            "lowerBound budgets).",
            "tenant",
            "window",
        ),
        _gauge(
            "grid_budget_state",
            "1 for the state of a tenant's budget: ok, warn (from its warnAt percent of the "
            "cap) or exhausted (other states have no sample).",
            "tenant",
            "window",
            "state",
        ),
        _gauge(
            "grid_budget_complete",
            "1 while the spend this site knows is the mesh's whole spend (every site heard "
            "from), 0 while it is a lower bound.",
        ),
        _gauge(
            "grid_budget_config_agreed",
            "1 while no peer publishes a budget configured otherwise than here (its window, "
            "escrow cap and sites, enforcement), 0 while one does (BudgetsAgreed).",
        ),
    )
}

# Every key of a SWIM node's stats(): (family, extra label values), or None with the family
# that already exposes the same quantity.
MESSAGE_KINDS = (
    "foca",
    "sync_request",
    "sync_response",
    "leave",
    "hello",
    "conflict",
    "digest",
    "repair",
    "handshake_init",
    "handshake_response",
    "handshake_confirm",
)
"""The kinds of SWIM message, as ``stats()`` names them (docs/wire-format.md)."""

SWIM_STATS: dict[str, tuple[str, tuple[str, ...]] | None] = {
    "packets_in": ("grid_swim_received_packets_total", ()),
    "bytes_in": ("grid_swim_received_bytes_total", ()),
    "packets_out": ("grid_swim_sent_packets_total", ()),
    "bytes_out": ("grid_swim_sent_bytes_total", ()),
    "send_errors": ("grid_swim_socket_errors_total", ("send",)),
    "recv_errors": ("grid_swim_socket_errors_total", ("receive",)),
    **{
        f"dropped_{reason}": ("grid_swim_dropped_frames_total", (reason,))
        for reason in ("too_short", "too_long", "bad_magic", "unknown_version", "auth_failed")
    },
    **{
        f"dropped_{reason}": ("grid_swim_refused_messages_total", (reason,))
        for reason in (
            "malformed",
            "bad_identity",
            "misdirected",
            "stale",
            "replayed",
            "unknown_sender",
            "bad_signature",
            "untrusted_certificate",
            "incompatible_version",
            "superseded",
            "over_budget",
            "unknown_session",
            "bad_tag",
        )
    },
    "name_conflicts": ("grid_swim_refused_messages_total", ("name_conflict",)),
    "bad_messages": ("grid_swim_refused_messages_total", ("undecodable",)),
    "private_key_drops": ("grid_items_refused_total", ("swim", "private_key")),
    "items_malformed": ("grid_items_refused_total", ("swim", "malformed")),
    "items_store_full": ("grid_items_refused_total", ("swim", "store_full")),
    "items_unverified_origin": ("grid_items_refused_total", ("swim", "unverified_origin")),
    "items_bad_signature": ("grid_items_refused_total", ("swim", "bad_signature")),
    "members_unverified": ("grid_swim_ignored_member_updates_total", ("unverified",)),
    "members_implausible": ("grid_swim_ignored_member_updates_total", ("implausible",)),
    "down_claims_held": ("grid_swim_down_claims_held_total", ()),
    "probes_failed": ("grid_swim_probes_failed_total", ()),
    "late_answers": ("grid_swim_late_probe_answers_total", ()),
    "suspicion_notices": ("grid_swim_suspicion_notices_sent_total", ()),
    "refutations": ("grid_swim_refutations_total", ()),
    "stale_suspicion_timers": ("grid_swim_stale_suspicion_timers_total", ()),
    "syncs_started": ("grid_swim_syncs_started_total", ()),
    "syncs_done": ("grid_swim_syncs_completed_total", ()),
    "syncs_served": ("grid_swim_syncs_served_total", ()),
    "catch_up_syncs": ("grid_swim_catch_up_syncs_total", ()),
    "heads_syncs": ("grid_swim_heads_syncs_total", ()),
    "stretch_syncs": ("grid_swim_stretch_syncs_total", ()),
    "hole_syncs": ("grid_swim_hole_syncs_total", ()),
    "stretches_lost": ("grid_swim_stretches_lost_total", ()),
    "syncs_incomplete": ("grid_swim_syncs_incomplete_total", ()),
    "sync_chunks_sent": ("grid_swim_sync_chunks_sent_total", ()),
    "sync_chunks_received": ("grid_swim_sync_chunks_received_total", ()),
    "digests_sent": ("grid_swim_repair_digests_sent_total", ()),
    "digests_answered": ("grid_swim_repair_digests_answered_total", ()),
    "digests_held_back": ("grid_swim_repair_digests_held_back_total", ()),
    "repair_items_sent": ("grid_swim_repair_items_sent_total", ()),
    "items_repaired": ("grid_swim_items_repaired_total", ()),
    "sync_entries_known": ("grid_swim_sync_entries_known_total", ()),
    "sync_members_left_out": ("grid_swim_sync_members_left_out_total", ()),
    "gossip_entries_known": ("grid_swim_gossip_entries_known_total", ()),
    "leave_notices": ("grid_swim_leave_notices_total", ()),
    "renewals": ("grid_swim_certificate_renewals_total", ()),
    "items_earlier_key": ("grid_swim_renewal_items_total", ("earlier_key",)),
    "items_signatures_renewed": ("grid_swim_renewal_items_total", ("signature_renewed",)),
    "items_signed_again": ("grid_swim_renewal_items_total", ("signed_again",)),
    "items_revoked": ("grid_swim_renewal_items_total", ("revoked",)),
    "earlier_certificates": ("grid_swim_earlier_certificates", ()),
    "previous_key_messages": ("grid_swim_previous_key_messages_total", ()),
    "item_signature_checks": ("grid_swim_item_signature_checks_total", ()),
    "session_messages_sent": ("grid_swim_session_messages_total", ("sent",)),
    "session_messages_accepted": ("grid_swim_session_messages_total", ("accepted",)),
    "handshakes_started": ("grid_swim_handshakes_total", ("started",)),
    "handshakes_completed": ("grid_swim_handshakes_total", ("completed",)),
    "handshakes_refused": ("grid_swim_handshakes_total", ("refused",)),
    "sessions": ("grid_swim_sessions", ()),
    "members_revoked": ("grid_swim_members_revoked_total", ()),
    "keys_asked": ("grid_swim_certificate_requests_total", ()),
    "caught_up": ("grid_swim_caught_up", ()),
    "items_waiting": ("grid_swim_items_waiting", ()),
    "hellos_sent": ("grid_swim_hellos_sent_total", ()),
    "hellos_received": ("grid_swim_hellos_received_total", ()),
    "answers_withheld": ("grid_swim_answers_withheld_total", ()),
    "events_dropped": ("grid_swim_events_dropped_total", ()),
    "items_coalesced": ("grid_swim_items_coalesced_total", ()),
    "broadcast_backlog": ("grid_swim_broadcast_backlog", ()),
    "relay_queue": ("grid_swim_relay_queue", ()),
    "updates_backlog": ("grid_swim_membership_backlog", ()),
    "items_stored": ("grid_swim_stored_items", ()),
    "max_transmissions": ("grid_swim_max_transmissions", ()),
    "local_health": ("grid_swim_local_health", ()),
    **{
        f"foca_error_{kind}": ("grid_swim_protocol_errors_total", (kind,))
        for kind in (
            "data_too_big",
            "not_undead",
            "same_identity",
            "not_connected",
            "incomplete_probe_cycle",
            "data_from_ourselves",
            "indirect_for_ourselves",
            "malformed_packet",
            "encode",
            "decode",
            "custom_broadcast",
            "invalid_config",
        )
    },
    **{
        f"{stat}_{direction}_{kind}": (metric, (direction, kind))
        for stat, metric in (
            ("messages", "grid_swim_messages_total"),
            ("message_bytes", "grid_swim_message_bytes_total"),
        )
        for direction in ("sent", "accepted")
        for kind in MESSAGE_KINDS
    },
    # Exposed elsewhere: the sum of the two drop families, the shell's counters by lane,
    # and the engine's members by state.
    "dropped": None,
    "items_published": None,
    "items_delivered": None,
    "members": None,
}

SWIM_PROBLEMS = ("start", "credentials", "rotation", "name_conflict", "key_file")
MEMBER_STATES = ("alive", "suspect", "down", "left")


class Durations:
    """A histogram of durations by label values, with fixed buckets: observed where the
    work completes, read at scrape time."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], seconds: float) -> None:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = ([0] * (len(self.buckets) + 1), [0.0])
        counts, total = series
        counts[bisect.bisect_left(self.buckets, seconds)] += 1
        total[0] += seconds

    def forget(self, keep: Callable[[tuple[str, ...]], bool]) -> None:
        """Drop the series whose label values ``keep`` rejects (a provider that is gone)."""
        for labels in [labels for labels in self._series if not keep(labels)]:
            del self._series[labels]

    def series(self) -> Iterator[tuple[tuple[str, ...], list[tuple[str, float]], float]]:
        """(label values, cumulative buckets with ``+Inf`` last, sum) of every series."""
        bounds = [*map(_le, self.buckets), "+Inf"]
        for labels, (counts, total) in sorted(self._series.items()):
            cumulative, running = [], 0
            for bound, count in zip(bounds, counts, strict=True):
                running += count
                cumulative.append((bound, float(running)))
            yield labels, cumulative, total[0]


def _le(bound: float) -> str:
    return repr(float(bound))


@dataclass
class ObservationDurations:
    """How long a network's health checks, scrapes, site probes and readings of its egress
    source took."""

    health: Durations = field(default_factory=lambda: Durations(REQUEST_BUCKETS))
    """By (provider, outcome)."""
    scrape: Durations = field(default_factory=lambda: Durations(REQUEST_BUCKETS))
    """By (provider, outcome)."""
    probe: Durations = field(default_factory=lambda: Durations(REQUEST_BUCKETS))
    """By (egress mode, outcome)."""
    egress_read: Durations = field(default_factory=lambda: Durations(REQUEST_BUCKETS))
    """By (kind of object, outcome)."""
    spend_scrape: Durations = field(default_factory=lambda: Durations(REQUEST_BUCKETS))
    """By (spend source, outcome)."""


class ScrapedSwimDriver(Protocol):
    """What a scrape reads from a network's SWIM driver (:class:`grid.runtime.swim.SwimDriver`,
    which imports this module for :class:`Durations`: a protocol here, not an import back).
    """

    @property
    def node(self) -> SwimNode | None: ...

    @property
    def problems(self) -> Mapping[str, bool]:
        """Which of the driver's problems hold now, by name (:data:`SWIM_PROBLEMS`)."""

    @property
    def published(self) -> Mapping[str, int]:
        """Items published, by lane."""

    @property
    def refused(self) -> Mapping[str, int]:
        """Items the node refused to publish, by error."""

    @property
    def received(self) -> Mapping[tuple[str, str], int]:
        """Items received, by lane and outcome."""

    @property
    def name_conflicts(self) -> Mapping[str, int]:
        """Other nodes claiming this site's name, by outcome."""

    @property
    def suspicion_to_down(self) -> Durations: ...


@dataclass(frozen=True, slots=True)
class NetworkView:
    """What one network offers a scrape. ``held_back``: whether a gateway's overlay is held
    back (its render, or the shell's write, failed). ``network_phase``: the GridNetwork's
    phase when the shell composes it (it replaces the engine's)."""

    name: str
    engine: SiteEngine | None
    swim: ScrapedSwimDriver | None
    durations: ObservationDurations | None
    held_back: Callable[[GatewayOverlay], bool]
    network_phase: str | None = None
    key_file_problem: bool = False


class Exposition:
    """The families of one scrape: add samples, then iterate."""

    def __init__(self, families: Iterable[Family]) -> None:
        self.catalog = {f.name: f for f in families}
        self._metrics = {name: f.metric() for name, f in self.catalog.items()}

    def add(self, name: str, labels: Sequence[str], value: float) -> None:
        metric = self._metrics[name]
        assert isinstance(metric, CounterMetricFamily | GaugeMetricFamily), name
        metric.add_metric(list(labels), value)

    def add_info(self, name: str, values: Mapping[str, str]) -> None:
        metric = self._metrics[name]
        assert isinstance(metric, InfoMetricFamily)
        metric.add_metric([], dict(values))

    def add_durations(self, name: str, prefix: Sequence[str], durations: Durations) -> None:
        metric = self._metrics[name]
        assert isinstance(metric, HistogramMetricFamily)
        for labels, buckets, total in durations.series():
            metric.add_metric([*prefix, *labels], buckets, total)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._metrics.values())


def build_info(shell: str) -> dict[str, str]:
    try:
        version = importlib.metadata.version("grid-mesh")
    except importlib.metadata.PackageNotFoundError:
        version = _native.__version__
    return {
        "shell": shell,
        "version": version,
        "native": _native.__version__,
        "python": platform.python_version(),
    }


class GridCollector(Collector):
    """The families of :data:`FAMILIES` for the networks ``networks`` returns at each
    scrape, and a shell's own (``extra_families``, filled by ``extra``)."""

    def __init__(
        self,
        shell: str,
        networks: Callable[[], Iterable[NetworkView]],
        *,
        extra_families: Iterable[Family] = (),
        extra: Callable[[Exposition], None] | None = None,
    ) -> None:
        self._shell = shell
        self._networks = networks
        self._families = (*FAMILIES.values(), *extra_families)
        self._extra = extra
        self._info = build_info(shell)

    def describe(self) -> Iterator[Metric]:
        return iter(Exposition(self._families))

    def collect(self) -> Iterator[Metric]:
        exposition = Exposition(self._families)
        exposition.add_info("grid_build_info", self._info)
        for view in sorted(self._networks(), key=lambda v: v.name):
            add_network(exposition, view)
        if self._extra is not None:
            self._extra(exposition)
        return iter(exposition)


def add_network(out: Exposition, view: NetworkView) -> None:
    """One network's samples."""
    name = view.name
    if view.network_phase is not None:
        out.add("grid_resource_phase", (name, "GridNetwork", name, view.network_phase), 1)
    add_swim(out, name, view.swim, key_file_problem=view.key_file_problem)
    if view.durations is not None:
        out.add_durations(
            "grid_provider_health_check_duration_seconds", (name,), view.durations.health
        )
        out.add_durations("grid_provider_scrape_duration_seconds", (name,), view.durations.scrape)
        out.add_durations("grid_site_probe_duration_seconds", (name,), view.durations.probe)
        out.add_durations(
            "grid_site_egress_read_duration_seconds", (name,), view.durations.egress_read
        )
        out.add_durations(
            "grid_spend_source_scrape_duration_seconds", (name,), view.durations.spend_scrape
        )
    engine = view.engine
    if engine is None:
        return
    states = dict.fromkeys(MEMBER_STATES, 0)
    for member in engine.members.values():
        states[member.state.value] += 1
    for state, count in states.items():
        out.add("grid_swim_members", (name, state), count)
    for reason, count in sorted(engine.refused_items.items()):
        out.add("grid_items_refused_total", (name, "engine", reason), count)
    trusted = engine.trusted_sites
    for (kind, resource), status in engine.statuses().items():
        if isinstance(status, GridNetworkStatus):
            add_budgets(out, name, status, engine.network.spec.budgets)
        if kind == "GridNetwork" and view.network_phase is not None:
            continue
        out.add("grid_resource_phase", (name, kind, resource, str(status.phase)), 1)
        if kind == "GridSite" and resource != engine.site:
            out.add("grid_site_trusted", (name, resource), 1 if resource in trusted else 0)
    for site, certificate in sorted(engine.certificates.items()):
        out.add(
            "grid_site_certificate_expiry_timestamp_seconds",
            (name, site),
            certificate.not_after.timestamp(),
        )
    for (namespace, gateway), current in sorted(engine.overlays.items()):
        labels = (name, namespace, gateway)
        overlay = current.overlay
        candidates = 0 if overlay is None else len(overlay.candidates)
        out.add("grid_overlay_candidates", labels, candidates)
        out.add("grid_overlay_render_refused", labels, 1 if view.held_back(current) else 0)
        if overlay is not None and current.rendered_at is not None:
            out.add(
                "grid_overlay_last_rendered_timestamp_seconds",
                labels,
                current.rendered_at.timestamp(),
            )


def add_budgets(
    out: Exposition, network: str, status: GridNetworkStatus, budgets: Sequence[TenantBudget]
) -> None:
    """Each tenant's spend, cap and what remains, as of the network's last status."""
    windows = {budget.tenant: budget.window_name for budget in budgets}
    for budget in status.budgets:
        labels = (network, budget.tenant, windows.get(budget.tenant, ""))
        out.add("grid_budget_spent", labels, budget.used)
        out.add("grid_budget_cap", labels, budget.cap)
        out.add("grid_budget_remaining", labels, max(budget.cap - budget.used, 0))
        if budget.allowance is not None:
            out.add("grid_budget_allowance", labels, budget.allowance)
        if budget.state is not None:
            out.add("grid_budget_state", (*labels, str(budget.state)), 1)
    if budgets:
        out.add("grid_budget_complete", (network,), 0 if status.unheard_sites else 1)
    agreed = next((c for c in status.conditions if c.type == "BudgetsAgreed"), None)
    if agreed is not None:
        out.add("grid_budget_config_agreed", (network,), 1 if agreed.status == "True" else 0)


def peers_by_protocol(node: SwimNode) -> Counter[str]:
    """Live peers by the protocol version spoken with them (``unknown`` before a HELLO)."""
    try:
        members = node.members()
    except GridError:
        return Counter()  # stopped meanwhile
    return Counter(
        "unknown" if m.protocol is None else str(m.protocol)
        for m in members
        if m.state in ("alive", "suspect")
    )


def add_swim(
    out: Exposition, network: str, swim: ScrapedSwimDriver | None, *, key_file_problem: bool = False
) -> None:
    """The SWIM driver's counters and its node's, when it runs."""
    node = None if swim is None else swim.node
    running = node is not None and node.running
    out.add("grid_swim_running", (network,), 1 if running else 0)
    problems = dict.fromkeys(SWIM_PROBLEMS, False)
    problems["key_file"] = key_file_problem
    if swim is None:
        for problem, present in problems.items():
            out.add("grid_swim_problem", (network, problem), int(present))
        return
    problems.update(swim.problems)
    for problem, present in problems.items():
        out.add("grid_swim_problem", (network, problem), int(present))
    for lane, count in sorted(swim.published.items()):
        out.add("grid_items_published_total", (network, lane), count)
    for error, count in sorted(swim.refused.items()):
        out.add("grid_items_publish_refused_total", (network, error), count)
    for (lane, outcome), count in sorted(swim.received.items()):
        out.add("grid_items_received_total", (network, lane, outcome), count)
    for outcome, count in sorted(swim.name_conflicts.items()):
        out.add("grid_swim_name_conflicts_total", (network, outcome), count)
    out.add_durations("grid_swim_suspicion_to_down_seconds", (network,), swim.suspicion_to_down)
    if node is None or not running:
        return
    try:
        stats = node.stats()
        keys = len(node.key_ids())
    except GridError:
        return  # stopped between the check and the calls
    out.add("grid_swim_keys", (network,), keys)
    for protocol, count in sorted(peers_by_protocol(node).items()):
        out.add("grid_swim_peers_by_protocol", (network, protocol), count)
    for stat, value in sorted(stats.items()):
        target = SWIM_STATS.get(stat)
        if target is not None:
            family, labels = target
            out.add(family, (network, *labels), value)
