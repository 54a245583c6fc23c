"""Agents for tests: ``grid agent`` run as a process of its own (:class:`AgentProcess`), and
meshes of agents on 127.0.0.1 whose sites run in this process or as such processes
(:class:`AgentMesh`, built by the ``agent_mesh`` fixture of ``tests/conftest.py``, which
stops whatever is still running after the test).

Every wait is on a condition, polled, and fails at once, with the agent's log tail, when
the agent it waits on has exited."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from grid.demo import LocalMesh, MeshSettings, ProviderPlan, SitePlan
from grid.demo.builder import GATEWAY_NAME, GATEWAY_NAMESPACE

POLL_S = 0.05
LOG_TAIL_CHARACTERS = 3000

LLAMA = "llama-3.1-8b"
QWEN = "qwen-2.5-72b"
THREE_SITES = (
    SitePlan("site-a", "us-east", "us-east-1a", (ProviderPlan("llama-a", (LLAMA,)),)),
    SitePlan("site-b", "us-east", "us-east-1b", (ProviderPlan("qwen-b", (QWEN, LLAMA)),)),
    SitePlan("site-c", "us-west", "us-west-2a", (ProviderPlan("llama-c", (LLAMA,)),)),
)
"""Three sites in two regions, one provider each."""

TOKEN_SECRET = ("grid", "llama-token", "token")
"""(namespace, Secret, key) of the bearer token that site-a's provider of
:data:`TOKEN_SITES` needs."""
TOKEN_SITES = (
    SitePlan(
        "site-a",
        "us-east",
        "us-east-1a",
        (ProviderPlan("llama-a", ("llama",), bearer_secret=TOKEN_SECRET),),
    ),
    SitePlan("site-b", "us-east", "us-east-1b", (ProviderPlan("qwen-b", ("qwen",)),)),
)
"""Two sites; site-a's provider needs a bearer token, for tests that look for it where it
must not be."""


def mount_token(secrets_dir: Path, token: str | bytes) -> Path:
    """``token`` as the mounted Secret that :data:`TOKEN_SITES` needs, below
    ``secrets_dir`` (returned, for ``MeshSettings.secrets_dir``)."""
    path = secrets_dir.joinpath(*TOKEN_SECRET)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(token.encode() if isinstance(token, str) else token)
    return secrets_dir


class AgentProcess:
    """``grid <args>`` (``args`` start with ``agent``) run by this interpreter, its output
    in files: an unread pipe that fills up would stall the agent. Standard output goes to
    ``log`` as well, unless ``stdout`` names a file of its own."""

    def __init__(self, args: Sequence[str], log: Path, *, stdout: Path | None = None) -> None:
        self.log = log
        with contextlib.ExitStack() as files:
            errors = files.enter_context(log.open("wb"))
            output = errors if stdout is None else files.enter_context(stdout.open("wb"))
            self.process = subprocess.Popen(
                [sys.executable, "-m", "grid.cli", *args], stdout=output, stderr=errors
            )

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-LOG_TAIL_CHARACTERS:]
        except OSError:
            return "(no log)"

    def check_running(self, what: str) -> None:
        """Fails, saying ``what`` was being waited for, if the agent has exited."""
        if self.process.poll() is not None:
            raise AssertionError(
                f"{what}: the agent exited with status {self.process.returncode}\n{self.log_tail()}"
            )

    def _check(self, what: str, timeout: float, started: float) -> None:
        self.check_running(what)
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what}: not within {timeout:g} s\n{self.log_tail()}")

    def wait_until(self, what: str, predicate: Callable[[], bool], timeout: float = 30) -> None:
        """Blocks until ``predicate`` holds while the agent runs."""
        started = time.monotonic()
        while not predicate():
            self._check(what, timeout, started)
            time.sleep(POLL_S)

    async def until(self, what: str, predicate: Callable[[], bool], timeout: float = 30) -> None:
        """Waits, leaving the event loop free, until ``predicate`` holds while the agent
        runs."""
        started = time.monotonic()
        while not predicate():
            self._check(what, timeout, started)
            await asyncio.sleep(POLL_S)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (the agent leaves its meshes) and its exit status; killed if it has not
        exited within ``timeout``. Also for an agent that has exited already."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=10)

    def close(self) -> None:
        """Kills the agent if it still runs (after a test that failed before stopping it)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def site_agent_args(mesh: LocalMesh, site: str, *options: str) -> list[str]:
    """``grid agent`` arguments that run ``site`` of ``mesh`` as a process of its own, with
    the options it would have in this process (its secrets directory too), probes and
    resource reloads every second, and ``options`` added."""
    settings = mesh.options(site)
    assert settings.key_files[None] and settings.tls_dir is not None and settings.bind.default
    args = [
        "agent",
        "--resources",
        str(settings.resources),
        "--state-dir",
        str(settings.state_dir),
        "--site",
        site,
        "--bind",
        settings.bind.default,
        "--key-file",
        str(settings.key_files[None][0]),
        "--tls-dir",
        str(settings.tls_dir),
        "--egress-listen",
        str(settings.egress_listen),
    ]
    if settings.secrets_dir is not None:
        args += ["--secrets-dir", str(settings.secrets_dir)]
    return [*args, "--probe-interval", "1", "--reload-interval", "1", *options]


class AgentMesh(LocalMesh):
    """A :class:`~grid.demo.LocalMesh` (prepared) whose sites run in this process
    (:meth:`start`) or each as a ``grid agent`` process of its own (:meth:`spawn`).
    :meth:`stop` ends the processes first, then what runs here; it may be called again."""

    def __init__(
        self, root: Path, sites: Sequence[SitePlan], settings: MeshSettings | None = None
    ) -> None:
        super().__init__(root, sites, settings)
        self.processes: list[AgentProcess] = []

    def spawn(
        self, site: str, *options: str, log: Path | None = None, stdout: Path | None = None
    ) -> AgentProcess:
        """Run ``site`` as a ``grid agent`` process (see :func:`site_agent_args`), its log in
        ``<root>/<site>.log`` unless ``log`` says where."""
        args = site_agent_args(self, site, *options)
        started = AgentProcess(args, log or self.root / f"{site}.log", stdout=stdout)
        self.processes.append(started)
        return started

    async def converge(self, sites: Collection[str] | None = None, timeout: float = 20) -> float:
        """Seconds until each of ``sites`` (default: every site) running here ranks the
        candidates of exactly ``sites``."""
        group = set(self.sites if sites is None else sites)
        return await self.wait_for(
            f"{', '.join(sorted(group))} converge",
            lambda: all({c["site"] for c in self.candidates(s)} == group for s in group),
            timeout,
        )

    def overlay_candidates(self, site: str) -> list[dict[str, Any]]:
        """The candidates in ``site``'s overlay file as written (none before the first), read
        from disk: a site run as a process has no overlay in this one."""
        path = (
            self.sites[site].state_dir
            / "overlays"
            / self.settings.network
            / GATEWAY_NAMESPACE
            / GATEWAY_NAME
            / "grid-config.json"
        )
        if not path.exists():
            return []
        return list(json.loads(path.read_text())["overlay"]["candidates"])

    async def stop(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(p.stop) for p in self.processes))
        await super().stop()


class AgentMeshes:
    """What the ``agent_mesh`` fixture gives a test: ``await agent_mesh(sites, settings)``
    builds and prepares an :class:`AgentMesh` below the test's directory
    (``<tmp_path>/mesh``), stopped after the test."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._built: list[AgentMesh] = []

    async def __call__(
        self, sites: Sequence[SitePlan], settings: MeshSettings | None = None
    ) -> AgentMesh:
        name = "mesh" if not self._built else f"mesh-{len(self._built) + 1}"
        mesh = AgentMesh(self._root / name, sites, settings)
        self._built.append(mesh)
        await mesh.prepare()
        return mesh

    async def close(self) -> None:
        for mesh in self._built:
            await mesh.stop()
