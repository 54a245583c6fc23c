"""What-if rendering: the candidates a site's gateway would get, built from the resources
of a whole mesh (as YAML) and a file of provider signals, with no network involved.

A provider sits at the GridSites its ``siteSelector`` matches. A provider without one is
tied to no site (a managed cloud or a third-party API): every gateway reaches it directly,
so it is offered at the consuming site, with an unknown locality tier. At the consuming
site a candidate is reached through the provider's own endpoint and cluster and carries its
credential reference; at another site it is reached through that site's egress gateway
(cluster ``site-<site>``), which injects its own credentials.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from decimal import Decimal
from types import MappingProxyType
from urllib.parse import urlsplit

from pydantic import AwareDatetime, Field, ValidationError

from grid.errors import ConfigError, MetricsFileError, ScoringInputError
from grid.models.common import AuthStrategy, GridModel
from grid.models.fields import is_ip_address, join_host_port
from grid.models.network import GatewayRef, GridNetwork
from grid.models.oauth2 import MINTED_TOKEN_KEY, minted_token_secret
from grid.models.provider import InferenceProvider, InferenceProviderPhase, api_key_header
from grid.models.resources import LoadedResources
from grid.models.selectors import select
from grid.models.site import EgressTlsMode, GridSite
from grid.oauth.rotation import TokenKeys
from grid.render.consumer import (
    CLIENT_KEY_FILE,
    ClientCertificate,
    ClusterEndpoint,
    GatewayPlan,
)
from grid.render.overlay import OverlayScope, OverlaySource, credential_document
from grid.scoring.inputs import (
    UNKNOWN_GEOGRAPHY,
    CandidateInput,
    ConsumingSite,
    CredentialStrategy,
    Geography,
    Metrics,
    SecretRef,
    TokenCost,
)
from grid.suggest import listing, unknown_name

REMOTE_CLUSTER_PREFIX = "site-"
NO_SECRET_STRATEGIES = frozenset({AuthStrategy.MTLS_ONLY, AuthStrategy.SERVICE_ACCOUNT})
MINTED_FROM_SECRET = frozenset({AuthStrategy.OAUTH2, AuthStrategy.SIGV4})
"""Strategies whose Secret holds what the owning site mints a bearer token from: an OAuth 2.0
client's secret or key (Oauth2), AWS credentials that sign a Bedrock API key (Sigv4)."""
DEFAULT_GATEWAY_NAMESPACE = "default"


class SignalReport(GridModel):
    """Signal values and health of a provider, as the metrics file gives them."""

    queue_depth: float | None = Field(None, ge=0, allow_inf_nan=False)
    kv_cache_utilization: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    prefix_cache_hit_ratio: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    p99_latency_ms: float | None = Field(None, ge=0, allow_inf_nan=False)
    healthy: bool | None = None
    degraded: bool | None = None
    updated_at: AwareDatetime | None = None


class ProviderReport(SignalReport):
    """A provider's values, with per-site values for a provider at several sites."""

    sites: dict[str, SignalReport] = Field(default_factory=dict)


class MetricsReport(GridModel):
    """The ``--metrics`` file: ``providers`` maps provider names to their signals."""

    providers: dict[str, ProviderReport] = Field(default_factory=dict)

    def for_candidate(self, provider: str, site: str) -> SignalReport:
        """The values for ``provider`` at ``site``: the site's values where given, the
        provider's otherwise."""
        report = self.providers.get(provider)
        if report is None:
            return SignalReport()
        base = report.model_dump(exclude={"sites"})
        override = report.sites.get(site)
        if override is not None:
            base.update(override.model_dump(exclude_unset=True))
        return SignalReport(**base)


def parse_metrics_report(document: object) -> MetricsReport:
    """Check a decoded metrics file (YAML or JSON). Raises :class:`MetricsFileError`
    naming each bad field (never its value)."""
    if document is None:
        return MetricsReport()
    try:
        text = json.dumps(document, default=_json_default)
        return MetricsReport.model_validate_json(text, strict=True)
    except (TypeError, ValueError) as error:
        if isinstance(error, ValidationError):
            problems = "; ".join(
                f"{'.'.join(str(part) for part in detail['loc'])}: "
                f"{detail['msg'].removeprefix('Value error, ')}"
                for detail in error.errors()
            )
            raise MetricsFileError(f"metrics file: {problems}") from None
        raise MetricsFileError(f"metrics file: {error}") from None


def _json_default(value: object) -> str:
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"holds a {type(value).__name__} value, which is not JSON")


@dataclass(frozen=True, slots=True)
class WhatIf:
    """Everything needed to rank and render for one site's gateway."""

    network: GridNetwork
    gateway: GatewayRef
    consumer: ConsumingSite
    candidates: tuple[CandidateInput, ...]
    endpoints: Mapping[str, ClusterEndpoint]
    not_offered: tuple[tuple[str, str], ...] = ()
    """(provider, reason) for providers that yield no candidate."""
    notes: tuple[str, ...] = ()
    """Warnings worth showing (an unknown consuming site, a gateway not in the network)."""
    declared: Mapping[str, ClusterEndpoint] = field(default_factory=lambda: MappingProxyType({}))
    """Clusters beyond ``endpoints`` the gateway's configuration declares: the egress of
    every other site, candidates or not."""
    declared_credentials: tuple[SecretRef, ...] = ()
    """Credential references beyond the candidates' the gateway's configuration lists: a
    minted token about to be named, or the one named before (:func:`with_token_keys`)."""

    @property
    def plan(self) -> GatewayPlan:
        """What the gateway's configuration must declare."""
        clusters = {**self.declared, **self.endpoints}
        refs = [c.credential for c in self.candidates if c.credential is not None]
        credentials = {ref: credential_document(ref) for ref in [*refs, *self.declared_credentials]}
        return GatewayPlan(self.scope, MappingProxyType(clusters), tuple(credentials.values()))

    @property
    def scope(self) -> OverlayScope:
        return OverlayScope(
            network=self.network.metadata.name,
            gateway=self.gateway.name,
            namespace=self.gateway.namespace,
            local_site=self.consumer.name,
        )

    @property
    def source(self) -> OverlaySource:
        metadata = self.network.metadata
        return OverlaySource(
            name=metadata.name,
            uid=metadata.uid or f"what-if-{metadata.name}",
            generation=max(metadata.generation or 1, 1),
        )


def check_target(
    resources: LoadedResources,
    *,
    site: str,
    gateway: str,
    namespace: str | None = None,
    allow_unknown_site: bool = False,
) -> None:
    """Refuse what a command line most likely got wrong, before anything is rendered: a
    ``site`` that is not a GridSite (unless ``allow_unknown_site``: the what-if of a site
    not created yet), a ``gateway`` its GridNetwork does not list, a ``namespace`` the
    gateway is not listed in. Raises :class:`ConfigError` with one line naming what is
    known and, for a typo, the closest names."""
    sites_by_name = {entry.metadata.name: entry for entry in resources.sites}
    own_site = sites_by_name.get(site)
    if own_site is None and not allow_unknown_site:
        problem = unknown_name(f"site {site!r} is not a GridSite", site, sites_by_name, "GridSites")
        raise ConfigError(f"{problem}; --allow-unknown-site renders for a site not created yet")
    network = _pick_network(resources, own_site, site)
    _listed_gateway(network, gateway, namespace)


def _pick_network(resources: LoadedResources, site: GridSite | None, site_name: str) -> GridNetwork:
    networks = {network.metadata.name: network for network in resources.networks}
    if site is not None:
        name = site.spec.grid_network_ref
        if name not in networks:
            raise ConfigError(
                unknown_name(
                    f"GridSite {site_name!r} belongs to GridNetwork {name!r}, not found",
                    name,
                    networks,
                    "GridNetworks",
                )
            )
        return networks[name]
    if len(networks) == 1:
        return next(iter(networks.values()))
    raise ConfigError(
        f"site {site_name!r} is not a GridSite here, so its GridNetwork cannot be told "
        f"({len(networks)} networks found)"
    )


def _listed_gateway(network: GridNetwork, name: str, namespace: str | None) -> GatewayRef:
    """The gatewayRef of ``network`` named ``name`` (in ``namespace`` when given). Raises
    :class:`ConfigError` for a gateway listed in several namespaces with none given, in
    other namespaces only, or not listed at all (with the closest names)."""
    refs = network.spec.gateway_refs
    named = [ref for ref in refs if ref.name == name]
    matches = [ref for ref in named if namespace in (None, ref.namespace)]
    if len(matches) > 1:
        raise ConfigError(
            f"gateway {name!r} is listed in several namespaces "
            f"({listing(ref.namespace for ref in matches)}): give --namespace"
        )
    if matches:
        return matches[0]
    where = f"GridNetwork {network.metadata.name!r}"
    if named:
        spaces = sorted({ref.namespace for ref in named})
        hint = (
            f"give --namespace {spaces[0]}"
            if len(spaces) == 1
            else "give one of them as --namespace"
        )
        plural = "s" if len(spaces) > 1 else ""
        raise ConfigError(
            f"{where} lists gateway {name!r} in namespace{plural} {listing(spaces)}, "
            f"not {namespace!r}: {hint}"
        )
    if not refs:
        raise ConfigError(f"{where} lists no gateway: add {name!r} to its spec.gatewayRefs")
    raise ConfigError(
        unknown_name(
            f"{where} lists no gateway {name!r}",
            name,
            (ref.name for ref in refs),
            "gatewayRefs",
            shown=(f"{ref.namespace}/{ref.name}" for ref in refs),
        )
    )


def _pick_gateway(
    network: GridNetwork, name: str, namespace: str | None, notes: list[str]
) -> GatewayRef:
    """The gatewayRef to render for; a gateway the network does not list (a what-if of
    one not added yet) gets default settings and a note. :func:`check_target` refuses that
    case instead."""
    try:
        return _listed_gateway(network, name, namespace)
    except ConfigError as refused:
        if any(ref.name == name for ref in network.spec.gateway_refs) and namespace is None:
            raise  # listed in several namespaces: ambiguous, not missing
        reason = str(refused)
    notes.append(f"{reason}; rendering with default settings")
    try:
        return GatewayRef(name=name, namespace=namespace or DEFAULT_GATEWAY_NAMESPACE)
    except ValidationError as error:
        reason = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise ConfigError(f"gateway {name!r}: {reason}") from None


def endpoint_of(provider: InferenceProvider) -> ClusterEndpoint:
    """The gateway cluster endpoint of ``provider``'s own URL, with the client certificate
    an ``MtlsOnly`` provider's Secret holds (:func:`client_certificate_of`)."""
    parts = urlsplit(provider.spec.endpoint)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = join_host_port(host, port)
    tls_mode = EgressTlsMode.TLS if parts.scheme == "https" else EgressTlsMode.PLAINTEXT
    server_name = provider.spec.server_name or (None if is_ip_address(host) else host)
    certificate, _ = client_certificate_of(provider)
    return ClusterEndpoint(
        address=address,
        tls_mode=tls_mode,
        server_name=server_name,
        path=parts.path,
        client_certificate=certificate,
    )


def client_certificate_of(
    provider: InferenceProvider,
) -> tuple[ClientCertificate | None, str | None]:
    """The client certificate the gateway presents to an ``MtlsOnly`` provider whose
    ``secretRef`` names one (its key the certificate chain, the private key under
    ``tls.key`` beside it: a ``kubernetes.io/tls`` Secret), or the reason it cannot. An
    ``MtlsOnly`` provider without ``secretRef`` gets none: its mutual TLS is the platform's
    (a service mesh's sidecar), as in 0.2.0."""
    auth = provider.spec.auth
    if auth is None or auth.strategy is not AuthStrategy.MTLS_ONLY or auth.secret_ref is None:
        return None, None
    ref = auth.secret_ref
    if urlsplit(provider.spec.endpoint).scheme != "https":
        return None, (
            "auth strategy MtlsOnly with a secretRef needs an https endpoint: the client "
            "certificate is presented in the TLS handshake"
        )
    if ref.key == CLIENT_KEY_FILE:
        return None, (
            f"auth strategy MtlsOnly: secretRef.key names the certificate chain, and the "
            f"private key is read from {CLIENT_KEY_FILE!r} beside it, so the key cannot be "
            f"{CLIENT_KEY_FILE!r} (use tls.crt)"
        )
    return ClientCertificate(ref.name, ref.namespace, ref.key), None


def _egress_of(site: GridSite) -> ClusterEndpoint | None:
    egress = site.spec.egress
    if egress is not None and egress.address is not None:
        return ClusterEndpoint(egress.address, egress.tls_mode, egress.server_name)
    # Learned through SWIM, or read through spec.egress.from by the site's operator.
    learned = site.status.egress_address if site.status is not None else None
    if learned is None:
        return None
    if egress is not None:
        return ClusterEndpoint(learned, egress.tls_mode, egress.server_name)
    return ClusterEndpoint(learned, EgressTlsMode.MUTUAL_TLS)


def _credential_of(
    provider: InferenceProvider, gateway: GatewayRef, rendered_header: str | None = None
) -> tuple[SecretRef | None, str | None]:
    """The credential reference to project to ``gateway`` (with how it sends it), or the
    reason the provider cannot be offered there. ``rendered_header``: the header of a
    Custom value whose Secret names it, as this site last read it."""
    auth = provider.spec.auth
    if auth is None:
        return None, None
    if auth.strategy is AuthStrategy.SERVICE_ACCOUNT and auth.service_account is not None:
        # The owning site's operator mints the token into the ServiceAccount's namespace.
        name = minted_token_secret(provider.metadata.name)
        return SecretRef(name, auth.service_account.namespace, MINTED_TOKEN_KEY), None
    ref = auth.secret_ref
    if auth.strategy is AuthStrategy.MTLS_ONLY:
        # No header to inject: the certificate goes with the cluster (endpoint_of).
        return None, client_certificate_of(provider)[1]
    if auth.strategy in NO_SECRET_STRATEGIES or ref is None:
        return None, None  # every other strategy has a secretRef: the model requires it
    if auth.strategy is AuthStrategy.OAUTH2 and auth.oauth2 is None:
        return None, (
            "auth strategy Oauth2 needs auth.oauth2 (the grant and the token endpoint) "
            "for the site to mint its tokens"
        )
    if auth.strategy in MINTED_FROM_SECRET:
        # The site mints the token and writes it under this name, beside the gateway:
        # the candidate names where it is, as for BearerToken.
        name = minted_token_secret(provider.metadata.name)
        return SecretRef(name, ref.namespace, MINTED_TOKEN_KEY), None
    if auth.strategy is AuthStrategy.CUSTOM and auth.custom is not None:
        # The owning site renders the value and writes it beside the Secret, as a token.
        header = auth.header or rendered_header
        if not gateway.api_key_credentials:
            return None, header_refusal(auth.strategy, header)
        if header is None:
            return None, CUSTOM_HEADER_UNREAD
        name = minted_token_secret(provider.metadata.name)
        return SecretRef(
            name, ref.namespace, MINTED_TOKEN_KEY, CredentialStrategy.API_KEY, header
        ), None
    if auth.strategy is AuthStrategy.CUSTOM and auth.header is None:
        return None, (
            "auth strategy Custom names no header: set auth.header to the request header "
            "the Secret's value is sent in"
        )
    # What is left (BearerToken, ApiKey, Custom) holds a value the gateway sends itself:
    # BearerToken as a bearer token; ApiKey in the header api_key_header names (the
    # provider's auth.header or its kind's default), or as a bearer token for the kinds that
    # take API keys that way (open_ai, bedrock); Custom as the whole value of auth.header.
    header = api_key_header(provider.spec.provider_kind, auth.strategy, auth.header)
    if header is None:
        return SecretRef(ref.name, ref.namespace, ref.key, CredentialStrategy.BEARER_TOKEN), None
    if not gateway.api_key_credentials:
        return None, header_refusal(auth.strategy, header)
    return SecretRef(ref.name, ref.namespace, ref.key, CredentialStrategy.API_KEY, header), None


API_KEY_OPT_IN = "apiKeyCredentials"
"""The gatewayRefs field saying a gateway accepts the contract's ``apikey`` credentials."""


def needs_api_key_credentials(provider: InferenceProvider) -> bool:
    """Whether ``provider`` is offered to a gateway or not depending on its
    :data:`API_KEY_OPT_IN`: its key goes in a header of its own (ApiKey of a header kind or
    with ``auth.header``, Custom with ``auth.header``)."""
    auth = provider.spec.auth
    if auth is None or auth.secret_ref is None:
        return False
    if auth.strategy is AuthStrategy.CUSTOM and auth.custom is not None:
        return True
    return api_key_header(provider.spec.provider_kind, auth.strategy, auth.header) is not None


CUSTOM_HEADER_UNREAD = (
    "auth strategy Custom takes its header's name from its Secret (custom.headerKey), which "
    "the site has not read yet: offered once the value is rendered"
)
"""Why a Custom provider whose Secret names its header is not offered before the site that
owns it rendered its value (other sites, ``grid render``: they never read the Secret)."""


def header_refusal(strategy: AuthStrategy, header: str | None) -> str:
    """Why a credential sent in a header of its own is not offered to a gateway without
    :data:`API_KEY_OPT_IN`: the Praxis AI gateway checked at commit 9f6e8386 injects
    credentials as ``Authorization: Bearer`` only. Its ``credential_inject`` filter has no other
    strategy, and its overlay parser refuses a credential with a ``header``, which would
    make it refuse the whole overlay, every other candidate's routing with it. A gateway
    with the overlay contract's ``apikey`` strategy says so with the opt-in."""
    where = "the header its Secret names" if header is None else f"header {header!r}"
    return (
        f"auth strategy {strategy.value} sends the key in {where}, and the gateway "
        "injects credentials as 'Authorization: Bearer' only (its credential_inject filter "
        "has no header strategy, and an overlay naming one would be refused whole); for a "
        f"gateway that accepts apikey credentials, set {API_KEY_OPT_IN}: true on its "
        "gatewayRefs entry"
    )


def with_token_keys(what_if: WhatIf, keys: Mapping[str, TokenKeys]) -> WhatIf:
    """``what_if`` with the references to the tokens this site mints moved to the keys they
    are written under: each candidate of a provider in ``keys`` names its
    :attr:`~grid.oauth.rotation.TokenKeys.reference`, and the gateway's configuration lists
    every key of :attr:`~grid.oauth.rotation.TokenKeys.declared`. A provider whose first
    token has not reached the gateway yet (no reference) is not offered, saying so. A
    provider not in ``keys`` (no token written yet) keeps the reference to ``token``."""
    if not keys:
        return what_if
    candidates = []
    declared: dict[SecretRef, None] = {}
    waiting: dict[str, None] = {}
    for candidate in what_if.candidates:
        ref = candidate.credential
        found = keys.get(candidate.provider)
        if ref is None or found is None or ref.name != minted_token_secret(candidate.provider):
            candidates.append(candidate)
            continue
        for key in found.declared:
            declared[replace(ref, key=key, header=found.header_of(key) or ref.header)] = None
        if found.reference is None:
            waiting[candidate.provider] = None
            continue
        header = found.header_of(found.reference) or ref.header
        credential = replace(ref, key=found.reference, header=header)
        candidates.append(replace(candidate, credential=credential))
    return replace(
        what_if,
        candidates=tuple(candidates),
        declared_credentials=(*what_if.declared_credentials, *declared),
        not_offered=(*what_if.not_offered, *((name, FIRST_TOKEN_SETTLING) for name in waiting)),
    )


FIRST_TOKEN_SETTLING = (
    "its first token is on its way to the gateway: offered once the gateway can read it "
    "(both rotation settle times after it was written: 4 min at the operator by default, "
    "2 s at the agent)"
)
"""Why a provider whose first minted token has not settled is not offered yet."""


def _check_reports(metrics: MetricsReport, providers: list[InferenceProvider]) -> None:
    known = {provider.metadata.name for provider in providers}
    unknown = sorted(set(metrics.providers) - known)
    if unknown:
        raise MetricsFileError(f"metrics file: provider {unknown[0]!r} is not in this network")


def build_what_if(
    resources: LoadedResources,
    *,
    site: str,
    gateway: str,
    namespace: str | None = None,
    metrics: MetricsReport | None = None,
    rendered_headers: Mapping[str, str] | None = None,
) -> WhatIf:
    """The candidates ``site``'s gateway would be offered. ``rendered_headers``: per Custom
    provider whose Secret names its header, that header as this site rendered it. Raises
    :class:`ConfigError` when the resources cannot say (no network, an ambiguous gateway,
    conflicting endpoints)."""
    metrics = metrics or MetricsReport()
    notes: list[str] = []
    sites_by_name = {entry.metadata.name: entry for entry in resources.sites}
    own_site = sites_by_name.get(site)
    network = _pick_network(resources, own_site, site)
    network_name = network.metadata.name
    if own_site is None:
        notes.append(
            f"site {site!r} is not a GridSite of {network_name!r}: it is unknown, so providers "
            "with an access policy are left out"
        )
        consumer = ConsumingSite(name=site)
    else:
        consumer = ConsumingSite(
            name=site,
            geography=Geography(own_site.spec.region, own_site.spec.zone),
            labels=own_site.metadata.labels,
        )
    gateway_ref = _pick_gateway(network, gateway, namespace, notes)
    sites = [entry for entry in resources.sites if entry.spec.grid_network_ref == network_name]
    providers = sorted(
        (entry for entry in resources.providers if entry.spec.grid_network_ref == network_name),
        key=lambda entry: entry.metadata.name,
    )
    _check_reports(metrics, providers)

    candidates: list[CandidateInput] = []
    endpoints: dict[str, ClusterEndpoint] = {}
    not_offered: list[tuple[str, str]] = []
    for provider in providers:
        name = provider.metadata.name
        placements = _placements(provider, sites)
        if placements == []:
            not_offered.append((name, "its siteSelector matches no GridSite"))
            continue
        report = metrics.providers.get(name)
        placed_names = (
            {consumer.name} if placements is None else {entry.metadata.name for entry in placements}
        )
        elsewhere = sorted(set(report.sites) - placed_names) if report is not None else []
        if elsewhere:
            raise MetricsFileError(
                f"metrics file: provider {name!r} does not sit at site {elsewhere[0]!r}"
            )
        credential, refusal = _credential_of(
            provider, gateway_ref, (rendered_headers or {}).get(name)
        )
        sited: list[GridSite | None] = [None] if placements is None else list(placements)
        for placement in sited:
            site_name = consumer.name if placement is None else placement.metadata.name
            if site_name == consumer.name:
                if refusal is not None:
                    not_offered.append((name, refusal))
                    continue
                cluster, secret = provider.cluster, credential
                endpoint = endpoint_of(provider)
            else:
                egress = None if placement is None else _egress_of(placement)
                if egress is None:
                    not_offered.append((name, f"site {site_name!r} has no egress address"))
                    continue
                cluster, endpoint, secret = f"{REMOTE_CLUSTER_PREFIX}{site_name}", egress, None
            known = endpoints.setdefault(cluster, endpoint)
            if known != endpoint:
                raise ConfigError(f"gateway cluster {cluster!r} would have two endpoints")
            candidates += _candidates(
                provider,
                site_name=site_name,
                site=placement,
                cluster=cluster,
                credential=secret,
                metrics=metrics,
            )
    declared = {
        f"{REMOTE_CLUSTER_PREFIX}{entry.metadata.name}": egress
        for entry in sites
        if entry.metadata.name != consumer.name and (egress := _egress_of(entry)) is not None
    }
    return WhatIf(
        network=network,
        gateway=gateway_ref,
        consumer=consumer,
        candidates=tuple(candidates),
        endpoints=MappingProxyType(endpoints),
        not_offered=tuple(not_offered),
        notes=tuple(notes),
        declared=MappingProxyType(declared),
    )


def _placements(provider: InferenceProvider, sites: list[GridSite]) -> list[GridSite] | None:
    """The sites ``provider`` sits at, or None for a provider tied to no site (without a
    selector: every gateway reaches it directly)."""
    selector = provider.spec.site_selector
    if selector is None:
        return None
    return select(selector, sites, lambda entry: entry.metadata.labels)


def _candidates(
    provider: InferenceProvider,
    *,
    site_name: str,
    site: GridSite | None,
    cluster: str,
    credential: SecretRef | None,
    metrics: MetricsReport,
) -> list[CandidateInput]:
    name = provider.metadata.name
    report = metrics.for_candidate(name, site_name)
    phase = provider.status.phase if provider.status is not None else None
    healthy = report.healthy
    if healthy is None and phase is InferenceProviderPhase.UNAVAILABLE:
        healthy = False
    degraded = report.degraded
    if degraded is None:
        degraded = phase is InferenceProviderPhase.DEGRADED
    cost = provider.spec.cost
    policy = provider.spec.access_policy
    try:
        return [
            CandidateInput(
                provider=name,
                model=offer.name,
                site=site_name,
                cluster=cluster,
                backend_kind=provider.spec.backend_kind,
                geography=UNKNOWN_GEOGRAPHY
                if site is None
                else Geography(site.spec.region, site.spec.zone),
                site_bound=site is not None,
                metrics=Metrics(
                    queue_depth=report.queue_depth,
                    kv_cache_utilization=report.kv_cache_utilization,
                    prefix_cache_hit_ratio=report.prefix_cache_hit_ratio,
                    p99_latency_ms=report.p99_latency_ms,
                ),
                cost=None
                if cost is None
                else TokenCost(Decimal(cost.input_per_million), Decimal(cost.output_per_million)),
                healthy=healthy,
                degraded=degraded,
                updated_at=report.updated_at,
                credential=credential,
                access_policy=None if policy is None else policy.site_selector,
            )
            for offer in provider.spec.models
        ]
    except ScoringInputError as error:
        raise ConfigError(f"provider {name!r} at site {site_name!r}: {error}") from None
