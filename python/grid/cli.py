"""The ``grid`` command."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from grid import __version__

# Each module defines ``register(subparsers)``, which adds its subcommands and sets
# ``handler`` (args -> exit code) on each of them.
COMMAND_MODULES: tuple[str, ...] = (
    "grid.commands.crds",
    "grid.commands.overlay",
    "grid.commands.budget",
    "grid.commands.render",
    "grid.commands.agent",
    "grid.commands.demo",
    "grid.commands.bench",
    "grid.commands.operator",
    "grid.commands.secrets",
    "grid.commands.docs",
    "grid.commands.booklet",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grid", description="Grid: route AI inference across sites."
    )
    parser.add_argument("--version", action="version", version=f"grid {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""What a shell reports for a command whose reader went away (``grid render | head``)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        code = int(args.handler(args))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped reading: that ends the command quietly, as it ends any Unix
        # filter. Point stdout at /dev/null so the interpreter's own final flush cannot
        # raise again on the way out.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
