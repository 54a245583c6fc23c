"""Tiers, backend groups, access policies, staleness, exclusion and the gateway's order,
including property tests that the order is total, deterministic and independent of input
order."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.errors import ScoringInputError
from grid.models.common import (
    AdmissionState,
    AdmissionThresholds,
    BackendKind,
    Hysteresis,
    LocalityTier,
    ScoringConfig,
)
from grid.models.selectors import LabelSelector
from grid.scoring import explain
from grid.scoring.explain import why_above
from grid.scoring.inputs import CandidateInput, ConsumingSite, Geography, Metrics, TokenCost
from grid.scoring.ranking import (
    LeftOutReason,
    OrderPart,
    Ranking,
    ScoringMemo,
    decided_by,
    order_key,
    rank_candidates,
)
from grid.scoring.tiers import BackendGroup, backend_group, locality_tier

NOW = datetime(2026, 7, 29, 12, 0, tzinfo=UTC)
EAST = Geography("us-east", "us-east-1a")
CONSUMER = ConsumingSite("east", EAST, {"tier": "edge", "region": "us-east"})
CONFIG = ScoringConfig()


def candidate(provider: str = "p", model: str = "m", **overrides: Any) -> CandidateInput:
    fields: dict[str, Any] = {
        "provider": provider,
        "model": model,
        "site": "east",
        "cluster": f"{provider}-cluster",
        "backend_kind": BackendKind.LOCAL,
        "geography": EAST,
        "healthy": True,
    }
    fields.update(overrides)
    return CandidateInput(**fields)


def rank(*candidates: CandidateInput, **options: Any) -> Ranking:
    consumer = options.pop("consumer", CONSUMER)
    config = options.pop("config", CONFIG)
    return rank_candidates(candidates, consumer, config, options.pop("now", NOW), **options)


def providers(ranking: Ranking) -> list[str]:
    return [entry.candidate.provider for entry in ranking.candidates]


def left_out(ranking: Ranking) -> dict[str, LeftOutReason]:
    return {entry.candidate.provider: entry.reason for entry in ranking.left_out}


# --- tiers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("site", "geography", "expected"),
    [
        ("east", Geography(None, None), LocalityTier.SAME_SITE),
        ("east-2", Geography("us-east", "us-east-1a"), LocalityTier.SAME_ZONE),
        ("east-2", Geography("us-east", "us-east-1b"), LocalityTier.SAME_REGION),
        ("east-2", Geography("us-east", None), LocalityTier.SAME_REGION),
        ("west", Geography("us-west", "us-east-1a"), LocalityTier.CROSS_REGION),
        ("west", Geography("us-west", None), LocalityTier.CROSS_REGION),
        ("far", Geography(None, "us-east-1a"), LocalityTier.UNKNOWN),
    ],
)
def test_locality_tier(site: str, geography: Geography, expected: LocalityTier) -> None:
    assert locality_tier(candidate(site=site, geography=geography), CONSUMER) is expected


def test_tier_is_unknown_when_the_consumer_has_no_geography() -> None:
    consumer = ConsumingSite("east")
    assert locality_tier(candidate(site="west"), consumer) is LocalityTier.UNKNOWN
    assert locality_tier(candidate(site="east"), consumer) is LocalityTier.SAME_SITE


def test_capacity_tied_to_no_site_comes_after_every_site() -> None:
    api = candidate("api", backend_kind=BackendKind.API_PROVIDER, site_bound=False)
    assert locality_tier(api, CONSUMER) is LocalityTier.UNKNOWN
    far = candidate(
        "far", site="west", geography=Geography("us-west"), backend_kind=BackendKind.REMOTE
    )
    assert providers(rank(api, far)) == ["far", "api"]


@pytest.mark.parametrize(
    ("kind", "group"),
    [
        (BackendKind.LOCAL, BackendGroup.SELF_HOSTED),
        (BackendKind.REMOTE, BackendGroup.SELF_HOSTED),
        (BackendKind.CLOUD_MANAGED, BackendGroup.EXTERNAL),
        (BackendKind.API_PROVIDER, BackendGroup.EXTERNAL),
    ],
)
def test_backend_group(kind: BackendKind, group: BackendGroup) -> None:
    assert backend_group(candidate(backend_kind=kind)) is group
    assert rank(candidate(backend_kind=kind)).candidates[0].group is group


# --- access policy --------------------------------------------------------------------------


def selector(raw: dict[str, Any]) -> LabelSelector:
    return LabelSelector.model_validate(raw)


@pytest.mark.parametrize(
    ("policy", "visible"),
    [
        ({}, True),
        ({"matchLabels": {"tier": "edge"}}, True),
        ({"matchLabels": {"tier": "core"}}, False),
        ({"matchLabels": {"tier": "edge", "region": "us-west"}}, False),
        ({"matchExpressions": [{"key": "region", "operator": "In", "values": ["us-east"]}]}, True),
        ({"matchExpressions": [{"key": "region", "operator": "In", "values": ["eu"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["core"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["edge"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
    ],
)
def test_access_policy_selects_consuming_sites(policy: dict[str, Any], visible: bool) -> None:
    ranking = rank(candidate(access_policy=selector(policy)))
    assert bool(ranking.candidates) is visible
    if not visible:
        assert left_out(ranking) == {"p": LeftOutReason.ACCESS_DENIED}


def test_an_unknown_consumer_sees_nothing_that_has_a_policy() -> None:
    unknown = ConsumingSite("east", EAST, labels=None)
    ranking = rank(
        candidate("open"),
        candidate("guarded", access_policy=selector({})),
        consumer=unknown,
    )
    assert providers(ranking) == ["open"]
    assert left_out(ranking) == {"guarded": LeftOutReason.CONSUMER_UNKNOWN}


# --- staleness, health ------------------------------------------------------------------------


def test_stale_remote_candidates_are_evicted_and_stale_local_ones_are_not_fresh() -> None:
    old = NOW - timedelta(seconds=301)
    ranking = rank(
        candidate("remote-old", site="west", updated_at=old),
        candidate("remote-new", site="west", updated_at=NOW - timedelta(seconds=299)),
        candidate("remote-edge", site="west", updated_at=NOW - timedelta(seconds=300)),
        candidate("local-old", updated_at=old),
        candidate("configured", site="west"),
        stale_after_seconds=300,
    )
    assert left_out(ranking) == {"remote-old": LeftOutReason.STALE}
    fresh = {entry.candidate.provider: entry.fresh for entry in ranking.candidates}
    assert fresh == {
        "remote-new": True,
        "remote-edge": True,
        "local-old": False,
        "configured": True,
    }


def test_without_a_ttl_nothing_is_stale() -> None:
    ranking = rank(candidate(site="west", updated_at=NOW - timedelta(days=30)))
    assert ranking.candidates[0].fresh


def test_a_future_timestamp_is_not_stale() -> None:
    ranking = rank(
        candidate(site="west", updated_at=NOW + timedelta(minutes=5)), stale_after_seconds=1
    )
    assert ranking.candidates[0].fresh


def test_unhealthy_candidates_are_left_out_and_degraded_ones_are_not_fresh() -> None:
    ranking = rank(
        candidate("sick", healthy=False),
        candidate("tired", degraded=True),
        candidate("unknown", healthy=None),
    )
    assert left_out(ranking) == {"sick": LeftOutReason.UNHEALTHY}
    assert {entry.candidate.provider: entry.fresh for entry in ranking.candidates} == {
        "tired": False,
        "unknown": True,
    }


# --- order ----------------------------------------------------------------------------------


def test_admission_comes_before_score() -> None:
    busy_but_near = candidate("busy", metrics=Metrics(queue_depth=63))
    idle_but_far = candidate(
        "idle", site="west", geography=Geography("us-west"), backend_kind=BackendKind.REMOTE
    )
    ranking = rank(busy_but_near, idle_but_far)
    assert providers(ranking) == ["idle", "busy"]
    assert [entry.admission for entry in ranking.candidates] == [
        AdmissionState.NEW_AND_EXISTING,
        AdmissionState.EXISTING_ONLY,
    ]


def test_tier_comes_before_score() -> None:
    near = candidate("near", site="east-2", metrics=Metrics(queue_depth=40))
    cheap_far = candidate(
        "far", site="west", geography=Geography("us-west"), metrics=Metrics(queue_depth=0)
    )
    ranking = rank(cheap_far, near)
    assert providers(ranking) == ["near", "far"]
    assert ranking.candidates[0].score < ranking.candidates[1].score


EAST_2 = Geography("us-east", "us-east-1b")
"""Another zone of the consumer's region: a same-region site."""


def gpt_4o_at_the_consuming_site() -> CandidateInput:
    """A third-party API placed at the consuming site (so ``same_site``), loaded and slow."""
    return candidate(
        "openai",
        "gpt-4o",
        cluster="openai",
        backend_kind=BackendKind.API_PROVIDER,
        metrics=Metrics(queue_depth=43, p99_latency_ms=4000),
        cost=TokenCost(Decimal("2.5"), Decimal("10")),
    )


def own_model_in_the_region() -> CandidateInput:
    """The consumer's own capacity at a same-region site, idle and free."""
    return candidate(
        "vllm-east-2",
        "llama-70b",
        site="east-2",
        cluster="site-east-2",
        geography=EAST_2,
        backend_kind=BackendKind.REMOTE,
        metrics=Metrics(
            queue_depth=4, kv_cache_utilization=0.3, prefix_cache_hit_ratio=0.6, p99_latency_ms=900
        ),
        cost=TokenCost(Decimal(0), Decimal(0)),
    )


def test_self_hosted_capacity_in_the_region_ranks_before_an_api_at_the_site() -> None:
    """The case of issue 13: ordered by tier first, the paid fallback took the traffic."""
    api, own = gpt_4o_at_the_consuming_site(), own_model_in_the_region()
    ranking = rank(api, own)
    assert providers(ranking) == ["vllm-east-2", "openai"]
    first, second = ranking.candidates
    assert (first.group, first.tier) == (BackendGroup.SELF_HOSTED, LocalityTier.SAME_REGION)
    assert (second.group, second.tier) == (BackendGroup.EXTERNAL, LocalityTier.SAME_SITE)
    assert round(first.score, 2) == 0.79
    assert round(second.score, 2) == 0.41
    assert decided_by(first, second) is OrderPart.GROUP
    assert why_above(first, second) == (
        OrderPart.GROUP,
        "self_hosted (remote) before external (api_provider)",
    )


def test_the_group_decides_whatever_the_scores() -> None:
    """Even an idle, free API at the consuming site ranks after busy self-hosted capacity in
    another region of unknown geography."""
    api = candidate(
        "api",
        backend_kind=BackendKind.API_PROVIDER,
        metrics=Metrics(queue_depth=0, kv_cache_utilization=0, prefix_cache_hit_ratio=1),
        cost=TokenCost(Decimal(0), Decimal(0)),
    )
    own = candidate(
        "own",
        site="nowhere",
        geography=Geography(None, None),
        backend_kind=BackendKind.REMOTE,
        metrics=Metrics(queue_depth=50, p99_latency_ms=9000),
    )
    ranking = rank(api, own)
    assert providers(ranking) == ["own", "api"]
    assert ranking.candidates[0].tier is LocalityTier.UNKNOWN
    assert ranking.candidates[0].score < ranking.candidates[1].score


def test_inside_the_external_group_tier_then_score_order_as_before() -> None:
    cloud_in_region = candidate(
        "cloud-region",
        site="east-2",
        geography=EAST_2,
        backend_kind=BackendKind.CLOUD_MANAGED,
        metrics=Metrics(queue_depth=0),
    )
    api_at_site = candidate(
        "api-site", backend_kind=BackendKind.API_PROVIDER, metrics=Metrics(queue_depth=40)
    )
    cloud_at_site = candidate(
        "cloud-site", backend_kind=BackendKind.CLOUD_MANAGED, metrics=Metrics(queue_depth=40)
    )
    api_nowhere = candidate("api-unbound", backend_kind=BackendKind.API_PROVIDER, site_bound=False)
    ranking = rank(api_nowhere, cloud_in_region, api_at_site, cloud_at_site)
    # Same site first, cloud_managed above api_provider there only by score (its locality
    # signal is 0.2 against 0.1); then the same region, whatever its higher score; then
    # capacity tied to no site.
    assert providers(ranking) == ["cloud-site", "api-site", "cloud-region", "api-unbound"]
    parts = [decided_by(upper, lower) for upper, lower in pairwise(ranking.candidates)]
    assert parts == [OrderPart.SCORE, OrderPart.TIER, OrderPart.TIER]
    assert ranking.candidates[1].score < ranking.candidates[2].score
    assert {entry.group for entry in ranking.candidates} == {BackendGroup.EXTERNAL}


def test_inside_the_self_hosted_group_tier_orders_local_and_remote() -> None:
    busy_local = candidate("local-site", metrics=Metrics(queue_depth=50))
    idle_remote_zone = candidate(
        "remote-zone",
        site="east-3",
        backend_kind=BackendKind.REMOTE,
        metrics=Metrics(queue_depth=0),
    )
    local_far = candidate(
        "local-far",
        site="west",
        geography=Geography("us-west"),
        metrics=Metrics(queue_depth=0),
    )
    remote_region = candidate(
        "remote-region",
        site="east-2",
        geography=EAST_2,
        backend_kind=BackendKind.REMOTE,
        metrics=Metrics(queue_depth=40),
    )
    ranking = rank(local_far, remote_region, idle_remote_zone, busy_local)
    assert providers(ranking) == ["local-site", "remote-zone", "remote-region", "local-far"]
    assert [entry.tier for entry in ranking.candidates] == [
        LocalityTier.SAME_SITE,
        LocalityTier.SAME_ZONE,
        LocalityTier.SAME_REGION,
        LocalityTier.CROSS_REGION,
    ]
    assert ranking.candidates[0].score < ranking.candidates[1].score
    assert {entry.group for entry in ranking.candidates} == {BackendGroup.SELF_HOSTED}


def test_admission_still_comes_before_the_group() -> None:
    busy_own = candidate("own", metrics=Metrics(queue_depth=63))
    api = candidate("api", backend_kind=BackendKind.API_PROVIDER, site_bound=False)
    ranking = rank(busy_own, api)
    assert providers(ranking) == ["api", "own"]
    upper, lower = ranking.candidates
    assert (upper.admission, upper.group) == (
        AdmissionState.NEW_AND_EXISTING,
        BackendGroup.EXTERNAL,
    )
    assert (lower.admission, lower.group) == (
        AdmissionState.EXISTING_ONLY,
        BackendGroup.SELF_HOSTED,
    )
    assert why_above(upper, lower) == (
        OrderPart.ADMISSION,
        "new_and_existing before existing_only",
    )


def test_score_descends_within_a_tier() -> None:
    ranking = rank(
        candidate("slow", metrics=Metrics(p99_latency_ms=9000)),
        candidate("fast", metrics=Metrics(p99_latency_ms=100)),
        candidate("middle", metrics=Metrics(p99_latency_ms=5000)),
    )
    assert providers(ranking) == ["fast", "middle", "slow"]


def test_freshness_breaks_score_ties() -> None:
    ranking = rank(
        candidate("never"),
        candidate("degraded", degraded=True, updated_at=NOW),
        candidate("older", updated_at=NOW - timedelta(seconds=20)),
        candidate("newer", updated_at=NOW - timedelta(seconds=10)),
    )
    assert providers(ranking) == ["newer", "older", "never", "degraded"]


def test_names_break_the_remaining_ties() -> None:
    ranking = rank(
        candidate("b", model="x", cluster="c1"),
        candidate("a", model="x", cluster="c2"),
        candidate("c", model="w", cluster="c3"),
    )
    assert providers(ranking) == ["c", "b", "a"]


def test_why_above_names_what_decided() -> None:
    ranking = rank(
        candidate("never", model="a"),
        candidate("degraded", model="a", degraded=True, updated_at=NOW),
        candidate("older", model="a", updated_at=NOW - timedelta(seconds=20)),
        candidate("newer", model="a", updated_at=NOW - timedelta(seconds=10)),
        candidate("twin", model="b", updated_at=NOW - timedelta(seconds=10)),
        candidate("slow", model="c", metrics=Metrics(p99_latency_ms=9000)),
    )
    assert providers(ranking) == ["newer", "twin", "older", "never", "degraded", "slow"]
    entries = ranking.candidates
    reasons = [why_above(upper, lower) for upper, lower in pairwise(entries)]
    assert reasons == [
        (OrderPart.TIE_BREAK, "model a before b"),
        (OrderPart.UPDATED, "updated more recently"),
        (OrderPart.UPDATED, "updated before never updated"),
        (OrderPart.FRESHNESS, "fresh before not fresh"),
        (OrderPart.SCORE, f"{entries[4].score:.4f} before {entries[5].score:.4f}"),
    ]
    with pytest.raises(ValueError, match="same place"):
        decided_by(entries[0], entries[0])


def test_a_route_taken_by_a_better_candidate_is_left_out() -> None:
    ranking = rank(
        candidate("worse", cluster="shared", metrics=Metrics(queue_depth=30)),
        candidate("better", cluster="shared", metrics=Metrics(queue_depth=1)),
    )
    assert providers(ranking) == ["better"]
    assert left_out(ranking) == {"worse": LeftOutReason.DUPLICATE_ROUTE}
    assert "'better'" in ranking.left_out[0].detail


def test_the_same_candidate_twice_is_refused() -> None:
    with pytest.raises(ScoringInputError, match="twice"):
        rank(candidate(), candidate())


def test_the_same_candidate_through_two_clusters_is_refused() -> None:
    with pytest.raises(ScoringInputError, match="twice"):
        rank(candidate(cluster="c1"), candidate(cluster="c2"))
    with pytest.raises(ScoringInputError, match="twice"):
        rank_candidates(
            [candidate(cluster="c1")], CONSUMER, CONFIG, NOW, routes=[(candidate(cluster="c2"),)]
        )


def test_a_route_given_with_a_candidate_of_another_is_refused() -> None:
    mixed = (candidate("a", cluster="c1"), candidate("b", cluster="c2"))
    with pytest.raises(ScoringInputError, match="route"):
        rank_candidates([], CONSUMER, CONFIG, NOW, routes=[mixed])
    # With a memo, a route given as the same block as last pass is not checked again; a new
    # block for the same route is, even though the memo holds the route.
    memo = ScoringMemo()
    block = (candidate("a", cluster="c1"),)
    for _ in range(2):
        rank_candidates([], CONSUMER, CONFIG, NOW, memo=memo, routes=[block])
    with pytest.raises(ScoringInputError, match="route"):
        rank_candidates([], CONSUMER, CONFIG, NOW, memo=memo, routes=[(*block, mixed[1])])


def test_a_new_observation_of_a_candidate_equals_one_built_anew() -> None:
    before = candidate(
        "p",
        cost=TokenCost(Decimal("1"), Decimal("2")),
        access_policy=LabelSelector.model_validate({"matchLabels": {"tier": "edge"}}),
        updated_at=NOW,
    )
    observation: dict[str, Any] = {
        "metrics": Metrics(queue_depth=7, kv_cache_utilization=0.5),
        "healthy": False,
        "degraded": True,
        "updated_at": NOW + timedelta(seconds=5),
    }
    after = before.observed(**observation)
    anew = dataclasses.replace(before, **observation)
    assert after == anew
    for name in ("key", "route", "tie_break", "updated_seconds"):
        assert getattr(after, name) == getattr(anew, name)
    with pytest.raises(ScoringInputError, match="KV-cache"):
        before.observed(**(observation | {"metrics": Metrics(kv_cache_utilization=1.5)}))
    with pytest.raises(ScoringInputError, match="time zone"):
        before.observed(**(observation | {"updated_at": datetime(2026, 1, 1)}))


def test_now_and_ttl_are_checked() -> None:
    with pytest.raises(ScoringInputError, match="time zone"):
        rank(candidate(), now=datetime(2026, 1, 1))
    with pytest.raises(ScoringInputError, match="TTL"):
        rank(candidate(), stale_after_seconds=-1)


def test_left_out_is_sorted() -> None:
    ranking = rank(
        candidate("z", healthy=False), candidate("a", healthy=False), candidate("m", healthy=False)
    )
    assert [entry.candidate.provider for entry in ranking.left_out] == ["a", "m", "z"]
    assert ranking.candidates == ()


# --- stabilized admission through the ranking ---------------------------------------------


def test_stabilized_admission_carries_its_memory_between_passes() -> None:
    config = ScoringConfig(
        admission=AdmissionThresholds(
            hysteresis=Hysteresis(enabled=True, consecutive_observations=2, min_seconds_in_state=0)
        )
    )
    loaded = candidate(metrics=Metrics(queue_depth=60))
    idle = candidate(metrics=Metrics(queue_depth=1))
    first = rank(idle, config=config)
    assert first.admission_memory[idle.key].state is AdmissionState.NEW_AND_EXISTING
    states = []
    memory = first.admission_memory
    for step in range(1, 4):
        ranking = rank(
            loaded, config=config, now=NOW + timedelta(seconds=step), admission_memory=memory
        )
        memory = ranking.admission_memory
        states.append(ranking.candidates[0].admission)
    assert states == [
        AdmissionState.NEW_AND_EXISTING,
        AdmissionState.EXISTING_ONLY,
        AdmissionState.EXISTING_ONLY,
    ]
    plain = rank(loaded)
    assert dict(plain.admission_memory) == {}


def test_stabilized_admission_reports_a_candidate_held_excluded() -> None:
    config = ScoringConfig(
        admission=AdmissionThresholds(
            hysteresis=Hysteresis(enabled=True, consecutive_observations=2, min_seconds_in_state=0)
        )
    )
    sick = rank(candidate(healthy=False), config=config)
    assert left_out(sick) == {"p": LeftOutReason.UNHEALTHY}
    held = rank(
        candidate(healthy=True),
        config=config,
        now=NOW + timedelta(seconds=1),
        admission_memory=sick.admission_memory,
    )
    assert left_out(held) == {"p": LeftOutReason.HELD_EXCLUDED}


def test_explain_lists_contributions_and_reasons() -> None:
    ranking = rank(candidate("kept"), candidate("sick", healthy=False))
    text = explain(ranking, not_offered=[("ghost", "its siteSelector matches no GridSite")])
    assert "kept" in text
    assert "new_and_existing" in text
    assert "same_site" in text
    assert "self_hosted" in text
    assert "unhealthy" in text
    assert "not_offered" in text
    assert f"{ranking.candidates[0].breakdown.total:.4f}" in text


def test_explain_shows_each_group_and_when_the_group_decided() -> None:
    text = explain(rank(gpt_4o_at_the_consuming_site(), own_model_in_the_region()))
    rows = text.splitlines()
    header = next(line for line in rows if line.startswith("RANK"))
    assert header.split()[5:8] == ["ADMISSION", "GROUP", "TIER"]
    assert rows[rows.index(header) + 1].split()[1:8] == [
        "llama-70b",
        "vllm-east-2",
        "east-2",
        "site-east-2",
        "new_and_existing",
        "self_hosted",
        "same_region",
    ]
    assert rows[rows.index(header) + 2].split()[6:8] == ["external", "same_site"]
    assert "why each candidate is above the next:" in rows
    assert rows[-1].split() == [
        "0",
        "1",
        "group",
        "self_hosted",
        "(remote)",
        "before",
        "external",
        "(api_provider)",
    ]


def test_explain_of_one_candidate_has_no_order_table() -> None:
    assert "why each candidate" not in explain(rank(candidate()))


# --- properties ---------------------------------------------------------------------------

SITES = [
    ("east", EAST),
    ("east-2", Geography("us-east", "us-east-1b")),
    ("east-3", Geography("us-east", "us-east-1a")),
    ("west", Geography("us-west", "us-west-2a")),
    ("nowhere", Geography(None, None)),
]
optional_ratio = st.none() | st.sampled_from([0.0, 0.25, 0.5, 0.9, 0.95, 1.0])


@st.composite
def candidate_sets(draw: st.DrawFn) -> list[CandidateInput]:
    count = draw(st.integers(min_value=0, max_value=25))
    result = []
    for index in range(count):
        site, geography = draw(st.sampled_from(SITES))
        result.append(
            CandidateInput(
                # Few names, so ties on every other key are common.
                provider=f"p{index}",
                model=draw(st.sampled_from(["m1", "m2"])),
                site=site,
                cluster=draw(st.sampled_from(["c1", "c2", f"own-{index}"])),
                backend_kind=draw(st.sampled_from(list(BackendKind))),
                geography=geography,
                site_bound=draw(st.booleans()),
                metrics=Metrics(
                    queue_depth=draw(st.none() | st.sampled_from([0.0, 10.0, 60.0])),
                    kv_cache_utilization=draw(optional_ratio),
                    prefix_cache_hit_ratio=draw(optional_ratio),
                    p99_latency_ms=draw(st.none() | st.sampled_from([100.0, 5000.0])),
                ),
                healthy=draw(st.sampled_from([True, None, False])),
                degraded=draw(st.booleans()),
                updated_at=draw(
                    st.none()
                    | st.sampled_from([NOW, NOW - timedelta(seconds=10), NOW - timedelta(hours=1)])
                ),
            )
        )
    return result


def summary(ranking: Ranking) -> tuple[object, ...]:
    return (
        [
            (entry.candidate.key, entry.score, entry.admission, entry.tier)
            for entry in ranking.candidates
        ],
        [(entry.candidate.key, entry.reason) for entry in ranking.left_out],
    )


@settings(max_examples=150, deadline=None)
@given(candidate_sets(), st.randoms(use_true_random=False))
def test_order_is_total_and_independent_of_input_order(
    candidates: list[CandidateInput], rng: random.Random
) -> None:
    ranking = rank(*candidates, stale_after_seconds=600)
    keys = [order_key(entry) for entry in ranking.candidates]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)  # no two candidates tie on the whole key
    shuffled = candidates[:]
    rng.shuffle(shuffled)
    assert summary(rank(*shuffled, stale_after_seconds=600)) == summary(ranking)
    assert summary(rank(*candidates, stale_after_seconds=600)) == summary(ranking)
    kept = {entry.candidate.key for entry in ranking.candidates}
    dropped = {entry.candidate.key for entry in ranking.left_out}
    assert kept.isdisjoint(dropped)
    assert kept | dropped == {entry.key for entry in candidates}
    routes = [entry.candidate.route for entry in ranking.candidates]
    assert len(set(routes)) == len(routes)
    for upper, lower in pairwise(ranking.candidates):
        if upper.admission is lower.admission:  # self-hosted before external
            assert (upper.group, lower.group) != (BackendGroup.EXTERNAL, BackendGroup.SELF_HOSTED)
        assert decided_by(upper, lower) is why_above(upper, lower)[0]


@settings(max_examples=100, deadline=None)
@given(candidate_sets(), candidate_sets(), st.randoms(use_true_random=False))
def test_a_memo_kept_across_passes_never_changes_a_ranking(
    first: list[CandidateInput], replacements: list[CandidateInput], rng: random.Random
) -> None:
    """Passes that keep some candidate objects, replace others (same key, new values) and
    change the consumer or the weights rank with a memo exactly as without one."""
    memo = ScoringMemo()
    heavy_queue = ScoringConfig.model_validate({"weights": {"queueDepth": 0.9}})
    west = ConsumingSite("west", Geography("us-west", None), {"tier": "edge"})
    current = first
    for consumer, config in ((CONSUMER, CONFIG), (CONSUMER, CONFIG), (west, heavy_queue)):
        with_memo = rank(*current, consumer=consumer, config=config, memo=memo, now=NOW)
        without = rank(*current, consumer=consumer, config=config, now=NOW)
        assert summary(with_memo) == summary(without)
        assert [e.signals for e in with_memo.candidates] == [e.signals for e in without.candidates]
        changed = {c.provider: c for c in replacements if rng.random() < 0.5}
        current = [changed.get(c.provider, c) for c in current]
    assert len(memo) <= len(current)


def assert_ranked_alike(got: Ranking, expected: Ranking, step: int) -> None:
    """The same ranking: what is offered and left out, why, and what is fresh."""
    assert summary(got) == summary(expected), step
    assert [e.fresh for e in got.candidates] == [e.fresh for e in expected.candidates]
    assert [e.detail for e in got.left_out] == [e.detail for e in expected.left_out]


def replace_some(
    current: list[CandidateInput], replacements: list[CandidateInput], rng: random.Random
) -> list[CandidateInput]:
    """``current`` with about a third of the providers ``replacements`` names replaced."""
    changed = {c.provider: c for c in replacements if rng.random() < 0.3}
    return [changed.get(c.provider, c) for c in current]


@settings(max_examples=100, deadline=None)
@given(candidate_sets(), candidate_sets(), st.randoms(use_true_random=False))
def test_filing_kept_across_passes_never_changes_a_ranking(
    first: list[CandidateInput], replacements: list[CandidateInput], rng: random.Random
) -> None:
    """Passes that keep some candidate objects and replace others, some with access
    policies, while time passes the TTL of some: with a memo, the same ranking as without,
    pass after pass (what is left out, why, and what is fresh included)."""
    policies = [
        None,
        LabelSelector.model_validate({"matchLabels": {"tier": "edge"}}),
        LabelSelector.model_validate({"matchLabels": {"tier": "core"}}),
    ]
    memo = ScoringMemo()
    current = [dataclasses.replace(c, access_policy=rng.choice(policies)) for c in first]
    moments = (NOW, NOW, NOW + timedelta(seconds=30), NOW + timedelta(hours=2), NOW)
    for step, moment in enumerate(moments):
        with_memo = rank(*current, memo=memo, now=moment, stale_after_seconds=600)
        without = rank(*current, now=moment, stale_after_seconds=600)
        assert_ranked_alike(with_memo, without, step)
        current = replace_some(current, replacements, rng)


@settings(max_examples=100, deadline=None)
@given(candidate_sets(), candidate_sets(), st.randoms(use_true_random=False))
def test_routes_kept_across_passes_never_change_a_ranking(
    first: list[CandidateInput], replacements: list[CandidateInput], rng: random.Random
) -> None:
    """Candidates given grouped by route, as a site's engine does: passes that keep some
    route objects as they were, rebuild others with some candidates replaced, give some
    candidates loose, while time passes the TTL of some. With a memo, the same ranking as
    ranking them all anew, loose (what is left out, why, and what is fresh included)."""
    memo = ScoringMemo()
    current = first
    blocks: dict[tuple[str, str, str], tuple[CandidateInput, ...]] = {}
    moments = (NOW, NOW, NOW + timedelta(seconds=30), NOW + timedelta(hours=2), NOW, NOW)
    for step, moment in enumerate(moments):
        grouped: dict[tuple[str, str, str], list[CandidateInput]] = {}
        for c in current:
            grouped.setdefault(c.route, []).append(c)
        routes, loose = [], []
        for route, members in grouped.items():
            held = blocks.get(route)
            if rng.random() < 0.2:
                loose += members
                continue
            if held is None or list(held) != members:
                held = tuple(members)
            blocks[route] = held
            routes.append(held)
        with_memo = rank_candidates(
            loose, CONSUMER, CONFIG, moment, stale_after_seconds=600, memo=memo, routes=routes
        )
        without = rank(*current, now=moment, stale_after_seconds=600)
        assert_ranked_alike(with_memo, without, step)
        current = replace_some(current, replacements, rng)


def test_a_route_ranked_again_keeps_its_winner_while_nothing_about_it_changed() -> None:
    """Another candidate of its route changed: the winner is the object of the last pass
    (the overlay's document of it is not built again). The winner itself changed: a new
    one."""
    memo = ScoringMemo()

    def ranked(*block: CandidateInput) -> Ranking:
        return rank_candidates([], CONSUMER, CONFIG, NOW, memo=memo, routes=[block])

    best = candidate("best", cluster="shared", metrics=Metrics(queue_depth=0.0))
    other = candidate("other", cluster="shared", metrics=Metrics(queue_depth=30.0))
    first = ranked(best, other)
    busier = dataclasses.replace(other, metrics=Metrics(queue_depth=35.0))
    second = ranked(best, busier)
    assert second.candidates[0] is first.candidates[0]
    assert left_out(second) == {"other": LeftOutReason.DUPLICATE_ROUTE}
    loaded = dataclasses.replace(best, metrics=Metrics(queue_depth=1.0))
    third = ranked(loaded, busier)
    assert third.candidates[0] is not second.candidates[0]
    assert third.candidates[0].candidate is loaded
    excluded = dataclasses.replace(loaded, healthy=False)
    assert providers(ranked(excluded, busier)) == ["other"]
