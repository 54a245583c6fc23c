"""The ``grid`` command as a shell runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from grid.cli import EXIT_BROKEN_PIPE

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "mesh"


def test_a_reader_that_went_away_ends_the_command_quietly() -> None:
    # `grid render ... | head -1` once head has exited: every write meets a closed pipe.
    # Closing the read end before the command starts makes that deterministic.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "grid.cli",
                "render",
                "--resources",
                str(EXAMPLES),
                "--site",
                "east-edge",
                "--gateway",
                "glb-demo-edge-gateway",
            ],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert result.returncode == EXIT_BROKEN_PIPE, stderr
