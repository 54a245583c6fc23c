"""Golden what-if renders of the mesh in ``tests/golden/mesh``: the overlay of every site,
the gateway configuration and the explanation, byte for byte (the producer version aside).

After an intended change, rewrite them with ``GRID_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grid import __version__
from grid.cli import main
from grid.render.validate import validate_overlay

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("GRID_UPDATE_GOLDEN") == "1"
INPUTS = [
    "--resources",
    str(GOLDEN / "mesh"),
    "--metrics",
    str(GOLDEN / "metrics.yaml"),
    "--now",
    "2026-07-29T12:00:00Z",
]
CASES = {
    "overlay-alpha.json": ["render", "--site", "alpha", "--gateway", "edge-gateway"],
    "overlay-beta.json": ["render", "--site", "beta", "--gateway", "edge-gateway"],
    "overlay-gamma.json": ["render", "--site", "gamma", "--gateway", "edge-gateway"],
    "overlay-next-alpha.json": ["render", "--site", "alpha", "--gateway", "next-gateway"],
    "consumer-next-alpha.yaml": [
        "render",
        "--site",
        "alpha",
        "--gateway",
        "next-gateway",
        "--consumer-config",
    ],
    "explain-gamma.txt": ["explain", "--site", "gamma", "--gateway", "edge-gateway"],
}
VERSION_PLACEHOLDER = "<producer version>"


def rendered(case: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main([*CASES[case], *INPUTS]) == 0
    out = capsys.readouterr().out
    if case.endswith(".json"):
        document = json.loads(out)
        assert document["provenance"]["producer_version"] == __version__
        document["provenance"]["producer_version"] = VERSION_PLACEHOLDER
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = GOLDEN / case
    text = rendered(case, capsys)
    if UPDATE:
        # Rewriting turns the comparison into a self-comparison: never in CI.
        assert os.environ.get("CI") != "true", "GRID_UPDATE_GOLDEN=1 is refused under CI=true"
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("case", sorted(name for name in CASES if name.startswith("overlay-")))
def test_golden_overlays_are_accepted_with_their_revision(case: str) -> None:
    document = json.loads((GOLDEN / case).read_text())
    verdict = validate_overlay(json.dumps(document))
    assert str(verdict) == f"accept {document['revision']['value']}"


def test_the_two_gateways_of_a_site_get_the_same_revision() -> None:
    edge = json.loads((GOLDEN / "overlay-alpha.json").read_text())
    renamed = json.loads((GOLDEN / "overlay-next-alpha.json").read_text())
    assert edge["revision"] == renamed["revision"]
    assert edge["scope"]["gateway"] != renamed["scope"]["gateway"]
