"""Translations between resources and the replicated records: what this site publishes
about itself, and the resource-side form of what peers publish. Pure."""

from __future__ import annotations

from grid.crdt.records import (
    MAX_RATIO_PPM,
    CredentialRef,
    GatewayRecord,
    ModelEntry,
    ProviderMetrics,
    ProviderRecord,
    ProviderSpec,
    SelectorRequirement,
    SiteMetadata,
    TokenCost,
)
from grid.crdt.records import LabelSelector as RecordSelector
from grid.crdt.signals import SignalThresholds
from grid.models.network import GridNetworkSpec
from grid.models.provider import InferenceProvider, InferenceProviderPhase
from grid.models.selectors import LabelSelector
from grid.models.site import GridSite
from grid.observe.signals import Signals


def record_selector(selector: LabelSelector) -> RecordSelector:
    """An access policy in its replicated form."""
    return RecordSelector(
        match_labels=dict(selector.match_labels),
        match_expressions=tuple(
            SelectorRequirement(entry.key, entry.operator.value, tuple(entry.values))
            for entry in selector.match_expressions
        ),
    )


def resource_selector(selector: RecordSelector) -> LabelSelector:
    """A replicated access policy in the form scoring evaluates."""
    return LabelSelector.model_validate(selector.as_kubernetes(), by_alias=True)


def provider_record(
    provider: InferenceProvider,
    phase: InferenceProviderPhase,
    metrics: ProviderMetrics,
) -> ProviderRecord:
    """What this site publishes about one of its providers. The credential travels as a
    Secret reference only. Raises :class:`~grid.errors.CrdtValueError` for a value the
    replicated form cannot hold (the message names the field)."""
    spec = provider.spec
    auth = spec.auth
    credential = None
    if auth is not None and auth.secret_ref is not None:
        ref = auth.secret_ref
        credential = CredentialRef(auth.strategy.value, ref.name, ref.namespace, ref.key)
    cost = spec.cost
    return ProviderRecord(
        name=provider.metadata.name,
        spec=ProviderSpec(
            backend_kind=spec.backend_kind.value,
            provider_kind=spec.provider_kind.value,
            upstream=provider.cluster,
            endpoint=spec.endpoint,
            cost=None
            if cost is None
            else TokenCost.from_usd(cost.input_per_million, cost.output_per_million),
            credential=credential,
            access_policy=None
            if spec.access_policy is None
            else record_selector(spec.access_policy.site_selector),
        ),
        phase=phase.value,
        metrics=metrics,
        models=tuple(
            ModelEntry(offer.name, tuple(offer.capabilities), offer.context_window)
            for offer in spec.models
        ),
    )


def provider_metrics(signals: Signals | None, healthy: bool | None) -> ProviderMetrics:
    """The replicated metrics of a provider: the scraped signals and the health verdict."""
    if signals is None:
        return ProviderMetrics.from_measurements(healthy=healthy)
    return ProviderMetrics.from_measurements(
        healthy=healthy,
        queue_depth=signals.queue_depth,
        kv_cache_utilization=signals.kv_cache_utilization,
        prefix_cache_hit_ratio=signals.prefix_cache_hit_ratio,
        p99_latency_ms=signals.p99_latency_ms,
    )


def signal_thresholds(spec: GridNetworkSpec) -> SignalThresholds | None:
    """When this site republishes its providers' signals, from the network's
    ``signalPublishing`` steps in the units of the wire, and the levels its admission
    decides at; None publishes every change."""
    publishing = spec.signal_publishing
    if not publishing.enabled:
        return None
    scales = spec.scoring.scales
    admission = spec.scoring.admission
    levels = [(admission.queue_depth, admission.kv_utilization)]
    if admission.hysteresis.enabled:
        hysteresis = admission.hysteresis
        levels.append((hysteresis.queue_depth_exit, hysteresis.kv_utilization_exit))
    return SignalThresholds(
        queue_depth_milli=round(publishing.queue_depth_step * scales.queue_capacity * 1_000),
        kv_cache_ppm=round(publishing.kv_cache_step * MAX_RATIO_PPM),
        prefix_cache_ppm=round(publishing.prefix_cache_step * MAX_RATIO_PPM),
        p99_latency_us=round(publishing.latency_step * scales.latency_ceiling_ms * 1_000),
        queue_capacity=scales.queue_capacity,
        queue_levels=tuple(sorted({queue for queue, _ in levels})),
        kv_levels=tuple(sorted({kv for _, kv in levels})),
    )


def signals_refresh_seconds(spec: GridNetworkSpec) -> float:
    """How long a provider's signals may go unpublished: three times per stale-candidate
    TTL (so peers never take a live site's quiet provider for a stale one), and at most
    ``signalPublishing.maxInterval`` (so a change below a step is not kept back longer)."""
    refresh = spec.stale_candidate_ttl_seconds / 3
    if spec.signal_publishing.enabled:
        refresh = min(refresh, spec.signal_publishing.max_interval.seconds)
    return refresh


def site_metadata(site: GridSite | None, grid_id: str | None) -> SiteMetadata:
    """Where this site is, as its GridSite says, and the grid it belongs to."""
    if site is None:
        return SiteMetadata(grid_id=grid_id)
    spec = site.spec
    return SiteMetadata(
        region=spec.region,
        zone=spec.zone,
        sovereignty_zone=spec.sovereignty_zone,
        labels=dict(site.metadata.labels),
        grid_id=grid_id,
    )


def gateway_record(site: GridSite | None, resolved: str | None) -> GatewayRecord | None:
    """This site's egress as peers should reach it, if its GridSite names one: its address,
    or ``resolved``, the one read through ``spec.egress.from`` (None while there is none)."""
    if site is None or site.spec.egress is None:
        return None
    egress = site.spec.egress
    address = egress.address if egress.address is not None else resolved
    if address is None:
        return None
    return GatewayRecord(address, egress.tls_mode.value, egress.server_name)
