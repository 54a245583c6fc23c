"""A mesh of ``grid agent`` processes, one per network namespace, for the chaos suite.

Each site has, inside its namespace: a provider process (``provider.py``) serving
``/health`` and ``/metrics`` for its providers, an egress gateway process (``gateway.py``:
the agent's TLS egress listener on its own, which peers probe), and its agent
(``site_agent.py``: ``grid agent`` with the spend inbox and view files), which binds SWIM
and its health checks to the site's address. Everything the test learns comes from the
files the agents write: ``view.json``, ``overlays.jsonl``, ``spends.jsonl`` and the overlay
file itself.

Process control is by pid, from the thread that started the process: SIGSTOP/SIGCONT
(pause), SIGKILL (crash), SIGTERM (leave), and a restart with the same options; a wedge
(the agent's event loop blocked, its SWIM thread running) is asked for by a file. A child
dies with the test process (``PR_SET_PDEATHSIG``), and whatever is left in a namespace is
killed when the namespace is removed.

Each site's agent runs a :class:`Release`: a Python with Grid installed and that release's
own ``site_agent.py`` (by default this checkout's, on the running interpreter).
:meth:`ChaosMesh.restart_agent` moves a site to another release as an operator's rollout
does: SIGTERM (the agent leaves), then the other release on the same state directory,
resources and certificates. The provider and gateway processes are the harness's and stay
on this interpreter.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from chaos.netns import Lab
from grid import __version__ as grid_version
from grid.demo import builder

HERE = Path(__file__).resolve().parent
NETWORK = "grid-chaos"
TENANT = "acme"
SWIM_PORT = 7946
EGRESS_PORT = 8443
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Release:
    """What a site's agent runs: a Python where a release of Grid is installed and that
    release's own ``site_agent.py`` (a later one may use APIs an older Grid lacks)."""

    name: str
    """Short: ``previous``, ``current``."""
    version: str
    """Which Grid it is, for reports."""
    python: Path
    site_agent: Path
    options: tuple[str, ...] = ()
    """Interpreter options before the script (``-E -s`` keeps this environment's
    ``PYTHONPATH`` and user site from mixing another Grid into the release's)."""

    @property
    def label(self) -> str:
        return f"{self.name} ({self.version})"

    def command(self) -> list[str]:
        return [str(self.python), *self.options, str(self.site_agent)]

    def grid_package(self) -> Path:
        """The directory of the ``grid`` package this release's Python imports."""
        return _grid_package(self.python, self.options)


def current_release() -> Release:
    """This checkout: the running interpreter and ``tests/chaos/site_agent.py``."""
    return Release(
        "current",
        f"grid {grid_version}, this checkout",
        Path(sys.executable),
        HERE / "site_agent.py",
    )


@functools.cache
def _grid_package(python: Path, options: tuple[str, ...]) -> Path:
    done = subprocess.run(
        [str(python), *options, "-c", "import grid; print(grid.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return Path(done.stdout.strip()).resolve().parent


@dataclass(frozen=True, slots=True)
class ProviderPlan:
    """One provider of a site: what it offers and the load its endpoint reports. The load
    values are exact in binary and in the replicated record's units, and differ between
    providers, so no two candidates tie on score."""

    name: str
    port: int
    models: tuple[str, ...]
    cost: tuple[str, str]
    queue: int
    kv: float
    prefix: float
    latency_s: float

    @property
    def cost_micro_usd(self) -> tuple[int, int]:
        return (int(Decimal(self.cost[0]) * 1_000_000), int(Decimal(self.cost[1]) * 1_000_000))


@dataclass(frozen=True, slots=True)
class SitePlan:
    name: str
    region: str
    zone: str
    providers: tuple[ProviderPlan, ...]


@dataclass(frozen=True, slots=True)
class MeshSettings(builder.MeshTiming):
    """FAST SWIM settings and a short stale-candidate TTL, so that faults longer than the
    TTL fit in a test."""

    stale_ttl_seconds: int = 8
    probe_interval_s: float = 0.5
    suspicion_timeout_s: float = 1.5
    reload_interval_s: float = 1.0
    budget_window: str = "24h"


def default_plans() -> tuple[SitePlan, ...]:
    """Four sites in two regions, six providers."""

    def provider(name: str, port: int, models: tuple[str, ...], queue: int) -> ProviderPlan:
        return ProviderPlan(name, port, models, ("0.10", "0.20"), queue, 0.25, 0.5, 0.5)

    return (
        SitePlan(
            "east-a",
            "us-east",
            "us-east-1a",
            (
                provider("llama-east-a", 18001, ("llama-3.1-8b",), 1),
                provider("qwen-east-a", 18002, ("qwen-2.5-72b", "qwen-2.5-7b"), 2),
            ),
        ),
        SitePlan(
            "east-b",
            "us-east",
            "us-east-1b",
            (provider("llama-east-b", 18001, ("llama-3.1-8b",), 3),),
        ),
        SitePlan(
            "west-a",
            "us-west",
            "us-west-2a",
            (
                provider("llama-west-a", 18001, ("llama-3.1-8b", "llama-3.1-70b"), 4),
                provider("mistral-west-a", 18002, ("mistral-7b",), 5),
            ),
        ),
        SitePlan(
            "west-b",
            "us-west",
            "us-west-2b",
            (provider("qwen-west-b", 18001, ("qwen-2.5-7b",), 6),),
        ),
    )


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Site(builder.SiteDirectory):
    """One site: its plan (providers as currently declared), files and processes."""

    plan: SitePlan
    directory: Path
    address: str
    release: Release
    """What the agent runs (its next start, if it is not running)."""
    agent: subprocess.Popen[bytes] | None = None
    provider: subprocess.Popen[bytes] | None = None
    gateway: subprocess.Popen[bytes] | None = None
    paused: bool = False
    lives: int = 0
    exits: list[str] = field(default_factory=list)
    """Exits of the agent nobody asked for (code and log tail)."""

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def chaos_dir(self) -> Path:
        return self.directory / "chaos"

    @property
    def log(self) -> Path:
        return self.directory / "agent.log"

    @property
    def running(self) -> bool:
        """The agent process exists (it may be paused)."""
        return self.agent is not None and self.agent.poll() is None

    @property
    def overlay_file(self) -> Path:
        return (
            self.state_dir
            / "overlays"
            / NETWORK
            / builder.GATEWAY_NAMESPACE
            / builder.GATEWAY_NAME
            / "grid-config.json"
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def read_json(path: Path) -> Any:
    """A JSON file, or None while it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a file (a torn last line is left out)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            found.append(json.loads(line))
    return found


def wait_until(
    what: str, predicate: Callable[[], bool], timeout: float, every: float = 0.1
) -> float:
    """Seconds until ``predicate`` holds; raises :class:`TimeoutError` naming ``what``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what}: not within {timeout:g}s")
        time.sleep(every)
    return time.monotonic() - started


class ChaosMesh:
    """Build with a :class:`~chaos.netns.Lab` whose namespaces exist, :meth:`prepare`,
    :meth:`start`; :meth:`stop` ends every process (also after a failure)."""

    def __init__(
        self,
        root: Path,
        lab: Lab,
        plans: Sequence[SitePlan] | None = None,
        settings: MeshSettings | None = None,
        release: Release | None = None,
        budgets: Sequence[dict[str, Any]] | None = None,
        spend_metric: str | None = None,
    ) -> None:
        """``release``: what every agent runs at first (default: :func:`current_release`);
        ``budgets``: the network's (default: one for :data:`TENANT` that nothing reaches);
        ``spend_metric``: a counter each site's provider process serves (see
        :meth:`serve_spend`), which the site scrapes as its spend source."""
        self.root = root
        self.budgets = list(budgets or [{"tenant": TENANT, "cap": 10**12}])
        self.spend_metric = spend_metric
        self.served_spend: dict[str, dict[str, int]] = {}
        self.lab = lab
        self.settings = settings or MeshSettings()
        plans = tuple(plans or default_plans())
        first = release or current_release()
        self.sites = {
            plan.name: Site(plan, root / plan.name, lab.address(plan.name), first) for plan in plans
        }
        self._spend_serial = 0
        self.key_file = root / "swim.key"
        self.started_at = 0.0
        """When :meth:`start` started the first agent (monotonic seconds)."""

    @property
    def names(self) -> list[str]:
        return list(self.sites)

    # -- setting up -----------------------------------------------------------------------

    def prepare(self) -> None:
        """The CA and a certificate per site, the SWIM key, every resource directory."""
        credentials = builder.MeshCredentials(self.key_file, "Grid chaos CA")
        pins = {}
        for site in self.sites.values():
            for directory in (site.resources, site.state_dir, site.tls_dir, site.chaos_dir):
                directory.mkdir(parents=True, exist_ok=True)
            pins[site.name] = credentials.certify(
                site.name, site.tls_dir, ip_addresses=(site.address,)
            )
        self._pins = pins
        for site in self.sites.values():
            self._write_static_resources(site)
            self.write_providers(site)

    def _write_static_resources(self, site: Site) -> None:
        settings = self.settings
        seeds = [f"{s.address}:{SWIM_PORT}" for s in self.sites.values()]
        budgets = [{"window": settings.budget_window, **budget} for budget in self.budgets]
        current = site.release.name == "current"
        if not current:
            # Fields the release before does not know: its agent's loader would refuse the
            # network, where its operator ignores them (docs/upgrading.md, "New fields last").
            budgets = [{k: v for k, v in b.items() if k != "enforcement"} for b in budgets]
        network = builder.network_document(NETWORK, seeds, timing=settings, budgets=budgets)
        if self.spend_metric is not None and current:
            network["spec"]["spendSources"] = [self._spend_source(s) for s in self.sites.values()]
        sites = [
            builder.site_document(
                other.name,
                NETWORK,
                region=other.plan.region,
                zone=other.plan.zone,
                egress=builder.mutual_tls_egress(f"{other.address}:{EGRESS_PORT}", other.name),
                pin=self._pins[other.name],
            )
            for other in self.sites.values()
        ]
        builder.write_documents(site.resources / builder.NETWORK_FILE, [network])
        builder.write_documents(site.resources / builder.SITES_FILE, sites)

    def _spend_source(self, site: Site) -> dict[str, Any]:
        """The counter ``site``'s provider process serves, read by ``site`` alone."""
        return {
            "name": f"tokens-{site.name}",
            "siteSelector": {"matchLabels": {builder.SITE_LABEL: site.name}},
            "url": f"http://{site.address}:{site.plan.providers[0].port}/metrics",
            "interval": "1s",
            "timeout": "500ms",
            "metric": self.spend_metric,
            "tenantLabel": "team",
        }

    def serve_spend(self, name: str, counts: dict[str, int]) -> None:
        """What ``name``'s provider process serves from now on as the spend counter: the
        tokens granted so far, per team."""
        self.served_spend[name] = dict(counts)
        self._write_values(self.sites[name])

    def provider_document(self, site: Site, plan: ProviderPlan) -> dict[str, Any]:
        return builder.provider_document(
            plan.name,
            network=NETWORK,
            site=site.name,
            models=plan.models,
            capabilities=("chat",),
            endpoint=f"http://{site.address}:{plan.port}",
            cost=plan.cost,
            observation=builder.scraped_observation(plan.port, self.settings.observe_interval),
        )

    def write_providers(self, site: Site) -> None:
        """Write the site's providers as currently planned (the agent reloads them), and
        the values its provider process serves."""
        documents = [self.provider_document(site, plan) for plan in site.plan.providers]
        builder.write_documents(site.resources / builder.PROVIDERS_FILE, documents)
        self._write_values(site)

    def _write_values(self, site: Site) -> None:
        values: dict[str, dict[str, Any]] = {
            plan.name: {
                "port": plan.port,
                "queue": plan.queue,
                "kv": plan.kv,
                "prefix": plan.prefix,
                "latency_s": plan.latency_s,
                "healthy": True,
            }
            for plan in site.plan.providers
        }
        if site.name in self.served_spend:
            values[site.plan.providers[0].name]["spend"] = self.served_spend[site.name]
        _write_text(site.directory / "values.json", json.dumps(values, sort_keys=True))

    def edit_provider(self, site_name: str, provider: str, **changes: Any) -> ProviderPlan:
        """Change one provider of a site (``models``, ``cost``) in its resource directory."""
        site = self.sites[site_name]
        plans = list(site.plan.providers)
        index = next(i for i, plan in enumerate(plans) if plan.name == provider)
        plans[index] = replace(plans[index], **changes)
        site.plan = replace(site.plan, providers=tuple(plans))
        self.write_providers(site)
        return plans[index]

    # -- processes ------------------------------------------------------------------------

    def _spawn(
        self, site: Site, command: list[str], log: Path, title: str
    ) -> subprocess.Popen[bytes]:
        with log.open("ab") as output:
            output.write(f"=== {datetime.now(UTC).isoformat()} {title}\n".encode())
            output.flush()
            return subprocess.Popen(
                [*self.lab.exec_prefix(site.name), *command],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                # One prctl call between fork and exec; the harness starts no threads.
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )

    def start(self, timeout: float = 60.0) -> None:
        """Start every provider and gateway process, then every agent."""
        self.start_services(timeout)
        self.start_agents()

    def start_services(self, timeout: float = 60.0) -> None:
        """Start every provider and gateway process, and wait until each is ready."""
        for site in self.sites.values():
            self.start_provider(site)
            self.start_gateway(site)
        for site in self.sites.values():
            for ready in ("ready.json", "gateway-ready.json"):
                wait_until(
                    f"{site.name}'s {ready.removesuffix('.json')} process",
                    lambda path=site.directory / ready: path.exists(),  # type: ignore[misc]
                    timeout,
                )

    def start_agents(self) -> None:
        """Start every site's agent (after :meth:`start_services`)."""
        self.started_at = time.monotonic()
        for site in self.sites.values():
            self.start_agent(site.name)

    def set_budget_window(self, window: str) -> None:
        """Give the network's budgets windows of ``window`` (``"97s"``) in every site's
        resources, before the agents start."""
        assert not any(site.running for site in self.sites.values()), "agents already run"
        self.settings = replace(self.settings, budget_window=window)
        for site in self.sites.values():
            self._write_static_resources(site)

    def start_gateway(self, site: Site) -> None:
        ready = site.directory / "gateway-ready.json"
        ready.unlink(missing_ok=True)
        command = [
            sys.executable,
            str(HERE / "gateway.py"),
            "--listen",
            f"{site.address}:{EGRESS_PORT}",
            "--tls-dir",
            str(site.tls_dir),
            "--ready",
            str(ready),
        ]
        site.gateway = self._spawn(site, command, site.directory / "gateway.log", "gateway")

    def start_provider(self, site: Site) -> None:
        (site.directory / "ready.json").unlink(missing_ok=True)
        command = [
            sys.executable,
            str(HERE / "provider.py"),
            "--host",
            site.address,
            "--values",
            str(site.directory / "values.json"),
            "--ready",
            str(site.directory / "ready.json"),
        ]
        site.provider = self._spawn(site, command, site.directory / "provider.log", "provider")

    def agent_command(self, site: Site) -> list[str]:
        settings = self.settings
        return [
            *site.release.command(),
            "--chaos-dir",
            str(site.chaos_dir),
            "agent",
            "--resources",
            str(site.resources),
            "--state-dir",
            str(site.state_dir),
            "--site",
            site.name,
            "--bind",
            f"{site.address}:{SWIM_PORT}",
            "--key-file",
            str(self.key_file),
            "--tls-dir",
            str(site.tls_dir),
            "--probe-interval",
            str(settings.agent_probe_interval_s),
            "--reload-interval",
            str(settings.reload_interval_s),
        ]

    def start_agent(self, name: str) -> None:
        site = self.sites[name]
        assert not site.running, f"{name}'s agent is already running"
        site.lives += 1
        site.paused = False
        site.agent = self._spawn(
            site, self.agent_command(site), site.log, f"agent {site.release.label}"
        )

    def restart_agent(
        self,
        name: str,
        release: Release,
        *,
        while_down: Callable[[], None] | None = None,
        timeout: float = 30.0,
    ) -> int:
        """Move a site's agent to ``release`` as a rollout does: SIGTERM (it leaves the mesh
        and exits), ``while_down`` if given, then ``release`` on the same state directory,
        resources and certificates. The exit status of the agent that left."""
        status = self.leave(name, timeout)
        if while_down is not None:
            while_down()
        self.sites[name].release = release
        self.start_agent(name)
        return status

    def pause(self, name: str) -> None:
        site = self.sites[name]
        assert site.agent is not None
        site.agent.send_signal(signal.SIGSTOP)
        site.paused = True

    def resume(self, name: str) -> None:
        site = self.sites[name]
        assert site.agent is not None
        site.agent.send_signal(signal.SIGCONT)
        site.paused = False

    def crash(self, name: str) -> None:
        """SIGKILL: the site vanishes as a crash would (no leave)."""
        site = self.sites[name]
        assert site.agent is not None
        site.agent.send_signal(signal.SIGKILL)
        site.agent.wait(timeout=30)
        site.agent, site.paused = None, False

    def leave(self, name: str, timeout: float = 30.0) -> int:
        """SIGTERM: the agent leaves the mesh and exits; its exit status."""
        site = self.sites[name]
        assert site.agent is not None
        if site.paused:
            self.resume(name)
        process, site.agent = site.agent, None
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
            raise

    def loaded_grid(self, name: str) -> Path | None:
        """The directory of the Grid extension module the site's agent has loaded (from its
        memory map), or None before it has."""
        site = self.sites[name]
        if site.agent is None:
            return None
        try:
            maps = Path(f"/proc/{site.agent.pid}/maps").read_text()
        except OSError:
            return None
        for line in maps.splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and "/grid/_native" in fields[5]:
                return Path(fields[5].removesuffix(" (deleted)")).resolve().parent
        return None

    def check_processes(self) -> list[str]:
        """Agents, provider or gateway processes that exited on their own since the last
        call (an agent described with its log tail); each is started again."""
        problems = []
        for site in self.sites.values():
            if site.agent is not None and site.agent.poll() is not None:
                problem = (
                    f"{site.name}'s agent exited by itself with status {site.agent.returncode}; "
                    f"log tail:\n{site.log_tail()}"
                )
                site.exits.append(problem)
                problems.append(problem)
                site.agent = None
                self.start_agent(site.name)
            if site.provider is not None and site.provider.poll() is not None:
                problems.append(
                    f"{site.name}'s provider process exited ({site.provider.returncode})"
                )
                self.start_provider(site)
            if site.gateway is not None and site.gateway.poll() is not None:
                problems.append(f"{site.name}'s gateway process exited ({site.gateway.returncode})")
                self.start_gateway(site)
        return problems

    def stop(self) -> None:
        """Kill every process of the mesh (the namespaces go with the lab)."""
        for site in self.sites.values():
            for process in (site.agent, site.provider, site.gateway):
                if process is not None and process.poll() is None:
                    process.kill()
            for process in (site.agent, site.provider, site.gateway):
                if process is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout=30)

    # -- spends ---------------------------------------------------------------------------

    def spend(self, name: str, amount: int) -> str:
        """Ask a site to count ``amount`` of the tenant's spend; the request's id."""
        self._spend_serial += 1
        identifier = f"{name}-{os.getpid()}-{time.monotonic_ns()}-{self._spend_serial}"
        inbox = self.sites[name].chaos_dir / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        _write_text(
            inbox / f"{identifier}.json",
            json.dumps({"id": identifier, "tenant": TENANT, "amount": amount}),
        )
        return identifier

    def pending_spends(self, name: str) -> int:
        return len(list((self.sites[name].chaos_dir / "inbox").glob("*.json")))

    def acknowledged_spends(self) -> list[dict[str, Any]]:
        """Every spend any site counted, in any of its lives."""
        found = []
        for site in self.sites.values():
            found += read_lines(site.chaos_dir / "spends.jsonl")
        return found

    def wedge(self, name: str, seconds: float) -> None:
        """Block the site's agent's event loop for ``seconds`` (its SWIM thread runs on)."""
        site = self.sites[name]
        _write_text(site.chaos_dir / "wedge.json", json.dumps({"seconds": seconds}))

    def wedges(self, name: str) -> list[dict[str, Any]]:
        """The wedges the site's agents went through: pid, start (epoch seconds), seconds."""
        return read_lines(self.sites[name].chaos_dir / "wedges.jsonl")

    # -- views ----------------------------------------------------------------------------

    def view(self, name: str) -> dict[str, Any] | None:
        """The site's latest view, if its current life wrote one."""
        site = self.sites[name]
        document = read_json(site.chaos_dir / "view.json")
        if not isinstance(document, dict) or site.agent is None:
            return None
        if document.get("pid") != site.agent.pid or "members" not in document:
            return None
        return document

    def overlay_document(self, name: str) -> dict[str, Any] | None:
        document = read_json(self.sites[name].overlay_file)
        return document if isinstance(document, dict) else None

    def overlay_log(self, name: str) -> list[dict[str, Any]]:
        return read_lines(self.sites[name].chaos_dir / "overlays.jsonl")


def _write_text(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def everyone_but(names: Iterable[str], excluded: str) -> list[str]:
    return [name for name in names if name != excluded]
