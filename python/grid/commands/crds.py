"""``grid crds``: print, write or check the CustomResourceDefinitions."""

from __future__ import annotations

import argparse
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
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.check is not None:
        return check(args.check)
    if args.write is not None:
        return write(args.write)
    sys.stdout.write(dump_all_crds())
    return 0


def check(directory: Path) -> int:
    """0 when ``directory`` holds every generated file (CRDs and their kustomization)
    unchanged, else 1 (and why)."""
    stale = []
    for name, text in crd_directory_files().items():
        path = directory / name
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            stale.append(f"{path}: missing")
            continue
        except OSError as error:
            stale.append(f"{path}: cannot read ({error.strerror})")
            continue
        if current != text:
            stale.append(f"{path}: differs from the models")
    for line in stale:
        print(line, file=sys.stderr)
    if stale:
        print(f"regenerate with: grid crds --write {directory}", file=sys.stderr)
        return 1
    return 0


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
