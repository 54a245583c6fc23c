"""``grid bench mesh``: one real site under the load of a large mesh, measured, and today's
design measured under the same load in the same run.

The measured site is a real standalone agent in a process of its own
(:mod:`grid.meshbench.measured`); the rest of the mesh is real peer sites in another process
(:mod:`grid.meshbench.peers`), all on 127.0.0.1 with real encrypted, signed SWIM frames. A
machine of two cores cannot run a hundred SWIM nodes that each verify and relay every item
of the mesh, so a few peers stand for the other sites (each carries the providers of several
sites); at ten sites or fewer every site is a peer of its own. docs/scale.md says what this
changes.

Today's design is the code of :data:`BASELINE_COMMIT` (before the state plane's rework),
taken from the git history of the tree Grid runs from, with the SWIM extension built here
beside it. Each design runs with its own peers (each encodes items its own way), one after
the other, with the same seed and the same load.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import partial
from io import BytesIO
from pathlib import Path
from typing import IO, Any

import grid
from grid.crdt import MAX_PROVIDERS_PER_SITE
from grid.demo.builder import (
    SITE_LABEL,
    MeshCredentials,
    network_document,
    provider_document,
    site_document,
    write_documents,
)
from grid.demo.mesh import free_port
from grid.errors import ConfigError
from grid.meshbench.figures import figures, joins, others_joins
from grid.meshbench.restart_load import RestartLoad

BASELINE_COMMIT = "a8f59f0"
"""Today's design: the state plane before coalesced rendering and compact signals."""
SCHEMA_VERSION = 1
NETWORK = "bench"
SITE = "site-000"
GRID_ID = "bench-grid"
PROBE_SITE = "probe"
JOINER_SITE = "joiner"
"""The site that joins again and again during the measurement (``--others-join``)."""
PROBE_MODEL = "probe-model"
MODELS = 16
"""Models served in the mesh; provider j of each site serves model j mod 16."""
MAX_PEERS_ONE_EACH = 10
"""Up to this many sites, every other site is a peer of its own."""
DEFAULT_PEERS = 4
PROVIDERS_PER_PEER = 2500
"""Above ten sites, peers enough that none carries more providers than this (the 100 x 100
load, 99 sites over the default four peers): a peer is one SWIM node publishing all its
sites' items, and a site publishes at most ``MAX_PROVIDERS_PER_SITE`` providers."""
CONVERGE_TIMEOUT_S = 600.0
MAX_JOINS = 100
OTHERS_JOIN_SAMPLE_S = 0.1
"""With ``--others-join``, the measured site samples its CPU time and bytes this often, so
that a catch-up of a fraction of a second can be told from the rest of the window."""
MIN_SECONDS_PER_OTHER_JOIN = 4.0
"""Each of ``--others-join``'s joins has a slot of the window this long at least: time to
catch up, leave, and leave probe changes outside its catch-up."""

Progress = Callable[[str, float, float], None]


@dataclass(frozen=True, slots=True)
class MeshPlan:
    sites: int = 10
    providers_per_site: int = 10
    scrape_interval_s: float = 15.0
    duration_s: float = 60.0
    warmup_s: float = 5.0
    peers: int | None = None
    """SWIM peers standing for the other sites (default: one per site up to ten sites, else
    four, or more so that none carries over :data:`PROVIDERS_PER_PEER` providers)."""
    probe_every_s: float = 2.0
    seed: int = 1
    baseline: bool = True
    joins: int = 0
    """Restarts of the measured site after the measurement, each timed until it trusts every
    site and ranks every candidate again."""
    others_join: int = 0
    """Joins of another site during the measurement: a site with an empty store joins,
    catches up and leaves, this many times, spread over the window."""

    def __post_init__(self) -> None:
        if self.sites < 2:
            raise ConfigError(f"--sites must be at least 2, got {self.sites}")
        if not 1 <= self.providers_per_site <= 1000:
            raise ConfigError(
                f"--providers-per-site must be from 1 to 1000, got {self.providers_per_site}"
            )
        for name, value, low in (
            ("--scrape-interval", self.scrape_interval_s, 1.0),
            ("--duration", self.duration_s, 1.0),
        ):
            if not (math.isfinite(value) and value >= low):
                raise ConfigError(f"{name} must be at least {low:g} s, got {value:g}")
        if not (math.isfinite(self.warmup_s) and self.warmup_s >= 0):
            raise ConfigError(f"the warm-up must not be negative, got {self.warmup_s:g}")
        if not 0 <= self.joins <= MAX_JOINS:
            raise ConfigError(f"--joins must be from 0 to {MAX_JOINS}, got {self.joins}")
        if not 0 <= self.others_join <= MAX_JOINS:
            raise ConfigError(
                f"--others-join must be from 0 to {MAX_JOINS}, got {self.others_join}"
            )
        if self.others_join and self.duration_s < MIN_SECONDS_PER_OTHER_JOIN * self.others_join:
            raise ConfigError(
                f"--others-join {self.others_join} needs a --duration of at least "
                f"{MIN_SECONDS_PER_OTHER_JOIN * self.others_join:g} s "
                f"({MIN_SECONDS_PER_OTHER_JOIN:g} s per join), got {self.duration_s:g} s"
            )
        if self.peers is not None and not 1 <= self.peers <= self.sites - 1:
            raise ConfigError(f"--peers must be from 1 to {self.sites - 1}, got {self.peers}")
        carried = math.ceil((self.sites - 1) / self.peer_count) * self.providers_per_site
        if carried > MAX_PROVIDERS_PER_SITE:
            fewest = math.ceil(
                (self.sites - 1) / (MAX_PROVIDERS_PER_SITE // self.providers_per_site)
            )
            raise ConfigError(
                f"--peers {self.peer_count} makes a peer carry {carried} providers, more than "
                f"the {MAX_PROVIDERS_PER_SITE} a site publishes: use --peers {fewest} or more"
            )

    @property
    def peer_count(self) -> int:
        if self.peers is not None:
            return self.peers
        others = self.sites - 1
        if self.sites <= MAX_PEERS_ONE_EACH:
            return others
        needed = math.ceil(others * self.providers_per_site / PROVIDERS_PER_PEER)
        return min(others, max(DEFAULT_PEERS, needed))

    @property
    def candidates(self) -> int:
        """What the site ranks: a candidate per own provider, one per model of every other
        site (a site's providers of one model are reached through its egress, as one
        candidate), and the probe's."""
        others = (self.sites - 1) * min(self.providers_per_site, MODELS)
        return self.providers_per_site + others + 1


@dataclass(frozen=True, slots=True)
class Tree:
    """A Grid tree to measure: the directory to put on ``PYTHONPATH``."""

    label: str
    path: Path


def current_tree() -> Tree:
    return Tree("current", Path(grid.__file__).resolve().parent.parent)


@contextmanager
def baseline_tree(work: Path) -> Iterator[Tree | str]:
    """Today's design, from git, with this build's SWIM extension; or why not."""
    package = Path(grid.__file__).resolve().parent
    root = package.parent.parent
    natives = sorted(package.glob("_native*.so"))
    if not (root / ".git").exists():
        yield f"no git history beside {package} (installed from a wheel)"
        return
    if not natives:
        yield f"no built grid._native in {package}"
        return
    try:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", "--format=tar", BASELINE_COMMIT, "python"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError) as error:
        yield f"commit {BASELINE_COMMIT} cannot be read from {root}: {error}"
        return
    target = work / "baseline"
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    for native in natives:
        shutil.copy2(native, target / "python" / "grid" / native.name)
    yield Tree("baseline", target / "python")


# -- one design ---------------------------------------------------------------------------


def _sites_of_peers(plan: MeshPlan) -> list[list[int]]:
    """Which of the other sites (1..sites-1) each peer stands for."""
    count = plan.peer_count
    return [list(range(1 + k, plan.sites, count)) for k in range(count)]


def _peer_name(index: int, plan: MeshPlan) -> str:
    return f"site-{index + 1:03d}" if plan.sites <= MAX_PEERS_ONE_EACH else f"peer-{index:02d}"


# These documents reach the baseline tree's agent and peers as well as the current tree's:
# both designs must read the same mesh, so they stay as the bench has always written them.


def _network(seeds: list[str]) -> dict[str, Any]:
    return network_document(NETWORK, seeds, grid_id=GRID_ID)


def _site(name: str, sink: str, pin: str) -> dict[str, Any]:
    egress = {"address": sink, "tlsMode": "plaintext"}
    return site_document(
        name, NETWORK, region="us-east", egress=egress, pin=pin, labels={SITE_LABEL: name}
    )


def _metrics_config(plan: MeshPlan, sink_port: int) -> dict[str, Any]:
    return {
        "port": sink_port,
        "path": "/metrics",
        "interval": f"{plan.scrape_interval_s:g}s",
        "timeout": "1s",
        "signals": {
            "queueDepth": {"metric": "bench_queue"},
            "kvCacheUtilization": {"metric": "bench_kv"},
            "prefixCacheHitRatio": {"metric": "bench_prefix"},
            "p99LatencyMs": {"metric": "bench_latency_ms"},
        },
    }


@dataclass
class Layout:
    """The files of one design's run."""

    peers_config: Path
    measured_config: Path
    resources: Path
    sites: dict[str, dict[str, Any]]
    own_providers: list[dict[str, Any]]


def prepare(work: Path, plan: MeshPlan) -> Layout:
    """PKI, SWIM key and configuration of the peers and the measured site."""
    credentials = MeshCredentials(work / "swim.key", "Grid bench CA")
    key_file = credentials.key_file
    sink = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    sink_port = int(sink.rsplit(":", 1)[1])

    def tls(name: str) -> tuple[Path, str]:
        directory = work / "tls" / name
        return directory, credentials.certify(name, directory, dns_names=("localhost",))

    measured_tls, measured_pin = tls(SITE)
    sites = {SITE: _site(SITE, sink, measured_pin)}
    peers: list[dict[str, Any]] = []
    for index, carried in enumerate(_sites_of_peers(plan)):
        name = _peer_name(index, plan)
        directory, pin = tls(name)
        sites[name] = _site(name, sink, pin)
        # A peer that stands for several sites names each one's models apart: a site is
        # ranked as a candidate per model, and the measured site must rank as many as it
        # would with every site a peer of its own.
        suffix = len(carried) > 1
        providers = [
            (f"s{site:03d}-p{j:03d}", f"model-{j % MODELS}" + (f".s{site:03d}" if suffix else ""))
            for site in carried
            for j in range(plan.providers_per_site)
        ]
        peers.append({"site": name, "tls": str(directory), "providers": providers})
    directory, pin = tls(PROBE_SITE)
    sites[PROBE_SITE] = _site(PROBE_SITE, sink, pin)
    peers.append(
        {
            "site": PROBE_SITE,
            "tls": str(directory),
            "providers": [("probe-p000", PROBE_MODEL)],
            "probe": True,
        }
    )
    metrics = _metrics_config(plan, sink_port)
    joiner = None
    if plan.others_join:
        # A site of its own, as a single-site peer is: its GridSite is in the measured
        # site's resources (a site joining a mesh is described to every site).
        directory, pin = tls(JOINER_SITE)
        sites[JOINER_SITE] = _site(JOINER_SITE, sink, pin)
        joiner = {
            "site": JOINER_SITE,
            "tls": str(directory),
            "providers": [
                (f"joiner-p{j:03d}", f"model-{j % MODELS}") for j in range(plan.providers_per_site)
            ],
            "joins": plan.others_join,
        }
    peers_config = work / "peers.json"
    peers_config.write_text(
        json.dumps(
            {
                "seed": plan.seed,
                "grid_id": GRID_ID,
                "network": _network([]),
                "sites": sites,
                "peers": peers,
                "joiner": joiner,
                "sink": sink,
                "key_file": str(key_file),
                "metrics_config": metrics,
                "scrape_interval_s": plan.scrape_interval_s,
                "probe_every_s": plan.probe_every_s,
                "swim": {
                    "probe_interval": 5.0,
                    "suspicion_timeout": 10.0,
                    "gossip_nodes": 3,
                    "push_pull_interval": 30.0,
                },
            }
        )
    )
    own = [
        provider_document(
            f"s000-p{j:03d}",
            network=NETWORK,
            site=SITE,
            models=[f"model-{j % MODELS}"],
            endpoint=f"http://{sink}/s000-p{j:03d}",
            cost=("0.10", "0.20"),
            observation={"metricsConfig": metrics},
        )
        for j in range(plan.providers_per_site)
    ]
    measured_config = work / "measured.json"
    measured_config.write_text(
        json.dumps(
            {
                "resources": str(work / "resources"),
                "state": str(work / "state"),
                "site": SITE,
                "network": NETWORK,
                "key_file": str(key_file),
                "tls": str(measured_tls),
                "probe_interval_s": 10.0,
                "probe_model": PROBE_MODEL,
                "probe_site": PROBE_SITE,
                "candidates": plan.candidates,
                "converge_timeout_s": CONVERGE_TIMEOUT_S,
                "joins": plan.joins,
                "joiner_site": JOINER_SITE if plan.others_join else None,
                "sample_every_s": OTHERS_JOIN_SAMPLE_S if plan.others_join else None,
                "warmup_s": plan.warmup_s,
                "duration_s": plan.duration_s,
            }
        )
    )
    return Layout(peers_config, measured_config, work / "resources", sites, own)


def write_resources(layout: Layout, seeds: list[str]) -> None:
    documents = [_network(seeds), *layout.sites.values(), *layout.own_providers]
    write_documents(layout.resources / "mesh.yaml", documents)


class Child:
    """A bench process speaking JSON lines."""

    def __init__(self, script: str, config: Path, tree: Tree, *args: str) -> None:
        env = {"PYTHONPATH": str(tree.path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        self.process = subprocess.Popen(
            [sys.executable, "-P", str(Path(__file__).with_name(script)), str(config), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._errors: list[str] = []
        assert self.process.stderr is not None
        threading.Thread(target=self._drain, args=(self.process.stderr,), daemon=True).start()

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            self._errors.append(line)
            del self._errors[:-40]

    def events(self) -> Iterator[dict[str, Any]]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                self.lines.append(event)
                yield event

    def collect(self, on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Read every line in the background (each handed to ``on_event`` too)."""

        def read() -> None:
            for event in self.events():
                if on_event is not None:
                    on_event(event)

        threading.Thread(target=read, daemon=True).start()

    def tell(self, line: str) -> None:
        """One line to the process's standard input."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def failure(self, what: str) -> str:
        tail = "".join(self._errors[-12:]).strip()
        return f"{what} (exit {self.process.poll()}): {tail or 'no output'}"

    def stop(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class BenchFailed(Exception):
    """A bench process failed; the message says which and why."""


def run_design(tree: Tree, plan: MeshPlan, progress: Progress) -> dict[str, Any]:
    """One design under the load: its figures."""
    with tempfile.TemporaryDirectory(prefix=f"grid-bench-mesh-{tree.label}-") as name:
        work = Path(name)
        layout = prepare(work, plan)
        peers = Child("peers.py", layout.peers_config, tree, "load")
        probe: Child | None = None
        try:
            progress(f"{tree.label}: the mesh forms", 0, 1)
            ready = next((e for e in peers.events() if e["event"] == "ready"), None)
            if ready is None:
                raise BenchFailed(peers.failure(f"the peers of {tree.label} did not start"))
            peers.collect()
            probe = Child("peers.py", layout.peers_config, tree, "probe", ready["seeds"][0])
            if not any(e["event"] == "ready" for e in probe.events()):
                raise BenchFailed(probe.failure(f"the probe of {tree.label} did not start"))
            # The peers' CPU while another site catches up (``--others-join``).
            other_joins = RestartLoad(peers.process.pid)
            probe.collect(partial(_pace_joins, other_joins))
            write_resources(layout, ready["seeds"])
            measured = Child("measured.py", layout.measured_config, tree)
            restarts = RestartLoad(peers.process.pid)
            try:
                result = None
                converge_s = None
                measuring = False
                for event in measured.events():
                    kind = event["event"]
                    if kind == "converging":
                        progress(f"{tree.label}: joining", event["candidates"], event["expected"])
                    elif kind == "converged":
                        converge_s = event["seconds"]
                    elif kind == "measuring":
                        if not measuring and plan.others_join:
                            probe.tell(f"joins {time.monotonic()!r} {plan.duration_s!r}")
                        measuring = True
                        progress(f"{tree.label}: measuring", event["done"], event["total"])
                    elif kind == "restarting":
                        restarts.began()
                    elif kind == "joined":
                        restarts.ended()
                        joined = sum(1 for e in measured.lines if e["event"] == "joined")
                        progress(f"{tree.label}: restarts", joined, plan.joins)
                    elif kind == "result":
                        result = event
                if result is None:
                    raise BenchFailed(measured.failure(f"the {tree.label} site failed"))
                if "error" in result:
                    raise BenchFailed(f"the {tree.label} site did not converge: {result['error']}")
            finally:
                measured.stop()
        finally:
            if probe is not None:
                probe.stop()
            peers.stop()
        return (
            figures(result, peers.lines + probe.lines, converge_s)
            | joins(ready.get("formed_s"), result.get("joins", []), restarts.cpu_share())
            | others_joins(result, probe.lines, other_joins.cpu_share())
        )


def _pace_joins(load: RestartLoad, event: dict[str, Any]) -> None:
    if event["event"] == "joiner_started":
        load.began()
    elif event["event"] == "joiner":
        load.ended()


# -- targets ------------------------------------------------------------------------------

TARGET_SIZE = (100, 100, 15.0)
TARGETS: tuple[tuple[str, str, str, float], ...] = (
    ("cpu", "CPU of one site", "cpu_share", 0.10),
    ("memory", "resident memory of one site (MB)", "rss_mb_median", 500.0),
    ("gossip_in", "gossip in (bytes/s)", "bytes_in_per_s", 200_000.0),
    ("gossip_out", "gossip out (bytes/s)", "bytes_out_per_s", 200_000.0),
    ("latency_p99", "metric change -> overlay p99 (ms)", "latency_ms_p99", 2000.0),
)
OTHERS_JOIN_TARGETS: tuple[tuple[str, str, str, float], ...] = (
    (
        "cpu_while_joining",
        "CPU of one site while another catches up",
        "others_join_cpu_share",
        0.10,
    ),
    (
        "latency_p99_while_joining",
        "metric change -> overlay p99 while another site catches up (ms)",
        "others_join_latency_ms_p99",
        2000.0,
    ),
)
"""The same targets while another site joins (issue 37), with ``--others-join``."""


def verdicts(plan: MeshPlan, current: dict[str, Any]) -> list[dict[str, Any]]:
    """Grid's scale targets against the current design's figures. A p99 with a missed
    change, or none measured, is MISSED."""
    at_size = (plan.sites, plan.providers_per_site, plan.scrape_interval_s) == TARGET_SIZE
    result = []
    for key, label, figure, bound in TARGETS + (OTHERS_JOIN_TARGETS if plan.others_join else ()):
        value = current.get(figure)
        result.append(
            {
                "target": key,
                "label": label,
                "bound": bound,
                "value": value,
                "met": value is not None and value <= bound,
                "at_target_size": at_size,
            }
        )
    return result


def run_mesh(plan: MeshPlan, progress: Progress) -> dict[str, Any]:
    """The whole benchmark: the current design, then today's design if it can run."""
    current = run_design(current_tree(), plan, progress)
    runs: dict[str, dict[str, Any] | None] = {"current": current}
    with tempfile.TemporaryDirectory(prefix="grid-bench-mesh-") as name:
        baseline: dict[str, Any] = {"commit": BASELINE_COMMIT, "ran": False, "reason": ""}
        runs["baseline"] = None
        if not plan.baseline:
            baseline["reason"] = "not asked for (--no-baseline)"
        else:
            with baseline_tree(Path(name)) as tree:
                if isinstance(tree, str):
                    baseline["reason"] = tree
                else:
                    try:
                        plan_of_baseline = replace(plan, joins=0, others_join=0)
                        runs["baseline"] = run_design(tree, plan_of_baseline, progress)
                        baseline["ran"] = True
                    except BenchFailed as error:
                        baseline["reason"] = str(error)
    return {
        "schema_version": SCHEMA_VERSION,
        "grid_version": grid.__version__,
        "plan": asdict(plan) | {"peer_count": plan.peer_count, "candidates": plan.candidates},
        "baseline": baseline,
        "runs": runs,
        "targets": verdicts(plan, current),
    }
