"""The live view's document: one site's view of each of its networks, built from the
engine (and what the shell adds: its SWIM node, the member history) at ``now``.

Pure: no clock, no I/O. It carries what ``/status`` carries (names, addresses, revisions,
certificate fingerprints, key ids), never a key, a token or a Secret's contents: a
provider's credential is not even named here.

Parts of a network's document:

- ``swim``: the node (address, generation, key ids, running, why not) and the settings
  that bound failure detection;
- ``members``: every peer with its SWIM state and since when; ``history``: the last
  transitions (:mod:`grid.view.history`);
- ``trust``: per GridSite its phase, whether it is trusted, its pins, the fingerprint last
  observed, which pin matched and the conditions that say why;
- ``certificates``: this site's certificate and each peer's advertised one, with its
  fingerprint, expiry and what vouches for it (:func:`certificates_part`, also in
  ``/status``);
- ``budgets``: each tenant's spend, cap, state and window, and ``unheardSites``, the sites
  whose spend may be missing (:func:`budgets_part`, as the network's status says);
- ``gateways``: per gateway its overlay's revision, when it was rendered, why it was held
  back, and its candidates in order with each signal's weighted contribution, admission
  and tier, exactly as ``grid explain --json`` reports them (:func:`ranking_part`);
- ``leftOut`` and ``notOffered``: providers that are not in the list, and why;
- ``matrix``: who routes to whom (:func:`route_matrix`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from grid import __version__
from grid.engine import GatewayOverlay, SiteEngine
from grid.membership import SwimConfig
from grid.models.common import AdmissionState
from grid.models.network import GridNetwork
from grid.models.phases import MemberState
from grid.models.site import GridSiteStatus
from grid.render.whatif import REMOTE_CLUSTER_PREFIX
from grid.scoring.explain import explain_document
from grid.scoring.inputs import CandidateInput, ConsumingSite, Geography
from grid.scoring.ranking import Ranking, rank_candidates
from grid.view.history import MemberHistory
from grid.view.node import NodeInfo

VIEW_SCHEMA_VERSION = 1
EXTERNAL = "(no site)"
"""The matrix column of capacity tied to no site (a managed cloud, a third-party API):
each gateway reaches it directly."""
TRUST_CONDITIONS = ("Trusted", "Reachable", "CertificateAdvertised")
_ROUTING = (MemberState.ALIVE, MemberState.SUSPECT)
EMPTY_MATRIX: Mapping[str, Any] = MappingProxyType(
    {"viewer": None, "sites": [], "columns": [], "rows": []}
)


@dataclass(frozen=True, slots=True)
class NetworkSource:
    """One network as a shell runs it: the engine (None while the operator has not found
    its site yet), its SWIM node, and why SWIM does not run as configured."""

    name: str
    engine: SiteEngine | None
    node: NodeInfo | None
    swim_error: str | None = None
    held_back: Callable[[GatewayOverlay], str] = lambda overlay: overlay.message
    """Why a gateway's overlay is not what the gateway reads ("" when it is)."""
    problem: str | None = None
    """Why there is no engine (operator: the site is not known yet)."""


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def swim_part(source: NetworkSource) -> dict[str, Any]:
    node = source.node
    part: dict[str, Any] = {
        "running": node is not None and node.running,
        "address": None if node is None else node.address,
        "generation": None if node is None else node.generation,
        "keyIds": [] if node is None else list(node.key_ids),
        "caughtUp": node is not None and node.caught_up,
        "itemsWaiting": 0 if node is None else node.items_waiting,
        "error": source.swim_error,
    }
    if source.engine is not None:
        swim = source.engine.network.spec.swim
        config = SwimConfig(
            probe_interval=swim.probe_interval.seconds,
            suspicion_timeout=swim.suspicion_timeout.seconds,
            gossip_nodes=swim.gossip_nodes,
            push_pull_interval=swim.probe_interval.seconds,
        )
        size = 1 + len(source.engine.members)
        part |= {
            "probeIntervalSeconds": config.probe_interval,
            "suspicionTimeoutSeconds": config.suspicion_timeout,
            "detectionBoundSeconds": config.detection_bound(size),
        }
    return part


def members_part(engine: SiteEngine, node: NodeInfo | None) -> list[dict[str, Any]]:
    """This site first (``alive`` while its SWIM node runs, else ``stopped``), then every
    peer as SWIM last reported it (down and left ones included), by name."""
    running = node is not None and node.running
    own = {
        "site": engine.site,
        "self": True,
        "address": None if node is None else node.address,
        "state": "alive" if running else "stopped",
        "generation": None if node is None else node.generation,
        "since": None,
    }
    return [own] + [
        {
            "site": member.site,
            "self": False,
            "address": member.address,
            "state": member.state.value,
            "generation": member.generation,
            "since": _time(member.since),
        }
        for _, member in sorted(engine.members.items())
    ]


def history_part(history: MemberHistory) -> dict[str, Any]:
    """The recorded transitions, oldest first, and how many the bound pushed out."""
    return {
        "capacity": history.capacity,
        "dropped": history.dropped,
        "transitions": [
            {
                "site": transition.site,
                "from": transition.before,
                "to": transition.after,
                "generation": transition.generation,
                "address": transition.address,
                "at": _time(transition.at),
            }
            for transition in history
        ],
    }


def _trust_row(
    name: str, status: GridSiteStatus, pins: Sequence[str], trusted: bool, own: bool
) -> dict[str, Any]:
    conditions = {
        condition.type: {
            "status": str(condition.status),
            "reason": condition.reason,
            "message": condition.message,
        }
        for condition in status.conditions
        if condition.type in TRUST_CONDITIONS
    }
    probe = status.last_probe
    return {
        "site": name,
        "self": own,
        "phase": str(status.phase),
        "trusted": trusted,
        "pins": list(pins),
        "observedFingerprint": status.observed_fingerprint,
        "matchedPin": None if status.matched_pin is None else str(status.matched_pin),
        "why": _why(status, pins, own),
        "conditions": conditions,
        "egressAddress": status.egress_address,
        "lastSeenAlive": _time(status.last_seen_alive),
        "lastProbe": None
        if probe is None
        else {
            "at": _time(probe.at),
            "reachable": probe.reachable,
            "latencyMs": probe.latency_ms,
            "message": probe.message,
        },
    }


def _why(status: GridSiteStatus, pins: Sequence[str], own: bool) -> str:
    """One sentence: whether the pin matched and why, from the site's conditions."""
    if own:
        return "this site"
    by_type = {condition.type: condition for condition in status.conditions}
    trusted = by_type.get("Trusted")
    reachable = by_type.get("Reachable")
    if not pins:
        return "no pin is set (spec.trust.certFingerprint): the site is never trusted"
    if reachable is not None and str(reachable.status) == "False":
        return f"not reachable: {reachable.message}"
    if trusted is not None:
        return trusted.message
    return "not probed yet"


def trust_part(engine: SiteEngine) -> list[dict[str, Any]]:
    """Per GridSite of the network (this site first): whether its certificate matched its
    pin, and why."""
    pins = engine.site_pins()
    trusted = engine.trusted_sites
    rows = []
    for (kind, name), status in engine.statuses().items():
        if kind != "GridSite" or not isinstance(status, GridSiteStatus):
            continue
        rows.append(
            _trust_row(name, status, pins.get(name, ()), name in trusted, name == engine.site)
        )
    return sorted(rows, key=lambda row: (not row["self"], row["site"]))


def certificates_part(engine: SiteEngine) -> list[dict[str, Any]]:
    """This site's certificate first, then each peer's advertised one: its fingerprint,
    when it expires, what vouches for it (``ca``: the network CA, ``pin``: only a pin,
    null: nothing now) and why peers discard it, if they do."""
    rows = [
        {
            "site": name,
            "self": name == engine.site,
            "fingerprint": certificate.fingerprint,
            "notAfter": _time(certificate.not_after),
            "anchor": None if certificate.anchor is None else str(certificate.anchor),
            "problem": certificate.problem,
        }
        for name, certificate in engine.certificates.items()
    ]
    return sorted(rows, key=lambda row: (not row["self"], row["site"]))


def budgets_part(engine: SiteEngine) -> dict[str, Any]:
    """Each tenant's budget as the network's last status says (spend, cap, ``ok``,
    ``warn`` or ``exhausted``, whether the spend is complete, the window, and with escrow
    this site's allowance, else null), and the sites not heard from, since when."""
    status = engine.network_status
    return {
        "budgets": [
            {
                "tenant": budget.tenant,
                "used": budget.used,
                "cap": budget.cap,
                "state": None if budget.state is None else str(budget.state),
                "complete": budget.complete,
                "windowStart": _time(budget.window_start),
                "windowEnd": _time(budget.window_end),
                "allowance": budget.allowance,
            }
            for budget in status.budgets
        ],
        "unheardSites": [
            {"site": unheard.site, "since": _time(unheard.since)}
            for unheard in status.unheard_sites
        ],
    }


def gateway_part(
    overlay: GatewayOverlay, ranking: Ranking | None, not_offered: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """One gateway: its overlay's revision and age, why it is held back, and its candidates
    in order as ``grid explain --json`` reports them (the published list; candidates cut to
    fit the overlay's limit are left out as ``truncated``)."""
    rendered = overlay.overlay
    part: dict[str, Any] = {
        "namespace": overlay.gateway.namespace,
        "name": overlay.gateway.name,
        "revision": overlay.revision,
        "renderedAt": _time(overlay.rendered_at),
        "message": overlay.message,
    }
    if ranking is None or rendered is None:
        return part | {"candidates": [], "order": []}
    explained = explain_document(
        ranking,
        published=rendered.candidates,
        extra_left_out=rendered.truncated,
        not_offered=not_offered,
    )
    return part | {
        "candidates": explained["candidates"],
        "order": explained["order"],
        "truncated": len(rendered.truncated),
    }


def left_out_part(
    ranking: Ranking | None, not_offered: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """Candidates the ranking left out and providers that yield no candidate, with why."""
    left_out = [] if ranking is None else explain_document(ranking)["left_out"]
    return {
        "leftOut": left_out,
        "notOffered": [
            {"provider": provider, "reason": reason} for provider, reason in not_offered
        ],
    }


def consumers(engine: SiteEngine) -> dict[str, ConsumingSite]:
    """The sites whose routing this site can compute: itself (as its ranking was made) and
    every peer SWIM reports alive or suspect that published where it is (geography and
    labels, which access policies are evaluated against)."""
    ranking = engine.ranking
    found: dict[str, ConsumingSite] = {}
    if ranking is not None:
        found[engine.site] = ranking.consumer
    for name, member in sorted(engine.members.items()):
        metadata = engine.state.metadata(name)
        if member.state in _ROUTING and metadata is not None:
            found[name] = ConsumingSite(
                name=name,
                geography=Geography(metadata.region, metadata.zone),
                labels=metadata.labels,
            )
    return found


def _as_seen_from(candidate: CandidateInput, consumer: str, viewer: str) -> CandidateInput:
    """``candidate`` (offered to ``viewer``) as ``consumer``'s gateway would reach it: capacity
    tied to no site at the consumer itself, a site's capacity through that site's egress."""
    if not candidate.site_bound:
        return replace(candidate, site=consumer, credential=None)
    if candidate.site == viewer and viewer != consumer:
        return replace(candidate, cluster=f"{REMOTE_CLUSTER_PREFIX}{viewer}", credential=None)
    return candidate


def route_matrix(
    ranking: Ranking | None,
    sites: Mapping[str, ConsumingSite],
    network: GridNetwork,
    now: datetime,
) -> dict[str, Any]:
    """Who routes to whom, as this site sees it: for each consuming site, how many of its
    candidates sit at each site, and at which site each model's first choice is.

    This site's row is its own ranking. Another site's row is the real ranking
    (:func:`~grid.scoring.ranking.rank_candidates`) of the candidates this site holds
    (its own providers and those of the peers it trusts, from the replicated state) for
    that site as consumer: what that site would route to if it trusted what this one
    trusts and saw the same signals. Candidates the ranking leaves out (stale, unhealthy,
    denied) are not counted; capacity tied to no site is the ``(no site)`` column."""
    if ranking is None:
        return dict(EMPTY_MATRIX)
    viewer = ranking.consumer.name
    pool = [entry.candidate for entry in ranking.candidates] + [
        left.candidate for left in ranking.left_out
    ]
    spec = network.spec
    rows = []
    columns: set[str] = set()
    for name, consumer in sites.items():
        if name == viewer:
            ranked = ranking
        else:
            ranked = rank_candidates(
                [_as_seen_from(candidate, name, viewer) for candidate in pool],
                consumer,
                spec.scoring,
                now,
                stale_after_seconds=spec.stale_candidate_ttl_seconds,
            )
        counts: Counter[str] = Counter()
        admitted: Counter[str] = Counter()
        first: Counter[str] = Counter()
        models: set[str] = set()
        for entry in ranked.candidates:
            candidate = entry.candidate
            target = candidate.site if candidate.site_bound else EXTERNAL
            counts[target] += 1
            if entry.admission is AdmissionState.NEW_AND_EXISTING:
                admitted[target] += 1
            if candidate.model not in models:
                models.add(candidate.model)
                first[target] += 1
        columns.update(counts)
        rows.append(
            {
                "consumer": name,
                "computed": name != viewer,
                "cells": {
                    target: {
                        "candidates": counts[target],
                        "admitted": admitted[target],
                        "firstChoices": first[target],
                    }
                    for target in sorted(counts)
                },
                "models": len(models),
            }
        )
    ordered = sorted(columns - {EXTERNAL}) + ([EXTERNAL] if EXTERNAL in columns else [])
    return {"viewer": viewer, "sites": list(sites), "columns": ordered, "rows": rows}


def ranking_part(
    overlays: Iterable[GatewayOverlay],
    ranking: Ranking | None,
    not_offered: Sequence[tuple[str, str]],
) -> dict[str, Any]:
    """The gateways (by namespace and name), left out and not offered: what follows from
    the engine's last ranking. Reads only immutable values, so a shell may compute it off
    its event loop and keep it while the ranking stays the same."""
    return {
        "gateways": [
            gateway_part(overlay, ranking, not_offered)
            for overlay in sorted(overlays, key=lambda overlay: overlay.key)
        ],
        **left_out_part(ranking, not_offered),
    }


def network_document(
    source: NetworkSource,
    history: MemberHistory,
    now: datetime,
    *,
    ranked: Mapping[str, Any] | None = None,
    matrix: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One network's part of the view. ``ranked`` (:func:`ranking_part`) and ``matrix``
    (:func:`route_matrix`) may be given when the shell cached them; they are computed
    otherwise."""
    engine = source.engine
    document: dict[str, Any] = {
        "name": source.name,
        "site": None if engine is None else engine.site,
        "gridId": None if engine is None else engine.grid_id,
        "problem": source.problem,
        "swim": swim_part(source),
    }
    if engine is None:
        return document | {
            "members": [],
            "history": history_part(history),
            "trust": [],
            "certificates": [],
            "budgets": [],
            "unheardSites": [],
            "trustedSites": [],
            "discoveredSites": [],
            "gateways": [],
            "leftOut": [],
            "notOffered": [],
            "matrix": dict(EMPTY_MATRIX),
        }
    if ranked is None:
        ranked = ranking_part(engine.overlays.values(), engine.ranking, engine.not_offered)
    gateways = []
    for gateway in ranked["gateways"]:
        current = engine.overlays.get((gateway["namespace"], gateway["name"]))
        held = gateway["message"] if current is None else source.held_back(current)
        gateways.append(gateway | {"message": held})
    if matrix is None:
        matrix = route_matrix(engine.ranking, consumers(engine), engine.network, now)
    return document | {
        "members": members_part(engine, source.node),
        "history": history_part(history),
        "trust": trust_part(engine),
        "certificates": certificates_part(engine),
        **budgets_part(engine),
        "trustedSites": sorted(engine.trusted_sites),
        "discoveredSites": list(engine.discovered_sites),
        **ranked,
        "gateways": gateways,
        "matrix": dict(matrix),
    }


def view_document(
    role: str,
    networks: Iterable[Mapping[str, Any]],
    now: datetime,
    *,
    links: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The whole document ``/view.json`` serves: who serves it (``agent`` or
    ``operator``), the time at the server and each network's part."""
    return {
        "schemaVersion": VIEW_SCHEMA_VERSION,
        "role": role,
        "version": __version__,
        "now": now.isoformat(),
        "links": dict(links or {}),
        "networks": list(networks),
    }
