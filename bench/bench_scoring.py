"""Scoring and rendering benchmark.

Measures, as medians over repeated runs:

- scoring and ordering 10,000 candidates (``rank_candidates``), against a baseline that
  only sorts the same 10,000 candidates by a precomputed key (the cost of ordering alone);
- rendering and digesting a 1,024-candidate overlay (``render_overlay``), against a
  baseline that serializes the same document with ``json.dumps`` and hashes it (the cost of
  a non-canonical digest);

Target: under 50 ms each. ``bench/bench_render.py`` compares rendering with the previous,
pure-Python implementation. Run with ``.venv/bin/python bench/bench_scoring.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial

from grid.models.common import BackendKind, ScoringConfig
from grid.models.selectors import LabelSelector
from grid.render.overlay import OverlayScope, OverlaySource, render_overlay
from grid.scoring.inputs import (
    CandidateInput,
    ConsumingSite,
    Geography,
    Metrics,
    SecretRef,
    TokenCost,
)
from grid.scoring.ranking import rank_candidates

NOW = datetime(2026, 7, 29, 12, 0, tzinfo=UTC)
SITES = [
    (f"site-{index}", Geography(f"region-{index % 4}", f"zone-{index % 8}")) for index in range(20)
]
CONSUMER = ConsumingSite("site-0", SITES[0][1], {"tier": "edge"})
SCOPE = OverlayScope("bench", "gateway", "grid-system", "site-0")
SOURCE = OverlaySource("bench", "uid", 1)


def candidates(count: int, seed: int = 7, *, all_ranked: bool = False) -> list[CandidateInput]:
    """A mix of every backend kind, missing signals, policies and credentials; with
    ``all_ranked`` nothing is unhealthy, stale or hidden by a policy (the worst case: every
    candidate is scored and ordered)."""
    rng = random.Random(seed)
    policy = LabelSelector.model_validate({"matchLabels": {"tier": "edge"}})
    result = []
    for index in range(count):
        site, geography = rng.choice(SITES)
        result.append(
            CandidateInput(
                provider=f"provider-{index}",
                model=f"model-{index % 300}",
                site=site,
                cluster=f"cluster-{index}",
                backend_kind=rng.choice(list(BackendKind)),
                geography=geography,
                metrics=Metrics(
                    queue_depth=rng.choice([None, rng.uniform(0, 80)]),
                    kv_cache_utilization=rng.choice([None, rng.random()]),
                    prefix_cache_hit_ratio=rng.choice([None, rng.random()]),
                    p99_latency_ms=rng.choice([None, rng.uniform(50, 12_000)]),
                ),
                cost=TokenCost(
                    Decimal(rng.randint(0, 500)) / 100, Decimal(rng.randint(0, 3000)) / 100
                ),
                healthy=True if all_ranked else rng.choice([True, True, True, None, False]),
                degraded=rng.random() < 0.05,
                updated_at=NOW - timedelta(seconds=rng.uniform(0, 250 if all_ranked else 400)),
                credential=SecretRef(f"key-{index % 5}", "grid-system", "token")
                if rng.random() < 0.3
                else None,
                access_policy=policy if rng.random() < 0.1 else None,
                site_bound=rng.random() > 0.05,
            )
        )
    return result


def median_ms(action: Callable[[], object], runs: int) -> float:
    action()  # warm up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    config = ScoringConfig()

    keyed = [(key, key) for key in range(10_000)]
    random.Random(1).shuffle(keyed)
    sort_ms = median_ms(lambda: sorted(keyed, key=lambda pair: pair[0]), args.runs)
    for label, all_ranked in (("mixed", False), ("all ranked", True)):
        pool = candidates(10_000, all_ranked=all_ranked)
        ranking = rank_candidates(pool, CONSUMER, config, NOW, stale_after_seconds=300)
        rank_ms = median_ms(
            partial(rank_candidates, pool, CONSUMER, config, NOW, stale_after_seconds=300),
            args.runs,
        )
        print(
            f"score+order 10000 candidates ({label}: {len(ranking.candidates)} ranked, "
            f"{len(ranking.left_out)} left out): median {rank_ms:.1f} ms; baseline sort of "
            f"10000 keys {sort_ms:.1f} ms; ratio {rank_ms / sort_ms:.1f}x"
        )

    sized = rank_candidates(candidates(1500, seed=11, all_ranked=True), CONSUMER, config, NOW)
    rendered = render_overlay(sized, SCOPE, SOURCE, NOW)
    count = len(rendered.document["overlay"]["candidates"])
    render_ms = median_ms(lambda: render_overlay(sized, SCOPE, SOURCE, NOW), args.runs)
    document = rendered.document

    def plain_digest() -> str:
        return hashlib.sha256(json.dumps(document, separators=(",", ":")).encode()).hexdigest()

    plain_ms = median_ms(plain_digest, args.runs)
    print(
        f"render+digest {count}-candidate overlay ({len(rendered.text)} bytes): median "
        f"{render_ms:.1f} ms; baseline json.dumps+sha256 of the same document {plain_ms:.1f} ms; "
        f"ratio {render_ms / plain_ms:.1f}x"
    )


if __name__ == "__main__":
    main()
