"""Rendering the overlay document: envelope, digest, stable ids, credentials, limits."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from grid import __version__
from grid.errors import EmptyOverlayError, OverlayRenderError
from grid.models.common import BackendKind, ScoringConfig
from grid.render.digest import content_digest, fnv1a_32, stable_id
from grid.render.overlay import (
    MAX_CANDIDATES,
    DocumentMemo,
    OverlayScope,
    OverlaySource,
    render_overlay,
    rfc3339,
    select_candidates,
)
from grid.render.validate import ExpectedScope, validate_overlay
from grid.scoring.inputs import CandidateInput, ConsumingSite, Geography, Metrics, SecretRef
from grid.scoring.ranking import LeftOutReason, Ranking, ScoringMemo, rank_candidates

NOW = datetime(2026, 7, 29, 12, 0, tzinfo=UTC)
CONSUMER = ConsumingSite("east", Geography("us-east", "us-east-1a"), {})
SCOPE = OverlayScope(network="mesh", gateway="gw", namespace="grid-system", local_site="east")
SOURCE = OverlaySource(name="mesh", uid="uid-1", generation=4)
TOKEN_REF = SecretRef(name="openai-api-key", namespace="grid-system", key="token")


def candidate(provider: str, model: str = "m", **overrides: Any) -> CandidateInput:
    fields: dict[str, Any] = {
        "provider": provider,
        "model": model,
        "site": "east",
        "cluster": provider,
        "backend_kind": BackendKind.LOCAL,
        "geography": Geography("us-east", "us-east-1a"),
    }
    fields.update(overrides)
    return CandidateInput(**fields)


def ranking(*candidates: CandidateInput) -> Ranking:
    return rank_candidates(candidates, CONSUMER, ScoringConfig(), NOW)


def sample() -> Ranking:
    return ranking(
        candidate("vllm", "llama", metrics=Metrics(queue_depth=4, p99_latency_ms=800)),
        candidate("openai", "gpt-4o", backend_kind=BackendKind.API_PROVIDER, credential=TOKEN_REF),
        candidate(
            "west", "llama", site="west", cluster="site-west", geography=Geography("us-west")
        ),
    )


def test_fnv1a_known_vectors() -> None:
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


def test_stable_id_hashes_kind_name_site_cluster() -> None:
    expected = f"{fnv1a_32(b'inference_model/llama/east/vllm'):08x}"
    assert stable_id("inference_model", "llama", "east", "vllm") == expected
    assert len(expected) == 8
    assert stable_id("inference_model", "llama", "east", "vllm2") != expected


def test_the_rendered_document_follows_the_contract() -> None:
    rendered = render_overlay(sample(), SCOPE, SOURCE, NOW)
    document = rendered.document
    assert list(document) == [
        "schema_version",
        "revision",
        "content_digest",
        "scope",
        "provenance",
        "overlay",
    ]
    assert document["schema_version"] == "1.0.0"
    assert document["revision"] == {
        "kind": "content_addressed",
        "algorithm": "sha256",
        "value": rendered.revision,
    }
    assert document["content_digest"] == {"algorithm": "sha256", "value": rendered.revision}
    assert document["scope"] == {
        "network": "mesh",
        "gateway": "gw",
        "namespace": "grid-system",
        "local_site": "east",
    }
    assert document["provenance"] == {
        "producer": "grid",
        "producer_version": __version__,
        "source_name": "mesh",
        "source_uid": "uid-1",
        "source_generation": 4,
        "rendered_at": "2026-07-29T12:00:00Z",
    }
    overlay = document["overlay"]
    assert overlay["generated_at"] == "2026-07-29T12:00:00Z"
    assert rendered.revision == content_digest("mesh", "east", overlay["candidates"])
    first = overlay["candidates"][0]
    assert list(first) == [
        "kind",
        "name",
        "site",
        "cluster",
        "fresh",
        "stable_id",
        "admission_state",
        "selection_tier",
        "score",
        "score_breakdown",
        "rank",
    ]
    assert [c["rank"] for c in overlay["candidates"]] == [0, 1, 2]
    # Self-hosted before external: the API at the consuming site comes after the cross-region
    # self-hosted candidate.
    assert [c["name"] for c in overlay["candidates"]] == ["llama", "llama", "gpt-4o"]
    assert first["stable_id"] == stable_id("inference_model", "llama", "east", "vllm")
    assert first["admission_state"] == "new_and_existing"
    assert first["selection_tier"] == "same_site"
    assert overlay["candidates"][1]["selection_tier"] == "cross_region"
    assert overlay["candidates"][2]["selection_tier"] == "same_site"
    assert first["score_breakdown"]["total"] == pytest.approx(first["score"] * 13, abs=1e-5)


def test_the_rendered_text_is_accepted_by_the_validator() -> None:
    rendered = render_overlay(sample(), SCOPE, SOURCE, NOW)
    expected = ExpectedScope(
        network="mesh", gateway="gw", namespace="grid-system", local_site="east"
    )
    assert str(validate_overlay(rendered.text, expected)) == f"accept {rendered.revision}"
    assert json.loads(rendered.text) == rendered.document


def test_credentials_are_references_only() -> None:
    rendered = render_overlay(sample(), SCOPE, SOURCE, NOW)
    with_credential = [c for c in rendered.document["overlay"]["candidates"] if "credential" in c]
    assert [c["name"] for c in with_credential] == ["gpt-4o"]
    assert with_credential[0]["credential"] == {
        "strategy": "bearer_token",
        "secretRef": {"name": "openai-api-key", "namespace": "grid-system", "key": "token"},
    }


def test_rendering_later_with_the_same_content_keeps_the_revision() -> None:
    first = render_overlay(sample(), SCOPE, SOURCE, NOW)
    later = render_overlay(
        sample(), SCOPE, OverlaySource("mesh", "uid-1", 9), NOW + timedelta(hours=5)
    )
    assert later.revision == first.revision
    assert later.text != first.text
    other_scope = OverlayScope("mesh", "other-gw", "ns", "east")
    assert render_overlay(sample(), other_scope, SOURCE, NOW).revision == first.revision


@pytest.mark.parametrize("seed", range(5))
def test_documents_kept_across_renders_render_the_same_bytes(seed: int) -> None:
    """Passes that keep most route objects (a scoring memo), change some candidates' load,
    add and drop others, with a cut below the ranking's size: with a document memo the
    rendered text is the text rendered without one, pass after pass."""
    rng = random.Random(seed)
    routes = {
        f"p{index}": (
            candidate(f"p{index}", f"m{index % 7}", credential=TOKEN_REF if index % 3 else None),
        )
        for index in range(60)
    }
    scoring, documents = ScoringMemo(), DocumentMemo()
    for step in range(8):
        for name in rng.sample(sorted(routes), 12):
            load = Metrics(queue_depth=rng.uniform(0, 40), p99_latency_ms=rng.uniform(50, 900))
            routes[name] = (candidate(name, f"m{int(name[1:]) % 7}", metrics=load),)
        if step % 3 == 2:
            routes.pop(rng.choice(sorted(routes)))
        ranked = rank_candidates(
            [], CONSUMER, ScoringConfig(), NOW, memo=scoring, routes=list(routes.values())
        )
        with_memo = render_overlay(
            ranked, SCOPE, SOURCE, NOW, max_candidates=40, documents=documents
        )
        without = render_overlay(ranked, SCOPE, SOURCE, NOW, max_candidates=40)
        assert with_memo.text == without.text, step
        assert with_memo.document == without.document


def test_a_content_change_changes_the_revision() -> None:
    first = render_overlay(sample(), SCOPE, SOURCE, NOW)
    busier = ranking(
        candidate("vllm", "llama", metrics=Metrics(queue_depth=5, p99_latency_ms=800)),
        candidate("openai", "gpt-4o", backend_kind=BackendKind.API_PROVIDER, credential=TOKEN_REF),
        candidate(
            "west", "llama", site="west", cluster="site-west", geography=Geography("us-west")
        ),
    )
    assert render_overlay(busier, SCOPE, SOURCE, NOW).revision != first.revision


def test_no_candidate_means_no_overlay() -> None:
    empty = ranking(candidate("sick", healthy=False))
    with pytest.raises(EmptyOverlayError, match="keeping the previous overlay") as error:
        render_overlay(empty, SCOPE, SOURCE, NOW)
    assert "unhealthy" in str(error.value)
    assert len(error.value.left_out) == 1


@pytest.mark.parametrize(
    ("scope", "source", "match"),
    [
        (SCOPE, OverlaySource("other-mesh", "uid", 1), "not the scope's network"),
        (OverlayScope("mesh", "gw", "ns", "west"), SOURCE, "made for site 'east'"),
    ],
)
def test_inconsistent_scope_is_refused(
    scope: OverlayScope, source: OverlaySource, match: str
) -> None:
    with pytest.raises(OverlayRenderError, match=match):
        render_overlay(sample(), scope, source, NOW)


def test_bad_scope_and_source_values_are_refused() -> None:
    with pytest.raises(OverlayRenderError, match="gateway"):
        OverlayScope("mesh", " ", "ns", "east")
    with pytest.raises(OverlayRenderError, match="generation"):
        OverlaySource("mesh", "uid", 0)
    with pytest.raises(OverlayRenderError, match="generation"):
        OverlaySource("mesh", "uid", True)
    with pytest.raises(OverlayRenderError, match="uid"):
        OverlaySource("mesh", "", 1)
    with pytest.raises(OverlayRenderError, match="time zone"):
        rfc3339(datetime(2026, 1, 1))
    with pytest.raises(OverlayRenderError, match="max_candidates"):
        render_overlay(sample(), SCOPE, SOURCE, NOW, max_candidates=MAX_CANDIDATES + 1)


def test_rfc3339_is_utc_with_whole_seconds() -> None:
    moment = datetime(2026, 7, 29, 14, 30, 5, 999_999, tzinfo=UTC).astimezone()
    assert rfc3339(moment) == "2026-07-29T14:30:05Z"


# --- the candidate limit ----------------------------------------------------------------------


def test_truncation_keeps_the_best_of_every_model_first() -> None:
    crowd = [
        candidate(f"p{index:04d}", "popular", metrics=Metrics(queue_depth=index % 50))
        for index in range(MAX_CANDIDATES + 10)
    ]
    rare = candidate(
        "rare", "niche", site="west", cluster="site-west", geography=Geography("us-west")
    )
    full = ranking(*crowd, rare)
    assert full.candidates[-1].candidate.model == "niche"
    rendered = render_overlay(full, SCOPE, SOURCE, NOW)
    names = [c["name"] for c in rendered.document["overlay"]["candidates"]]
    assert len(names) == MAX_CANDIDATES
    assert names[-1] == "niche"
    assert [c["rank"] for c in rendered.document["overlay"]["candidates"]] == list(
        range(MAX_CANDIDATES)
    )
    assert len(rendered.truncated) == 11
    assert {entry.reason for entry in rendered.truncated} == {LeftOutReason.TRUNCATED}
    cut = {entry.candidate.key for entry in rendered.truncated}
    assert cut == {entry.candidate.key for entry in full.candidates[MAX_CANDIDATES - 1 : -1]}
    assert validate_overlay(rendered.text).accepted


def test_select_candidates_keeps_order_and_respects_a_smaller_limit() -> None:
    full = ranking(
        candidate("a1", "a", metrics=Metrics(queue_depth=1)),
        candidate("a2", "a", metrics=Metrics(queue_depth=2)),
        candidate("a3", "a", metrics=Metrics(queue_depth=3)),
        candidate("b1", "b", metrics=Metrics(queue_depth=10)),
        candidate("c1", "c", metrics=Metrics(queue_depth=20)),
    )
    kept, cut = select_candidates(full.candidates, 4)
    assert [entry.candidate.provider for entry in kept] == ["a1", "a2", "b1", "c1"]
    assert [entry.candidate.provider for entry in cut] == ["a3"]
    kept, cut = select_candidates(full.candidates, 2)
    assert [entry.candidate.provider for entry in kept] == ["a1", "b1"]
    assert len(cut) == 3
    kept, cut = select_candidates(full.candidates, 5)
    assert len(kept) == 5
    assert cut == ()


def test_a_document_over_2_mib_is_refused() -> None:
    def long(prefix: str, index: int) -> str:
        # A control character takes six bytes once escaped in JSON.
        return f"{prefix}{index:04d}".ljust(256, "\x01")

    big = ranking(
        *(
            candidate(
                long("p", index),
                long("m", index),
                cluster=long("c", index),
                credential=SecretRef(long("s", index), long("n", index), long("k", index)),
            )
            for index in range(MAX_CANDIDATES)
        )
    )
    with pytest.raises(OverlayRenderError, match="over the contract's"):
        render_overlay(big, SCOPE, SOURCE, NOW)
