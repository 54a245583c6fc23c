"""``grid explain``: why the list is in the order it is, and why each missing provider is
missing, as plain-text tables or as one JSON document.

Each candidate shows the parts of the order (admission, group, tier, score, freshness); a
second table says, for every pair of neighbours, which part put the upper one first and how.

The tables can be fitted to a width (a terminal's): the least important columns are left out
first (the weighted contributions, then cluster and group, ...) and long names are cut in
the middle with ``…``; no cell is ever wrapped. Without a width every column is shown.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

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

ELLIPSIS = "…"
"""What stands for the characters cut out of a cell."""

EXPLAIN_SCHEMA_VERSION = 1
"""The ``schema_version`` of :func:`explain_document`: raised when a key changes meaning or
goes away (keys may be added without it)."""


@dataclass(frozen=True, slots=True)
class _Drop:
    """Leave the column out."""

    column: str


@dataclass(frozen=True, slots=True)
class _Shrink:
    """Cut the column's cells, only as much as the table is too wide, and to no fewer than
    ``minimum`` characters; ``cut`` says where the characters go."""

    column: str
    minimum: int
    cut: Literal["middle", "end"] = "middle"


_Step = _Drop | _Shrink

# How each table gives way to a narrow terminal, one step at a time until it fits; the
# first steps give up the least. The order of the candidates is told again, pair by pair,
# by the second table, so even a narrow candidate table keeps rank, names and score.
_CANDIDATE_FIT: tuple[_Step, ...] = (
    _Drop("TOTAL"),  # the score says the same, normalized
    _Drop("COST"),
    _Drop("LATENCY"),
    _Drop("PREFIX"),
    _Drop("KV"),
    _Drop("QUEUE"),
    _Drop("LOCALITY"),
    _Drop("CLUSTER"),
    _Drop("GROUP"),
    _Shrink("MODEL", 24),
    _Shrink("PROVIDER", 16),
    _Drop("FRESH"),
    _Drop("ADMISSION"),
    _Shrink("MODEL", 16),
    _Shrink("PROVIDER", 12),
    _Shrink("SITE", 12),
    _Drop("TIER"),
    _Shrink("MODEL", 10),
    _Shrink("PROVIDER", 8),
    _Shrink("SITE", 8),
)
_ORDER_FIT: tuple[_Step, ...] = (_Shrink("WHY", 16, "end"),)
_LEFT_OUT_FIT: tuple[_Step, ...] = (
    _Shrink("DETAIL", 24, "end"),
    _Shrink("MODEL", 16),
    _Shrink("PROVIDER", 12),
    _Shrink("SITE", 12),
    _Shrink("DETAIL", 12, "end"),
    _Shrink("MODEL", 10),
    _Shrink("PROVIDER", 8),
    _Shrink("SITE", 8),
    _Shrink("DETAIL", 8, "end"),
)
_SEPARATOR = "  "


def _cut(cell: str, width: int, where: Literal["middle", "end"], ellipsis: str) -> str:
    if len(cell) <= width:
        return cell
    if width <= len(ellipsis):
        return cell[:width]
    keep = width - len(ellipsis)
    if where == "end":
        return cell[:keep] + ellipsis
    head = (keep + 1) // 2
    return cell[:head] + ellipsis + cell[len(cell) - (keep - head) :]


def _line_width(widths: Sequence[int]) -> int:
    return sum(widths) + len(_SEPARATOR) * (len(widths) - 1) if widths else 0


@dataclass(frozen=True, slots=True)
class _Table:
    lines: list[str]
    dropped: tuple[str, ...]


def _table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int | None = None,
    fit: Sequence[_Step] = (),
    ellipsis: str = ELLIPSIS,
) -> _Table:
    """The aligned table; with ``width``, the ``fit`` steps are taken in order until its
    lines are no wider (a table that cannot fit is printed as narrow as the steps go).
    Room a later step freed goes back to the columns cut before it, the last cut first."""
    columns = list(range(len(header)))
    natural = [max(len(row[i]) for row in (header, *rows)) for i in columns]
    widths = list(natural)
    cut_at: dict[int, Literal["middle", "end"]] = {}
    dropped: list[str] = []
    if width is not None:
        position = {name: i for i, name in enumerate(header)}
        for step in fit:
            excess = _line_width([widths[i] for i in columns]) - width
            if excess <= 0:
                break
            index = position[step.column]
            if index not in columns:
                continue
            if isinstance(step, _Drop):
                columns.remove(index)
                dropped.append(step.column)
                continue
            target = max(step.minimum, len(header[index]), widths[index] - excess)
            if target < widths[index]:
                widths[index] = target
                cut_at.pop(index, None)
                cut_at[index] = step.cut
        for index in reversed([i for i in cut_at if i in columns]):
            spare = width - _line_width([widths[i] for i in columns])
            if spare <= 0:
                break
            widths[index] = min(natural[index], widths[index] + spare)
    lines = []
    for number, row in enumerate((header, *rows)):
        cells = [
            _cut(row[i], widths[i], cut_at[i], ellipsis) if number and i in cut_at else row[i]
            for i in columns
        ]
        lines.append(
            _SEPARATOR.join(
                cell.ljust(widths[i]) for cell, i in zip(cells, columns, strict=True)
            ).rstrip()
        )
    return _Table(lines, tuple(dropped))


def _dropped_note(dropped: Sequence[str], width: int) -> list[str]:
    count = f"{len(dropped)} column{'s' if len(dropped) != 1 else ''}"
    text = f"({count} not shown to fit {width} columns: {', '.join(dropped)}; --wide shows them)"
    return textwrap.wrap(text, max(width, 20), break_long_words=False, break_on_hyphens=False)


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


def _candidate_row(rank: int, entry: RankedCandidate) -> tuple[str, ...]:
    candidate, breakdown = entry.candidate, entry.breakdown
    return (
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


def _all_left_out(ranking: Ranking, extra_left_out: Sequence[LeftOut]) -> list[LeftOut]:
    return sorted((*ranking.left_out, *extra_left_out), key=lambda entry: entry.candidate.key)


def explain(
    ranking: Ranking,
    *,
    published: Sequence[RankedCandidate] | None = None,
    extra_left_out: Sequence[LeftOut] = (),
    not_offered: Sequence[tuple[str, str]] = (),
    width: int | None = None,
    ellipsis: str = ELLIPSIS,
) -> str:
    """The candidate table (each signal's weighted contribution, admission, group, tier,
    rank), the table of what puts each candidate above the next, and the left-out table.

    ``published`` is the list the overlay carries when it differs from the ranking (after
    truncation), and ``extra_left_out`` what was cut from it; ``not_offered`` lists
    (provider, reason) for providers that never became candidates. With ``width``, each
    table is fitted to that many columns (see the module's docs) and a line names the
    candidate columns left out; without it every column is shown in full. ``ellipsis``
    stands for what is cut out of a cell (``~`` where ``…`` cannot be written).
    """
    shown = ranking.candidates if published is None else published
    left_out = _all_left_out(ranking, extra_left_out)
    lines = [
        f"site {ranking.consumer.name}: {len(shown)} candidates, "
        f"{len(left_out) + len(not_offered)} left out"
    ]
    rows = [_candidate_row(rank, entry) for rank, entry in enumerate(shown)]
    candidates = _table(CANDIDATE_COLUMNS, rows, width, _CANDIDATE_FIT, ellipsis)
    lines += ["", *candidates.lines]
    if candidates.dropped and width is not None:
        lines += _dropped_note(candidates.dropped, width)
    if len(shown) > 1:
        order_rows = []
        for rank in range(len(shown) - 1):
            part, why = why_above(shown[rank], shown[rank + 1])
            order_rows.append((str(rank), str(rank + 1), part.value, why))
        order = _table(ORDER_COLUMNS, order_rows, width, _ORDER_FIT, ellipsis)
        lines += ["", "why each candidate is above the next:", *order.lines]
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
        lines += [
            "",
            "left out:",
            *_table(LEFT_OUT_COLUMNS, left_rows, width, _LEFT_OUT_FIT, ellipsis).lines,
        ]
    return "\n".join(lines) + "\n"


def explain_document(
    ranking: Ranking,
    *,
    published: Sequence[RankedCandidate] | None = None,
    extra_left_out: Sequence[LeftOut] = (),
    not_offered: Sequence[tuple[str, str]] = (),
    scope: Mapping[str, str] | None = None,
    now: str | None = None,
) -> dict[str, Any]:
    """What :func:`explain` prints, as one JSON-ready document with every column in full
    (numbers unrounded):

    - ``schema_version`` (:data:`EXPLAIN_SCHEMA_VERSION`);
    - ``scope`` (the overlay's: ``network``, ``gateway``, ``namespace``, ``local_site``) and
      ``now`` (the moment ranked at, RFC 3339), when given;
    - ``site`` (the consuming site);
    - ``candidates``, in the gateway's order: ``rank``, ``model``, ``provider``, ``site``,
      ``cluster``, ``backend_kind``, ``admission``, ``group``, ``tier``, ``fresh`` (a
      boolean), ``score`` and ``score_breakdown`` (``locality``, ``queue_depth``,
      ``kv_cache``, ``prefix_cache``, ``latency``, ``cost``, ``total``: the overlay's
      ``score_breakdown``);
    - ``order``, one per pair of neighbours: ``above`` and ``below`` (ranks),
      ``decided_by`` (the part of the order) and ``why``;
    - ``left_out``: ``provider``, ``model``, ``site``, ``cluster``, ``reason``, ``detail``;
    - ``not_offered`` (providers that yield no candidate): ``provider``, ``reason``.
    """
    shown = ranking.candidates if published is None else published
    candidates = []
    for rank, entry in enumerate(shown):
        candidate = entry.candidate
        candidates.append(
            {
                "rank": rank,
                "model": candidate.model,
                "provider": candidate.provider,
                "site": candidate.site,
                "cluster": candidate.cluster,
                "backend_kind": candidate.backend_kind.value,
                "admission": entry.admission.wire,
                "group": entry.group.value,
                "tier": entry.tier.wire,
                "fresh": entry.fresh,
                "score": entry.score,
                "score_breakdown": entry.breakdown.as_wire(),
            }
        )
    order = []
    for rank in range(len(shown) - 1):
        part, why = why_above(shown[rank], shown[rank + 1])
        order.append({"above": rank, "below": rank + 1, "decided_by": part.value, "why": why})
    left_out = [
        {
            "provider": entry.candidate.provider,
            "model": entry.candidate.model,
            "site": entry.candidate.site,
            "cluster": entry.candidate.cluster,
            "reason": entry.reason.value,
            "detail": entry.detail,
        }
        for entry in _all_left_out(ranking, extra_left_out)
    ]
    document: dict[str, Any] = {"schema_version": EXPLAIN_SCHEMA_VERSION}
    if scope is not None:
        document["scope"] = dict(scope)
    if now is not None:
        document["now"] = now
    return {
        **document,
        "site": ranking.consumer.name,
        "candidates": candidates,
        "order": order,
        "left_out": left_out,
        "not_offered": [
            {"provider": provider, "reason": reason} for provider, reason in not_offered
        ],
    }
