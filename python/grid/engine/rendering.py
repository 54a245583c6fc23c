"""Rendering: the candidates of this site and of the trusted sites, ranked, and the
overlay (and, when enabled, the whole gateway configuration) for each gateway.

A render that fails keeps the last good overlay and says why on the gateway. Pure: time
comes in as ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
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
from grid.render.whatif import (
    REMOTE_CLUSTER_PREFIX,
    needs_api_key_credentials,
    with_token_keys,
)
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


@dataclass(slots=True)
class _Pass:
    """What the ranking for one kind of gateway keeps from one render to the next.
    Gateways that accept the contract's ``apikey`` credentials (``apiKeyCredentials``) are
    offered providers the others are not (a key sent in a header of its own), so while the
    site observes such a provider each kind present gets a ranking of its own; with its own
    memos, neither rebuilds more per pass than the one ranking of a site with one kind."""

    local: LocalCandidates = field(default_factory=LocalCandidates)
    scoring: ScoringMemo = field(default_factory=ScoringMemo)
    documents: DocumentMemo = field(default_factory=DocumentMemo)
    admission: Mapping[CandidateKey, AdmissionMemory] = field(
        default_factory=lambda: MappingProxyType({})
    )


@dataclass(frozen=True, slots=True)
class _Ranked:
    """One kind of gateway's ranking, and what its gateways' configurations declare."""

    gateways: tuple[GatewayRef, ...]
    ranking: Ranking
    declared: Mapping[str, ClusterEndpoint]
    credentials: tuple[Mapping[str, object], ...]
    not_offered: tuple[tuple[str, str], ...]


class Renderer:
    """The overlay per gateway of one site, and the ranking it was rendered from."""

    def __init__(self) -> None:
        self._overlays: dict[tuple[str, str], GatewayOverlay] = {}
        self._changed: dict[tuple[str, str], GatewayOverlay] = {}
        self.ranking: Ranking | None = None
        """The last ranking (for the network's first gateway), for explanations."""
        self.not_offered: tuple[tuple[str, str], ...] = ()
        """(provider, reason) for providers that yielded no candidate in the last pass."""
        self.stale_at: float | None = None
        """When (seconds) the next remote candidate in the ranking goes stale."""
        self._passes: dict[bool, _Pass] = {}
        """By ``apiKeyCredentials``: the kinds of gateway the network lists."""
        self._remote_candidates = RemoteCandidates()

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
        kinds: dict[bool, list[GatewayRef]] = {}
        for gateway in gateways:
            kinds.setdefault(gateway.api_key_credentials, []).append(gateway)
        if len(kinds) > 1 and not any(map(needs_api_key_credentials, inputs.observing)):
            # No local provider sends its key in a header of its own: one ranking serves
            # both kinds (a second cost 40 % more per pass at 100 sites x 10 providers).
            kinds = {gateways[0].api_key_credentials: list(gateways)}
        for kind in set(self._passes) - set(kinds):
            del self._passes[kind]
        self._remote_candidates.keep_only(remote.name for remote in remotes)
        remote_routes = [self._remote_candidates.of(remote, state) for remote in remotes]
        outcomes: list[_Ranked] = []
        for kind, members in kinds.items():
            ranked = self._rank(
                inputs,
                members,
                self._passes.setdefault(kind, _Pass()),
                views,
                zip(remotes, remote_routes, strict=True),
                egress,
                now,
            )
            if ranked is not None:
                outcomes.append(ranked)
        self.ranking = outcomes[0].ranking if outcomes else None
        self.not_offered = _not_offered(outcomes)
        ttl = network.spec.stale_candidate_ttl_seconds
        self.stale_at = min(
            (
                entry.candidate.updated_seconds + ttl
                for outcome in outcomes
                for entry in outcome.ranking.candidates
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
        for outcome in outcomes:
            documents = self._passes[outcome.gateways[0].api_key_credentials].documents
            for gateway in outcome.gateways:
                plan = GatewayPlan(_scope(inputs, gateway), outcome.declared, outcome.credentials)
                self._render_gateway(inputs, gateway, outcome.ranking, source, plan, documents, now)
        live = {(g.namespace, g.name) for g in gateways}
        for key in set(self._overlays) - live:
            del self._overlays[key]

    def _rank(  # noqa: PLR0917 - one kind of gateway's ranking
        self,
        inputs: SiteInputs,
        gateways: Sequence[GatewayRef],
        memos: _Pass,
        views: Mapping[str, LocalView],
        remotes: Iterable[
            tuple[
                RemoteSite,
                tuple[tuple[tuple[CandidateInput, ...], ...], tuple[tuple[str, str], ...]],
            ]
        ],
        egress: Egress,
        now: datetime,
    ) -> _Ranked | None:
        """The ranking for ``gateways`` (of one kind), or None when it cannot be made (the
        gateways say why and keep their last good overlay)."""
        network = inputs.network
        try:
            what_if = memos.local.of(
                network,
                gateway=gateways[0],
                site_name=inputs.site,
                local_site=inputs.local_site,
                providers=inputs.observing,
                views=views,
                token_keys=inputs.token_keys,
            )
        except ConfigError as error:
            self._refuse_all(inputs, gateways, f"the local providers cannot be rendered: {error}")
            return None
        what_if = with_token_keys(what_if, inputs.token_keys)
        endpoints: dict[str, ClusterEndpoint] = dict(what_if.endpoints)
        not_offered = list(what_if.not_offered)
        routes: list[tuple[CandidateInput, ...]] = []
        for remote, (offered, refused) in remotes:
            not_offered += refused
            if offered and endpoints.setdefault(remote.cluster, remote.endpoint) != (
                remote.endpoint
            ):
                not_offered.append((remote.cluster, "a local cluster has the same name"))
                continue
            routes += offered
        try:
            ranking = rank_candidates(
                what_if.candidates,
                consuming_site(inputs),
                network.spec.scoring,
                now,
                stale_after_seconds=network.spec.stale_candidate_ttl_seconds,
                admission_memory=memos.admission,
                memo=memos.scoring,
                routes=routes,
            )
        except ScoringInputError as error:
            self._refuse_all(inputs, gateways, f"the candidates cannot be ranked: {error}")
            return None
        memos.admission = ranking.admission_memory
        return _Ranked(
            tuple(gateways),
            ranking,
            _declared_clusters(inputs, endpoints, egress),
            what_if.plan.credentials,
            tuple(not_offered),
        )

    def _render_gateway(  # noqa: PLR0917 - one gateway's render
        self,
        inputs: SiteInputs,
        gateway: GatewayRef,
        ranking: Ranking,
        source: OverlaySource,
        plan: GatewayPlan,
        documents: DocumentMemo,
        now: datetime,
    ) -> None:
        key = (gateway.namespace, gateway.name)
        scope = _scope(inputs, gateway)
        current = self._overlays.get(key) or GatewayOverlay(gateway, scope)
        try:
            rendered = render_overlay(ranking, scope, source, now, documents=documents)
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


def _not_offered(outcomes: Sequence[_Ranked]) -> tuple[tuple[str, str], ...]:
    """(provider, reason) of every kind of gateway's ranking: a reason that holds for some
    gateways only (a key sent in a header of its own, refused where ``apiKeyCredentials``
    is not set) names them."""
    if len(outcomes) == 1:
        return outcomes[0].not_offered
    everywhere = set.intersection(*(set(outcome.not_offered) for outcome in outcomes))
    merged: dict[tuple[str, str], None] = {}
    for outcome in outcomes:
        plural = "s" if len(outcome.gateways) > 1 else ""
        names = ", ".join(f"{g.namespace}/{g.name}" for g in outcome.gateways)
        for provider, reason in outcome.not_offered:
            shared = (provider, reason) in everywhere
            merged[(provider, reason if shared else f"to gateway{plural} {names}: {reason}")] = None
    return tuple(merged)


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
