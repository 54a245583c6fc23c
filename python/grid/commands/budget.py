"""``grid budget verify``: judge a budget document as a reader should before taking it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grid.render.budgets import verify_budget_document

EXIT_ACCEPT = 0
EXIT_REJECT = 1
EXIT_USAGE = 2


def register(subparsers: Any) -> None:
    """Add ``grid budget verify``."""
    budget = subparsers.add_parser("budget", help="work with budget documents")
    commands = budget.add_subparsers(dest="budget_command", metavar="SUBCOMMAND", required=True)
    verify = commands.add_parser(
        "verify",
        help="check a budget document's schema, digest and scope",
        description="Prints 'accept <revision>' and each tenant's state, or 'reject "
        "<reason>' (not_json, too_large, schema, digest_mismatch, scope_mismatch); with "
        "--json, one JSON object: file, accepted, revision, reason, detail, tenants. Exit "
        "status: 0 accepted, 1 rejected, 2 unreadable file.",
    )
    verify.add_argument("file", help="the budget document ('-' reads standard input)")
    verify.add_argument("--json", action="store_true", help="print the verdict as JSON")
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
        print(f"grid budget verify: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return EXIT_USAGE
    expected = {
        "network": args.network,
        "gateway": args.gateway,
        "namespace": args.namespace,
        "local_site": args.local_site,
    }
    verdict = verify_budget_document(data, expected)
    if args.json:
        document = {
            "file": args.file,
            "accepted": verdict.accepted,
            "revision": verdict.revision,
            "reason": verdict.reason,
            "detail": verdict.detail,
            "tenants": dict(verdict.tenants),
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        print(verdict)
        for tenant, state in verdict.tenants:
            print(f"{tenant} {state}")
    if not verdict.accepted:
        print(f"grid budget verify: {verdict.detail}", file=sys.stderr)
        return EXIT_REJECT
    return EXIT_ACCEPT
