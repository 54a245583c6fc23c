"""Subcommands of ``grid``: each module has ``register(subparsers)`` and is listed in
:data:`grid.cli.COMMAND_MODULES`."""
