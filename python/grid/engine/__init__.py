"""The site engine: one site's state and decisions for one GridNetwork.

Pure: resources, membership changes, received items, observations and probe results go in
with ``now``; items to publish, overlays, phases, conditions and events come out. The
standalone agent and the operator are the shells that feed it.
"""

from grid.engine.candidates import LocalView, RemoteSite
from grid.engine.egress import EgressResolution, SourceRead
from grid.engine.engine import (
    DEFAULT_PROBE_INTERVAL_S,
    ItemOutcome,
    RefreshResult,
    ResourceStatus,
    SiteEngine,
)
from grid.engine.escrow_checkpoint import EscrowCheckpoint
from grid.engine.events import ResourceEvent
from grid.engine.members import MemberInfo
from grid.engine.rendering import GatewayOverlay
from grid.engine.spend import CountedSpend
from grid.engine.spend_checkpoint import SpendCheckpoint
from grid.engine.targets import (
    EgressSourceTarget,
    HealthTarget,
    MetricsTarget,
    ObservationTarget,
    ProbeTarget,
    SpendTarget,
)

__all__ = [
    "DEFAULT_PROBE_INTERVAL_S",
    "CountedSpend",
    "EgressResolution",
    "EgressSourceTarget",
    "EscrowCheckpoint",
    "GatewayOverlay",
    "HealthTarget",
    "ItemOutcome",
    "LocalView",
    "MemberInfo",
    "MetricsTarget",
    "ObservationTarget",
    "ProbeTarget",
    "RefreshResult",
    "RemoteSite",
    "ResourceEvent",
    "ResourceStatus",
    "SiteEngine",
    "SourceRead",
    "SpendCheckpoint",
    "SpendTarget",
]
