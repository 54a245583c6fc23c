"""grid._native's part of rendering an overlay: RFC 8785 canonical JSON and its SHA-256
checked byte for byte against the ``rfc8785`` package, compact JSON against ``json.dumps``,
on seeded random documents and on the edges (number notation boundaries, UTF-16 member
order, escapes), every refusal raising CanonicalJsonError naming the problem and where it
is; stable_id against FNV-1a in Python; score breakdowns bit for bit against
``score_breakdown``."""

from __future__ import annotations

import enum
import hashlib
import json
import math
import random
import struct
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import rfc8785

from grid import _native
from grid.errors import CanonicalJsonError
from grid.models.common import BackendKind, ScoringConfig, ScoringWeights
from grid.render.digest import CONTENT_MEMBERS, content_digest, document_json_and_digest
from grid.render.overlay import (
    OverlayScope,
    OverlaySource,
    candidate_document,
    render_overlay,
)
from grid.scoring.inputs import CandidateInput, ConsumingSite, Geography, Metrics, SecretRef
from grid.scoring.ranking import rank_candidates
from grid.scoring.signals import DECIMALS, ScoreBreakdown, SignalValues, score_breakdown

MAX_SAFE = 2**53 - 1


def compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def random_char(rng: random.Random) -> str:
    """Any Unicode scalar value, weighted towards the ranges where escaping and UTF-16
    order differ from the obvious."""
    low, high = rng.choice(
        [
            (0x00, 0x1F),  # control characters: escaped
            (0x20, 0x7F),  # ASCII, with '"' and '\\'
            (0x80, 0x7FF),
            (0x800, 0xD7FF),
            (0xE000, 0xFFFF),  # after the surrogates in code points, before them in UTF-16
            (0x10000, 0x10FFFF),  # astral: a surrogate pair in UTF-16
        ]
    )
    return chr(rng.randint(low, high))


def random_string(rng: random.Random) -> str:
    return "".join(random_char(rng) for _ in range(rng.randint(0, 8)))


def random_float(rng: random.Random) -> float:
    choice = rng.random()
    if choice < 0.3:  # any finite double, from its bits
        while True:
            value: float = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if math.isfinite(value):
                return value
    if choice < 0.6:  # across magnitudes, around the plain/exponent switches of both notations
        exponent = rng.choice([-324, -308, -8, -7, -6, -5, -4, -3, 15, 16, 17, 20, 21, 22, 308])
        exponent = rng.randint(exponent - 2, exponent + 2)
        return rng.choice([-1, 1]) * rng.uniform(1, 10) * 10.0 ** min(exponent, 307)
    if choice < 0.8:  # what the renderer writes: six decimals
        return round(rng.uniform(-20, 20), 6)
    return rng.choice(
        [0.0, -0.0, 1e21, 1e21 - 65536, 9.999999999999999e20, 1e-6, 1e-7, 0.1, 5e-324, 1e16]
    )


def random_int(rng: random.Random) -> int:
    if rng.random() < 0.5:
        return rng.randint(-MAX_SAFE, MAX_SAFE)
    return rng.choice([-1, 1]) * (MAX_SAFE - rng.randint(0, 3))


def random_value(rng: random.Random, depth: int) -> Any:
    kinds = ["str", "int", "float", "bool", "null"]
    if depth < 5:
        kinds += ["list", "object", "object"]
    kind = rng.choice(kinds)
    if kind == "str":
        return random_string(rng)
    if kind == "int":
        return random_int(rng)
    if kind == "float":
        return random_float(rng)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {random_string(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))}


RANDOM_DOCUMENTS = [random_value(random.Random(seed), 0) for seed in range(600)]


def test_random_documents_match_rfc8785_byte_for_byte() -> None:
    for document in RANDOM_DOCUMENTS:
        expected = rfc8785.dumps(document)
        assert _native.canonical_json(document) == expected, document
        assert _native.canonical_digest(document) == hashlib.sha256(expected).hexdigest()


def test_random_documents_match_json_dumps() -> None:
    for document in RANDOM_DOCUMENTS:
        assert _native.compact_json(document) == compact(document), document


def test_floats_across_magnitudes_match_both_references() -> None:
    rng = random.Random(8785)
    values = [random_float(rng) for _ in range(20_000)]
    values += [float(f"1e{exponent}") for exponent in range(-324, 309)]
    values += [math.nextafter(value, math.inf) for value in (1e21, 1e-7, 1e16, 1e-4)]
    values += [math.nextafter(value, 0.0) for value in (1e21, 1e-6, 1e16, 1e-4)]
    values += [float(MAX_SAFE), float(2**53), float(2**53 + 2), -0.0, 0.0]
    for value in values:
        assert _native.canonical_json(value) == rfc8785.dumps(value), repr(value)
        assert _native.compact_json(value) == compact(value), repr(value)
    # Sweeping the list once more as one document checks the same through the array path.
    assert _native.canonical_json(values) == rfc8785.dumps(values)


def test_integers_up_to_two_to_the_53() -> None:
    edges = [0, -1, 1, MAX_SAFE, -MAX_SAFE, MAX_SAFE - 1, 2**31, -(2**31), 2**32]
    assert _native.canonical_json(edges) == rfc8785.dumps(edges)
    huge = [2**53, -(2**53), 2**63 - 1, -(2**63), 2**64, 10**40, -(10**40)]
    # Compact JSON writes any integer, as json.dumps does.
    assert _native.compact_json(huge) == compact(huge)


def test_members_order_by_utf16_code_units() -> None:
    # U+FB33 sorts after U+1F600 in UTF-16 (the astral character's units are D83D DE00)
    # but before it in code points; RFC 8785 §3.2.3 takes UTF-16.
    names = ["\U0001f600", "\ufb33", "\u20ac", "\r", "1", "\x80", "\xf6", "\ue000", "a\U00010000"]
    document = {name: index for index, name in enumerate(names)}
    canonical = _native.canonical_json(document)
    assert canonical == rfc8785.dumps(document)
    order = list(json.loads(canonical))
    assert order == sorted(names, key=lambda name: name.encode("utf-16-be"))
    assert order.index("\U0001f600") < order.index("\ufb33")
    # Compact JSON keeps the document's order.
    assert list(json.loads(_native.compact_json(document))) == names


def test_strings_escape_what_jcs_requires() -> None:
    text = '"\\/\b\f\n\r\t\x00\x01\x1f\x7f\u2028\U0001f600é'
    assert _native.canonical_json(text) == rfc8785.dumps(text)
    assert _native.canonical_json(text) == (
        b'"\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u0001\\u001f\x7f' + "\u2028\U0001f600é".encode() + b'"'
    )
    assert _native.compact_json(text) == compact(text)


class Level(enum.IntEnum):
    HIGH = 3


class Colour(enum.StrEnum):
    RED = "red"


def test_subclasses_are_written_as_their_base_types() -> None:
    document = OrderedDict([("z", Level.HIGH), ("a", Colour.RED), ("flag", True), ("none", None)])
    assert _native.canonical_json(document) == rfc8785.dumps(document)
    assert _native.compact_json(document) == compact(document)


REFUSALS: list[tuple[Any, str]] = [
    ({"a": [1, {"b": math.nan}]}, "NaN is not a JSON number at $.a[1].b"),
    ([math.inf], "Infinity is not a JSON number at $[0]"),
    ({"x y": -math.inf}, '-Infinity is not a JSON number at $["x y"]'),
    (
        {"n": 2**53},
        "the integer 9007199254740992 is beyond ±(2**53 - 1), "
        "the integers a JSON number carries exactly at $.n",
    ),
    ([-(2**53) - 1], "the integer -9007199254740993 is beyond ±(2**53 - 1)"),
    ([2**64], "an integer beyond ±(2**53 - 1)"),
    ({"k": {1: "one"}}, "an object key of type int (keys must be str) at $.k"),
    ({(1, 2): "pair"}, "an object key of type tuple (keys must be str) at $"),
    ({"s": {1, 2}}, "a value of type set has no JSON form (JSON has dict, list, str, int, float"),
    ([b"bytes"], "a value of type bytes has no JSON form"),
    ([Decimal("1.5")], "a value of type Decimal has no JSON form"),
    (
        [object()],
        "a value of type object has no JSON form (JSON has dict, list, str, int, float, bool and None) at $[0]",
    ),
    ({"s": "\ud800"}, "a string holds a lone surrogate (U+D800..U+DFFF)"),
    ({"\udfff": 1}, "a string holds a lone surrogate"),
]


@pytest.mark.parametrize(("value", "message"), REFUSALS)
def test_refusals_name_the_problem_and_where(value: Any, message: str) -> None:
    with pytest.raises(CanonicalJsonError) as raised:
        _native.canonical_json(value)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)  # callers catching ValueError keep working
    with pytest.raises(ValueError):  # the reference refuses them as well
        rfc8785.dumps(value)
    with pytest.raises(CanonicalJsonError):
        _native.canonical_digest(value)


def test_tuples_are_refused_where_rfc8785_takes_them_for_lists() -> None:
    # JSON arrays are lists: a tuple in a document is a mistake to report, not to guess at.
    with pytest.raises(
        CanonicalJsonError, match=r"a value of type tuple has no JSON form .* at \$.t"
    ):
        _native.canonical_json({"t": (1, 2)})


def test_compact_json_refuses_what_json_cannot_carry() -> None:
    for value in ([math.nan], {1: 2}, [(1,)], ["\ud800"]):
        with pytest.raises(CanonicalJsonError):
            _native.compact_json(value)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"n": value}
    return value


def test_nesting_is_bounded() -> None:
    deepest = nested(_native.MAX_JSON_DEPTH)
    assert _native.canonical_json(deepest) == rfc8785.dumps(deepest)
    assert _native.compact_json(deepest) == compact(deepest)
    for serialize in (_native.canonical_json, _native.compact_json):
        with pytest.raises(CanonicalJsonError, match=r"nest deeper than 512 levels at \$"):
            serialize(nested(_native.MAX_JSON_DEPTH + 1))
        # Far beyond Python's own recursion limit: refused, not a crash.
        with pytest.raises(CanonicalJsonError):
            serialize(nested(100_000))


def test_threads_serializing_at_once_agree() -> None:
    documents = RANDOM_DOCUMENTS[:200]
    expected = [_native.canonical_json(document) for document in documents]
    results: dict[int, list[bytes]] = {}

    def work(worker: int) -> None:
        for _ in range(5):
            results[worker] = [_native.canonical_json(document) for document in documents]

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(results) == set(range(6))
    assert all(result == expected for result in results.values())


def test_content_digest_is_sha256_of_rfc8785() -> None:
    candidates = [document for document in RANDOM_DOCUMENTS[:50] if isinstance(document, dict)]
    reference = {"network": "mesh", "local_site": "east", "candidates": candidates}
    expected = hashlib.sha256(rfc8785.dumps(reference)).hexdigest()
    assert content_digest("mesh", "east", candidates) == expected
    assert content_digest("mesh", "east", tuple(candidates)) == expected


PENDING = object()


def test_document_json_and_digest_is_one_walk_of_both() -> None:
    candidates = [document for document in RANDOM_DOCUMENTS[:80] if isinstance(document, dict)]
    document = {
        "revision": {"value": PENDING},
        "overlay": {
            "network": "mesh",
            "local_site": "east",
            "candidates": candidates,
            "generated_at": "2026-07-29T12:00:00Z",
        },
        "digest": PENDING,
    }
    encoded, digest = document_json_and_digest(document, PENDING)
    assert digest == content_digest("mesh", "east", candidates)
    filled = {**document, "revision": {"value": digest}, "digest": digest}
    assert encoded == compact(filled)


def test_document_json_and_digest_refuses_a_missing_member() -> None:
    with pytest.raises(CanonicalJsonError, match=r'no member "overlay" at \$'):
        document_json_and_digest({"revision": PENDING}, PENDING)
    overlay = {"network": "mesh", "candidates": []}
    with pytest.raises(CanonicalJsonError, match=r'no member "local_site" at \$.overlay'):
        document_json_and_digest({"overlay": overlay}, PENDING)
    overlay = {"network": "mesh", "local_site": "east", "candidates": [{"score": math.nan}]}
    with pytest.raises(CanonicalJsonError, match=r"at \$.overlay.candidates\[0\].score"):
        document_json_and_digest({"overlay": overlay}, PENDING)
    # The placeholder stands for the digest, which cannot be part of what it digests.
    overlay = {"network": PENDING, "local_site": "east", "candidates": []}
    with pytest.raises(CanonicalJsonError, match="has no JSON form"):
        document_json_and_digest({"overlay": overlay}, PENDING)
    assert CONTENT_MEMBERS == ("network", "local_site", "candidates")


def random_objects(seed: int) -> list[dict[str, Any]]:
    """Objects of random members, none named ``rank``: some sort before it, some after."""
    rng = random.Random(seed)
    objects = []
    for _ in range(rng.randint(0, 12)):
        value = random_value(rng, 1)
        if not isinstance(value, dict):
            value = {}
        value.pop("rank", None)
        for name in rng.sample(["a", "rank_", "ran", "z", "\U0001f600", ""], rng.randint(0, 3)):
            value[name] = random_value(rng, 3)
        objects.append(value)
    return objects


@pytest.mark.parametrize("seed", range(40))
def test_object_forms_are_the_objects_with_their_index(seed: int) -> None:
    objects = random_objects(seed)
    forms = [_native.ObjectForms(value, "rank") for value in objects]
    plain = [{**value, "rank": index} for index, value in enumerate(objects)]
    assert _native.canonical_json(forms) == rfc8785.dumps(plain)
    assert _native.compact_json(forms) == compact(plain)
    # Inside the content of a document, where both forms are written in one walk.
    overlay = {"network": "mesh", "local_site": "east", "candidates": forms}
    encoded, digest = document_json_and_digest({"overlay": overlay, "at": PENDING}, PENDING)
    assert digest == content_digest("mesh", "east", plain)
    assert encoded == compact({"overlay": {**overlay, "candidates": plain}, "at": digest})


def test_object_forms_refusals_name_the_problem() -> None:
    with pytest.raises(CanonicalJsonError, match='already has member "rank"'):
        _native.ObjectForms({"name": "a", "rank": 3}, "rank")
    with pytest.raises(CanonicalJsonError, match=r"NaN is not a JSON number at \$.score"):
        _native.ObjectForms({"name": "a", "score": math.nan}, "rank")
    forms = _native.ObjectForms({"name": "a"}, "rank")
    for outside in (forms, {"one": forms}):
        with pytest.raises(CanonicalJsonError, match="as list elements only"):
            _native.canonical_json(outside)
        with pytest.raises(CanonicalJsonError, match="as list elements only"):
            _native.compact_json(outside)
    overlay = {"network": "mesh", "local_site": forms, "candidates": []}
    with pytest.raises(
        CanonicalJsonError, match=r"list elements only \(for their index\) at \$.overlay.local_site"
    ):
        document_json_and_digest({"overlay": overlay}, PENDING)


def test_rendered_overlay_is_what_the_references_write() -> None:
    now = datetime(2026, 7, 29, 12, 0, tzinfo=UTC)
    rng = random.Random(16)
    pool = [
        CandidateInput(
            provider=f"provider-{index}",
            model=f"model-{index % 40}",
            site=f"site-{index % 7}",
            cluster=f"cluster-{index}",
            backend_kind=rng.choice(list(BackendKind)),
            geography=Geography(f"region-{index % 3}"),
            metrics=Metrics(queue_depth=rng.uniform(0, 60), p99_latency_ms=rng.uniform(40, 9000)),
            healthy=True,
            updated_at=now,
            credential=SecretRef(f"key-{index}", "grid-system", "token") if index % 3 else None,
        )
        for index in range(300)
    ]
    consumer = ConsumingSite("site-0", Geography("region-0"), {})
    ranking = rank_candidates(pool, consumer, ScoringConfig(), now)
    scope = OverlayScope("mesh", "gw", "grid-system", "site-0")
    rendered = render_overlay(ranking, scope, OverlaySource("mesh", "uid", 3), now)
    document = rendered.document
    # Each candidate as the plain dict it stands for: the rendered text is json.dumps of it.
    expected = [candidate_document(entry, rank) for rank, entry in enumerate(rendered.candidates)]
    overlay = document["overlay"]
    assert rendered.text.encode() == compact(
        {**document, "overlay": {**overlay, "candidates": expected}}
    )
    content = {name: overlay[name] for name in CONTENT_MEMBERS}
    assert rendered.revision == hashlib.sha256(rfc8785.dumps(content)).hexdigest()
    assert document["revision"]["value"] == document["content_digest"]["value"] == rendered.revision


def test_stable_id_is_fnv1a_of_the_path() -> None:
    def reference(data: bytes) -> int:
        value = 2166136261
        for byte in data:
            value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
        return value

    rng = random.Random(32)
    for _ in range(200):
        parts = [random_string(rng).replace("\ud800", "") for _ in range(4)]
        path = "/".join(parts).encode()
        assert _native.fnv1a_32(path) == reference(path)
        assert _native.stable_id(*parts) == f"{reference(path):08x}"


def test_score_breakdowns_match_score_breakdown() -> None:
    rng = random.Random(175)
    weight_choices = [0.0, 1.0, 3.0, 0.5, 1e-7, 2.5e9, 1e12]

    def number(choices: list[float]) -> float:
        pick = rng.random()
        if pick < 0.4:
            return rng.random()
        if pick < 0.6:  # exact binary fractions: true ties at six decimals
            return rng.randint(0, 1024) / 128
        if pick < 0.8:
            return rng.choice(choices)
        return rng.uniform(-5, 5) * 10.0 ** rng.randint(-9, 4)

    rows = [
        (
            SignalValues(*(number([0.0, 1.0, 0.5, 1e-7]) for _ in SignalValues._fields)),
            ScoringWeights.model_construct(
                **{name: number(weight_choices) for name in SignalValues._fields}
            ),
        )
        for _ in range(5000)
    ]
    native = _native.score_breakdowns(
        [signals for signals, _ in rows],
        [[getattr(weights, name) for name in SignalValues._fields] for _, weights in rows],
        DECIMALS,
        ScoreBreakdown._fields,
    )
    for (signals, weights), breakdown in zip(rows, native, strict=True):
        expected = score_breakdown(signals, weights).as_wire()
        assert list(breakdown) == list(expected)
        # Bit for bit, so that -0.0 and 0.0 count as different.
        assert [struct.pack("<d", value) for value in breakdown.values()] == [
            struct.pack("<d", value) for value in expected.values()
        ], (signals, weights)


def test_score_breakdowns_refuse_rows_that_do_not_fit() -> None:
    names = ScoreBreakdown._fields
    with pytest.raises(ValueError, match="1 rows of signals but 0 of weights"):
        _native.score_breakdowns([[1.0] * 6], [], DECIMALS, names)
    with pytest.raises(ValueError, match="row 0: 5 signals and 6 weights for 7 names"):
        _native.score_breakdowns([[1.0] * 5], [[1.0] * 6], DECIMALS, names)
