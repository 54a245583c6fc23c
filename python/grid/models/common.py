"""Vocabulary shared by every resource model and by scoring: the enums of the spec, the
base model, and the scoring settings a GridNetwork carries."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class GridModel(BaseModel):
    """Base of every resource model: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_assignment=True,
    )


class BackendKind(StrEnum):
    """Where a provider's capacity lives; also the locality preference ladder."""

    LOCAL = "local"
    REMOTE = "remote"
    CLOUD_MANAGED = "cloud_managed"
    API_PROVIDER = "api_provider"


class ProviderKind(StrEnum):
    OPEN_AI = "open_ai"
    ANTHROPIC = "anthropic"
    BEDROCK = "bedrock"
    VERTEX = "vertex"
    SELF_HOSTED = "self_hosted"


class AuthStrategy(StrEnum):
    API_KEY = "ApiKey"
    BEARER_TOKEN = "BearerToken"
    MTLS_ONLY = "MtlsOnly"
    OAUTH2 = "Oauth2"
    SERVICE_ACCOUNT = "ServiceAccount"
    SIGV4 = "Sigv4"
    CUSTOM = "Custom"


class AdmissionState(StrEnum):
    """Whether the gateway may send new sessions, only existing ones, or nothing.

    Values are the spec's names; :attr:`wire` is the overlay contract's spelling.
    """

    NEW_AND_EXISTING = "NewAndExisting"
    EXISTING_ONLY = "ExistingOnly"
    EXCLUDED = "Excluded"

    @property
    def wire(self) -> str:
        return _ADMISSION_WIRE[self]


_ADMISSION_WIRE = {
    AdmissionState.NEW_AND_EXISTING: "new_and_existing",
    AdmissionState.EXISTING_ONLY: "existing_only",
    AdmissionState.EXCLUDED: "none",
}


class LocalityTier(StrEnum):
    """How near a candidate's site is to the consuming site (nearest first)."""

    SAME_SITE = "SameSite"
    SAME_ZONE = "SameZone"
    SAME_REGION = "SameRegion"
    CROSS_REGION = "CrossRegion"
    UNKNOWN = "Unknown"

    @property
    def wire(self) -> str:
        return _TIER_WIRE[self]


_TIER_WIRE = {
    LocalityTier.SAME_SITE: "same_site",
    LocalityTier.SAME_ZONE: "same_zone",
    LocalityTier.SAME_REGION: "same_region",
    LocalityTier.CROSS_REGION: "cross_region",
    LocalityTier.UNKNOWN: "unknown",
}


class ScoringWeights(GridModel):
    """Weights of the six signals in the blended score (the spec's defaults)."""

    locality: float = Field(3.0, ge=0, le=100)
    queue_depth: float = Field(3.0, ge=0, le=100)
    kv_cache: float = Field(2.0, ge=0, le=100)
    prefix_cache: float = Field(2.0, ge=0, le=100)
    latency: float = Field(2.0, ge=0, le=100)
    cost: float = Field(1.0, ge=0, le=100)


class SignalScales(GridModel):
    """Reference points that turn raw metrics into [0, 1] signals."""

    queue_capacity: float = Field(
        64.0, gt=0, description="Queue depth at which the queue signal reaches 0."
    )
    latency_ceiling_ms: float = Field(
        10_000.0, gt=0, description="P99 latency (ms) at which the latency signal reaches 0."
    )
    cost_ceiling_per_million: float = Field(
        60.0,
        gt=0,
        description="Blended USD per million tokens at which the cost signal reaches 0.",
    )
    output_cost_weight: float = Field(
        0.75,
        ge=0,
        le=1,
        description="Share of the output price in the blended per-token cost.",
    )


class Hysteresis(GridModel):
    """Stabilized admission: a provider must cross `enter` to leave NewAndExisting and fall
    back below `exit` to return, for `consecutiveObservations` in a row and no sooner than
    `minSecondsInState` after its last change."""

    enabled: bool = False
    queue_depth_exit: float = Field(0.70, ge=0, le=1)
    kv_utilization_exit: float = Field(0.80, ge=0, le=1)
    consecutive_observations: int = Field(3, ge=1, le=100)
    min_seconds_in_state: float = Field(30.0, ge=0, le=86_400)


class AdmissionThresholds(GridModel):
    """Normalized metric levels above which a provider takes existing sessions only."""

    queue_depth: float = Field(0.85, ge=0, le=1)
    kv_utilization: float = Field(0.90, ge=0, le=1)
    hysteresis: Hysteresis = Field(default_factory=Hysteresis)


class ScoringConfig(GridModel):
    """A GridNetwork's `scoring` block."""

    weights: ScoringWeights = Field(default_factory=ScoringWeights)
    scales: SignalScales = Field(default_factory=SignalScales)
    admission: AdmissionThresholds = Field(default_factory=AdmissionThresholds)
