"""Installing Grid into a fresh venv and running the demo: from the release wheel against
from the sources, in one run.

- wheel: ``pip install dist/<this machine's wheel>`` (scripts/build-wheels), binary wheels
  only, no Rust toolchain on ``PATH``;
- source: ``pip install .`` in the repository, the install the README gave before wheels:
  pip has maturin compile the extension, into an empty ``CARGO_TARGET_DIR`` so that
  nothing is reused from earlier builds (crates already downloaded to ``~/.cargo`` are).

Both then run ``grid demo --json`` and ``python -c "import grid._native"``, each in its own
fresh venv made by the venv's own pip. Each step's wall time is printed.

Run: ``.venv/bin/python bench/bench_install.py`` (after ``scripts/build-wheels``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.wheels import (
    REPO,
    Steps,
    env_without_rust,
    host_arch,
    install_and_demo,
    wheel_dir,
    wheels,
)


def show(label: str, steps: Steps) -> None:
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.seconds.items())
    print(f"{label:<8} total {steps.total:6.1f} s   ({parts})", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--skip-source", action="store_true", help="time the wheel only (no compile)"
    )
    args = parser.parse_args()
    found = wheels(wheel_dir())
    if host_arch() not in found:
        print(f"no {host_arch()} wheel in {wheel_dir()}: run scripts/build-wheels", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="grid-install-") as scratch:
        root = Path(scratch)
        steps, report = install_and_demo(
            root / "wheel",
            str(found[host_arch()]),
            env_without_rust(),
            pip_args=["--only-binary", ":all:"],
        )
        assert json.loads(report)["ok"] is True
        show("wheel", steps)
        if args.skip_source:
            return 0
        env = dict(os.environ, CARGO_TARGET_DIR=str(root / "target"))
        env.pop("VIRTUAL_ENV", None)
        steps, report = install_and_demo(root / "source", ".", env, cwd=REPO, timeout=3600)
        assert json.loads(report)["ok"] is True
        show("source", steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
