"""The overlay validator against the gateway project's acceptance fixtures, and every rule
of the contract at its edges, through the function and through ``grid overlay verify``."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from grid.cli import main
from grid.render.digest import content_digest
from grid.render.validate import ExpectedScope, RejectReason, VerdictKind, validate_overlay

REPO = Path(__file__).resolve().parent.parent
VENDORED = REPO / "tests" / "fixtures" / "overlay-contract-v1"
SHARED = REPO.parent / "shared" / "fixtures" / "overlay-contract-v1"
MANIFEST = json.loads((VENDORED / "manifest.json").read_text())["fixtures"]


def expected_verdict(entry: dict[str, str]) -> str:
    if entry["expected"] == "accept":
        return f"accept {entry['revision']}"
    if entry["expected"] == "reject":
        return f"reject {entry['reason']}"
    return entry["expected"]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_every_fixture_verdict_and_revision(name: str) -> None:
    verdict = validate_overlay((VENDORED / name).read_bytes())
    assert str(verdict) == expected_verdict(MANIFEST[name])
    if "content_digest" in MANIFEST[name]:
        assert verdict.revision == MANIFEST[name]["content_digest"]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_grid_overlay_verify_reproduces_every_fixture(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["overlay", "verify", str(VENDORED / name)])
    out = capsys.readouterr().out
    assert out == expected_verdict(MANIFEST[name]) + "\n"
    assert code == (1 if MANIFEST[name]["expected"] == "reject" else 0)


def test_the_manifest_covers_every_vendored_fixture() -> None:
    files = {path.name for path in VENDORED.glob("*.json")} - {"manifest.json"}
    assert files == set(MANIFEST)


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared fixtures are not beside the repo")
def test_the_vendored_fixtures_match_the_shared_ones() -> None:
    shared = {path.name: path.read_bytes() for path in SHARED.iterdir() if path.is_file()}
    vendored = {path.name: path.read_bytes() for path in VENDORED.iterdir() if path.is_file()}
    assert vendored == shared


# --- the rules at their edges -------------------------------------------------------------

BASE = json.loads((VENDORED / "valid-multi-candidate.json").read_text())


def sealed(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with its digest and revision recomputed, so only the edit is judged."""
    overlay = document["overlay"]
    digest = content_digest(overlay["network"], overlay["local_site"], overlay["candidates"])
    document["content_digest"]["value"] = digest
    document["revision"]["value"] = digest
    return document


def edited(path: str, value: Any, *, seal: bool = True) -> dict[str, Any]:
    """A copy of the valid document with the field at ``path`` (dotted, ``-`` deletes) set."""
    document = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    holder: Any = document
    for part in parents:
        holder = holder[int(part)] if isinstance(holder, list) else holder[part]
    if value == "-":
        del holder[last]
    elif isinstance(holder, list):
        holder[int(last)] = value
    else:
        holder[last] = value
    return sealed(document) if seal else document


def verdict_of(document: object, expected: ExpectedScope | None = None) -> str:
    return str(validate_overlay(json.dumps(document).encode(), expected))


def test_the_base_document_is_accepted() -> None:
    assert verdict_of(BASE) == f"accept {BASE['revision']['value']}"


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"[1, 2]", b'"text"', b"\xff\xfe{}", b"{}", b'{"overlay": {}}'],
)
def test_what_is_not_an_overlay_object_is_malformed(raw: bytes) -> None:
    assert str(validate_overlay(raw)) == "reject malformed_structure"


def test_duplicate_keys_and_non_json_numbers_are_malformed() -> None:
    text = json.dumps(BASE)
    duplicated = text.replace(
        '"schema_version": "1.0.0"', '"schema_version": "1.0.0", "schema_version": "1.0.0"'
    )
    assert str(validate_overlay(duplicated)) == "reject malformed_structure"
    legacy_nan = '{"network": "n", "local_site": "s", "candidates": [{"score": NaN}]}'
    assert str(validate_overlay(legacy_nan)) == "reject malformed_structure"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("schema_version", 1),
        ("scope", "glb-demo"),
        ("provenance", []),
        ("overlay", None),
        ("revision.value", 5),
        ("content_digest.algorithm", None),
        ("scope.gateway", 7),
        ("provenance.source_generation", "1"),
        ("provenance.source_generation", True),
        ("overlay.candidates", {}),
        ("overlay.network", ["glb-demo"]),
        ("overlay.generated_at", 0),
    ],
)
def test_envelope_fields_of_the_wrong_type_are_malformed(path: str, value: Any) -> None:
    assert verdict_of(edited(path, value, seal=False)) == "reject malformed_structure"


def test_a_bare_payload_is_legacy_and_must_still_be_one() -> None:
    payload = copy.deepcopy(BASE["overlay"])
    assert verdict_of(payload) == "accept_legacy"
    del payload["candidates"]
    assert verdict_of(payload) == "reject malformed_structure"


def test_any_envelope_field_makes_an_envelope() -> None:
    payload = copy.deepcopy(BASE["overlay"])
    for name in ("revision", "content_digest", "scope", "provenance"):
        document = {**payload, name: copy.deepcopy(BASE[name])}
        assert verdict_of(document) == "reject missing_schema_version"


@pytest.mark.parametrize("version", ["1.0", "1.0.1", "2.0.0", ""])
def test_only_schema_1_0_0_is_supported(version: str) -> None:
    assert verdict_of(edited("schema_version", version)) == "reject unsupported_schema_version"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("revision.kind", "sequential"),
        ("revision.algorithm", "sha512"),
        ("content_digest.algorithm", "md5"),
        ("revision.kind", "-"),
        ("revision", "-"),
        ("content_digest", "-"),
        ("overlay", "-"),
        ("overlay.local_site", "-"),
    ],
)
def test_revision_and_digest_must_be_content_addressed_sha256(path: str, value: Any) -> None:
    assert verdict_of(edited(path, value, seal=False)) == "reject malformed_structure"


@pytest.mark.parametrize("value", ["ABCDEF" + "0" * 58, "0" * 63, "0" * 65, "g" * 64])
def test_digest_values_must_be_64_lowercase_hex(value: str) -> None:
    assert verdict_of(edited("content_digest.value", value, seal=False)) == (
        "reject malformed_structure"
    )
    assert verdict_of(edited("revision.value", value, seal=False)) == ("reject malformed_structure")


def test_any_change_inside_the_digest_is_a_digest_mismatch() -> None:
    for path, value in [
        ("overlay.candidates.0.rank", 5),
        ("overlay.candidates.1.extra", "field"),
        ("overlay.network", "other"),
    ]:
        assert verdict_of(edited(path, value, seal=False)) == "reject digest_mismatch"


def test_timestamps_scope_and_provenance_are_outside_the_digest() -> None:
    document = edited("overlay.generated_at", "2030-01-01T00:00:00Z", seal=False)
    document["provenance"]["rendered_at"] = "2030-01-01T00:00:00+02:00"
    document["provenance"]["producer"] = "someone-else"
    document["scope"]["gateway"] = "another-gateway"
    assert verdict_of(document) == f"accept {BASE['revision']['value']}"


def test_a_number_json_cannot_carry_exactly_is_malformed() -> None:
    document = edited("overlay.candidates.0.score", 2**60, seal=False)
    assert verdict_of(document) == "reject malformed_structure"


def test_the_reader_can_require_a_scope() -> None:
    assert verdict_of(BASE, ExpectedScope(network="glb-demo", local_site="east-edge")).startswith(
        "accept"
    )
    for field, value in [
        ("network", "other"),
        ("gateway", "other"),
        ("namespace", "other"),
        ("local_site", "other"),
    ]:
        expected = ExpectedScope(**{field: value})
        assert verdict_of(BASE, expected) == "reject scope_mismatch"


def test_scope_fields_are_required() -> None:
    assert verdict_of(edited("scope.namespace", "-")) == "reject malformed_structure"
    assert verdict_of(edited("scope", "-")) == "reject malformed_structure"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("provenance", "-"),
        ("provenance.producer", "-"),
        ("provenance.producer", " "),
        ("provenance.source_name", "another-network"),
        ("provenance.source_generation", 0),
        ("provenance.source_generation", -3),
        ("provenance.rendered_at", "yesterday"),
        ("provenance.rendered_at", "2026-13-01T00:00:00Z"),
        ("provenance.rendered_at", "2026-07-29 00:00:00"),
        ("provenance.rendered_at", "2026-07-29T00:00:00+24:00"),
        ("overlay.generated_at", "2026-02-30T00:00:00Z"),
        ("scope.gateway", ""),
        ("scope.namespace", "n" * 257),
        ("overlay.candidates", []),
        ("overlay.candidates.0.name", ""),
        ("overlay.candidates.0.site", "   "),
        ("overlay.candidates.0.cluster", "c" * 257),
        ("overlay.candidates.0.kind", "database"),
        ("overlay.candidates.0.kind", "-"),
        ("overlay.candidates.1", "not an object"),
        ("overlay.candidates.0.fresh", "yes"),
        ("overlay.candidates.0.stable_id", 12),
        ("overlay.candidates.0.admission_state", "maybe"),
        ("overlay.candidates.0.selection_tier", "next_door"),
        ("overlay.candidates.0.score", "high"),
        ("overlay.candidates.0.score_breakdown", {"locality": "high"}),
        ("overlay.candidates.0.score_breakdown", {"charm": 1}),
        ("overlay.candidates.0.rank", -1),
        ("overlay.candidates.0.credential.strategy", "api_key"),
        ("overlay.candidates.0.credential.token", "sk-live"),
        ("overlay.candidates.0.credential.secretRef.value", "sk-live"),
        ("overlay.candidates.0.credential.secretRef.key", "-"),
        ("overlay.candidates.0.credential.secretRef.name", ""),
        ("overlay.candidates.0.credential", "openai-api-key"),
    ],
)
def test_provenance_and_candidate_rules(path: str, value: Any) -> None:
    assert verdict_of(edited(path, value)) == "reject malformed_structure"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("provenance.rendered_at", "2026-06-30T23:59:60Z"),
        ("provenance.rendered_at", "2026-07-29T00:00:00.123456-07:00"),
        ("overlay.candidates.0.kind", "mcp_tool"),
        ("overlay.candidates.0.name", "é" * 128),
        ("overlay.candidates.0.score", 0.5),
        ("overlay.candidates.0.surprise", {"nested": [1, 2]}),
        ("overlay.generated_at", "-"),
    ],
)
def test_what_the_rules_allow_is_accepted(path: str, value: Any) -> None:
    assert verdict_of(edited(path, value)).startswith("accept ")


def test_candidates_must_be_distinct_routes() -> None:
    document = copy.deepcopy(BASE)
    twin = copy.deepcopy(document["overlay"]["candidates"][0])
    twin["rank"] = 2
    document["overlay"]["candidates"].append(twin)
    assert verdict_of(sealed(document)) == "reject malformed_structure"
    twin["cluster"] = "another-cluster"
    assert verdict_of(sealed(document)).startswith("accept ")


def test_between_one_and_1024_candidates() -> None:
    def with_candidates(count: int) -> dict[str, Any]:
        document = copy.deepcopy(BASE)
        document["overlay"]["candidates"] = [
            {"kind": "inference_model", "name": f"m{i}", "site": "s", "cluster": "c", "rank": i}
            for i in range(count)
        ]
        return sealed(document)

    assert verdict_of(with_candidates(1024)).startswith("accept ")
    assert verdict_of(with_candidates(1025)) == "reject malformed_structure"


def test_a_document_over_2_mib_is_too_large() -> None:
    document = copy.deepcopy(BASE)
    document["overlay"]["candidates"][1]["padding"] = "x" * (2 * 1024 * 1024)
    verdict = validate_overlay(json.dumps(sealed(document)))
    assert verdict.kind is VerdictKind.REJECT
    assert verdict.reason is RejectReason.TOO_LARGE
    document["overlay"]["candidates"][1]["padding"] = "x" * (2 * 1024 * 1024 - 2000)
    assert verdict_of(sealed(document)).startswith("accept ")


def test_rules_apply_in_the_contract_order() -> None:
    # Wrong digest and wrong scope: the digest rule comes first.
    document = edited("scope.network", "elsewhere", seal=False)
    document["content_digest"]["value"] = "0" * 64
    assert verdict_of(document) == "reject digest_mismatch"
    # Both digests wrong and different: digest_mismatch, not revision_digest_mismatch.
    document["revision"]["value"] = "1" * 64
    assert verdict_of(document) == "reject digest_mismatch"
    # Scope mismatch before a malformed candidate.
    document = edited("overlay.candidates.0.name", "")
    document["scope"]["local_site"] = "elsewhere"
    assert verdict_of(document) == "reject scope_mismatch"


# --- the command ------------------------------------------------------------------------------


def test_verify_reads_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io
    import sys

    data = (VENDORED / "valid-minimal.json").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["overlay", "verify", "-"]) == 0
    assert capsys.readouterr().out.startswith("accept abd5f485")


def test_verify_checks_the_expected_scope(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(VENDORED / "valid-multi-candidate.json")
    assert (
        main(
            [
                "overlay",
                "verify",
                path,
                "--network",
                "glb-demo",
                "--gateway",
                "glb-demo-edge-gateway",
                "--namespace",
                "grid-system",
                "--local-site",
                "east-edge",
            ]
        )
        == 0
    )
    assert main(["overlay", "verify", path, "--local-site", "west-edge"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "reject scope_mismatch"
    assert "expected 'west-edge'" in captured.err


def test_verify_reports_an_unreadable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["overlay", "verify", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["overlay", "verify", str(tmp_path)]) == 2


def test_verify_without_a_file_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["overlay", "verify"])
    assert exit_info.value.code == 2
