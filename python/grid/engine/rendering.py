"""Rendering: the candidates of this site and of the trusted sites, ranked, and the
overlay (and, when enabled, the whole gateway configuration) for each gateway.

A render that fails keeps the last good overlay and says why on the gateway. Pure: time
comes in as ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from types import MappingProxyType

from grid.crdt.state import GridState
from grid.engine.candidates import LocalCandidates, LocalView, RemoteCandidates, RemoteSite
from grid.engine.events import clip
from grid.engine.inputs import SiteInputs
from grid.engine.members import LIVE_STATES, Members
from grid.errors import ConfigError, EmptyOverlayError, OverlayRenderError, ScoringInputError
from grid.models.network import GatewayRef
from grid.models.phases import MemberState
from grid.render.consumer import ClusterEndpoint, GatewayPlan, consumer_config_yaml
from grid.render.overlay import (
    DocumentMemo,
    OverlayScope,
    OverlaySource,
    RenderedOverlay,
    render_overlay,
)
from grid.render.whatif import REMOTE_CLUSTER_PREFIX, with_token_keys
from grid.scoring.admission import AdmissionMemory
from grid.scoring.inputs import CandidateInput, ConsumingSite, Geography
from grid.scoring.ranking import CandidateKey, Ranking, ScoringMemo, rank_candidates

Egress = Callable[[str], ClusterEndpoint | None]
"""Where a site is reached (its GridSite's egress, else the gateway it advertises)."""


@dataclass(frozen=True, slots=True)
class GatewayOverlay:
    """The current overlay of one gateway: the last good document (kept when a render is
    refused), and why the last render was refused, if it was."""

    gateway: GatewayRef
    scope: OverlayScope
    overlay: RenderedOverlay | None = None
    consumer_config: str | None = None
    """The complete gateway configuration (YAML) when the gateway enables it."""
    rendered_at: datetime | None = None
    message: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) of the gateway."""
        return (self.gateway.namespace, self.gateway.name)

    @property
    def revision(self) -> str | None:
        return None if self.overlay is None else self.overlay.revision


class Renderer:
    """The overlay per gateway of one site, and the ranking it was rendered from."""

    def __init__(self) -> None:
        self._overlays: dict[tuple[str, str], GatewayOverlay] = {}
        self._changed: dict[tuple[str, str], GatewayOverlay] = {}
        self._admission: Mapping[CandidateKey, AdmissionMemory] = MappingProxyType({})
        self.ranking: Ranking | None = None
        """The last ranking, for explanations."""
        self.not_offered: tuple[tuple[str, str], ...] = ()
        """(provider, reason) for providers that yielded no candidate in the last pass."""
        self.stale_at: float | None = None
        """When (seconds) the next remote candidate in the ranking goes stale."""
        self._local_candidates = LocalCandidates()
        self._remote_candidates = RemoteCandidates()
        self._scoring_memo = ScoringMemo()
        self._documents = DocumentMemo()

    @property
    def overlays(self) -> Mapping[tuple[str, str], GatewayOverlay]:
        """The current overlay per gateway, keyed by (namespace, name)."""
        return MappingProxyType(self._overlays)

    def take_changed(self) -> tuple[GatewayOverlay, ...]:
        """Gateways whose overlay has a new revision (or a new refusal message) since the
        last call."""
        changed = tuple(self._changed.values())
        self._changed.clear()
        return changed

    def render(  # noqa: PLR0917 - what a render reads, from each room
        self,
        inputs: SiteInputs,
        state: GridState,
        views: Mapping[str, LocalView],
        remotes: Sequence[RemoteSite],
        egress: Egress,
        grid_id: str | None,
        now: datetime,
    ) -> None:
        """Rank this site's candidates and those of ``remotes`` (the trusted sites in
        reach), and render every gateway's overlay."""
        network = inputs.network
        gateways = network.spec.gateway_refs
        if not gateways:
            # The last gateway went: nothing is rendered, and no overlay stays behind.
            self.ranking = None
            self._overlays.clear()
            return
        try:
            what_if = self._local_candidates.of(
                network,
                gateway=gateways[0],
                site_name=inputs.site,
                local_site=inputs.local_site,
                providers=inputs.observing,
                views=views,
            )
        except ConfigError as error:
            self._refuse_all(inputs, gateways, f"the local providers cannot be rendered: {error}")
            return
        what_if = with_token_keys(what_if, inputs.token_keys)
        endpoints: dict[str, ClusterEndpoint] = dict(what_if.endpoints)
        not_offered = list(what_if.not_offered)
        routes: list[tuple[CandidateInput, ...]] = []
        self._remote_candidates.keep_only(remote.name for remote in remotes)
        for remote in remotes:
            offered, refused = self._remote_candidates.of(remote, state)
            not_offered += refused
            if offered and endpoints.setdefault(remote.cluster, remote.endpoint) != (
                remote.endpoint
            ):
                not_offered.append((remote.cluster, "a local cluster has the same name"))
                continue
            routes += offered
        self.not_offered = tuple(not_offered)
        ttl = network.spec.stale_candidate_ttl_seconds
        try:
            ranking = rank_candidates(
                what_if.candidates,
                consuming_site(inputs),
                network.spec.scoring,
                now,
                stale_after_seconds=ttl,
                admission_memory=self._admission,
                memo=self._scoring_memo,
                routes=routes,
            )
        except ScoringInputError as error:
            self._refuse_all(inputs, gateways, f"the candidates cannot be ranked: {error}")
            return
        self.ranking = ranking
        self._admission = ranking.admission_memory
        self.stale_at = min(
            (
                entry.candidate.updated_seconds + ttl
                for entry in ranking.candidates
                if entry.candidate.site != inputs.site
                and entry.candidate.updated_seconds is not None
            ),
            default=None,
        )
        metadata = network.metadata
        source = OverlaySource(
            name=metadata.name,
            uid=metadata.uid or grid_id or f"standalone-{metadata.name}",
            generation=max(metadata.generation or 1, 1),
        )
        declared = _declared_clusters(inputs, endpoints, egress)
        for gateway in gateways:
            plan = GatewayPlan(_scope(inputs, gateway), declared, what_if.plan.credentials)
            self._render_gateway(inputs, gateway, ranking, source, plan, now)
        live = {(g.namespace, g.name) for g in gateways}
        for key in set(self._overlays) - live:
            del self._overlays[key]

    def _render_gateway(  # noqa: PLR0917 - one gateway's render
        self,
        inputs: SiteInputs,
        gateway: GatewayRef,
        ranking: Ranking,
        source: OverlaySource,
        plan: GatewayPlan,
        now: datetime,
    ) -> None:
        key = (gateway.namespace, gateway.name)
        scope = _scope(inputs, gateway)
        current = self._overlays.get(key) or GatewayOverlay(gateway, scope)
        try:
            rendered = render_overlay(ranking, scope, source, now, documents=self._documents)
            consumer = gateway.consumer_config
            config = None
            if consumer is not None and consumer.enabled:
                config = consumer_config_yaml(
                    plan,
                    consumer,
                    overlay_key=gateway.config_map_key,
                    overlay=rendered,
                    route_filter=gateway.route_filter_name,
                    credential_filter=gateway.credential_filter_name,
                )
        except (EmptyOverlayError, OverlayRenderError) as error:
            self._refuse(current, replace(current, gateway=gateway), str(error))
            return
        if current.overlay is not None and current.overlay.revision == rendered.revision:
            updated = replace(current, gateway=gateway, consumer_config=config, message="")
            if current.message or current.consumer_config != config:
                self._changed[key] = updated
            self._overlays[key] = updated
            return
        updated = GatewayOverlay(gateway, scope, rendered, config, now, "")
        self._overlays[key] = updated
        self._changed[key] = updated

    def _refuse(self, current: GatewayOverlay, updated: GatewayOverlay, message: str) -> None:
        updated = replace(updated, message=clip(message))
        self._overlays[updated.key] = updated
        if current.message != updated.message:
            self._changed[updated.key] = updated

    def _refuse_all(self, inputs: SiteInputs, gateways: Sequence[GatewayRef], message: str) -> None:
        for gateway in gateways:
            key = (gateway.namespace, gateway.name)
            current = self._overlays.get(key) or GatewayOverlay(gateway, _scope(inputs, gateway))
            self._refuse(current, replace(current, gateway=gateway), message)


def remote_sites(
    inputs: SiteInputs, state: GridState, members: Members, trusted: frozenset[str], egress: Egress
) -> list[RemoteSite]:
    """The trusted sites in reach (alive or suspect, with an egress), in name order."""
    remote = []
    for name in sorted(trusted):
        member = members.get(name)
        endpoint = egress(name)
        if member is None or endpoint is None or member.state not in LIVE_STATES:
            continue
        spec = inputs.sites[name].spec
        metadata = state.metadata(name)
        # The local GridSite says where a peer is; what the peer says of itself only fills
        # the gaps.
        region = spec.region or (metadata.region if metadata else None)
        zone = spec.zone or (metadata.zone if metadata else None)
        remote.append(
            RemoteSite(
                name,
                Geography(region, zone),
                endpoint,
                suspect=member.state is MemberState.SUSPECT,
            )
        )
    return remote


def consuming_site(inputs: SiteInputs) -> ConsumingSite:
    """This site as scoring sees it (where it is, its labels)."""
    local = inputs.local_site
    if local is None:
        return ConsumingSite(name=inputs.site)
    return ConsumingSite(
        name=inputs.site,
        geography=Geography(local.spec.region, local.spec.zone),
        labels=local.metadata.labels,
    )


def _declared_clusters(
    inputs: SiteInputs, endpoints: Mapping[str, ClusterEndpoint], egress: Egress
) -> Mapping[str, ClusterEndpoint]:
    """Every cluster an overlay of this site's gateways can name: the local ones and the
    egress of every known site, whatever its state today, so that a site coming back (or a
    re-ranking) never names a cluster the gateway's configuration lacks."""
    declared = dict(endpoints)
    for name in sorted(inputs.sites):
        endpoint = egress(name) if name != inputs.site else None
        if endpoint is not None:
            declared.setdefault(f"{REMOTE_CLUSTER_PREFIX}{name}", endpoint)
    return MappingProxyType(declared)


def _scope(inputs: SiteInputs, gateway: GatewayRef) -> OverlayScope:
    return OverlayScope(
        network=inputs.network.metadata.name,
        gateway=gateway.name,
        namespace=gateway.namespace,
        local_site=inputs.site,
    )
