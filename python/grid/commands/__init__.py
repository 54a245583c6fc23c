"""Subcommands of ``grid``: each module has ``register(subparsers)`` and is named, with the
commands it registers, in :data:`grid.cli.COMMANDS`."""
