"""``grid crds``: print, write or check the CustomResourceDefinitions."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from grid.models.crd import all_crds, crd_directory_files, dump_all_crds
from grid.models.evolution import NonAdditiveChange, non_additive_changes_of_all

EXIT_USAGE = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "crds",
        help="print the CustomResourceDefinitions (YAML)",
        description="Print Grid's CustomResourceDefinitions as one YAML stream, write them "
        "as one file each, check that a directory holds the current ones, or check that "
        "they changed only additively since a previous release's.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        metavar="DIR",
        type=Path,
        help="exit 1 if DIR lacks a CRD file or holds one that differs from the generator",
    )
    mode.add_argument("--write", metavar="DIR", type=Path, help="write one file per CRD to DIR")
    mode.add_argument(
        "--compare-with",
        metavar="DIR",
        type=Path,
        help="exit 1 if the CRDs changed other than additively within a served version since "
        "the CRDs in DIR (a previous release's crds/): removed or narrowed fields, newly "
        "required ones, removed versions, new validation rules (grid docs resources)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="with --check or --compare-with: print the verdict as JSON (ok, directory, and "
        "files: name, state; or changes: crd, version, path, rule, needs_review, message)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.json and args.check is None and args.compare_with is None:
        print("grid crds: --json goes with --check or --compare-with", file=sys.stderr)
        return EXIT_USAGE
    if args.check is not None:
        return check(args.check, as_json=args.json)
    if args.compare_with is not None:
        return compare_with(args.compare_with, as_json=args.json)
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


def compare_with(directory: Path, *, as_json: bool = False) -> int:
    """0 when the generated CRDs changed only additively since those in ``directory``, 1
    (and each change that is not) otherwise, 2 when ``directory`` holds no CRD to compare
    with or cannot be read."""
    try:
        previous = read_crds(directory)
    except ValueError as error:
        print(f"grid crds: {error}", file=sys.stderr)
        return EXIT_USAGE
    changes = non_additive_changes_of_all(previous, all_crds())
    if as_json:
        document = {
            "ok": not changes,
            "directory": str(directory),
            "changes": [_change_document(change) for change in changes],
        }
        print(json.dumps(document, ensure_ascii=False))
    else:
        for change in changes:
            print(change, file=sys.stderr)
    if changes:
        print(
            f"grid crds: {len(changes)} change(s) since {directory} are not additive: keep "
            "what objects stored under a served version rely on, or serve the change as a "
            "new version",
            file=sys.stderr,
        )
        return 1
    return 0


def read_crds(directory: Path) -> list[Mapping[str, Any]]:
    """The CustomResourceDefinitions in the YAML files directly inside ``directory``, in
    file name order (other documents, such as a kustomization, are passed over). Raises
    ValueError, saying why, when a file cannot be read or parsed, or none holds a CRD."""
    try:
        paths = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml"))
    except OSError as error:
        raise ValueError(f"cannot read {directory}: {error.strerror}") from None
    found: list[Mapping[str, Any]] = []
    for path in paths:
        # Not the resource loader's hardened parser: `grid crds` itself writes the CRDs with
        # YAML anchors and aliases, which it refuses. The comparison only descends where the
        # generated CRD has a node too, so aliases cannot make it walk a document's expansion.
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except OSError as error:
            raise ValueError(f"cannot read {path}: {error.strerror}") from None
        except UnicodeDecodeError:
            raise ValueError(f"cannot read {path}: not UTF-8 text") from None
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ValueError(f"{path} is not valid YAML{where}") from None
        found.extend(
            document
            for document in documents
            if isinstance(document, Mapping) and document.get("kind") == "CustomResourceDefinition"
        )
    if not found:
        raise ValueError(f"{directory} holds no CustomResourceDefinition")
    return found


def _change_document(change: NonAdditiveChange) -> dict[str, Any]:
    return {
        "crd": change.crd,
        "version": change.version,
        "path": change.path,
        "rule": change.rule,
        "needs_review": change.needs_review,
        "message": str(change),
    }
