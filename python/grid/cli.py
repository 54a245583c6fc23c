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
COMMANDS: dict[str, str] = {
    "crds": "grid.commands.crds",
    "overlay": "grid.commands.overlay",
    "budget": "grid.commands.budget",
    "render": "grid.commands.render",
    "explain": "grid.commands.render",
    "agent": "grid.commands.agent",
    "demo": "grid.commands.demo",
    "bench": "grid.commands.bench",
    "operator": "grid.commands.operator",
    "secrets": "grid.commands.secrets",
    "docs": "grid.commands.docs",
    "booklet": "grid.commands.booklet",
}
"""Each top-level command and the module that registers it."""

COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grid", description="Grid: route AI inference across sites."
    )
    parser.add_argument("--version", action="version", version=f"grid {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(subparsers)
    return parser


def modules_for(argv: Sequence[str]) -> Sequence[str]:
    """The command modules a command line needs: the one that registers its command, none
    for ``--version``, and every one otherwise (``--help``, no command, an unknown one, so
    that help and "did you mean" list them all). A command's start-up then imports its own
    dependencies only: an agent does not import the operator's, nor ``grid --version``
    anybody's."""
    first = argv[0] if argv else None
    if first in COMMANDS:
        return (COMMANDS[first],)
    if first == "--version":
        return ()
    return COMMAND_MODULES


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""What a shell reports for a command whose reader went away (``grid render | head``)."""


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(modules_for(argv))
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
