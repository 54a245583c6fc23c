"""Ranking pass after pass, as a site of a 100 x 100 mesh does: 10,000 candidates (100
sites, 100 providers each, 16 models), of which 200 change between passes (about what one
second of that mesh's signals brings), ranked three ways in the same loop:

- grouped by route as a site's engine gives them (``routes=``: one tuple per site and
  model, a new tuple only where a candidate changed) with the memo a site keeps between
  passes (``ScoringMemo``): unchanged routes are not looked at again;
- loose, with the memo: every route is decided again, but unchanged candidates are not
  scored again;
- loose, without a memo (the baseline): every candidate scored and decided anew.

Reports the median CPU time of a pass each way and the ratios to the baseline. Run with
``.venv/bin/python bench/bench_ranking_memo.py [--passes 9]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from grid.models.common import BackendKind, ScoringConfig
from grid.scoring.inputs import CandidateInput, ConsumingSite, Geography, Metrics
from grid.scoring.ranking import Ranking, ScoringMemo, rank_candidates

NOW = datetime(2026, 7, 1, 12, tzinfo=UTC)
SITES, PROVIDERS, MODELS, CHANGED = 100, 100, 16, 200


def load(rng: random.Random) -> Metrics:
    return Metrics(
        queue_depth=float(rng.randint(0, 40)),
        kv_cache_utilization=rng.random(),
        prefix_cache_hit_ratio=rng.random(),
        p99_latency_ms=rng.uniform(100, 2000),
    )


def candidate(site: int, provider: int, metrics: Metrics, updated: datetime) -> CandidateInput:
    return CandidateInput(
        provider=f"site-{site:03d}-p{provider}",
        model=f"model-{provider % MODELS}",
        site=f"site-{site:03d}",
        cluster=f"site-site-{site:03d}",
        backend_kind=BackendKind.LOCAL,
        geography=Geography(f"region-{site % 4}", None),
        metrics=metrics,
        healthy=True,
        updated_at=updated,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=9)
    args = parser.parse_args()
    rng = random.Random(16)
    candidates = [
        candidate(s, p, load(rng), NOW - timedelta(seconds=rng.randint(0, 100)))
        for s in range(SITES)
        for p in range(PROVIDERS)
    ]
    consumer = ConsumingSite("site-000", Geography("region-0", None), {})
    config = ScoringConfig()
    routed_memo, loose_memo = ScoringMemo(), ScoringMemo()

    def route_of(index: int) -> tuple[int, int]:
        site, provider = divmod(index, PROVIDERS)
        return site, provider % MODELS

    members: dict[tuple[int, int], list[int]] = {}
    for index in range(len(candidates)):
        members.setdefault(route_of(index), []).append(index)
    routes = {key: tuple(candidates[i] for i in held) for key, held in members.items()}

    def rank_routed() -> Ranking:
        return rank_candidates(
            (),
            consumer,
            config,
            NOW,
            stale_after_seconds=300,
            memo=routed_memo,
            routes=list(routes.values()),
        )

    rank_routed()
    rank_candidates(candidates, consumer, config, NOW, stale_after_seconds=300, memo=loose_memo)
    routed, loose, anew = [], [], []
    for _ in range(args.passes):
        for index in rng.sample(range(len(candidates)), CHANGED):
            old = candidates[index]
            site, provider = divmod(index, PROVIDERS)
            candidates[index] = candidate(site, provider, load(rng), NOW)
            assert candidates[index].key == old.key
            key = route_of(index)
            routes[key] = tuple(candidates[i] for i in members[key])
        started = time.thread_time()
        by_route = rank_routed()
        routed.append(time.thread_time() - started)
        started = time.thread_time()
        with_memo = rank_candidates(
            candidates, consumer, config, NOW, stale_after_seconds=300, memo=loose_memo
        )
        loose.append(time.thread_time() - started)
        started = time.thread_time()
        plain = rank_candidates(candidates, consumer, config, NOW, stale_after_seconds=300)
        anew.append(time.thread_time() - started)
        expected = [e.candidate for e in plain.candidates]
        assert [e.candidate for e in with_memo.candidates] == expected
        assert [e.candidate for e in by_route.candidates] == expected
    plain_ms = statistics.median(anew) * 1000
    print(f"{SITES * PROVIDERS:,} candidates, {CHANGED} changed per pass, {args.passes} passes")
    for label, times in (
        ("routes kept, with the memo", routed),
        ("loose, with the memo", loose),
        ("loose, no memo (baseline)", anew),
    ):
        ms = statistics.median(times) * 1000
        print(f"{label:28s} {ms:7.1f} ms CPU per pass (median)  {ms / plain_ms:5.2f}x")


if __name__ == "__main__":
    main()
