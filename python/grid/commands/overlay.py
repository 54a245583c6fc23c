"""``grid overlay verify``: judge any overlay document by the gateway's acceptance rules."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grid.render.validate import ExpectedScope, Verdict, validate_overlay

EXIT_ACCEPT = 0
EXIT_REJECT = 1
EXIT_USAGE = 2


def register(subparsers: Any) -> None:
    """Add ``grid overlay verify``."""
    overlay = subparsers.add_parser("overlay", help="work with routing overlay documents")
    commands = overlay.add_subparsers(dest="overlay_command", metavar="SUBCOMMAND", required=True)
    verify = commands.add_parser(
        "verify",
        help="check an overlay document against the gateway's acceptance rules",
        description="Prints 'accept <revision>', 'accept_legacy' or 'reject <reason>' "
        "(with --json, one JSON object: file, verdict, accepted, revision, reason, detail). "
        "Exit status: 0 accepted, 1 rejected, 2 unreadable file or bad usage.",
    )
    verify.add_argument("file", help="the overlay document ('-' reads standard input)")
    verify.add_argument(
        "--json",
        action="store_true",
        help="print the verdict as one JSON object (its keys are above; grid docs overlay)",
    )
    verify.add_argument("--network", help="reject unless scope.network is this")
    verify.add_argument("--gateway", help="reject unless scope.gateway is this")
    verify.add_argument("--namespace", help="reject unless scope.namespace is this")
    verify.add_argument("--local-site", help="reject unless scope.local_site is this")
    verify.set_defaults(handler=verify_command)


def verdict_document(file: str, verdict: Verdict) -> dict[str, Any]:
    """``--json``'s object: ``file`` (as given, ``-`` for standard input), ``verdict``
    (``accept``, ``accept_legacy`` or ``reject``), ``accepted`` (a boolean), ``revision``
    (the accepted revision, else null), ``reason`` (the rejection's reason code, else null)
    and ``detail`` (which field broke which rule; empty when accepted)."""
    return {
        "file": file,
        "verdict": verdict.kind.value,
        "accepted": verdict.accepted,
        "revision": verdict.revision,
        "reason": None if verdict.reason is None else verdict.reason.value,
        "detail": verdict.detail,
    }


def verify_command(args: argparse.Namespace) -> int:
    """Print the verdict (as text or, with ``--json``, as one object); the reason for a
    rejection goes to standard error as well."""
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as error:
        print(f"grid overlay verify: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return EXIT_USAGE
    expected = ExpectedScope(
        network=args.network,
        gateway=args.gateway,
        namespace=args.namespace,
        local_site=args.local_site,
    )
    verdict = validate_overlay(data, expected)
    if args.json:
        print(json.dumps(verdict_document(args.file, verdict), indent=2, ensure_ascii=False))
    else:
        print(verdict)
    if not verdict.accepted:
        print(f"grid overlay verify: {verdict.detail}", file=sys.stderr)
        return EXIT_REJECT
    return EXIT_ACCEPT
