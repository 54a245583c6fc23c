"""The rest of the mesh for ``grid bench mesh``: real peer sites that publish as the other
sites would, in a process of their own.

Each peer is a real :class:`~grid.engine.SiteEngine` with a real SWIM node (its own site
certificate, the network's key) on 127.0.0.1. Its providers' metrics move every scrape
interval (a seeded random walk) and reach the engine as scrapes do; the engine decides what
to publish (whatever the item layout and publish rules of the code under test are) and the
node gossips it. A peer can stand for several sites of the mesh: it then carries their
providers as its own (SWIM items are signed by their origin, so one node cannot publish as
another site). One more peer, the probe, has a single provider whose queue depth jumps
every ``probe_every_s`` seconds; each jump is reported with the moment it was handed to
SWIM, for the change → overlay latency.

The load peers run in one process, which also serves the measured site's own providers'
``/metrics`` and accepts the TCP connections of its egress probes; the thread generating
their load runs at the lowest CPU priority. The probe runs in a process of its own at normal
priority, so that neither the measured site nor the probe waits for the CPU behind the
load. Run by path (``python -P
peers.py CONFIG load`` and ``python -P peers.py CONFIG probe ADDRESS``) with the tree under
test on ``PYTHONPATH``: it uses only interfaces that today's design has too. Reports are
JSON lines on standard output; each stops when its standard input closes.
"""

from __future__ import annotations

import json
import os
import random
import resource
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from grid import _native
from grid.engine import SiteEngine
from grid.models import load_resource
from grid.observe.scrape import ScrapeResult
from grid.runtime.credentials import swim_credentials

_TICK_S = 0.05
_ROUNDS_PER_SCRAPE = 3
"""Each peer's engine is refreshed this many times per scrape interval."""
_PROBE_QUEUE = (0.0, 500.0)


_EMIT_LOCK = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, **fields}) + "\n"
    with _EMIT_LOCK:
        sys.stdout.write(line)
        sys.stdout.flush()


@dataclass(slots=True)
class Load:
    """One provider's metrics, moving a little at every scrape."""

    queue: float
    kv: float
    prefix: float
    latency_ms: float

    def step(self, rng: random.Random) -> None:
        self.queue = max(0.0, self.queue + rng.choice((-3, -2, -1, 0, 1, 2, 3)))
        self.kv = min(1.0, max(0.0, self.kv + rng.uniform(-0.05, 0.05)))
        self.prefix = min(1.0, max(0.0, self.prefix + rng.uniform(-0.05, 0.05)))
        self.latency_ms = max(50.0, self.latency_ms * rng.uniform(0.95, 1.05))

    def exposition(self) -> str:
        return (
            f"bench_queue {self.queue}\nbench_kv {self.kv}\n"
            f"bench_prefix {self.prefix}\nbench_latency_ms {self.latency_ms}\n"
        )


@dataclass
class Peer:
    site: str
    engine: SiteEngine
    node: _native.SwimNode
    loads: dict[str, Load]
    next_scrape: dict[str, float]
    next_round: float
    published: int = 0
    published_bytes: int = 0
    pending: set[str] = field(default_factory=set)

    def publish(self, now: datetime) -> list[tuple[str, int]]:
        """Refresh the engine and publish what it decides to; the (key, version) of each item
        the node took as new."""
        items = self.engine.refresh(now).items
        if not items:
            return []
        # One exchange with the node's thread for the whole pass: one at a time, each item
        # would wait for the thread to finish a batch of received datagrams, and a peer
        # carrying thousands of providers would fall behind the load it stands for.
        results = self.node.publish_many(
            [(item.lane, item.key, item.version, item.payload) for item in items]
        )
        taken = []
        for item, result in zip(items, results, strict=True):
            if isinstance(result, str):
                raise RuntimeError(f"{self.site} cannot publish {item.key}: {result}")
            if result:
                self.published += 1
                self.published_bytes += len(item.payload)
                taken.append((item.key, item.version))
        return taken


def resources(config: dict[str, Any], peer: dict[str, Any]) -> tuple[Any, Any, list[Any]]:
    """The GridNetwork, this peer's GridSite and its providers, as the site would hold
    them."""
    # A peer renders no overlay: only what it publishes is load on the measured site, and
    # ranking thousands of providers several times a scrape would take the machine's CPU
    # from the site being measured.
    spec = {**config["network"]["spec"], "gatewayRefs": []}
    network = load_resource({**config["network"], "spec": spec})
    site = load_resource(config["sites"][peer["site"]])
    providers = [
        load_resource(_provider(config, peer["site"], name, model))
        for name, model in peer["providers"]
    ]
    return network, site, providers


def _provider(config: dict[str, Any], site: str, name: str, model: str) -> dict[str, Any]:
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "InferenceProvider",
        "metadata": {"name": name},
        "spec": {
            "gridNetworkRef": config["network"]["metadata"]["name"],
            "backendKind": "local",
            "providerKind": "self_hosted",
            "models": [{"name": model}],
            "endpoint": f"http://{config['sink']}/{name}",
            "siteSelector": {"matchLabels": {"grid.praxis-proxy.io/site": site}},
            "cost": {"inputPerMillion": "0.10", "outputPerMillion": "0.20"},
            "metricsConfig": config["metrics_config"],
        },
    }


def start_peer(config: dict[str, Any], peer: dict[str, Any], rng: random.Random) -> Peer:
    built = build_peer(config, peer, rng)
    built.node.start()
    return built


def build_peer(
    config: dict[str, Any], peer: dict[str, Any], rng: random.Random, bind: str = "127.0.0.1:0"
) -> Peer:
    """A peer whose node is bound to ``bind`` but not started."""
    network, site, providers = resources(config, peer)
    now = datetime.now(UTC)
    engine = SiteEngine(
        network, peer["site"], sites=[site], providers=providers, grid_id=config["grid_id"]
    )
    engine.set_membership_running(True)
    tls = Path(peer["tls"])
    certificate = (tls / "tls.crt").read_text()
    engine.set_certificate(certificate, now)
    credentials = swim_credentials(
        certificate, (tls / "tls.key").read_text(), (tls / "ca.crt").read_text()
    )
    swim = config["swim"]
    node = _native.SwimNode(
        bind,
        peer["site"],
        [Path(config["key_file"]).read_bytes()],
        certificate_chain=list(credentials.certificate_chain),
        private_key=credentials.private_key,
        trust_anchors=list(credentials.trust_anchors),
        pins=credentials.native_pins(),
        probe_interval=swim["probe_interval"],
        suspicion_timeout=swim["suspicion_timeout"],
        gossip_nodes=swim["gossip_nodes"],
        push_pull_interval=swim["push_pull_interval"],
        # Nobody reads a peer's events: keep few.
        event_capacity=16,
    )
    interval = config["scrape_interval_s"]
    moment = time.monotonic()
    loads = {
        name: Load(
            queue=float(rng.randint(0, 20)),
            kv=rng.uniform(0.1, 0.8),
            prefix=rng.uniform(0.2, 0.8),
            latency_ms=rng.uniform(300, 1500),
        )
        for name, _ in peer["providers"]
    }
    if peer.get("probe", False):
        # Best on every other signal, so the probe ranks among the candidates an overlay
        # keeps (at most 1,024) even while its queue is full.
        for load in loads.values():
            load.kv, load.prefix, load.latency_ms = 0.0, 1.0, 50.0
    for name, load in loads.items():
        engine.observe_scrape(name, ScrapeResult(200, 0.001, text=load.exposition()), now)
    return Peer(
        peer["site"],
        engine,
        node,
        loads,
        {name: moment + rng.uniform(0, interval) for name in loads},
        moment + rng.uniform(0, interval / _ROUNDS_PER_SCRAPE),
    )


class _Sink(BaseHTTPRequestHandler):
    """The measured site's own providers' ``/metrics`` (a steady, light load)."""

    body = b"bench_queue 2\nbench_kv 0.3\nbench_prefix 0.5\nbench_latency_ms 800\n"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _SinkServer(ThreadingHTTPServer):
    """One listener stands for every site's gateway (the egress each site's probe reaches)
    as well as the providers' ``/metrics``: a joining site probes all of them at once, so
    its accept queue holds one connection per site, as each site's own gateway would. With
    the default five, the probes past the fifth lost their SYN and waited a second for the
    retransmission, a delay no real mesh has."""

    request_queue_size = 1024


def serve_sink(address: str) -> ThreadingHTTPServer:
    host, port = address.rsplit(":", 1)
    server = _SinkServer((host, int(port)), _Sink)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


LOAD_NICENESS = 19
"""The thread generating the load runs at the lowest CPU priority: the machine is shared with
the measured site, which on its own host would have the CPU it needs (see docs/scale.md).
The peers' SWIM nodes keep the normal priority: they relay what the probe publishes, as the
other sites of a mesh do."""


def _settle_collector() -> None:
    """The garbage collector set as a site's process sets it (``grid agent``), in a design
    that does: the peers stand for sites, and with CPython's defaults the load process spent
    a third of its CPU in full collections of its large heap at 300 sites."""
    try:
        from grid.runtime.collector import settle_collector
    except ImportError:
        return
    settle_collector()


def main(argv: list[str]) -> int:
    """``peers.py CONFIG load``: the peers standing for the other sites, at the lowest CPU
    priority, and the measured site's metrics endpoint. ``peers.py CONFIG probe ADDRESS``:
    the probe peer alone, at normal priority, joining the mesh at ``ADDRESS``."""
    config = json.loads(Path(argv[1]).read_text())
    role = argv[2]
    rng = random.Random(config["seed"])
    if role == "load":
        sink = serve_sink(config["sink"])
        peers = [start_peer(config, p, rng) for p in config["peers"] if not p.get("probe")]
        seeds = [peer.node.address for peer in peers]
        for peer in peers[1:]:
            peer.node.join(seeds[:1])
        # The sites of a mesh know each other before the steady state measured here: a
        # peer publishing thousands of items before the others verified it would have most
        # of them held back and dropped (a node keeps 1,024 items of unverified origins),
        # and the rest would arrive only by push/pull syncs, minutes later.
        wait_until_all_alive(peers)
        # Per thread on Linux: this one, and those it starts from here on. The nodes'
        # threads, started above, keep the normal priority.
        os.setpriority(os.PRIO_PROCESS, 0, LOAD_NICENESS)
    else:
        (spec,) = [p for p in config["peers"] if p.get("probe")]
        peers = [start_peer(config, spec, random.Random(rng.random()))]
        seeds = [peers[0].node.address]
        peers[0].node.join([argv[3]])
    probe_seed = rng.random()
    stop = threading.Event()
    joiner = None
    if role == "probe" and config.get("joiner"):
        joiner = Joiner(config, config["joiner"], argv[3], random.Random(rng.random()), stop)
    now = datetime.now(UTC)
    for peer in peers:
        peer.publish(now)
    _settle_collector()
    if role == "load":
        # The load runs from here on; the measured site joins once the mesh has formed
        # (every peer holds the same item names, for a while), as a site joins a running
        # mesh: its join time is then its own, not the time the mesh takes to form.
        loading = threading.Thread(target=run_load, args=(peers, config, stop, rng))
        loading.start()
        emit("ready", seeds=seeds, formed_s=wait_until_formed(peers))
    else:
        emit("ready", seeds=seeds)

    def stop_when_stdin_closes() -> None:
        # One line, ``joins T0 WINDOW``, tells the probe's joiner when the measurement
        # began (monotonic seconds) and how long it lasts; the end of input stops the peers.
        for line in sys.stdin:
            words = line.split()
            if joiner is not None and words[:1] == ["joins"]:
                joiner.begin(float(words[1]), float(words[2]))
        stop.set()

    threading.Thread(target=stop_when_stdin_closes, daemon=True).start()
    if role == "load":
        loading.join()
        sink.shutdown()
    else:
        (probe_provider,) = peers[0].loads
        run_probe(peers[0], probe_provider, config, stop, probe_seed, joiner)
    if joiner is not None:
        joiner.close()
    for peer in peers:
        peer.node.close()
    return 0


_JOIN_TIMEOUT_S = 60.0
_FORM_TIMEOUT_S = 600.0
_FORMED_AFTER_STILL_S = 2.0
"""The peers' item names must hold still this long to count as formed."""


def wait_until_all_alive(peers: list[Peer]) -> None:
    """Waits until every peer's node holds all the others alive (or the join timeout
    passes: the run then goes on, and the convergence wait reports what is missing)."""
    deadline = time.monotonic() + _JOIN_TIMEOUT_S
    others = len(peers) - 1
    while time.monotonic() < deadline:
        alive = [
            sum(state == "alive" for _site, _address, state, _gen in peer.node.members())
            for peer in peers
        ]
        if all(count >= others for count in alive):
            return
        time.sleep(0.05)


def wait_until_formed(peers: list[Peer]) -> float | None:
    """Seconds until every peer's node holds as many item names as the others, unchanged for
    :data:`_FORMED_AFTER_STILL_S`; None if that did not happen within
    :data:`_FORM_TIMEOUT_S` (the run goes on, and the convergence wait reports what is
    missing)."""
    started = time.monotonic()
    last: list[int] = []
    still_since = started
    while time.monotonic() - started < _FORM_TIMEOUT_S:
        held = [peer.node.stats()["items_stored"] for peer in peers]
        if held != last:
            last, still_since = held, time.monotonic()
        elif len(set(held)) == 1 and time.monotonic() - still_since >= _FORMED_AFTER_STILL_S:
            return still_since - started
        time.sleep(0.1)
    return None


def run_load(
    peers: list[Peer], config: dict[str, Any], stop: threading.Event, rng: random.Random
) -> None:
    """Every scrape interval each provider's metrics move; each peer is refreshed a few
    times per interval and publishes what its engine decides to."""
    interval = config["scrape_interval_s"]
    round_s = interval / _ROUNDS_PER_SCRAPE
    next_report = time.monotonic() + 1.0
    while not stop.wait(_TICK_S):
        moment = time.monotonic()
        now = datetime.now(UTC)
        for peer in peers:
            if moment < peer.next_round:
                continue
            peer.next_round += round_s
            for name, due in peer.next_scrape.items():
                if due <= moment:
                    load = peer.loads[name]
                    load.step(rng)
                    result = ScrapeResult(200, 0.001, text=load.exposition())
                    peer.engine.observe_scrape(name, result, now)
                    peer.next_scrape[name] = due + interval
            peer.publish(now)
        if moment >= next_report:
            next_report = moment + 1.0
            usage = resource.getrusage(resource.RUSAGE_SELF)
            emit(
                "peers",
                t=moment,
                cpu_s=usage.ru_utime + usage.ru_stime,
                published=sum(p.published for p in peers),
                published_bytes=sum(p.published_bytes for p in peers),
            )


def run_probe(  # noqa: PLR0917 - the probe, what it changes, and the joiner it paces
    probe: Peer,
    provider: str,
    config: dict[str, Any],
    stop: threading.Event,
    seed: float,
    joiner: Joiner | None = None,
) -> None:
    """Every two seconds or so, the probe provider's queue jumps between 0 and 500; the
    moment each change is handed to SWIM is reported, with the items that carry it. A join
    of the joiner that is due starts just before a change."""
    rng = random.Random(seed)
    probes = 0
    while not stop.wait(config["probe_every_s"] * rng.uniform(0.8, 1.2)):
        joining = joiner is not None and joiner.due(time.monotonic())
        if joiner is not None and joining:
            joiner.start()
        probes += 1
        now = datetime.now(UTC)
        load = probe.loads[provider]
        load.queue = _PROBE_QUEUE[probes % 2]
        probe.engine.observe_scrape(provider, ScrapeResult(200, 0.001, text=load.exposition()), now)
        # Before publishing: the item can reach the site before the call returns.
        handed = time.monotonic()
        items = probe.publish(now)
        emit("probe", t=handed, queue=load.queue, serial=probes, items=items)
        if joiner is not None and joining:
            joiner.settle()


_CAUGHT_UP_POLL_S = 0.01
_CATCH_UP_TIMEOUT_S = 600.0
_DUE_IN_SLOT = 0.25


class Joiner:
    """Another site that joins the mesh again and again while the measured site is measured
    (``grid bench mesh --others-join N``): a real site of its own (its certificate, a
    GridSite the measured site holds, an engine publishing its providers as a site does)
    whose node starts with an empty store, joins through the load's first peer, catches up
    (its node's ``caught_up``: the store walked round and nothing waiting) and leaves, N
    times, each life a new node (a new generation) at the same address.

    The joins are spread over the measurement: the k-th is due a quarter into the k-th of
    N equal slots (so that a catch-up of several seconds ends, and the overlay shows its
    changes, before the window does), and starts in the probe's loop just before the
    probe's next change, so that every catch-up holds at least one probe change however
    short it is. No join starts after the window. The joiner runs in the probe's process,
    at normal priority (a joining site has the CPU of its own host); like the peers', its
    node's events are not read: its catch-up is its node's, not an engine's decoding."""

    def __init__(
        self,
        config: dict[str, Any],
        spec: dict[str, Any],
        seed: str,
        rng: random.Random,
        stop: threading.Event,
    ) -> None:
        self.config, self.spec, self.seed, self.rng, self.stop = config, spec, seed, rng, stop
        self.joins: int = spec["joins"]
        self.started = 0
        self._lock = threading.Lock()
        self._schedule: tuple[float, float] | None = None
        self._next: Peer | None = build_peer(config, spec, random.Random(rng.random()))
        self._bind = self._next.node.address
        self._life: tuple[Peer, float, int] | None = None
        self._watching: threading.Thread | None = None

    def begin(self, t0: float, window_s: float) -> None:
        with self._lock:
            self._schedule = (t0, window_s)

    def due(self, now: float) -> bool:
        with self._lock:
            if self._schedule is None or self._next is None or self.started >= self.joins:
                return False
            t0, window_s = self._schedule
            # None starts after the window (a catch-up longer than a slot delays the next).
            due = t0 + (self.started + _DUE_IN_SLOT) * window_s / self.joins
            return due <= now < t0 + window_s

    def start(self) -> None:
        """The next life's node starts and joins (in the probe's thread, just before a
        change)."""
        with self._lock:
            peer, self._next = self._next, None
            self.started += 1
            serial = self.started
        assert peer is not None
        started = time.monotonic()
        peer.node.start()
        peer.node.join([self.seed])
        self._life = (peer, started, serial)
        emit("joiner_started", t=started, serial=serial, generation=peer.node.generation)

    def settle(self) -> None:
        """After the probe's change: the life publishes its site's items, and a thread
        watches it catch up."""
        assert self._life is not None
        life, self._life = self._life, None
        life[0].publish(datetime.now(UTC))
        self._watching = threading.Thread(target=self._watch, args=life, daemon=True)
        self._watching.start()

    def _watch(self, peer: Peer, started: float, serial: int) -> None:
        caught: float | None = None
        deadline = started + _CATCH_UP_TIMEOUT_S
        while not self.stop.is_set() and time.monotonic() < deadline:
            if peer.node.stats()["caught_up"]:
                caught = time.monotonic()
                break
            time.sleep(_CAUGHT_UP_POLL_S)
        stats = peer.node.stats()
        emit(
            "joiner",
            serial=serial,
            t=started,
            caught_up_t=caught,
            caught_up_s=None if caught is None else caught - started,
            items=stats["items_stored"],
            bytes_in=stats["bytes_in"],
            bytes_out=stats["bytes_out"],
        )
        peer.node.leave()
        if self.started < self.joins and not self.stop.is_set():
            # The next life: an empty store, a new generation, the same address.
            following = build_peer(
                self.config, self.spec, random.Random(self.rng.random()), self._bind
            )
            with self._lock:
                self._next = following

    def close(self) -> None:
        """Waits for the life being watched to leave (``stop`` is set)."""
        if self._watching is not None:
            self._watching.join(timeout=30)
        if self._next is not None:
            self._next.node.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
