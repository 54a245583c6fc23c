"""From candidates to the ordered list the gateway walks, and the reasons for what is not
in it.

Order: admission state, then backend group (every self-hosted candidate, ``local`` or
``remote``, before every external one, ``cloud_managed`` or ``api_provider``), then locality
tier, then score (descending), then freshness, then (model, site, cluster, provider), so the
order is total and every site that holds the same state computes the same list, whatever
order the candidates arrive in.

The group comes before the tier because of the spec's preference ladder: use capacity you
own and that is near before falling out to third-party APIs. A third-party API placed at the
consuming site is ``same_site``; ordered by tier first, it would take the traffic from the
consumer's own capacity at a neighbouring site of the region whatever their scores.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from operator import attrgetter
from types import MappingProxyType
from typing import NamedTuple

from grid.errors import ScoringInputError
from grid.models.common import (
    AdmissionState,
    BackendKind,
    LocalityTier,
    ScoringConfig,
    ScoringWeights,
)
from grid.models.selectors import selector_matches
from grid.scoring.admission import (
    AdmissionMemory,
    LoadObservation,
    check_thresholds,
    load_admission,
    stabilized_admission,
)
from grid.scoring.inputs import CandidateInput, ConsumingSite
from grid.scoring.signals import (
    ScoreBreakdown,
    SignalValues,
    score_blender,
    score_breakdown,
    signal_reader,
)
from grid.scoring.tiers import (
    BACKEND_GROUP,
    GROUP_ORDER,
    TIER_ORDER,
    BackendGroup,
    locality_tier,
)

CandidateKey = tuple[str, str, str]
"""(provider, model, site)."""
_Tiers = dict[LocalityTier, list["RankedCandidate"]]
_Groups = dict[AdmissionState, dict[BackendGroup, _Tiers]]
"""Ranked candidates by admission state, backend group and locality tier, the first three
parts of the order."""

ADMISSION_ORDER: tuple[AdmissionState, ...] = (
    AdmissionState.NEW_AND_EXISTING,
    AdmissionState.EXISTING_ONLY,
    AdmissionState.EXCLUDED,
)

_ADMISSION_RANK = {state: position for position, state in enumerate(ADMISSION_ORDER)}
_GROUP_RANK = {group: position for position, group in enumerate(GROUP_ORDER)}
_KIND_GROUP_RANK = {kind: _GROUP_RANK[group] for kind, group in BACKEND_GROUP.items()}
_TIER_RANK = {tier: position for position, tier in enumerate(TIER_ORDER)}
_CANDIDATE_KEY = attrgetter("candidate.key")
_SCORE = attrgetter("score")


class OrderPart(StrEnum):
    """A part of the gateway's order, in the order they are compared (see
    :func:`order_key`)."""

    ADMISSION = "admission"
    GROUP = "group"
    """Self-hosted before external."""
    TIER = "tier"
    SCORE = "score"
    FRESHNESS = "freshness"
    """Fresh before not fresh."""
    UPDATED = "updated"
    """Most recently updated first, never-updated last."""
    TIE_BREAK = "tie_break"
    """(model, site, cluster, provider)."""


_ORDER_PARTS = tuple(OrderPart)


class LeftOutReason(StrEnum):
    """Why a candidate is not in the list."""

    STALE = "stale"
    """A remote candidate whose state is older than the network's stale-candidate TTL."""
    CONSUMER_UNKNOWN = "consumer_unknown"
    """It has an access policy and the consuming site is unknown (fail closed)."""
    ACCESS_DENIED = "access_denied"
    """Its access policy does not select the consuming site."""
    UNHEALTHY = "unhealthy"
    HELD_EXCLUDED = "held_excluded"
    """Healthy again, but stabilized admission keeps it excluded for now."""
    DUPLICATE_ROUTE = "duplicate_route"
    """A better candidate has the same (model, site, cluster): the gateway could not tell
    them apart."""
    TRUNCATED = "truncated"
    """Past the overlay's candidate limit."""


class LeftOut(NamedTuple):
    """A candidate that is not offered to the gateway, and why. A named tuple for the same
    reason as :class:`RankedCandidate`: most of a large mesh's candidates share a route
    with a better one and are left out on every pass."""

    candidate: CandidateInput
    reason: LeftOutReason
    detail: str


class RankedCandidate(NamedTuple):
    """A candidate with everything the overlay and ``grid explain`` say about it.

    A named tuple rather than a frozen dataclass because ranking builds ten thousand of
    them per pass and a tuple is several times cheaper to build.
    """

    candidate: CandidateInput
    signals: SignalValues
    score: float
    admission: AdmissionState
    tier: LocalityTier
    fresh: bool
    """False when the provider is degraded or its state is older than the TTL."""
    weights: ScoringWeights

    @property
    def group(self) -> BackendGroup:
        """Self-hosted or external, from the candidate's backend kind."""
        return BACKEND_GROUP[self.candidate.backend_kind]

    @property
    def breakdown(self) -> ScoreBreakdown:
        """The weighted contribution of each signal (computed on demand: only the rendered
        candidates need it)."""
        return score_breakdown(self.signals, self.weights)


@dataclass(frozen=True, slots=True)
class Ranking:
    """The outcome of one scoring pass."""

    consumer: ConsumingSite
    """The site the ranking was made for."""
    candidates: tuple[RankedCandidate, ...]
    """In the gateway's order: the position is the rank."""
    left_out: tuple[LeftOut, ...]
    """Sorted by (provider, model, site)."""
    admission_memory: Mapping[CandidateKey, AdmissionMemory] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """What stabilized admission must be given next time (empty in the plain mode)."""


_Scored = tuple[CandidateInput, AdmissionState, SignalValues, float, LocalityTier]
"""What one candidate's own values decide for one consumer and configuration: its plain
admission, signals, score and tier (the candidate is held so its id stays its own)."""

_Filed = tuple[
    CandidateInput, "LeftOut | tuple[AdmissionState, BackendKind, LocalityTier, RankedCandidate]"
]
"""Where a candidate that was neither stale nor under stabilized admission ended: left out
(by its access policy or its health), or in which bucket, as which entry."""

_NO_SCORES: Mapping[int, _Scored] = MappingProxyType({})
_NO_FILING: Mapping[int, _Filed] = MappingProxyType({})


class ScoringMemo:
    """The per-candidate part of a ranking pass, kept for the next one: a candidate object
    seen again (its inputs are immutable) is not scored again, nor checked against the
    consumer's labels, while the consumer and the scoring configuration stay the same; one
    not stale is filed where it was. Holds the candidates of the latest pass only."""

    def __init__(self) -> None:
        self._basis: tuple[ConsumingSite, ScoringConfig, float | None] | None = None
        self._scored: dict[int, _Scored] = {}
        self._filed: dict[int, _Filed] = {}

    def start(
        self, consumer: ConsumingSite, config: ScoringConfig, stale_after_seconds: float | None
    ) -> tuple[Mapping[int, _Scored], Mapping[int, _Filed]]:
        """What earlier passes scored and filed, if they did for this consumer,
        configuration and TTL."""
        basis = (consumer, config, stale_after_seconds)
        if self._basis != basis:
            self._basis, self._scored, self._filed = basis, {}, {}
        return self._scored, self._filed

    def keep(self, scored: dict[int, _Scored], filed: dict[int, _Filed]) -> None:
        self._scored, self._filed = scored, filed

    def __len__(self) -> int:
        return len(self._scored)


def order_key(
    ranked: RankedCandidate,
) -> tuple[int, int, int, float, bool, float, tuple[str, str, str, str]]:
    """The sort key of the gateway's order (smaller first): admission, backend group
    (self-hosted before external), tier, score (descending), fresh before not fresh, most
    recently updated first (never-updated last), then (model, site, cluster, provider).
    One element per :class:`OrderPart`, in that order."""
    candidate = ranked.candidate
    updated_seconds = candidate.updated_seconds
    return (
        _ADMISSION_RANK[ranked.admission],
        _KIND_GROUP_RANK[candidate.backend_kind],
        _TIER_RANK[ranked.tier],
        -ranked.score,
        not ranked.fresh,
        math.inf if updated_seconds is None else -updated_seconds,
        candidate.tie_break,
    )


def decided_by(above: RankedCandidate, below: RankedCandidate) -> OrderPart:
    """The first part of :func:`order_key` on which ``above`` and ``below`` differ: what
    puts one before the other. Distinct candidates always differ somewhere (the tie-break
    holds the provider, model and site); the same candidate twice is a ``ValueError``."""
    for part, mine, theirs in zip(_ORDER_PARTS, order_key(above), order_key(below), strict=True):
        if mine != theirs:
            return part
    raise ValueError("the two candidates have the same place in the order")


def _empty_groups() -> _Groups:
    return {
        admission: {group: {tier: [] for tier in TIER_ORDER} for group in GROUP_ORDER}
        for admission in ADMISSION_ORDER
    }


def _in_gateway_order(by_group: _Groups) -> list[RankedCandidate]:
    """The candidates of every (admission, group, tier) bucket, sorted by :func:`order_key`.

    The same order as one sort by that key, for less: the buckets are taken in order, each
    is sorted by score alone (a sort of plain floats) and only a run of equal scores is
    sorted by the full key.
    """
    ordered: list[RankedCandidate] = []
    for admission in ADMISSION_ORDER:
        for group in GROUP_ORDER:
            tiers = by_group[admission][group]
            for tier in TIER_ORDER:
                bucket = tiers[tier]
                bucket.sort(key=_SCORE, reverse=True)
                start, size = 0, len(bucket)
                for end in range(1, size + 1):
                    if end == size or bucket[end].score != bucket[start].score:
                        if end - start > 1:
                            bucket[start:end] = sorted(bucket[start:end], key=order_key)
                        start = end
                ordered += bucket
    return ordered


def rank_candidates(
    candidates: Iterable[CandidateInput],
    consumer: ConsumingSite,
    config: ScoringConfig,
    now: datetime,
    *,
    stale_after_seconds: float | None = None,
    admission_memory: Mapping[CandidateKey, AdmissionMemory] | None = None,
    memo: ScoringMemo | None = None,
) -> Ranking:
    """Filter, score, admit and order ``candidates`` for ``consumer`` at ``now``.

    Left out, in this order of checks: remote candidates whose ``updated_at`` is more than
    ``stale_after_seconds`` old (a stale candidate at the consuming site itself stays, as
    not fresh); candidates whose access policy does not select the consumer (or any policy,
    when the consumer is unknown); candidates admission excludes; and, after ordering, any
    candidate whose (model, site, cluster) an earlier one already took.

    ``admission_memory`` is the previous pass's :attr:`Ranking.admission_memory`; it is used
    only when the network enables stabilized admission. ``memo``, kept by the caller from
    one pass to the next, saves scoring and filing again the candidate objects it already
    scored and filed.
    """
    if now.utcoffset() is None:
        raise ScoringInputError("now must carry a time zone")
    if stale_after_seconds is not None and not stale_after_seconds >= 0:
        raise ScoringInputError("the stale-candidate TTL must be a number of seconds >= 0")
    thresholds, scales, weights = config.admission, config.scales, config.weights
    check_thresholds(thresholds)
    stabilized = thresholds.hysteresis.enabled
    queue_capacity = scales.queue_capacity
    read_signals = signal_reader(consumer, scales)
    blend = score_blender(weights)
    previous_memory = admission_memory or {}
    memory: dict[CandidateKey, AdmissionMemory] = {}
    consumer_name = consumer.name
    consumer_labels = consumer.labels
    now_seconds = now.timestamp()
    seen: set[CandidateKey] = set()
    by_group = _empty_groups()
    # The same tier buckets reached by backend kind, so filing a candidate costs no lookup
    # of its group: both kinds of a group share that group's buckets.
    by_kind: dict[AdmissionState, dict[BackendKind, _Tiers]] = {
        admission: {kind: groups[group] for kind, group in BACKEND_GROUP.items()}
        for admission, groups in by_group.items()
    }
    left_out: list[LeftOut] = []
    scored, filed = (
        (_NO_SCORES, _NO_FILING)
        if memo is None
        else memo.start(consumer, config, stale_after_seconds)
    )
    kept_scores: dict[int, _Scored] = {}
    kept_filing: dict[int, _Filed] = {}

    for candidate in candidates:
        key = candidate.key
        if key in seen:
            raise ScoringInputError(
                f"provider {candidate.provider!r} lists model {candidate.model!r} at site "
                f"{candidate.site!r} twice"
            )
        seen.add(key)

        updated_seconds = candidate.updated_seconds
        stale = (
            stale_after_seconds is not None
            and updated_seconds is not None
            and now_seconds - updated_seconds > stale_after_seconds
        )
        if stale and candidate.site != consumer_name:
            left_out.append(
                LeftOut(
                    candidate,
                    LeftOutReason.STALE,
                    f"no update for more than {stale_after_seconds:g}s",
                )
            )
            continue
        # Filed as last time: nothing about it or the consumer changed, and it is not stale.
        lasting = not (stale or stabilized)
        if lasting:
            held = filed.get(id(candidate))
            if held is not None and held[0] is candidate:
                kept_filing[id(candidate)] = held
                place = held[1]
                if isinstance(place, LeftOut):
                    left_out.append(place)
                else:
                    admission, kind, tier, entry = place
                    by_kind[admission][kind][tier].append(entry)
                continue

        policy = candidate.access_policy
        if policy is not None:
            refusal = None
            if consumer_labels is None:
                refusal = LeftOut(
                    candidate,
                    LeftOutReason.CONSUMER_UNKNOWN,
                    f"has an access policy and site {consumer_name!r} is unknown",
                )
            elif not selector_matches(policy, consumer_labels):
                refusal = LeftOut(
                    candidate,
                    LeftOutReason.ACCESS_DENIED,
                    f"access policy does not select site {consumer_name!r}",
                )
            if refusal is not None:
                left_out.append(refusal)
                if lasting:
                    kept_filing[id(candidate)] = (candidate, refusal)
                continue

        known = scored.get(id(candidate))
        if known is None or known[0] is not candidate:
            metrics = candidate.metrics
            queue_depth = metrics.queue_depth
            queue_utilization = None if queue_depth is None else queue_depth / queue_capacity
            signals = read_signals(candidate)
            known = (
                candidate,
                load_admission(
                    queue_utilization, metrics.kv_cache_utilization, candidate.healthy, thresholds
                ),
                signals,
                blend(signals),
                locality_tier(candidate, consumer),
            )
        kept_scores[id(candidate)] = known
        if stabilized:
            remembered = stabilized_admission(
                previous_memory.get(key), LoadObservation.of(candidate, scales), thresholds, now
            )
            memory[key] = remembered
            admission = remembered.state
        else:
            admission = known[1]
        if admission is AdmissionState.EXCLUDED:
            if candidate.healthy is False:
                unhealthy = LeftOut(candidate, LeftOutReason.UNHEALTHY, "health check failing")
                left_out.append(unhealthy)
                if lasting:
                    kept_filing[id(candidate)] = (candidate, unhealthy)
            else:
                left_out.append(
                    LeftOut(
                        candidate,
                        LeftOutReason.HELD_EXCLUDED,
                        "healthy again; stabilized admission holds it excluded",
                    )
                )
            continue

        _, _, signals, score, tier = known
        fresh = not (candidate.degraded or stale)
        # tuple.__new__ rather than RankedCandidate(...): the named tuple's own __new__ is a
        # Python function that costs three times as much, once per candidate.
        entry = tuple.__new__(
            RankedCandidate, (candidate, signals, score, admission, tier, fresh, weights)
        )
        by_kind[admission][candidate.backend_kind][tier].append(entry)
        if lasting:
            kept_filing[id(candidate)] = (
                candidate,
                (admission, candidate.backend_kind, tier, entry),
            )

    routes: dict[tuple[str, str, str], RankedCandidate] = {}
    kept: list[RankedCandidate] = []
    for entry in _in_gateway_order(by_group):
        candidate = entry.candidate
        route = candidate.route
        winner = routes.get(route)
        if winner is None:
            routes[route] = entry
            kept.append(entry)
        else:
            detail = f"provider {winner.candidate.provider!r} ranks higher on the same route"
            left_out.append(
                tuple.__new__(LeftOut, (candidate, LeftOutReason.DUPLICATE_ROUTE, detail))
            )
    left_out.sort(key=_CANDIDATE_KEY)
    if memo is not None:
        memo.keep(kept_scores, kept_filing)
    return Ranking(
        consumer=consumer,
        candidates=tuple(kept),
        left_out=tuple(left_out),
        admission_memory=MappingProxyType(memory),
    )
