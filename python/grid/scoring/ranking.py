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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from itertools import chain
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


@dataclass(frozen=True, slots=True, eq=False)
class Ranking:
    """The outcome of one scoring pass."""

    consumer: ConsumingSite
    """The site the ranking was made for."""
    candidates: tuple[RankedCandidate, ...]
    """In the gateway's order: the position is the rank."""
    left_out_parts: tuple[Sequence[LeftOut], ...] = ()
    """What was left out, in parts as ranking found them: read :attr:`left_out`."""
    admission_memory: Mapping[CandidateKey, AdmissionMemory] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """What stabilized admission must be given next time (empty in the plain mode)."""
    _left_out: tuple[LeftOut, ...] | None = field(default=None, init=False, repr=False)

    @property
    def left_out(self) -> tuple[LeftOut, ...]:
        """Every candidate left out, sorted by (provider, model, site). Put together when
        first read: a large mesh leaves out most of its candidates on every pass, and only
        ``grid explain``, the view and a refused render read them."""
        left_out = self._left_out
        if left_out is None:
            left_out = tuple(sorted(chain.from_iterable(self.left_out_parts), key=_CANDIDATE_KEY))
            object.__setattr__(self, "_left_out", left_out)
        return left_out


Route = tuple[str, str, str]
"""(model, site, cluster): what the gateway can tell apart."""

_Scored = tuple[CandidateInput, AdmissionState, SignalValues, float, LocalityTier]
"""What one candidate's own values decide for one consumer and configuration: its plain
admission, signals, score and tier (the candidate is held so its id stays its own)."""


class _RouteOutcome(NamedTuple):
    """What ranking decided for the candidates of one route: the one the gateway is
    offered (the best by :func:`order_key`), and the rest left out, with why."""

    block: Sequence[CandidateInput]
    decided_at: float
    valid_until: float
    """When the first of its candidates goes stale (infinity when none can)."""
    winner: RankedCandidate | None
    left_out: tuple[LeftOut, ...]
    scored: dict[int, _Scored]


class ScoringMemo:
    """What ranking decided for each route, kept for the next pass: a route given as the
    same object (its candidates are immutable) is not looked at again while none of its
    candidates can have gone stale, and the consumer, the scoring configuration and the TTL
    stay the same; in a route given anew, a candidate object seen before is not scored
    again, and the route's winner stays the same :class:`RankedCandidate` object while
    nothing about it changed. Holds the routes of the latest pass only."""

    def __init__(self) -> None:
        self._basis: tuple[ConsumingSite, ScoringConfig, float | None] | None = None
        self._routes: dict[Route, _RouteOutcome] = {}

    def start(
        self, consumer: ConsumingSite, config: ScoringConfig, stale_after_seconds: float | None
    ) -> Mapping[Route, _RouteOutcome]:
        """What earlier passes decided, if they did for this consumer, configuration and
        TTL."""
        basis = (consumer, config, stale_after_seconds)
        if self._basis != basis:
            self._basis, self._routes = basis, {}
        return self._routes

    def keep(self, routes: dict[Route, _RouteOutcome]) -> None:
        self._routes = routes

    def __len__(self) -> int:
        """How many candidates' scores are held."""
        return sum(len(outcome.scored) for outcome in self._routes.values())


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
    routes: Iterable[Sequence[CandidateInput]] = (),
) -> Ranking:
    """Filter, score, admit and order ``candidates`` for ``consumer`` at ``now``.

    Left out, in this order of checks: remote candidates whose ``updated_at`` is more than
    ``stale_after_seconds`` old (a stale candidate at the consuming site itself stays, as
    not fresh); candidates whose access policy does not select the consumer (or any policy,
    when the consumer is unknown); candidates admission excludes; and every candidate whose
    (model, site, cluster) a better one has: the gateway could not tell them apart.

    ``routes`` are more candidates, already grouped: each sequence holds every candidate
    of one route, and no other. Ranked the same as if given in ``candidates``, but with a
    ``memo`` (kept by the caller from one pass to the next), a route given as the same
    sequence object as in the last pass is not looked at again while none of its
    candidates can have gone stale. ``admission_memory`` is the previous pass's
    :attr:`Ranking.admission_memory`; it is used only when the network enables
    stabilized admission.
    """
    if now.utcoffset() is None:
        raise ScoringInputError("now must carry a time zone")
    if stale_after_seconds is not None and not stale_after_seconds >= 0:
        raise ScoringInputError("the stale-candidate TTL must be a number of seconds >= 0")
    check_thresholds(config.admission)
    ranker = _RouteRanker(consumer, config, now, stale_after_seconds, admission_memory or {})
    held: Mapping[Route, _RouteOutcome] = (
        {} if memo is None else memo.start(consumer, config, stale_after_seconds)
    )
    reusable = not ranker.stabilized
    now_seconds = ranker.now_seconds
    decided: dict[Route, _RouteOutcome] = {}
    by_group = _empty_groups()
    # The same tier buckets reached by backend kind, so filing a winner costs no lookup of
    # its group: both kinds of a group share that group's buckets.
    by_kind: dict[AdmissionState, dict[BackendKind, _Tiers]] = {
        admission: {kind: groups[group] for kind, group in BACKEND_GROUP.items()}
        for admission, groups in by_group.items()
    }
    left_out: list[Sequence[LeftOut]] = []
    model_sites: dict[tuple[str, str], Sequence[CandidateInput]] = {}
    for route, block in _route_blocks(candidates, routes, held):
        known = held.get(route)
        if not (
            reusable
            and known is not None
            and known.block is block
            and known.decided_at <= now_seconds <= known.valid_until
        ):
            known = ranker.rank_route(route, block, known)
        decided[route] = known
        winner = known.winner
        if winner is not None:
            by_kind[winner.admission][winner.candidate.backend_kind][winner.tier].append(winner)
        if known.left_out:
            left_out.append(known.left_out)
        # A candidate is (provider, model, site): it can only be given twice in two routes
        # of one model and site, through two clusters.
        model_site = (route[0], route[1])
        other = model_sites.setdefault(model_site, block)
        if other is not block:
            _refuse_shared_providers(other, block)
            model_sites[model_site] = (*other, *block)
    if memo is not None:
        memo.keep(decided)
    return Ranking(
        consumer=consumer,
        candidates=tuple(_in_gateway_order(by_group)),
        left_out_parts=tuple(left_out),
        admission_memory=MappingProxyType(ranker.memory),
    )


def _route_blocks(
    candidates: Iterable[CandidateInput],
    routes: Iterable[Sequence[CandidateInput]],
    held: Mapping[Route, _RouteOutcome],
) -> list[tuple[Route, Sequence[CandidateInput]]]:
    """Every route with its candidates: ``routes`` as given, ``candidates`` grouped (and
    merged into a given route of the same name, if any). A route given as the block the
    memo ``held`` decided last pass was checked then and is not checked again."""
    grouped: dict[Route, list[CandidateInput]] = {}
    for candidate in candidates:
        grouped.setdefault(candidate.route, []).append(candidate)
    blocks: dict[Route, Sequence[CandidateInput]] = {}
    for block in routes:
        if not block:
            continue
        route = block[0].route
        known = held.get(route)
        if known is None or known.block is not block:
            for candidate in block:
                if candidate.route != route:
                    raise ScoringInputError(
                        f"route {route!r} was given with provider {candidate.provider!r} of "
                        f"route {candidate.route!r}"
                    )
        taken = blocks.get(route)
        blocks[route] = block if taken is None else (*taken, *block)
    for route, group in grouped.items():
        taken = blocks.get(route)
        blocks[route] = group if taken is None else (*taken, *group)
    return list(blocks.items())


def _refuse_shared_providers(
    first: Sequence[CandidateInput], second: Sequence[CandidateInput]
) -> None:
    providers = {candidate.provider for candidate in first}
    for candidate in second:
        if candidate.provider in providers:
            _refuse_duplicate(candidate)


def _refuse_duplicate(candidate: CandidateInput) -> None:
    raise ScoringInputError(
        f"provider {candidate.provider!r} lists model {candidate.model!r} at site "
        f"{candidate.site!r} twice"
    )


class _RouteRanker:
    """One pass's consumer, configuration and time, applied to one route at a time."""

    def __init__(
        self,
        consumer: ConsumingSite,
        config: ScoringConfig,
        now: datetime,
        stale_after_seconds: float | None,
        previous_memory: Mapping[CandidateKey, AdmissionMemory],
    ) -> None:
        self.consumer = consumer
        self.thresholds = config.admission
        self.scales = config.scales
        self.weights = config.weights
        self.stabilized = self.thresholds.hysteresis.enabled
        self.read_signals = signal_reader(consumer, config.scales)
        self.blend = score_blender(config.weights)
        self.now = now
        self.now_seconds = now.timestamp()
        self.ttl = stale_after_seconds
        self.previous_memory = previous_memory
        self.memory: dict[CandidateKey, AdmissionMemory] = {}

    def rank_route(
        self, route: Route, block: Sequence[CandidateInput], known: _RouteOutcome | None
    ) -> _RouteOutcome:
        """Decide one route: its candidates filtered, scored, admitted, the best offered
        and the rest left out. ``known`` is the route's outcome last pass, whose scores are
        reused for the candidate objects it held."""
        consumer_name = self.consumer.name
        consumer_labels = self.consumer.labels
        now_seconds, ttl = self.now_seconds, self.ttl
        earlier = known.scored if known is not None else {}
        # Last pass's winner is kept as the same object when nothing about it changed, so
        # that what is built from it (the overlay's document of it) is not built again.
        held_winner = known.winner if known is not None else None
        scored: dict[int, _Scored] = {}
        seen: set[CandidateKey] = set()
        entries: list[RankedCandidate] = []
        left_out: list[LeftOut] = []
        valid_until = math.inf
        for candidate in block:
            key = candidate.key
            if key in seen:
                _refuse_duplicate(candidate)
            seen.add(key)
            updated_seconds = candidate.updated_seconds
            stale = False
            if ttl is not None and updated_seconds is not None:
                stale = now_seconds - updated_seconds > ttl
                if not stale and updated_seconds + ttl < valid_until:
                    valid_until = updated_seconds + ttl
            if stale and candidate.site != consumer_name:
                left_out.append(
                    LeftOut(candidate, LeftOutReason.STALE, f"no update for more than {ttl:g}s")
                )
                continue
            policy = candidate.access_policy
            if policy is not None:
                if consumer_labels is None:
                    left_out.append(
                        LeftOut(
                            candidate,
                            LeftOutReason.CONSUMER_UNKNOWN,
                            f"has an access policy and site {consumer_name!r} is unknown",
                        )
                    )
                    continue
                if not selector_matches(policy, consumer_labels):
                    left_out.append(
                        LeftOut(
                            candidate,
                            LeftOutReason.ACCESS_DENIED,
                            f"access policy does not select site {consumer_name!r}",
                        )
                    )
                    continue
            values = earlier.get(id(candidate))
            if values is None or values[0] is not candidate:
                values = self._score(candidate)
            scored[id(candidate)] = values
            if self.stabilized:
                remembered = stabilized_admission(
                    self.previous_memory.get(key),
                    LoadObservation.of(candidate, self.scales),
                    self.thresholds,
                    self.now,
                )
                self.memory[key] = remembered
                admission = remembered.state
            else:
                admission = values[1]
            if admission is AdmissionState.EXCLUDED:
                if candidate.healthy is False:
                    left_out.append(
                        LeftOut(candidate, LeftOutReason.UNHEALTHY, "health check failing")
                    )
                else:
                    left_out.append(
                        LeftOut(
                            candidate,
                            LeftOutReason.HELD_EXCLUDED,
                            "healthy again; stabilized admission holds it excluded",
                        )
                    )
                continue
            _, _, signals, score, tier = values
            fresh = not (candidate.degraded or stale)
            if (
                held_winner is not None
                and held_winner[0] is candidate
                and held_winner[1] is signals
                and held_winner[3] is admission
                and held_winner[5] is fresh
                and held_winner[6] is self.weights
            ):
                entries.append(held_winner)
                continue
            # tuple.__new__ rather than RankedCandidate(...): the named tuple's own __new__
            # is a Python function that costs three times as much.
            entries.append(
                tuple.__new__(
                    RankedCandidate,
                    (candidate, signals, score, admission, tier, fresh, self.weights),
                )
            )
        winner = None
        if entries:
            winner = entries[0] if len(entries) == 1 else min(entries, key=order_key)
            detail = f"provider {winner.candidate.provider!r} ranks higher on the same route"
            # tuple.__new__, as for the entries: most of a large mesh's candidates are left
            # out this way, again each time their route is decided.
            left_out.extend(
                tuple.__new__(LeftOut, (entry.candidate, LeftOutReason.DUPLICATE_ROUTE, detail))
                for entry in entries
                if entry is not winner
            )
        return _RouteOutcome(block, now_seconds, valid_until, winner, tuple(left_out), scored)

    def _score(self, candidate: CandidateInput) -> _Scored:
        metrics = candidate.metrics
        queue_depth = metrics.queue_depth
        queue_utilization = (
            None if queue_depth is None else queue_depth / self.scales.queue_capacity
        )
        signals = self.read_signals(candidate)
        return (
            candidate,
            load_admission(
                queue_utilization, metrics.kv_cache_utilization, candidate.healthy, self.thresholds
            ),
            signals,
            self.blend(signals),
            locality_tier(candidate, self.consumer),
        )
