"""``grid explain``: why the list is in the order it is, and why each missing provider is
missing, as plain-text tables."""

from __future__ import annotations

from collections.abc import Sequence

from grid.scoring.ranking import LeftOut, RankedCandidate, Ranking

CANDIDATE_COLUMNS = (
    "RANK",
    "MODEL",
    "PROVIDER",
    "SITE",
    "CLUSTER",
    "ADMISSION",
    "TIER",
    "FRESH",
    "SCORE",
    "LOCALITY",
    "QUEUE",
    "KV",
    "PREFIX",
    "LATENCY",
    "COST",
    "TOTAL",
)
LEFT_OUT_COLUMNS = ("PROVIDER", "MODEL", "SITE", "REASON", "DETAIL")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


def _number(value: float) -> str:
    return f"{value:.4f}"


def explain(
    ranking: Ranking,
    *,
    published: Sequence[RankedCandidate] | None = None,
    extra_left_out: Sequence[LeftOut] = (),
    not_offered: Sequence[tuple[str, str]] = (),
) -> str:
    """The candidate table (each signal's weighted contribution, admission, tier, rank) and
    the left-out table.

    ``published`` is the list the overlay carries when it differs from the ranking (after
    truncation), and ``extra_left_out`` what was cut from it; ``not_offered`` lists
    (provider, reason) for providers that never became candidates.
    """
    shown = ranking.candidates if published is None else published
    lines = [
        f"site {ranking.consumer.name}: {len(shown)} candidates, "
        f"{len(ranking.left_out) + len(extra_left_out) + len(not_offered)} left out"
    ]
    rows = []
    for rank, entry in enumerate(shown):
        candidate, breakdown = entry.candidate, entry.breakdown
        rows.append(
            (
                str(rank),
                candidate.model,
                candidate.provider,
                candidate.site,
                candidate.cluster,
                entry.admission.wire,
                entry.tier.wire,
                "yes" if entry.fresh else "no",
                _number(entry.score),
                _number(breakdown.locality),
                _number(breakdown.queue_depth),
                _number(breakdown.kv_cache),
                _number(breakdown.prefix_cache),
                _number(breakdown.latency),
                _number(breakdown.cost),
                _number(breakdown.total),
            )
        )
    lines += ["", *_table(CANDIDATE_COLUMNS, rows)]
    left_out = sorted((*ranking.left_out, *extra_left_out), key=lambda entry: entry.candidate.key)
    if left_out or not_offered:
        left_rows = [
            (
                entry.candidate.provider,
                entry.candidate.model,
                entry.candidate.site,
                entry.reason.value,
                entry.detail,
            )
            for entry in left_out
        ]
        left_rows += [
            (provider, "-", "-", "not_offered", reason) for provider, reason in not_offered
        ]
        lines += ["", "left out:", *_table(LEFT_OUT_COLUMNS, left_rows)]
    return "\n".join(lines) + "\n"
