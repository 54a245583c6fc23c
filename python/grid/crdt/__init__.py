"""Replicated state: CRDTs that every site merges to the same result whatever order,
duplication or batching the gossip delivers, and their canonical encoding as small items.

Pure: standard library only, no I/O, no clocks (time is passed in as ``now``), no threads.
"""

from grid.crdt.budget import MAX_COUNTERS, BudgetHorizon, BudgetLedger, BudgetStatus
from grid.crdt.clock import RevisionClock
from grid.crdt.codec import FORMAT_VERSION, MAX_ITEM_BYTES
from grid.crdt.gcounter import MAX_SLOTS, GCounter
from grid.crdt.lww import LWWRegister, Stamp
from grid.crdt.orset import Dot, ORSet
from grid.crdt.records import (
    PHASES,
    CredentialRef,
    GatewayRecord,
    LabelSelector,
    ModelEntry,
    ProviderMetrics,
    ProviderRecord,
    ProviderSpec,
    SelectorRequirement,
    SiteMetadata,
    TokenCost,
    micro_usd,
)
from grid.crdt.signals import SignalsState, SignalThresholds
from grid.crdt.site_records import MAX_PROVIDERS_PER_SITE, ProviderEntry
from grid.crdt.snapshot import (
    CERT_LANE,
    GATEWAY_LANE,
    LANES,
    METADATA_LANE,
    STATE_LANE,
    GridStateSnapshot,
    Item,
    ProviderState,
    decode_item,
)
from grid.crdt.state import MAX_SITES, GridState

__all__ = [
    "CERT_LANE",
    "FORMAT_VERSION",
    "GATEWAY_LANE",
    "LANES",
    "MAX_COUNTERS",
    "MAX_ITEM_BYTES",
    "MAX_PROVIDERS_PER_SITE",
    "MAX_SITES",
    "MAX_SLOTS",
    "METADATA_LANE",
    "PHASES",
    "STATE_LANE",
    "BudgetHorizon",
    "BudgetLedger",
    "BudgetStatus",
    "CredentialRef",
    "Dot",
    "GCounter",
    "GatewayRecord",
    "GridState",
    "GridStateSnapshot",
    "Item",
    "LWWRegister",
    "LabelSelector",
    "ModelEntry",
    "ORSet",
    "ProviderEntry",
    "ProviderMetrics",
    "ProviderRecord",
    "ProviderSpec",
    "ProviderState",
    "RevisionClock",
    "SelectorRequirement",
    "SignalThresholds",
    "SignalsState",
    "SiteMetadata",
    "Stamp",
    "TokenCost",
    "decode_item",
    "micro_usd",
]
