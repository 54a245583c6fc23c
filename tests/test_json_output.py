"""``--json`` of ``grid explain`` and ``grid overlay verify``, and ``grid explain``'s tables
fitted to a terminal (issue 15).

The JSON documents are checked against the text each command prints for the same input:
every row of every table is one object with the same values, and the exit statuses are
those of the text form.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grid.cli import main
from grid.commands.overlay import verdict_document
from grid.render.validate import validate_overlay
from grid.scoring.explain import CANDIDATE_COLUMNS, ELLIPSIS, LEFT_OUT_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
EXAMPLES = ROOT / "examples" / "mesh"
NOW = ["--now", "2026-07-29T12:00:00Z"]
GOLDEN_INPUTS = ["--resources", str(GOLDEN / "mesh"), "--metrics", str(GOLDEN / "metrics.yaml")]
EXAMPLE_INPUTS = ["--resources", str(EXAMPLES)]

# (inputs, site, gateway): every site of both meshes.
CASES = {
    "golden-alpha": (GOLDEN_INPUTS, "alpha", "edge-gateway"),
    "golden-beta": (GOLDEN_INPUTS, "beta", "edge-gateway"),
    "golden-gamma": (GOLDEN_INPUTS, "gamma", "edge-gateway"),
    "golden-next-alpha": (GOLDEN_INPUTS, "alpha", "next-gateway"),
    "examples-east-edge": (EXAMPLE_INPUTS, "east-edge", "glb-demo-edge-gateway"),
    "examples-east-core": (EXAMPLE_INPUTS, "east-core", "glb-demo-edge-gateway"),
    "examples-west-edge": (EXAMPLE_INPUTS, "west-edge", "glb-demo-edge-gateway"),
}

TOP_KEYS = [
    "schema_version",
    "scope",
    "now",
    "site",
    "candidates",
    "order",
    "left_out",
    "not_offered",
]
CANDIDATE_KEYS = [
    "rank",
    "model",
    "provider",
    "site",
    "cluster",
    "backend_kind",
    "admission",
    "group",
    "tier",
    "fresh",
    "score",
    "score_breakdown",
]
BREAKDOWN_KEYS = ["locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost", "total"]
ORDER_KEYS = ["above", "below", "decided_by", "why"]
LEFT_OUT_KEYS = ["provider", "model", "site", "cluster", "reason", "detail"]
NOT_OFFERED_KEYS = ["provider", "reason"]
VERDICT_KEYS = ["file", "verdict", "accepted", "revision", "reason", "detail"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def explain_args(case: str) -> list[str]:
    inputs, site, gateway = CASES[case]
    return ["explain", *inputs, *NOW, "--site", site, "--gateway", gateway]


def sections(text: str) -> dict[str, list[str]]:
    """The text output's tables by their title (the candidate table under ``candidates``),
    each as its lines, header first."""
    found: dict[str, list[str]] = {}
    title = "candidates"
    for block in text.split("\n\n")[1:]:
        lines = block.strip("\n").splitlines()
        if lines[0].endswith(":"):
            title, lines = lines[0][:-1], lines[1:]
        found[title] = lines
    return found


def number(value: float) -> str:
    return f"{value:.4f}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_explain_json_says_what_the_tables_say(
    case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text, text_err = run(explain_args(case), capsys)
    assert code == 0
    code, out, err = run([*explain_args(case), "--json"], capsys)
    assert code == 0
    assert err == text_err  # the notes on standard error are the same
    document = json.loads(out)

    assert list(document) == TOP_KEYS
    assert document["schema_version"] == 1
    _, site, gateway = CASES[case]
    assert document["site"] == site
    assert document["scope"]["local_site"] == site
    assert document["scope"]["gateway"] == gateway
    assert list(document["scope"]) == ["network", "gateway", "namespace", "local_site"]
    assert document["now"] == "2026-07-29T12:00:00Z"

    left_count = len(document["left_out"]) + len(document["not_offered"])
    assert text.splitlines()[0] == (
        f"site {site}: {len(document['candidates'])} candidates, {left_count} left out"
    )
    tables = sections(text)

    rows = tables["candidates"]
    assert rows[0].split() == list(CANDIDATE_COLUMNS)
    assert len(rows) == 1 + len(document["candidates"])
    for line, candidate in zip(rows[1:], document["candidates"], strict=True):
        assert list(candidate) == CANDIDATE_KEYS
        assert list(candidate["score_breakdown"]) == BREAKDOWN_KEYS
        assert isinstance(candidate["fresh"], bool)
        breakdown = candidate["score_breakdown"]
        assert line.split() == [
            str(candidate["rank"]),
            candidate["model"],
            candidate["provider"],
            candidate["site"],
            candidate["cluster"],
            candidate["admission"],
            candidate["group"],
            candidate["tier"],
            "yes" if candidate["fresh"] else "no",
            number(candidate["score"]),
            *(number(breakdown[key]) for key in BREAKDOWN_KEYS),
        ]
    assert [c["rank"] for c in document["candidates"]] == list(range(len(document["candidates"])))

    order = document["order"]
    assert len(order) == max(0, len(document["candidates"]) - 1)
    if order:
        lines = tables["why each candidate is above the next"]
        assert lines[0].replace("DECIDED BY", "DECIDED_BY").split() == [
            "ABOVE",
            "BELOW",
            "DECIDED_BY",
            "WHY",
        ]
        for line, pair in zip(lines[1:], order, strict=True):
            assert list(pair) == ORDER_KEYS
            assert line.split(maxsplit=3) == [
                str(pair["above"]),
                str(pair["below"]),
                pair["decided_by"],
                pair["why"],
            ]
    else:
        assert "why each candidate is above the next" not in tables

    if left_count:
        lines = tables["left out"]
        assert lines[0].split() == list(LEFT_OUT_COLUMNS)
        expected = [
            [entry["provider"], entry["model"], entry["site"], entry["reason"], entry["detail"]]
            for entry in document["left_out"]
        ] + [
            [entry["provider"], "-", "-", "not_offered", entry["reason"]]
            for entry in document["not_offered"]
        ]
        assert [line.split(maxsplit=4) for line in lines[1:]] == expected
        for entry in document["left_out"]:
            assert list(entry) == LEFT_OUT_KEYS
        for entry in document["not_offered"]:
            assert list(entry) == NOT_OFFERED_KEYS
    else:
        assert "left out" not in tables


def test_explain_json_of_the_golden_gamma_mesh(capsys: pytest.CaptureFixture[str]) -> None:
    """The values themselves, for one case (tests/golden/explain-gamma.txt)."""
    code, out, _ = run([*explain_args("golden-gamma"), "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["scope"] == {
        "network": "golden",
        "gateway": "edge-gateway",
        "namespace": "grid-system",
        "local_site": "gamma",
    }
    first = document["candidates"][0]
    assert (first["model"], first["provider"], first["backend_kind"]) == (
        "llama-8b",
        "tgi-gamma",
        "remote",
    )
    assert first["fresh"] is False
    assert first["score_breakdown"]["total"] == pytest.approx(10.653125)
    assert [pair["decided_by"] for pair in document["order"]] == [
        "tie_break",
        "score",
        "tier",
        "group",
        "tie_break",
        "admission",
        "tie_break",
    ]
    assert document["left_out"] == [
        {
            "provider": "claude",
            "model": "claude-sonnet",
            "site": "gamma",
            "cluster": "claude",
            "reason": "access_denied",
            "detail": "access policy does not select site 'gamma'",
        }
    ]
    assert document["not_offered"] == [
        {"provider": "orphan", "reason": "its siteSelector matches no GridSite"}
    ]


def test_explain_json_keeps_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    inputs = [*GOLDEN_INPUTS, *NOW, "--gateway", "edge-gateway"]
    for extra in ([], ["--json"]):
        code, out, err = run(["explain", *inputs, "--site", "alpah", *extra], capsys)
        assert (code, out) == (2, "")
        assert "did you mean 'alpha'" in err
    with pytest.raises(SystemExit) as usage:
        main(["explain", *inputs, "--site", "alpha", "--json", "--wide"])
    assert usage.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_an_unknown_site_has_no_candidates_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explain", *EXAMPLE_INPUTS, *NOW, "--gateway", "glb-demo-edge-gateway"]
    code, out, err = run([*argv, "--site", "new-site", "--allow-unknown-site", "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["site"] == "new-site"
    assert "note:" in err
    assert {entry["reason"] for entry in document["left_out"]} >= {"consumer_unknown"}


# --- grid overlay verify --json ---------------------------------------------------------


def verify(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    return run(["overlay", "verify", *argv], capsys)


def both_forms(
    argv: list[str], capsys: pytest.CaptureFixture[str], stdin: bytes | None = None
) -> tuple[int, str, dict[str, Any], str]:
    """The exit status, text verdict and JSON verdict of one check (the same status and
    standard error either way)."""
    outcomes = []
    for extra in ([], ["--json"]):
        if stdin is not None:
            sys.stdin = _BytesStdin(stdin)
        try:
            outcomes.append(verify([*argv, *extra], capsys))
        finally:
            sys.stdin = sys.__stdin__
    (code, text, err), (json_code, out, json_err) = outcomes
    assert code == json_code
    assert err == json_err
    document = json.loads(out)
    assert list(document) == VERDICT_KEYS
    return code, text.strip(), document, err


class _BytesStdin:
    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)


@pytest.mark.parametrize("name", ["overlay-alpha.json", "overlay-gamma.json"])
def test_verify_json_accepts_the_golden_overlays(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = GOLDEN / name
    code, text, document, err = both_forms([str(path)], capsys)
    revision = json.loads(path.read_text())["revision"]["value"]
    assert (code, text, err) == (0, f"accept {revision}", "")
    assert document == {
        "file": str(path),
        "verdict": "accept",
        "accepted": True,
        "revision": revision,
        "reason": None,
        "detail": "",
    }


def test_verify_json_of_an_examples_overlay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["render", *EXAMPLE_INPUTS, *NOW, "--site", "east-edge"]
    code, out, _ = run([*argv, "--gateway", "glb-demo-edge-gateway"], capsys)
    assert code == 0
    path = tmp_path / "grid-config.json"
    path.write_text(out)
    code, text, document, _ = both_forms([str(path), "--local-site", "east-edge"], capsys)
    assert code == 0
    assert text == f"accept {document['revision']}"
    assert document["revision"] == json.loads(out)["revision"]["value"]

    # The same document read for another site is rejected, for the same reason either way.
    code, text, document, err = both_forms([str(path), "--local-site", "west-edge"], capsys)
    assert code == 1
    assert text == "reject scope_mismatch"
    assert document["verdict"] == "reject"
    assert document["accepted"] is False
    assert document["revision"] is None
    assert document["reason"] == "scope_mismatch"
    assert err == f"grid overlay verify: {document['detail']}\n"


def test_verify_json_from_standard_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, document, err = both_forms(["-"], capsys, stdin=b"{}")
    assert (code, text) == (1, "reject malformed_structure")
    assert document["file"] == "-"
    assert document["reason"] == "malformed_structure"
    assert document["detail"] and document["detail"] in err


def test_verify_json_of_an_unreadable_file_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = verify([str(tmp_path / "missing.json"), "--json"], capsys)
    assert (code, out) == (2, "")
    assert "cannot read" in err


def test_verdict_document_of_a_legacy_payload() -> None:
    document = json.loads((GOLDEN / "overlay-gamma.json").read_text())
    verdict = validate_overlay(json.dumps(document["overlay"]))
    assert str(verdict) == "accept_legacy"
    assert verdict_document("x.json", verdict) == {
        "file": "x.json",
        "verdict": "accept_legacy",
        "accepted": True,
        "revision": None,
        "reason": None,
        "detail": verdict.detail,
    }


# --- tables that fit the terminal -------------------------------------------------------


def _on_a_terminal(monkeypatch: pytest.MonkeyPatch, columns: int | None) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))


def _check_fitted(text: str, full: str, width: int) -> None:
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    fitted, wide = sections(text), sections(full)
    assert fitted.keys() == wide.keys()
    for title, rows in wide.items():
        shown = fitted[title]
        if title == "candidates":
            # A line naming the columns left out may follow the table.
            shown = shown[: len(rows)]
            note = " ".join(fitted[title][len(rows) :])
            header = shown[0].split()
            dropped = [name for name in CANDIDATE_COLUMNS if name not in header]
            assert header == [name for name in CANDIDATE_COLUMNS if name in header]
            assert {"RANK", "MODEL", "PROVIDER", "SITE", "SCORE"} <= set(header)
            if dropped:
                assert note.startswith(f"({len(dropped)} column")
                assert "--wide shows them" in note
                for name in dropped:
                    assert name in note
            else:
                assert note == ""
        # No row is wrapped or lost, and a cell is either whole or cut with the ellipsis.
        assert len(shown) == len(rows)
        for fitted_row, wide_row in zip(shown[1:], rows[1:], strict=True):
            first, whole = fitted_row.split()[0], wide_row.split()[0]
            if ELLIPSIS in first:
                head, tail = first.split(ELLIPSIS)
                assert whole.startswith(head) and whole.endswith(tail)
            else:
                assert first == whole
            for word in fitted_row.split():
                if ELLIPSIS in word:
                    head, tail = word.split(ELLIPSIS)
                    assert head in wide_row and tail in wide_row
                else:
                    assert word in wide_row


@pytest.mark.parametrize("width", [200, 120, 100, 80, 60])
@pytest.mark.parametrize("case", ["golden-gamma", "examples-east-edge", "examples-west-edge"])
def test_explain_fits_the_terminal(
    case: str, width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, full, _ = run(explain_args(case), capsys)
    assert code == 0
    _on_a_terminal(monkeypatch, width)
    code, text, _ = run(explain_args(case), capsys)
    assert code == 0
    _check_fitted(text, full, width)
    code, wide, _ = run([*explain_args(case), "--wide"], capsys)
    assert (code, wide) == (0, full)


def test_a_table_that_fits_is_left_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, full, _ = run(explain_args("golden-gamma"), capsys)
    _on_a_terminal(monkeypatch, max(len(line) for line in full.splitlines()))
    assert run(explain_args("golden-gamma"), capsys) == (0, full, "")


def test_a_pipe_gets_every_column_whatever_columns_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(explain_args("golden-gamma"), capsys)
    assert code == 0
    assert out == (GOLDEN / "explain-gamma.txt").read_text()


def test_the_candidate_columns_give_way_in_order(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _on_a_terminal(monkeypatch, 80)
    code, out, _ = run(explain_args("examples-east-edge"), capsys)
    assert code == 0
    table = sections(out)["candidates"]
    assert table[0].split() == ["RANK", "MODEL", "PROVIDER", "SITE", "TIER", "SCORE"]
    assert "11 columns not shown to fit 80 columns" in " ".join(table[8:])
    # Only the long model names are cut, in the middle.
    models = [row.split()[1] for row in table[1:8]]
    assert models[5:] == ["gpt-4o", "gpt-4o-mini"]
    assert all(
        model.startswith("meta-llama/L") and model.endswith("8B-Instruct")
        for model in [models[0], models[2], models[3]]
    )


@pytest.mark.parametrize(("encoding", "ellipsis"), [("utf-8", ELLIPSIS), ("latin-1", "~")])
def test_columns_80_on_a_real_terminal(encoding: str, ellipsis: str) -> None:
    """``COLUMNS=80 grid explain`` with its standard output on a pseudo-terminal (one that
    cannot show ``…`` gets ``~``)."""
    leader, follower = pty.openpty()
    inputs, site, gateway = CASES["examples-east-edge"]
    argv = ["explain", *inputs, *NOW, "--site", site, "--gateway", gateway]
    env = {**os.environ, "COLUMNS": "80", "PYTHONIOENCODING": encoding}
    process = subprocess.Popen(
        [sys.executable, "-m", "grid.cli", *argv],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=60) == 0, process.stderr.read() if process.stderr else ""
    if process.stderr is not None:
        process.stderr.close()
    text = b"".join(chunks).decode(encoding).replace("\r\n", "\n")
    lines = text.splitlines()
    assert lines[0] == "site east-edge: 7 candidates, 0 left out"
    assert max(len(line) for line in lines) <= 80, text
    assert "--wide shows them" in text
    assert f"meta-llama/L{ellipsis}8B-Instruct" in text
