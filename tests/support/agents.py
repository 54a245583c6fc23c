"""``grid agent`` command lines for tests that run a demo mesh's sites as real processes."""

from __future__ import annotations

import sys

from grid.demo import LocalMesh


def agent_command(mesh: LocalMesh, site: str, *, http: str | None = None) -> list[str]:
    """The command that runs ``site`` of ``mesh`` as its own ``grid agent`` process (probes
    and resource reloads every second), serving HTTP on ``http`` when given."""
    options = mesh.options(site)
    assert options.key_files[None] and options.tls_dir is not None and options.bind.default
    command = [
        sys.executable,
        "-m",
        "grid.cli",
        "agent",
        "--resources",
        str(options.resources),
        "--state-dir",
        str(options.state_dir),
        "--site",
        site,
        "--bind",
        options.bind.default,
        "--key-file",
        str(options.key_files[None][0]),
        "--tls-dir",
        str(options.tls_dir),
        "--egress-listen",
        str(options.egress_listen),
    ]
    if http is not None:
        command += ["--http", http]
    return [*command, "--probe-interval", "1", "--reload-interval", "1"]
