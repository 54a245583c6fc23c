"""The ``grid`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from grid import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grid", description=__doc__)
    parser.add_argument("--version", action="version", version=f"grid {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
