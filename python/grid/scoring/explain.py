"""``grid explain``: why the list is in the order it is, and why each missing provider is
missing, as plain-text tables.

Each candidate shows the parts of the order (admission, group, tier, score, freshness); a
second table says, for every pair of neighbours, which part put the upper one first and how.
"""

from __future__ import annotations

from collections.abc import Sequence

from grid.scoring.ranking import LeftOut, OrderPart, RankedCandidate, Ranking, decided_by

CANDIDATE_COLUMNS = (
    "RANK",
    "MODEL",
    "PROVIDER",
    "SITE",
    "CLUSTER",
    "ADMISSION",
    "GROUP",
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
ORDER_COLUMNS = ("ABOVE", "BELOW", "DECIDED BY", "WHY")
LEFT_OUT_COLUMNS = ("PROVIDER", "MODEL", "SITE", "REASON", "DETAIL")
_TIE_BREAK_FIELDS = ("model", "site", "cluster", "provider")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


def _number(value: float) -> str:
    return f"{value:.4f}"


def _scores(above: float, below: float) -> tuple[str, str]:
    """The two scores as the table prints them, or with all six decimals when those look
    equal."""
    shown = _number(above), _number(below)
    return shown if shown[0] != shown[1] else (f"{above:.6f}", f"{below:.6f}")


def why_above(above: RankedCandidate, below: RankedCandidate) -> tuple[OrderPart, str]:
    """What puts ``above`` before ``below`` in the gateway's order, in words."""
    part = decided_by(above, below)
    if part is OrderPart.ADMISSION:
        return part, f"{above.admission.wire} before {below.admission.wire}"
    if part is OrderPart.GROUP:
        upper, lower = above.candidate.backend_kind.value, below.candidate.backend_kind.value
        return part, f"{above.group.value} ({upper}) before {below.group.value} ({lower})"
    if part is OrderPart.TIER:
        return part, f"{above.tier.wire} before {below.tier.wire}"
    if part is OrderPart.SCORE:
        upper, lower = _scores(above.score, below.score)
        return part, f"{upper} before {lower}"
    if part is OrderPart.FRESHNESS:
        return part, "fresh before not fresh"
    if part is OrderPart.UPDATED:
        if below.candidate.updated_at is None:
            return part, "updated before never updated"
        return part, "updated more recently"
    for name, mine, theirs in zip(
        _TIE_BREAK_FIELDS, above.candidate.tie_break, below.candidate.tie_break, strict=True
    ):
        if mine != theirs:
            return part, f"{name} {mine} before {theirs}"
    raise AssertionError("decided_by found a difference the tie-break does not hold")


def explain(
    ranking: Ranking,
    *,
    published: Sequence[RankedCandidate] | None = None,
    extra_left_out: Sequence[LeftOut] = (),
    not_offered: Sequence[tuple[str, str]] = (),
) -> str:
    """The candidate table (each signal's weighted contribution, admission, group, tier,
    rank), the table of what puts each candidate above the next, and the left-out table.

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
                entry.group.value,
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
    if len(shown) > 1:
        order_rows = []
        for rank in range(len(shown) - 1):
            part, why = why_above(shown[rank], shown[rank + 1])
            order_rows.append((str(rank), str(rank + 1), part.value, why))
        lines += ["", "why each candidate is above the next:", *_table(ORDER_COLUMNS, order_rows)]
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
