"""``grid demo``: three sites on 127.0.0.1 converge, reorder on load and survive a crash,
and every overlay it writes passes ``grid overlay verify``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from grid.demo import run_demo
from grid.demo.mesh import free_port

GRID = [sys.executable, "-m", "grid.cli"]


def test_the_demo_reports_json_and_its_overlays_pass_verify(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    finished = subprocess.run(
        [*GRID, "demo", "--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    report = json.loads(finished.stdout)
    assert report["ok"] is True
    steps = {step["name"]: step for step in report["steps"]}
    assert list(steps) == [
        "convergence",
        "metric_propagation",
        "failure_removal",
        "failure_detection",
    ]
    assert all(step["seconds"] is not None and step["error"] is None for step in steps.values())
    assert steps["failure_detection"]["boundSeconds"] > 0
    assert report["summary"]["total"] < 60
    convergence = steps["convergence"]["overlays"]
    assert {c["site"] for c in convergence["east-edge"]} == {"east-edge", "east-core", "west-edge"}
    loaded = [
        c for c in steps["metric_propagation"]["overlays"]["east-edge"] if c["site"] == "east-core"
    ]
    assert loaded and all(c["admission_state"] == "existing_only" for c in loaded)
    for overlay in steps["failure_removal"]["overlays"].values():
        assert all(c["site"] != "west-edge" for c in overlay)

    assert set(report["verification"]) == {"east-edge", "east-core", "west-edge"}
    for site, entry in report["verification"].items():
        path = Path(entry["path"])
        assert path.is_relative_to(out)
        verify = subprocess.run(
            [
                *GRID,
                "overlay",
                "verify",
                str(path),
                "--network",
                "grid-demo",
                "--local-site",
                site,
                "--gateway",
                "edge-gateway",
                "--namespace",
                "grid-system",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert verify.returncode == 0, verify.stderr
        assert verify.stdout.strip() == entry["verdict"]
        assert verify.stdout.startswith("accept ")


async def test_the_demo_reads_well_in_a_terminal(tmp_path: Path) -> None:
    lines: list[str] = []
    report = await run_demo(tmp_path, emit=lines.append)
    text = "\n".join(lines)
    assert report.ok, text
    for heading in (
        "1. The mesh converges",
        "2. Load rises at qwen-east-core",
        "3. west-edge crashes",
        "4. SWIM declares west-edge down",
        "Summary",
    ):
        assert heading in text
    assert "RANK  MODEL" in text
    assert "overlays accepted     3/3" in text
    assert max(len(line) for line in lines if "RANK" in line or line.startswith("    ")) < 120


def test_a_port_handed_out_is_not_handed_out_again() -> None:
    # Ports are handed out before their owners bind them (a mesh's sites, then a test's own
    # listener): 2,000 picks among the ~22,000 below the ephemeral range would repeat one
    # about 90 times if each pick only checked that the port binds now.
    picked = [free_port(socket.SOCK_STREAM) for _ in range(1_000)]
    picked += [free_port(socket.SOCK_DGRAM) for _ in range(1_000)]
    assert len(set(picked)) == len(picked)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", picked[0]))  # still free: nothing bound it
