"""GridNetwork: the tenancy boundary. One mesh of sites sharing SWIM keys, trust roots,
scoring settings, tenant budgets and the gateways that receive its routing overlay."""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol, Self

from pydantic import AfterValidator, AwareDatetime, ConfigDict, Field, model_validator

from grid.models.budgets import TenantBudget, TenantBudgetStatus, UnheardSite
from grid.models.common import GridModel, ScoringConfig
from grid.models.conditions import Conditions
from grid.models.fields import (
    HEX64_PATTERN,
    LIST_SET,
    NO_WHITESPACE,
    DnsLabel,
    DnsSubdomain,
    Duration,
    Fingerprint,
    HostPort,
    SecretKey,
    Topology,
    list_map,
    unique_by,
    unique_values,
    within,
)
from grid.models.meta import API_VERSION, ObjectMeta, SecretKeyRef, SecretObjectRef
from grid.models.spend import SpendSource, SpendSourceStatus
from grid.models.validation_rules import ValidationRule, present, validations

DEFAULT_CONFIG_MAP_KEY = "grid-config.json"
DEFAULT_ROUTE_FILTER = "grid_route"
DEFAULT_CREDENTIAL_FILTER = "grid_credential_inject"
DEFAULT_SWIM_PORT = 7946
DEFAULT_RENDER_INTERVAL = "250ms"

_FILTER_NAME = r"^[a-z][a-z0-9_]*$"


class ConsumerMode(StrEnum):
    """How the rendered gateway configuration gets its candidates."""

    OVERLAY = "overlay"
    """The routing filter reads the published overlay (digest and scope checked, hot
    reloaded): re-rankings never rebuild the gateway's pipeline."""
    INLINE = "inline"
    """The candidates are embedded; every re-ranking is a new configuration, and candidates
    closed to new requests are left out (the static format has no admission state)."""


AFFINITY_NEEDS_A_KEY = ValidationRule(
    f"!self.enabled || ({present('header')}) || ({present('cookie')})",
    "session affinity needs a header or a cookie to read the key from",
)


class SessionAffinity(GridModel):
    """The gateway's session affinity: a session keeps the backend it was first routed to
    while that backend admits existing sessions (``existing_only`` included)."""

    model_config = ConfigDict(json_schema_extra=validations(AFFINITY_NEEDS_A_KEY))

    enabled: bool = True
    header: str | None = Field(
        "X-Session-Id",
        pattern=r"^[A-Za-z0-9-]+$",
        max_length=128,
        description="Request header carrying the session key.",
    )
    cookie: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]+$",
        max_length=128,
        description="Cookie carrying the session key (the header wins when both are sent).",
    )
    ttl_seconds: int = Field(
        3600, ge=1, le=86400, description="How long a session stays bound to its backend."
    )

    @model_validator(mode="after")
    def _has_a_key(self) -> Self:
        if self.enabled and self.header is None and self.cookie is None:
            raise ValueError(AFFINITY_NEEDS_A_KEY.message)
        return self


class ConsumerConfig(GridModel):
    """Have Grid render a complete gateway configuration (listener, filter chain with the
    routing and credential filters, load balancer, admin listener) next to the overlay."""

    enabled: bool = False
    mode: ConsumerMode = Field(
        ConsumerMode.OVERLAY,
        description="overlay: the gateway reads the published overlay and reloads it; "
        "inline: the candidates are embedded in the configuration.",
    )
    overlay_mount_path: str = Field(
        "/etc/grid/overlay",
        pattern=r"^/[^\s]*$",
        max_length=1024,
        json_schema_extra=validations(NO_WHITESPACE),
        description="Directory where the overlay ConfigMap is mounted in the gateway "
        "(a whole-volume mount: subPath mounts never see updates).",
    )
    reload_debounce_ms: int = Field(
        500, ge=0, le=60000, description="How long the gateway waits for writes to settle."
    )
    session_affinity: SessionAffinity | None = Field(
        default_factory=SessionAffinity,
        description="Session affinity of the routing filter (overlay mode).",
    )
    allow_private_endpoints: bool = Field(
        False,
        description="Let the gateway reach endpoints it deems sensitive (loopback, "
        "link-local, localhost, *.local such as *.svc.cluster.local, *.internal).",
    )
    forward_client_credentials: bool = Field(
        False,
        description="Pass the client's own credential headers (Authorization, "
        "Proxy-Authorization, x-api-key, x-goog-api-key and every ApiKey provider's header) "
        "upstream. Default false: the gateway removes them, so a client's credential stops "
        "at the gateway and backends only ever see the credentials Grid injects. true sends "
        "every client's credentials to every backend the request is routed to, self-hosted "
        "servers and other sites' egress gateways included.",
    )
    listener_port: int = Field(8080, ge=1, le=65535, description="Public listener port.")
    admin_address: HostPort = Field(
        "127.0.0.1:9901", description="Address of the gateway's admin listener."
    )
    model_header: str = Field(
        "X-Model",
        pattern=r"^[A-Za-z0-9-]+$",
        max_length=128,
        description="Header the request's model field is copied into for routing.",
    )
    credential_mount_base: str = Field(
        "/etc/grid/credentials",
        pattern=r"^/[^\s]*$",
        max_length=1024,
        json_schema_extra=validations(NO_WHITESPACE),
        description="Directory where provider credential Secrets are mounted "
        "(<base>/<secret name>/<key>).",
    )
    tls_mount_path: str = Field(
        "/etc/grid/tls",
        pattern=r"^/[^\s]*$",
        max_length=1024,
        json_schema_extra=validations(NO_WHITESPACE),
        description="Directory holding ca.crt, tls.crt and tls.key for mutual TLS upstreams.",
    )
    config_map_name: DnsSubdomain | None = Field(
        None, description="ConfigMap for the rendered configuration; default <gateway>-praxis."
    )
    config_map_key: SecretKey = Field(
        "praxis.yaml", description="Key of the rendered configuration in that ConfigMap."
    )


class GatewayRef(GridModel):
    """A gateway that receives this network's routing overlay in a ConfigMap."""

    name: DnsSubdomain = Field(description="Name of the gateway (Deployment).")
    namespace: DnsLabel = Field(description="Namespace of the gateway and its ConfigMaps.")
    config_map_name: DnsSubdomain | None = Field(
        None, description="ConfigMap that holds the overlay; default <gateway>-grid-config."
    )
    config_map_key: SecretKey = Field(
        DEFAULT_CONFIG_MAP_KEY,
        description="Key of the overlay in the ConfigMap (routing-overlay.json for gateways "
        "after the filter rename).",
    )
    route_filter_name: str = Field(
        DEFAULT_ROUTE_FILTER,
        pattern=_FILTER_NAME,
        max_length=128,
        description="Routing filter name (intelligent_route for gateways after the rename).",
    )
    credential_filter_name: str = Field(
        DEFAULT_CREDENTIAL_FILTER,
        pattern=_FILTER_NAME,
        max_length=128,
        description="Credential filter name (credential_inject after the rename).",
    )
    api_key_credentials: bool = Field(
        False,
        description="The gateway accepts the overlay contract's apikey credential strategy "
        "(a Secret's value sent in a request header of its own, as in the contract fixtures "
        "of Praxis AI gateway commit 8de5e37a). true offers this gateway ApiKey providers "
        "whose key goes in a header (anthropic, vertex and self_hosted kinds, or "
        "auth.header) and Custom providers. Default false: credentials are injected as "
        "'Authorization: Bearer' only and those providers are not offered, since a gateway "
        "without the strategy refuses a whole overlay naming one.",
    )
    consumer_config: ConsumerConfig | None = None

    @property
    def overlay_config_map(self) -> str:
        """The ConfigMap the overlay is written to."""
        return self.config_map_name or f"{self.name}-grid-config"

    @property
    def budget_config_map(self) -> str:
        """The ConfigMap the budget document is written to, while the network has budgets
        (as long a name as the overlay's default)."""
        return f"{self.name}-grid-budget"

    @property
    def consumer_config_map(self) -> str:
        """The ConfigMap the rendered gateway configuration is written to."""
        explicit = self.consumer_config.config_map_name if self.consumer_config else None
        return explicit or f"{self.name}-praxis"


SUSPICION_OUTLASTS_PROBE = ValidationRule(
    "duration(self.suspicionTimeout) >= duration(self.probeInterval)",
    "suspicionTimeout must be at least probeInterval, or live peers are declared down before "
    "they can be probed again",
    field_path=".suspicionTimeout",
)


def _without_default(schema: dict[str, Any]) -> None:
    """Leave a field's default out of its JSON schema (and so out of the CRD)."""
    schema.pop("default", None)


class SwimSettings(GridModel):
    """SWIM membership tuning."""

    model_config = ConfigDict(json_schema_extra=validations(SUSPICION_OUTLASTS_PROBE))

    gossip_nodes: int = Field(
        3, ge=1, le=32, description="Peers each update is gossiped to per round."
    )
    probe_interval: Annotated[Duration, within(0.1, 300)] = Field(
        Duration.parse("5s"), description="Time between probes of a random peer."
    )
    suspicion_timeout: Annotated[Duration, within(0.1, 3600)] = Field(
        Duration.parse("10s"), description="How long a suspected peer has to refute."
    )
    port: int = Field(
        DEFAULT_SWIM_PORT,
        ge=1,
        le=65535,
        description="UDP port of SWIM.",
        # No default in the CRD: an API server would store it, and the operator would read
        # a network that names no port as asking for 7946 (grid.operator.ports gives a port
        # only to networks that set none).
        json_schema_extra=_without_default,
    )

    @model_validator(mode="after")
    def _suspicion_outlasts_probe(self) -> Self:
        if self.suspicion_timeout.seconds < self.probe_interval.seconds:
            raise ValueError(SUSPICION_OUTLASTS_PROBE.message)
        return self


class TlsSettings(GridModel):
    """Secrets holding the network's trust material (references only)."""

    ca_secret_ref: SecretKeyRef | None = Field(
        None, description="CA certificate (PEM) that signs site certificates."
    )
    site_cert_secret_ref: SecretObjectRef | None = Field(
        None, description="kubernetes.io/tls Secret with this site's tls.crt and tls.key."
    )
    swim_key_ref: SecretKeyRef | None = Field(
        None, description="32 random bytes that encrypt SWIM traffic (AES-256-GCM)."
    )
    revoked_certificates: Annotated[
        list[Fingerprint], AfterValidator(unique_values), LIST_SET, Field(max_length=256)
    ] = Field(
        default_factory=list,
        description=(
            "SHA-256 fingerprints of site certificates the network no longer trusts: "
            "every node refuses them, drops their sites from the membership as if they "
            "had left and drops what they signed, until the site presents a new "
            "certificate."
        ),
    )


class SignalPublishing(GridModel):
    """When a site republishes a provider's load signals to its peers.

    Always when the phase or health changes, when a signal appears or disappears, and when
    the queue depth or KV-cache utilization crosses a level admission decides at
    (``scoring.admission`` and its hysteresis exits); otherwise only when a signal moved by
    at least its step since it was last published, so the published value is never further
    than one step from the measured one. Steps are shares of the range scoring spreads a
    signal over (it scores linearly in each). ``maxInterval`` bounds how long a change
    smaller than a step goes unpublished.
    """

    enabled: bool = Field(
        True, description="Apply the steps below; false publishes every change of a signal."
    )
    queue_depth_step: float = Field(
        0.02, ge=0, le=1, description="Share of scoring.scales.queueCapacity."
    )
    kv_cache_step: float = Field(0.02, ge=0, le=1, description="KV-cache utilization, 0..1.")
    prefix_cache_step: float = Field(0.02, ge=0, le=1, description="Prefix-cache hit ratio, 0..1.")
    latency_step: float = Field(
        0.02, ge=0, le=1, description="Share of scoring.scales.latencyCeilingMs (P99)."
    )
    max_interval: Annotated[Duration, within(1, 3600)] = Field(
        Duration.parse("60s"),
        description="Longest time a provider's signals go without being republished "
        "(staleCandidateTtlSeconds / 3 when that is shorter).",
    )


class GridNetworkSpec(GridModel):
    """Desired state of a GridNetwork."""

    grid_id: DnsLabel | None = Field(
        None, description="Mesh identity; generated on first join and kept if unset."
    )
    seeds: Annotated[list[HostPort], AfterValidator(unique_values), LIST_SET] = Field(
        default_factory=list, max_length=64, description="SWIM seed peers (host:port)."
    )
    gateway_refs: Annotated[
        list[GatewayRef], unique_by("namespace", "name"), list_map("namespace", "name")
    ] = Field(default_factory=list, max_length=64)
    region: Topology | None = None
    zone: Topology | None = None
    swim: SwimSettings = Field(default_factory=SwimSettings)
    tls: TlsSettings | None = None
    stale_candidate_ttl_seconds: int = Field(
        300, ge=1, le=86400, description="Age after which a remote candidate is evicted."
    )
    render_interval: Annotated[Duration, within(0, 10)] = Field(
        Duration.parse(DEFAULT_RENDER_INTERVAL),
        description="Average time between renders of the overlay under a steady stream of "
        "changes: a change is rendered at once while renders keep within one per interval "
        "(a burst of 16 allowed); changes arriving faster are rendered together, once per "
        "interval, stretched up to 1s while a render costs more than 4% of it (0s renders "
        "on every change).",
    )
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    signal_publishing: SignalPublishing = Field(default_factory=SignalPublishing)
    budgets: Annotated[list[TenantBudget], unique_by("tenant"), list_map("tenant")] = Field(
        default_factory=list, max_length=1024
    )
    spend_sources: Annotated[list[SpendSource], unique_by("name"), list_map("name")] = Field(
        default_factory=list,
        max_length=16,
        description="Prometheus counters the budgets' spend is read from.",
    )


class GridNetworkPhase(StrEnum):
    PENDING = "Pending"
    INITIALIZING = "Initializing"
    ACTIVE = "Active"
    DEGRADED = "Degraded"


class GatewayOverlayStatus(GridModel):
    """The last overlay written for one gateway."""

    name: DnsSubdomain
    namespace: DnsLabel
    revision: str | None = Field(None, pattern=HEX64_PATTERN, description="Overlay revision.")
    candidates: int = Field(0, ge=0)
    rendered_at: AwareDatetime | None = None
    message: str = Field("", max_length=4096, description="Why the last render was refused.")


class GridNetworkStatus(GridModel):
    """Observed state of a GridNetwork, written by Grid."""

    phase: GridNetworkPhase = GridNetworkPhase.PENDING
    phase_transition_time: AwareDatetime | None = None
    observed_generation: int | None = Field(None, ge=0)
    conditions: Conditions = Field(default_factory=list)
    grid_id: DnsLabel | None = None
    connected_sites: int = Field(0, ge=0, description="Sites currently Active.")
    provider_count: int = Field(0, ge=0)
    gateways: Annotated[
        list[GatewayOverlayStatus], unique_by("namespace", "name"), list_map("namespace", "name")
    ] = Field(default_factory=list)
    budgets: Annotated[list[TenantBudgetStatus], unique_by("tenant"), list_map("tenant")] = Field(
        default_factory=list
    )
    spend_sources: Annotated[list[SpendSourceStatus], unique_by("name"), list_map("name")] = Field(
        default_factory=list, description="This site's latest scrape of each spend source."
    )
    unheard_sites: Annotated[list[UnheardSite], unique_by("site"), list_map("site")] = Field(
        default_factory=list,
        description="Sites not heard from: while any is, budgets' used is a lower bound.",
    )
    items_waiting: int | None = Field(
        None,
        ge=0,
        description="Items this site's SWIM node holds back until their origin's certificate "
        "is verified (absent while the node does not run); see the CaughtUp condition.",
    )


class GridNetwork(GridModel):
    """The tenancy boundary: a mesh of sites that share SWIM keys, trust roots, scoring
    settings and tenant budgets, and the gateways that receive its routing overlay."""

    api_version: Literal["grid.praxis-proxy.io/v1alpha1"] = API_VERSION
    kind: Literal["GridNetwork"] = "GridNetwork"
    metadata: ObjectMeta
    spec: GridNetworkSpec
    status: GridNetworkStatus | None = None


class RandomBits(Protocol):
    """Anything that yields random bits (``random.Random``, ``secrets.SystemRandom``)."""

    def getrandbits(self, k: int, /) -> int: ...


def generate_grid_id(rng: RandomBits) -> str:
    """A fresh grid id: a version-4 UUID drawn from ``rng``."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def resolve_grid_id(network: GridNetwork, rng: RandomBits) -> str:
    """The network's grid id: the one in spec if set, else the one already recorded in
    status (so it is kept across restarts), else a new one."""
    if network.spec.grid_id:
        return network.spec.grid_id
    if network.status is not None and network.status.grid_id:
        return network.status.grid_id
    return generate_grid_id(rng)
