"""The previous release (``compat/previous.txt``), built by ``scripts/previous-release`` into a
virtualenv of its own, for the tests that run a mesh mixing it with the current code.

``previous_release()`` builds it once per machine (the script keeps the build under
``.compat/``) and returns where it is; a test module asks for it through the
``previous_release`` fixture of ``tests/conftest.py``, which skips with the reason when it
cannot be built here and fails under ``CI=true``.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "previous-release"
PREVIOUS_FILE = REPO / "compat" / "previous.txt"


@dataclass(frozen=True, slots=True)
class PreviousRelease:
    """A build of the previous release: its commit and version, the archived source tree
    (its own tests and scripts included) and a virtualenv where it is installed."""

    commit: str
    version: str
    root: Path

    @property
    def source(self) -> Path:
        return self.root / "src"

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def grid(self) -> Path:
        return self.root / "venv" / "bin" / "grid"


def named_release() -> tuple[str, str]:
    """The commit and version ``compat/previous.txt`` names."""
    for line in PREVIOUS_FILE.read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            commit, version = stripped.split()
            return commit, version
    raise ValueError(f"{PREVIOUS_FILE} names no release")


class PreviousReleaseUnavailable(RuntimeError):
    """The previous release could not be built here; the message says why."""


@functools.cache
def previous_release() -> PreviousRelease:
    """Builds the previous release (or finds the build) and returns it."""
    commit, version = named_release()
    done = subprocess.run(
        [str(SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise PreviousReleaseUnavailable(
            f"scripts/previous-release failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    root = Path(done.stdout.strip().splitlines()[-1])
    return PreviousRelease(commit, version, root)
