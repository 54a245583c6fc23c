"""Render + digest of a 1,024-candidate overlay: ``render_overlay`` against the previous,
pure-Python implementation, side by side in one process on the same ranking.

The previous implementation is kept below as the baseline: candidate documents with a
pure-Python FNV-1a ``stable_id``, the content digest by a writer that reuses ``rfc8785``'s
output for the parts the candidates share, and ``json.dumps`` for the document's text.
Both must give the same text and revision, checked before timing. The two are timed in
alternation (new, previous, new, ...) so that load from other work on the machine falls on
both alike; the figures are medians.

Also timed, as a site renders pass after pass: ``render_overlay`` with the document memo a
site keeps (``DocumentMemo``) when a given share of the ranked entries are new since the
last render (``--new-share``, 0.4 by default: about what a second of a 100 x 100 mesh
brings), against ``render_overlay`` without it, in alternation on the same rankings.

Also timed: the content digest alone, ``grid.render.digest.content_digest`` (canonical JSON
and SHA-256 in ``grid._native``) against one ``rfc8785.dumps`` + ``hashlib.sha256`` of the
same content (the reference the tests compare with).

Target: render + digest of 1,024 candidates <= 10 ms (median).
Run: ``.venv/bin/python bench/bench_render.py [--runs N] [--new-share 0.4] [--json]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import operator
import os
import random
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import rfc8785

from bench_scoring import CONSUMER, NOW, SCOPE, SOURCE, candidates
from grid import __version__
from grid.models.common import ScoringConfig
from grid.render.digest import content_digest
from grid.render.overlay import (
    KIND_INFERENCE_MODEL,
    MAX_CANDIDATES,
    PRODUCER,
    SCHEMA_VERSION,
    DocumentMemo,
    OverlayScope,
    OverlaySource,
    credential_document,
    render_overlay,
    rfc3339,
    select_candidates,
)
from grid.scoring.ranking import (
    LeftOut,
    LeftOutReason,
    RankedCandidate,
    Ranking,
    rank_candidates,
)

TARGET_MS = 10.0

# The previous implementation, as it rendered before canonical JSON moved to grid._native.

_FNV_OFFSET_BASIS = 2166136261
_FNV_PRIME = 16777619


def _previous_stable_id(kind: str, name: str, site: str, cluster: str) -> str:
    value = _FNV_OFFSET_BASIS
    for byte in f"{kind}/{name}/{site}/{cluster}".encode():
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return f"{value:08x}"


_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})
_SLOT = re.compile(rb':"\\u0000(\d+)\\u0000"')


class _ObjectShape:
    """rfc8785's output for objects with given member names, a placeholder per value."""

    __slots__ = ("_format", "_values_in_order")

    def __init__(self, names: tuple[str, ...]) -> None:
        placeholders = {name: f"\x00{index}\x00" for index, name in enumerate(names)}
        parts = _SLOT.split(rfc8785.dumps(placeholders))
        fixed, slots = parts[0::2], [names[int(index)] for index in parts[1::2]]
        self._format = b":%b".join(part.replace(b"%", b"%%") for part in fixed)
        self._values_in_order: Callable[[Mapping[str, bytes]], tuple[bytes, ...]]
        if len(slots) > 1:
            self._values_in_order = operator.itemgetter(*slots)
        else:
            self._values_in_order = lambda values: tuple(values[name] for name in slots)

    def serialize(self, canonical_values: Mapping[str, bytes]) -> bytes:
        return self._format % self._values_in_order(canonical_values)


class _CanonicalWriter:
    """RFC 8785 serialization remembering rfc8785's output per object shape and scalar."""

    __slots__ = ("_scalars", "_shapes")

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, ...], _ObjectShape] = {}
        self._scalars: dict[tuple[type, Any], bytes] = {}

    def serialize(self, value: Any) -> bytes:
        value_type = type(value)
        if value_type in _SCALAR_TYPES:
            key = (value_type, value)
            known = self._scalars.get(key)
            if known is None:
                known = self._scalars[key] = rfc8785.dumps(value)
            return known
        if isinstance(value, dict):
            names = tuple(value)
            shape = self._shapes.get(names)
            if shape is None:
                shape = self._shapes[names] = _ObjectShape(names)
            serialize = self.serialize
            return shape.serialize({name: serialize(member) for name, member in value.items()})
        if isinstance(value, list | tuple):
            return b"[" + b",".join([self.serialize(element) for element in value]) + b"]"
        return rfc8785.dumps(value)


def _previous_select_candidates(
    ranked: Sequence[RankedCandidate], limit: int = MAX_CANDIDATES
) -> tuple[tuple[RankedCandidate, ...], tuple[LeftOut, ...]]:
    if len(ranked) <= limit:
        return tuple(ranked), ()
    chosen: set[int] = set()
    models: set[str] = set()
    for index, entry in enumerate(ranked):
        if len(chosen) == limit:
            break
        if entry.candidate.model not in models:
            models.add(entry.candidate.model)
            chosen.add(index)
    for index in range(len(ranked)):
        if len(chosen) == limit:
            break
        chosen.add(index)
    kept = tuple(entry for index, entry in enumerate(ranked) if index in chosen)
    cut = tuple(
        LeftOut(
            entry.candidate,
            LeftOutReason.TRUNCATED,
            f"beyond the overlay's limit of {limit} candidates",
        )
        for index, entry in enumerate(ranked)
        if index not in chosen
    )
    return kept, cut


def _previous_candidate_document(entry: RankedCandidate, rank: int) -> dict[str, Any]:
    candidate = entry.candidate
    document: dict[str, Any] = {
        "kind": KIND_INFERENCE_MODEL,
        "name": candidate.model,
        "site": candidate.site,
        "cluster": candidate.cluster,
        "fresh": entry.fresh,
    }
    credential = candidate.credential
    if credential is not None:
        document["credential"] = credential_document(credential)
    document["stable_id"] = _previous_stable_id(
        KIND_INFERENCE_MODEL, candidate.model, candidate.site, candidate.cluster
    )
    document["admission_state"] = entry.admission.wire
    document["selection_tier"] = entry.tier.wire
    document["score"] = entry.score
    document["score_breakdown"] = entry.breakdown.as_wire()
    document["rank"] = rank
    return document


def previous_render(
    ranking: Ranking, scope: OverlayScope, source: OverlaySource, now: datetime
) -> tuple[str, str]:
    """The previous ``render_overlay``'s text and revision (its checks left out: they
    cost nothing next to the rest)."""
    kept, _ = _previous_select_candidates(ranking.candidates)
    candidates = [_previous_candidate_document(entry, rank) for rank, entry in enumerate(kept)]
    content = {"network": scope.network, "local_site": scope.local_site, "candidates": candidates}
    digest = hashlib.sha256(_CanonicalWriter().serialize(content)).hexdigest()
    rendered_at = rfc3339(now)
    document = {
        "schema_version": SCHEMA_VERSION,
        "revision": {"kind": "content_addressed", "algorithm": "sha256", "value": digest},
        "content_digest": {"algorithm": "sha256", "value": digest},
        "scope": {
            "network": scope.network,
            "gateway": scope.gateway,
            "namespace": scope.namespace,
            "local_site": scope.local_site,
        },
        "provenance": {
            "producer": PRODUCER,
            "producer_version": __version__,
            "source_name": source.name,
            "source_uid": source.uid,
            "source_generation": source.generation,
            "rendered_at": rendered_at,
        },
        "overlay": {
            "network": scope.network,
            "local_site": scope.local_site,
            "candidates": candidates,
            "generated_at": rendered_at,
        },
    }
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    len(text.encode("utf-8"))  # the size check
    return text, digest


def alternating_medians(actions: Sequence[Callable[[], object]], runs: int) -> list[float]:
    """Median milliseconds of each action, run in turn ``runs`` times after a warm-up."""
    samples: list[list[float]] = [[] for _ in actions]
    for action in actions:
        action()
    for _ in range(runs):
        for index, action in enumerate(actions):
            start = time.perf_counter()
            action()
            samples[index].append(time.perf_counter() - start)
    return [statistics.median(taken) * 1000 for taken in samples]


def memo_medians(ranking: Ranking, new_share: float, runs: int) -> tuple[float, float]:
    """Median milliseconds of a render with a kept ``DocumentMemo`` and of one without, in
    alternation, each pass with ``new_share`` of the entries replaced by new objects (the
    same values: what ranking gives for a route it decided again)."""
    rng = random.Random(5)
    memo = DocumentMemo()
    entries = list(ranking.candidates)
    with_memo: list[float] = []
    without: list[float] = []
    for _ in range(runs + 1):
        for index in rng.sample(range(len(entries)), int(len(entries) * new_share)):
            entries[index] = tuple.__new__(RankedCandidate, tuple(entries[index]))
        current = Ranking(consumer=ranking.consumer, candidates=tuple(entries))
        start = time.perf_counter()
        kept = render_overlay(current, SCOPE, SOURCE, NOW, documents=memo)
        with_memo.append(time.perf_counter() - start)
        start = time.perf_counter()
        whole = render_overlay(current, SCOPE, SOURCE, NOW)
        without.append(time.perf_counter() - start)
        if kept.text != whole.text:
            raise SystemExit("a render with the document memo differs from one without")
    # The first pass fills the memo: not counted.
    return (
        statistics.median(with_memo[1:]) * 1000,
        statistics.median(without[1:]) * 1000,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=101)
    parser.add_argument("--new-share", type=float, default=0.4)
    parser.add_argument("--json", action="store_true", help="print the medians (ms) as JSON")
    args = parser.parse_args()

    pool = candidates(1500, seed=11, all_ranked=True)
    ranking = rank_candidates(pool, CONSUMER, ScoringConfig(), NOW)
    rendered = render_overlay(ranking, SCOPE, SOURCE, NOW)
    if (rendered.text, rendered.revision) != previous_render(ranking, SCOPE, SOURCE, NOW):
        raise SystemExit("render_overlay and the previous implementation disagree")
    if select_candidates(ranking.candidates) != _previous_select_candidates(ranking.candidates):
        raise SystemExit("select_candidates and the previous implementation disagree")
    count = len(rendered.candidates)
    overlay = rendered.document["overlay"]
    content = (overlay["network"], overlay["local_site"], overlay["candidates"])
    reference = dict(zip(("network", "local_site", "candidates"), content, strict=True))
    if content_digest(*content) != hashlib.sha256(rfc8785.dumps(reference)).hexdigest():
        raise SystemExit("content_digest disagrees with rfc8785")

    load_before = os.getloadavg()[0]
    new_ms, previous_ms = alternating_medians(
        [
            lambda: render_overlay(ranking, SCOPE, SOURCE, NOW),
            lambda: previous_render(ranking, SCOPE, SOURCE, NOW),
        ],
        args.runs,
    )
    memo_ms, whole_ms = memo_medians(ranking, args.new_share, args.runs)
    native_ms, reference_ms = alternating_medians(
        [
            lambda: content_digest(*content),
            lambda: hashlib.sha256(rfc8785.dumps(reference)).hexdigest(),
        ],
        args.runs,
    )
    if args.json:
        figures = {"render_ms": new_ms, "memo_render_ms": memo_ms, "digest_ms": native_ms}
        print(json.dumps({"figures": figures}))
        return
    print(
        f"render+digest {count} of {len(ranking.candidates)} ranked candidates "
        f"({len(rendered.text)} bytes): median {new_ms:.2f} ms; previous implementation "
        f"{previous_ms:.2f} ms; ratio {new_ms / previous_ms:.2f}x "
        f"({previous_ms / new_ms:.1f} times faster); target <= {TARGET_MS:.0f} ms: "
        f"{'met' if new_ms <= TARGET_MS else 'NOT met'}"
    )
    print(
        f"render+digest pass after pass, {args.new_share:.0%} of the entries new each time: "
        f"median {memo_ms:.2f} ms with the document memo; {whole_ms:.2f} ms without; "
        f"ratio {memo_ms / whole_ms:.2f}x"
    )
    print(
        f"content digest of the {count} candidates: median {native_ms:.2f} ms; "
        f"rfc8785.dumps + sha256 {reference_ms:.2f} ms; ratio {native_ms / reference_ms:.3f}x "
        f"({reference_ms / native_ms:.0f} times faster)"
    )
    # Other work on the machine slows both sides; the load says how much there was.
    print(
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after, "
        f"on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
