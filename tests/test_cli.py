"""The ``grid`` command as a shell runs it."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path

from grid.cli import COMMAND_MODULES, COMMANDS, EXIT_BROKEN_PIPE, modules_for

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "mesh"


def test_a_reader_that_went_away_ends_the_command_quietly() -> None:
    # `grid render ... | head -1` once head has exited: every write meets a closed pipe.
    # Closing the read end before the command starts makes that deterministic.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "grid.cli",
                "render",
                "--resources",
                str(EXAMPLES),
                "--site",
                "east-edge",
                "--gateway",
                "glb-demo-edge-gateway",
            ],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert result.returncode == EXIT_BROKEN_PIPE, stderr


def test_the_command_table_names_every_command_its_module_registers() -> None:
    # A command line loads only its own command's module (grid.cli.modules_for): a command
    # a module registers but the table leaves out would be unknown to it.
    for module in COMMAND_MODULES:
        subparsers = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(subparsers)
        listed = {name for name, owner in COMMANDS.items() if owner == module}
        assert set(subparsers.choices) == listed, module


def test_a_command_loads_its_own_module_only() -> None:
    # In a fresh interpreter: the command's module and nothing of the others'.
    code = (
        "import sys; from grid.cli import main\n"
        "try:\n    main(['docs', 'list'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('grid.commands.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "['grid.commands.docs']"
    assert modules_for(["--version"]) == ()
    assert modules_for(["--help"]) == COMMAND_MODULES
    assert modules_for(["rendr"]) == COMMAND_MODULES
