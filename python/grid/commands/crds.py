"""``grid crds``: print, write or check the CustomResourceDefinitions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grid.models.crd import crd_directory_files, dump_all_crds


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "crds",
        help="print the CustomResourceDefinitions (YAML)",
        description="Print Grid's CustomResourceDefinitions as one YAML stream, write them "
        "as one file each, or check that a directory holds the current ones.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        metavar="DIR",
        type=Path,
        help="exit 1 if DIR lacks a CRD file or holds one that differs from the generator",
    )
    mode.add_argument("--write", metavar="DIR", type=Path, help="write one file per CRD to DIR")
    parser.add_argument(
        "--json",
        action="store_true",
        help="with --check: print the verdict as JSON (ok, directory, files: name, state)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.json and args.check is None:
        print("grid crds: --json goes with --check", file=sys.stderr)
        return 2
    if args.check is not None:
        return check(args.check, as_json=args.json)
    if args.write is not None:
        return write(args.write)
    sys.stdout.write(dump_all_crds())
    return 0


def check(directory: Path, *, as_json: bool = False) -> int:
    """0 when ``directory`` holds every generated file (CRDs and their kustomization)
    unchanged, else 1 (and why)."""
    states = {name: _state(directory / name, text) for name, text in crd_directory_files().items()}
    stale = {name: state for name, state in states.items() if state != "current"}
    if as_json:
        files = [{"name": name, "state": state} for name, state in sorted(states.items())]
        print(json.dumps({"ok": not stale, "directory": str(directory), "files": files}))
        return 1 if stale else 0
    for name, state in stale.items():
        print(f"{directory / name}: {state}", file=sys.stderr)
    if stale:
        print(f"regenerate with: grid crds --write {directory}", file=sys.stderr)
        return 1
    return 0


def _state(path: Path, text: str) -> str:
    """``current``, ``missing``, ``differs from the models`` or why it cannot be read."""
    try:
        current = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "missing"
    except OSError as error:
        return f"cannot read ({error.strerror})"
    return "current" if current == text else "differs from the models"


def write(directory: Path) -> int:
    """Write each CRD and their kustomization to ``directory`` (created if needed)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in crd_directory_files().items():
            (directory / name).write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"cannot write CRDs to {directory}: {error.strerror}", file=sys.stderr)
        return 1
    return 0
