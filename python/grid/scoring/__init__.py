"""Scoring: which backend the gateway should use next.

Pure: candidates, the consuming site, the network's scoring settings and ``now`` go in; an
ordered, explained list comes out. No I/O, no clock, no threads.
"""

from grid.scoring.admission import (
    AdmissionMemory,
    LoadObservation,
    admission_state,
    stabilized_admission,
)
from grid.scoring.explain import explain
from grid.scoring.inputs import (
    CandidateInput,
    ConsumingSite,
    Geography,
    Metrics,
    SecretRef,
    TokenCost,
)
from grid.scoring.ranking import (
    LeftOut,
    LeftOutReason,
    OrderPart,
    RankedCandidate,
    Ranking,
    ScoringMemo,
    decided_by,
    order_key,
    rank_candidates,
)
from grid.scoring.signals import ScoreBreakdown, SignalValues, signal_values
from grid.scoring.tiers import BackendGroup, backend_group, locality_tier

__all__ = [
    "AdmissionMemory",
    "BackendGroup",
    "CandidateInput",
    "ConsumingSite",
    "Geography",
    "LeftOut",
    "LeftOutReason",
    "LoadObservation",
    "Metrics",
    "OrderPart",
    "RankedCandidate",
    "Ranking",
    "ScoreBreakdown",
    "ScoringMemo",
    "SecretRef",
    "SignalValues",
    "TokenCost",
    "admission_state",
    "backend_group",
    "decided_by",
    "explain",
    "locality_tier",
    "order_key",
    "rank_candidates",
    "signal_values",
    "stabilized_admission",
]
