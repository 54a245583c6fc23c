"""``grid overlay verify``: judge any overlay document by the gateway's acceptance rules."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from grid.render.validate import ExpectedScope, validate_overlay

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
        description="Prints 'accept <revision>', 'accept_legacy' or 'reject <reason>'. "
        "Exit status: 0 accepted, 1 rejected, 2 unreadable file or bad usage.",
    )
    verify.add_argument("file", help="the overlay document ('-' reads standard input)")
    verify.add_argument("--network", help="reject unless scope.network is this")
    verify.add_argument("--gateway", help="reject unless scope.gateway is this")
    verify.add_argument("--namespace", help="reject unless scope.namespace is this")
    verify.add_argument("--local-site", help="reject unless scope.local_site is this")
    verify.set_defaults(handler=verify_command)


def verify_command(args: argparse.Namespace) -> int:
    """Print the verdict; the reason for a rejection goes to standard error as well."""
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
    print(verdict)
    if not verdict.accepted:
        print(f"grid overlay verify: {verdict.detail}", file=sys.stderr)
        return EXIT_REJECT
    return EXIT_ACCEPT
