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
FIXTURES = REPO / "tests" / "fixtures"
SHARED_ROOT = REPO.parent / "shared"
SUITES = ("overlay-contract-v1", "overlay-contract-v1-credentials")
"""The gateway's acceptance suite: the twelve first fixtures, and the three it gained with
the apikey credential strategy (each directory with its own manifest)."""
VENDORED = FIXTURES / SUITES[0]
MANIFESTS = {
    suite: json.loads((FIXTURES / suite / "manifest.json").read_text())["fixtures"]
    for suite in SUITES
}
MANIFEST = MANIFESTS[SUITES[0]]
CASES = sorted((suite, name) for suite, manifest in MANIFESTS.items() for name in manifest)


def expected_verdict(entry: dict[str, str]) -> str:
    if entry["expected"] == "accept":
        return f"accept {entry['revision']}"
    if entry["expected"] == "reject":
        return f"reject {entry['reason']}"
    return entry["expected"]


def test_the_suites_hold_fifteen_fixtures() -> None:
    assert len(CASES) == 15


@pytest.mark.parametrize(("suite", "name"), CASES)
def test_every_fixture_verdict_and_revision(suite: str, name: str) -> None:
    entry = MANIFESTS[suite][name]
    verdict = validate_overlay((FIXTURES / suite / name).read_bytes())
    assert str(verdict) == expected_verdict(entry)
    if "content_digest" in entry:
        assert verdict.revision == entry["content_digest"]


@pytest.mark.parametrize(("suite", "name"), CASES)
def test_grid_overlay_verify_reproduces_every_fixture(
    suite: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = MANIFESTS[suite][name]
    code = main(["overlay", "verify", str(FIXTURES / suite / name)])
    out = capsys.readouterr().out
    assert out == expected_verdict(entry) + "\n"
    assert code == (1 if entry["expected"] == "reject" else 0)


@pytest.mark.parametrize("suite", SUITES)
def test_the_manifest_covers_every_vendored_fixture(suite: str) -> None:
    files = {path.name for path in (FIXTURES / suite).glob("*.json")} - {"manifest.json"}
    assert files == set(MANIFESTS[suite])


@pytest.mark.skipif(not SHARED_ROOT.is_dir(), reason="the shared tree is not beside the repo")
@pytest.mark.parametrize("suite", SUITES)
def test_the_vendored_fixtures_match_the_shared_ones(suite: str) -> None:
    # With ../shared present, a suite missing there or differing by one byte fails.
    shared_suite = SHARED_ROOT / "fixtures" / suite
    assert shared_suite.is_dir(), f"{shared_suite} is missing"
    shared = {path.name: path.read_bytes() for path in shared_suite.iterdir() if path.is_file()}
    vendored = {
        path.name: path.read_bytes() for path in (FIXTURES / suite).iterdir() if path.is_file()
    }
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


# --- credentials (rule 6, last) -------------------------------------------------------------

SECRET_REF = {"name": "anthropic-key", "namespace": "grid-system", "key": "api-key"}


def with_credentials(*credentials: object) -> dict[str, Any]:
    """The valid document with candidate i's credential set to ``credentials[i]``, sealed."""
    document = copy.deepcopy(BASE)
    for index, credential in enumerate(credentials):
        document["overlay"]["candidates"][index]["credential"] = credential
    return sealed(document)


def apikey(**extra: Any) -> dict[str, Any]:
    return {"strategy": "apikey", "secretRef": dict(SECRET_REF), "header": "x-api-key", **extra}


def bearer(**extra: Any) -> dict[str, Any]:
    return {"strategy": "bearer_token", "secretRef": dict(SECRET_REF), **extra}


@pytest.mark.parametrize(
    "credential",
    [
        bearer(),
        apikey(),
        apikey(header="X-Goog-Api-Key"),
        apikey(header="api-key"),
        apikey(header="!#$%&'*+-.^_`|~09azAZ"),
        apikey(header="h" * 256),
    ],
)
def test_bearer_token_and_apikey_credentials_are_accepted(credential: dict[str, Any]) -> None:
    assert verdict_of(with_credentials(credential)).startswith("accept ")


@pytest.mark.parametrize("strategy", ["oauth2", "api_key", "ApiKey", "BearerToken", "", " "])
def test_any_other_strategy_is_unsupported(strategy: str) -> None:
    for credential in (bearer(strategy=strategy), apikey(strategy=strategy)):
        verdict = validate_overlay(json.dumps(with_credentials(credential)))
        assert verdict.reason is RejectReason.UNSUPPORTED_CREDENTIAL_STRATEGY
        assert str(verdict) == "reject unsupported_credential_strategy"


@pytest.mark.parametrize(
    "credential",
    [
        bearer(header="x-api-key"),
        bearer(header="Authorization"),
        {"strategy": "apikey", "secretRef": dict(SECRET_REF)},
    ],
)
def test_a_header_goes_with_apikey_and_only_with_it(credential: dict[str, Any]) -> None:
    verdict = validate_overlay(json.dumps(with_credentials(credential)))
    assert verdict.reason is RejectReason.INVALID_CREDENTIAL_COMBINATION
    assert str(verdict) == "reject invalid_credential_combination"


@pytest.mark.parametrize(
    "credential",
    [
        apikey(value="sk-ant-live"),
        bearer(token="sk-live"),
        apikey(strategy="oauth2", token="sk-live"),
        apikey(header=""),
        apikey(header="x api key"),
        apikey(header="x-api-key:"),
        apikey(header="x-api-key\r\nInjected: 1"),
        apikey(header="clé"),
        apikey(header="h" * 257),
        apikey(header=None),
        apikey(header=7),
        apikey(header=["x-api-key"]),
        bearer(header=None),
        apikey(strategy=None),
        apikey(strategy=5),
        {"secretRef": dict(SECRET_REF), "header": "x-api-key"},
        {"strategy": "apikey", "header": "x-api-key"},
        apikey(secretRef={"name": "n", "namespace": "ns"}),
        apikey(secretRef={**SECRET_REF, "value": "sk-live"}),
        apikey(secretRef={**SECRET_REF, "key": ""}),
        apikey(secretRef="anthropic-key"),
        {"strategy": "oauth2", "secretRef": {**SECRET_REF, "name": " "}},
        {"strategy": "bearer_token", "secretRef": dict(SECRET_REF), "header": "bad header"},
        "anthropic-key",
        None,
    ],
)
def test_a_credential_of_the_wrong_shape_is_malformed(credential: object) -> None:
    verdict = validate_overlay(json.dumps(with_credentials(credential)))
    assert verdict.reason is RejectReason.MALFORMED_STRUCTURE


def test_the_credential_codes_come_last_in_rule_6_whatever_the_candidate_order() -> None:
    def verdict(*credentials: object) -> str:
        return verdict_of(with_credentials(*credentials))

    # Malformed anywhere beats the credential codes, before or after it.
    assert verdict(bearer(strategy="oauth2"), apikey(token="t")) == "reject malformed_structure"
    assert verdict(apikey(token="t"), bearer(strategy="oauth2")) == "reject malformed_structure"
    # An unsupported strategy anywhere beats a wrong combination.
    assert verdict(bearer(header="h"), bearer(strategy="oauth2")) == (
        "reject unsupported_credential_strategy"
    )
    # A candidate that breaks another rule 6 check beats the credential codes.
    document = with_credentials(bearer(strategy="oauth2"))
    document["overlay"]["candidates"][1]["name"] = " "
    assert verdict_of(sealed(document)) == "reject malformed_structure"
    # Rule 5 comes before, rule 7 after.
    document = with_credentials(bearer(header="h"))
    document["scope"]["local_site"] = "elsewhere"
    assert verdict_of(document) == "reject scope_mismatch"
    document = with_credentials(bearer(header="h"))
    document["overlay"]["candidates"][1]["padding"] = "x" * (2 * 1024 * 1024)
    assert verdict_of(sealed(document)) == "reject invalid_credential_combination"


def test_credential_details_never_quote_a_strategy() -> None:
    token = "sk-ant-" + "q" * 40
    verdict = validate_overlay(json.dumps(with_credentials(bearer(strategy=token))))
    assert verdict.reason is RejectReason.UNSUPPORTED_CREDENTIAL_STRATEGY
    assert token not in verdict.detail
    assert "bearer_token" in verdict.detail and "apikey" in verdict.detail


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
