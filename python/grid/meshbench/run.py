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
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from io import BytesIO
from pathlib import Path
from typing import IO, Any

import grid
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

BASELINE_COMMIT = "a8f59f0"
"""Today's design: the state plane before coalesced rendering and compact signals."""
SCHEMA_VERSION = 1
NETWORK = "bench"
SITE = "site-000"
GRID_ID = "bench-grid"
PROBE_SITE = "probe"
PROBE_MODEL = "probe-model"
MODELS = 16
"""Models served in the mesh; provider j of each site serves model j mod 16."""
MAX_PEERS_ONE_EACH = 10
"""Up to this many sites, every other site is a peer of its own."""
DEFAULT_PEERS = 4
CONVERGE_TIMEOUT_S = 600.0
MAX_JOINS = 100
MISSED_AFTER_S = 5.0
"""A probe change not in the overlay this long before the run ends counts as missed."""

Progress = Callable[[str, float, float], None]


@dataclass(frozen=True, slots=True)
class MeshPlan:
    sites: int = 10
    providers_per_site: int = 10
    scrape_interval_s: float = 15.0
    duration_s: float = 60.0
    warmup_s: float = 5.0
    peers: int | None = None
    """SWIM peers standing for the other sites (default: one per site up to ten sites,
    else four)."""
    probe_every_s: float = 2.0
    seed: int = 1
    baseline: bool = True
    joins: int = 0
    """Restarts of the measured site after the measurement, each timed until it trusts every
    site and ranks every candidate again."""

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
        if self.peers is not None and not 1 <= self.peers <= self.sites - 1:
            raise ConfigError(f"--peers must be from 1 to {self.sites - 1}, got {self.peers}")

    @property
    def peer_count(self) -> int:
        if self.peers is not None:
            return self.peers
        others = self.sites - 1
        return others if self.sites <= MAX_PEERS_ONE_EACH else min(DEFAULT_PEERS, others)

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
    peers_config = work / "peers.json"
    peers_config.write_text(
        json.dumps(
            {
                "seed": plan.seed,
                "grid_id": GRID_ID,
                "network": _network([]),
                "sites": sites,
                "peers": peers,
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

    def collect(self) -> None:
        """Read every line in the background."""
        threading.Thread(target=lambda: list(self.events()), daemon=True).start()

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
            probe.collect()
            write_resources(layout, ready["seeds"])
            measured = Child("measured.py", layout.measured_config, tree)
            try:
                result = None
                converge_s = None
                for event in measured.events():
                    kind = event["event"]
                    if kind == "converging":
                        progress(f"{tree.label}: joining", event["candidates"], event["expected"])
                    elif kind == "converged":
                        converge_s = event["seconds"]
                    elif kind == "measuring":
                        progress(f"{tree.label}: measuring", event["done"], event["total"])
                    elif kind == "joined":
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
        return figures(result, peers.lines + probe.lines, converge_s) | joins(
            ready.get("formed_s"), result.get("joins", [])
        )


# -- figures ------------------------------------------------------------------------------


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def probe_latencies(
    probes: list[dict[str, Any]], seen: list[tuple[float, float]], end: float
) -> tuple[list[float], int]:
    """Seconds from each probe change handed to SWIM at the peer to the first overlay file
    holding it, and how many were never seen (only changes older than
    :data:`MISSED_AFTER_S` at the end count as missed). A busy queue scores lower, so a
    change is in once the probe's queue score moved the right way."""
    latencies: list[float] = []
    missed = 0
    if not seen:
        return [], sum(1 for p in probes if end - p["t"] > MISSED_AFTER_S)
    scores = [score for _, score in seen]
    high, low = max(scores), min(scores)
    middle = (high + low) / 2
    for probe in probes:
        busy = probe["queue"] > 0
        found = next(
            (
                t
                for t, score in seen
                if t >= probe["t"] and (score < middle if busy else score > middle)
            ),
            None,
        )
        if found is not None:
            latencies.append(found - probe["t"])
        elif end - probe["t"] > MISSED_AFTER_S:
            missed += 1
    return latencies, missed


def delivery_latencies(
    probes: list[dict[str, Any]], received: list[tuple[float, str, int]]
) -> list[float]:
    """Seconds from each probe change handed to SWIM at the peer to the first item that
    carries it reaching the measured site's engine: the same key as an item the change was
    published in, at its version or a later one (which carries the change on, unless a
    later change replaced it). The gossip part of the change -> overlay latency (the rest is
    waiting for the site's loop, and the render). A change published in no item has no
    delivery."""
    latencies = []
    for probe in probes:
        carriers = dict(probe.get("items", ()))
        found = next(
            (
                t
                for t, key, version in received
                if t >= probe["t"] and version >= carriers.get(key, math.inf)
            ),
            None,
        )
        if found is not None:
            latencies.append(found - probe["t"])
    return latencies


def versions_skipped(probes: list[dict[str, Any]], received: list[tuple[float, str, int]]) -> int:
    """Probe changes whose own item version never reached the measured site while a later
    version of that item did: gossip missed the site, and the next change came first (the
    skipped change then counts in change -> overlay until the overlay next moves its way)."""
    taken = {(key, version) for _, key, version in received}
    latest: dict[str, int] = {}
    for _, key, version in received:
        latest[key] = max(version, latest.get(key, 0))
    skipped = 0
    for probe in probes:
        carriers = [(key, version) for key, version in probe.get("items", ())]
        if carriers and not any(carrier in taken for carrier in carriers):
            skipped += any(latest.get(key, 0) > version for key, version in carriers)
    return skipped


def figures(
    result: dict[str, Any], peer_lines: list[dict[str, Any]], converge_s: float | None
) -> dict[str, Any]:
    first, last = result["first"], result["last"]
    window = last["t"] - first["t"]
    received = last["received"] - first["received"]
    applied = last["applied"] - first["applied"]
    receive_s = last["receive_s"] - first["receive_s"]
    render_s = result["render_s"]
    render_cpu = result.get("render_cpu_s", [])
    probes = [
        line
        for line in peer_lines
        if line["event"] == "probe" and first["t"] <= line["t"] <= last["t"]
    ]
    latencies, missed = probe_latencies(probes, [tuple(s) for s in result["probe_seen"]], last["t"])
    received_items = [(t, key, version) for t, key, version in result.get("probe_received", [])]
    deliveries = delivery_latencies(probes, received_items)
    load = [line for line in peer_lines if line["event"] == "peers"]
    in_window = [line for line in load if first["t"] <= line["t"] <= last["t"]]
    peers_cpu = peers_rate = None
    if len(in_window) >= 2:
        span = in_window[-1]["t"] - in_window[0]["t"]
        peers_cpu = (in_window[-1]["cpu_s"] - in_window[0]["cpu_s"]) / span
        peers_rate = (in_window[-1]["published"] - in_window[0]["published"]) / span
    rss = [value / 1e6 for value in result["rss_bytes"]]
    return {
        "window_s": window,
        "converge_s": converge_s,
        "candidates": result["candidates"],
        "cpu_share": (last["cpu_s"] - first["cpu_s"]) / window,
        "swim_cpu_share": (last.get("swim_cpu_s", 0.0) - first.get("swim_cpu_s", 0.0)) / window,
        "rss_mb_median": statistics.median(rss),
        "rss_mb_max": max(rss),
        "bytes_in_per_s": (last["bytes_in"] - first["bytes_in"]) / window,
        "bytes_out_per_s": (last["bytes_out"] - first["bytes_out"]) / window,
        "packets_in_per_s": (last.get("packets_in", 0) - first.get("packets_in", 0)) / window,
        "packets_out_per_s": (last.get("packets_out", 0) - first.get("packets_out", 0)) / window,
        # Sealed message bytes (before encryption) per second by direction and kind, for a
        # design that counts them.
        "message_bytes_per_s": {
            name.removeprefix("message_bytes_"): (count - first["message_bytes"][name]) / window
            for name, count in last.get("message_bytes", {}).items()
            if count > first["message_bytes"].get(name, 0)
        },
        "relay_backlog": last.get("backlog"),
        "items_received_per_s": received / window,
        "items_applied_per_s": applied / window,
        "apply_us_mean": receive_s / received * 1e6 if received else None,
        "refreshes": last["refreshes"] - first["refreshes"],
        "renders": len(render_s),
        "renders_per_s": len(render_s) / window,
        "render_ms_p50": statistics.median(render_s) * 1000 if render_s else None,
        "render_ms_p99": _percentile(render_s, 0.99) * 1000 if render_s else None,
        "render_cpu_share": sum(render_s) / window,
        "render_cpu_ms_p50": statistics.median(render_cpu) * 1000 if render_cpu else None,
        "delivery_ms_p50": statistics.median(deliveries) * 1000 if deliveries else None,
        "delivery_ms_p99": _percentile(deliveries, 0.99) * 1000 if deliveries else None,
        "latency_ms_p50": statistics.median(latencies) * 1000 if latencies else None,
        "latency_ms_p99": (
            None if not latencies or missed else _percentile(latencies, 0.99) * 1000
        ),
        "probes": len(probes),
        "probes_seen": len(latencies),
        "probes_missed": missed,
        "probe_versions_skipped": versions_skipped(probes, received_items),
        "latencies_ms": [round(latency * 1000, 1) for latency in latencies],
        "deliveries_ms": [round(delivery * 1000, 1) for delivery in deliveries],
        "peers_cpu_share": peers_cpu,
        "peers_items_per_s": peers_rate,
    }


def joins(formed_s: float | None, restarts: list[dict[str, float]]) -> dict[str, Any]:
    """How long the mesh (the peers) took to form before the site joined it, and the
    measured site's restarts: p50 and p99 of the seconds until it trusted every site and
    until it ranked every candidate."""
    figures: dict[str, Any] = {"formed_s": formed_s, "restarts": restarts}
    for what in ("trusted_s", "ranked_s"):
        values = [restart[what] for restart in restarts]
        figures[f"restart_{what}_p50"] = statistics.median(values) if values else None
        figures[f"restart_{what}_p99"] = _percentile(values, 0.99) if values else None
    return figures


# -- targets ------------------------------------------------------------------------------

TARGET_SIZE = (100, 100, 15.0)
TARGETS: tuple[tuple[str, str, str, float], ...] = (
    ("cpu", "CPU of one site", "cpu_share", 0.10),
    ("memory", "resident memory of one site (MB)", "rss_mb_median", 500.0),
    ("gossip_in", "gossip in (bytes/s)", "bytes_in_per_s", 200_000.0),
    ("gossip_out", "gossip out (bytes/s)", "bytes_out_per_s", 200_000.0),
    ("latency_p99", "metric change -> overlay p99 (ms)", "latency_ms_p99", 2000.0),
)


def verdicts(plan: MeshPlan, current: dict[str, Any]) -> list[dict[str, Any]]:
    """Grid's scale targets against the current design's figures. A p99 with a missed
    change, or none measured, is MISSED."""
    at_size = (plan.sites, plan.providers_per_site, plan.scrape_interval_s) == TARGET_SIZE
    result = []
    for key, label, figure, bound in TARGETS:
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
                        runs["baseline"] = run_design(tree, replace(plan, joins=0), progress)
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
