"""The measured site of ``grid bench mesh``: a real standalone agent (its SWIM node, its site
engine, its scrapes and probes, its overlay and status files) in a process of its own, so
that the CPU time and memory it reports are its own.

It reads its resources from a directory like any agent. It counts, around the engine's
public calls, the items it takes in (and the time they take), the refresh passes that
render (and their time), and, from the SWIM node, the bytes in and out. Each time the
overlay file is written it notes the probe candidate's queue-depth score, for the
change → overlay latency. Once the ranking holds every provider of the mesh (and after a
warm-up), it measures for the given duration and prints the figures as one JSON line.

Run by path (``python -P measured.py CONFIG``) with the tree under test on
``PYTHONPATH``: it uses only interfaces that today's design has too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from grid.agent import Agent, AgentOptions, PerNetwork
from grid.engine import GatewayOverlay, ItemOutcome, RefreshResult, SiteEngine

_PAGE = os.sysconf("SC_PAGE_SIZE")
_CLOCK_TICK = os.sysconf("SC_CLK_TCK")
_SWIM_THREAD = "grid-swim"
"""How the SWIM node's thread is named (``grid-swim-<site>``, cut to 15 characters)."""
_SAMPLE_S = 0.5
_PROBE_CUT = -1.0
"""The probe's queue score while the overlay leaves it out: below any score."""


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def swim_cpu_seconds(tasks: list[str] | None = None) -> float:
    """CPU time of the SWIM node's thread (decrypting, verifying, relaying, syncing).
    ``tasks``, when given, holds the thread ids found last time: they are read again
    without listing every thread (a sampler's call, ten a second), and found afresh once
    one has ended."""
    if tasks:
        try:
            return sum(_task_cpu_ticks(task) for task in tasks) / _CLOCK_TICK
        except OSError:
            tasks.clear()  # a node that ended: look for the thread again
    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                if not comm.read().startswith(_SWIM_THREAD):
                    continue
            total += _task_cpu_ticks(task)
        except OSError:
            continue  # a thread that ended meanwhile
        if tasks is not None:
            tasks.append(task)
    return total / _CLOCK_TICK


def _task_cpu_ticks(task: str) -> int:
    with open(f"/proc/self/task/{task}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


class Counters:
    """What the engine did, counted around its public calls."""

    def __init__(self, engine: SiteEngine, probe_model: str, probe_site: str) -> None:
        self.engine = engine
        self.probe_model = probe_model
        self.probe_site = probe_site
        self.probe_received: list[tuple[float, str, int]] = []
        """(monotonic time, key, version) of each item of the probe's site taken in."""
        self.lanes_received: Counter[tuple[str, str]] = Counter()
        """Items taken in by (origin, lane): what a site that never converged was missing."""
        self.applied = 0
        self.received = 0
        self.receive_s = 0.0
        self.refreshes = 0
        self.refresh_s = 0.0
        self.render_s: list[float] = []
        self.render_cpu_s: list[float] = []
        """CPU time of the same passes (this thread's): what a pass costs, whatever else
        the machine runs."""
        self.probe_seen: list[tuple[float, float]] = []
        """(monotonic time the overlay file was written, probe's queue-depth score)."""
        self._ranking = engine.ranking
        self._probe_score: float | None = None
        receive, refresh = engine.receive_item, engine.refresh
        engine.receive_item = self._timed_receive(receive)  # type: ignore[method-assign]
        engine.refresh = self._timed_refresh(refresh)  # type: ignore[method-assign]

    def _timed_receive(self, receive: Callable[..., ItemOutcome]) -> Callable[..., ItemOutcome]:
        def timed(*args: Any) -> ItemOutcome:
            started = time.perf_counter()
            outcome = receive(*args)
            self.receive_s += time.perf_counter() - started
            self.lanes_received[(args[0], args[1])] += 1
            if args[0] == self.probe_site:
                self.probe_received.append((time.monotonic(), args[2], args[3]))
            self.received += 1
            if outcome is ItemOutcome.APPLIED:
                self.applied += 1
            return outcome

        return timed

    def _timed_refresh(self, refresh: Callable[..., RefreshResult]) -> Callable[..., RefreshResult]:
        def timed(now: datetime, **options: Any) -> RefreshResult:
            started, cpu_started = time.perf_counter(), time.thread_time()
            result = refresh(now, **options)
            spent = time.perf_counter() - started
            self.refreshes += 1
            self.refresh_s += spent
            if self.engine.ranking is not self._ranking:
                self._ranking = self.engine.ranking
                self.render_s.append(spent)
                self.render_cpu_s.append(time.thread_time() - cpu_started)
            return result

        return timed

    def overlay_written(self, _network: str, overlay: GatewayOverlay, _path: Path) -> None:
        if overlay.overlay is None:
            return
        # From the ranked entries the overlay was written from, not its document: reading
        # the document back from the text would cost the site a parse of every render.
        scores = [
            entry.breakdown.queue_depth
            for entry in overlay.overlay.candidates
            if entry.candidate.model == self.probe_model
        ]
        if scores:
            score = scores[0]
        elif self._probe_score is not None:
            # Known, and now left out: an overlay holds at most 1,024 candidates (the best
            # of each model first), and with more models than that a busy probe is cut. Its
            # busy state has reached the overlay.
            score = _PROBE_CUT
        else:
            return
        if score != self._probe_score:
            self._probe_score = score
            self.probe_seen.append((time.monotonic(), score))

    def candidates(self) -> int:
        ranking = self.engine.ranking
        return 0 if ranking is None else len(ranking.candidates)

    def candidates_but(self, site: str | None) -> int:
        """The candidates ranked, but those of ``site`` (the joiner's, which come and go)."""
        ranking = self.engine.ranking
        if ranking is None:
            return 0
        return sum(1 for entry in ranking.candidates if entry.candidate.site != site)

    def snapshot(self, agent: Agent, network: str) -> dict[str, Any]:
        node = agent.networks[network].node
        stats = node.stats() if node is not None else {}
        return {
            "t": time.monotonic(),
            "cpu_s": cpu_seconds(),
            "swim_cpu_s": swim_cpu_seconds(),
            "bytes_in": stats.get("bytes_in", 0),
            "bytes_out": stats.get("bytes_out", 0),
            "packets_in": stats.get("packets_in", 0),
            "packets_out": stats.get("packets_out", 0),
            "backlog": stats.get("broadcast_backlog", 0),
            "message_bytes": {k: v for k, v in stats.items() if k.startswith("message_bytes_")},
            "messages": {k: v for k, v in stats.items() if k.startswith("messages_")},
            "applied": self.applied,
            "received": self.received,
            "receive_s": self.receive_s,
            "refreshes": self.refreshes,
            "refresh_s": self.refresh_s,
            "renders": len(self.render_s),
        }


def _inactive_sites(engine: SiteEngine) -> dict[str, str]:
    """Each GridSite not Active, with its phase and the first condition that is not True."""
    inactive = {}
    for (kind, name), status in engine.statuses().items():
        phase = getattr(status, "phase", None)
        if kind != "GridSite" or phase is None or phase.value == "Active":
            continue
        failing = [c for c in status.conditions if c.status != "True"]
        why = f": {failing[0].type} {failing[0].reason} {failing[0].message}" if failing else ""
        inactive[name] = f"{phase.value}{why}"
    return inactive


def _collector_settling() -> Callable[[], None] | None:
    try:
        from grid.runtime.collector import settle_collector
    except ImportError:
        return None
    return settle_collector


def _options(config: dict[str, Any], bind: str) -> AgentOptions:
    return AgentOptions(
        resources=Path(config["resources"]),
        state_dir=Path(config["state"]),
        site=PerNetwork(config["site"]),
        bind=PerNetwork(bind),
        key_files={None: (Path(config["key_file"]),)},
        tls_dir=Path(config["tls"]),
        probe_interval_s=config["probe_interval_s"],
    )


def _active_sites(engine: SiteEngine, but: str | None = None) -> int:
    """The GridSites Active, but ``but`` (the joiner, which comes and goes)."""
    return sum(
        1
        for (kind, name), status in engine.statuses().items()
        if kind == "GridSite"
        and name != but
        and getattr(getattr(status, "phase", None), "value", "") == "Active"
    )


async def sample(
    agent: Agent, network: str, every_s: float, end: float, samples: list[list[float]]
) -> None:
    """(time, CPU time, bytes out, bytes in, the SWIM thread's CPU time) of the site every
    ``every_s`` until ``end``: to tell its CPU and gossip while another site caught up from
    the rest of the window, and the node's share of that CPU (answering the joiner's walks)
    from the engine's (taking the joiner in)."""
    swim_tasks: list[str] = []
    while True:
        node = agent.networks[network].node
        stats = node.stats() if node is not None else {}
        sent, received = stats.get("bytes_out", 0), stats.get("bytes_in", 0)
        samples.append(
            [time.monotonic(), cpu_seconds(), sent, received, swim_cpu_seconds(swim_tasks)]
        )
        if time.monotonic() >= end:
            return
        await asyncio.sleep(min(every_s, max(end - time.monotonic(), 0.0)))


async def restarts(config: dict[str, Any], address: str, sites: int) -> list[dict[str, float]]:
    """The site restarted ``joins`` times at its address (it leaves, and its next life joins
    the running mesh with its state directory): for each, the seconds until the ``sites``
    GridSites it trusted before were Active again and until every candidate was ranked, and
    the bytes it received until then beside the items it then held."""
    network, expected = config["network"], config["candidates"]
    joins = []
    for _ in range(config.get("joins", 0)):
        agent = Agent(_options(config, address))
        emit("restarting")
        started = time.monotonic()
        await agent.start()
        engine = agent.networks[network].engine
        trusted_s = ranked_s = None
        received: dict[str, int] = {}
        deadline = started + config["converge_timeout_s"]
        while (trusted_s is None or ranked_s is None) and time.monotonic() < deadline:
            if trusted_s is None and _active_sites(engine, config.get("joiner_site")) >= sites:
                trusted_s = time.monotonic() - started
            ranking = engine.ranking
            if ranked_s is None and ranking is not None and len(ranking.candidates) >= expected:
                ranked_s = time.monotonic() - started
                node = agent.networks[network].node
                stats = node.stats() if node is not None else {}
                received = {
                    "bytes_in": stats.get("bytes_in", 0),
                    "items": stats.get("items_stored", 0),
                }
            await asyncio.sleep(0.05)
        await agent.stop()
        if trusted_s is None or ranked_s is None:
            raise RuntimeError(
                f"a restart did not converge within {config['converge_timeout_s']:g} s"
            )
        joins.append(
            {
                "trusted_s": trusted_s,
                "ranked_s": ranked_s,
                **received,
            }
        )
        emit("joined", **joins[-1])
    return joins


async def measure(config: dict[str, Any]) -> dict[str, Any]:
    logging.getLogger("grid.agent").setLevel(logging.ERROR)
    agent = Agent(_options(config, "127.0.0.1:0"))
    settle = _collector_settling()
    if settle is not None:
        settle()  # as `grid agent` does, in a design that has it
    await agent.start()
    network = config["network"]
    engine = agent.networks[network].engine
    counters = Counters(engine, config["probe_model"], config["probe_site"])
    agent.overlay_listeners.append(counters.overlay_written)
    expected = config["candidates"]
    started = time.monotonic()
    deadline = started + config["converge_timeout_s"]
    while counters.candidates() < expected:
        if time.monotonic() > deadline:
            ranking = engine.ranking
            per_site = Counter(
                entry.candidate.site for entry in (ranking.candidates if ranking else ())
            )
            node = agent.networks[network].node
            stats = node.stats() if node is not None else {}
            watched = (
                "members",
                "items_stored",
                "items_store_full",
                "items_unverified_origin",
                "syncs_done",
                "catch_up_syncs",
                "syncs_incomplete",
            )
            swim = {k: stats.get(k) for k in watched}
            refused = dict(engine.refused_items)
            reasons = sorted({reason for _, reason in engine.not_offered})[:5]
            inactive = _inactive_sites(engine)
            taken = {
                site: {
                    lane: count
                    for (origin, lane), count in sorted(counters.lanes_received.items())
                    if origin == site
                }
                for site in inactive
            }
            await agent.stop()
            return {
                "error": f"only {counters.candidates()} of {expected} candidates ranked "
                f"(by site: {dict(sorted(per_site.items()))}; SWIM: {swim}; "
                f"items refused: {refused or 'none'}; not offered: {reasons or 'none'}; "
                f"sites not active: {inactive or 'none'}; "
                f"their items taken in, by lane: {taken or 'none'})"
            }
        emit("converging", candidates=counters.candidates(), expected=expected)
        await asyncio.sleep(_SAMPLE_S)
    emit("converged", seconds=time.monotonic() - started)
    await asyncio.sleep(config["warmup_s"])
    first = counters.snapshot(agent, network)
    first_render = len(counters.render_s)
    rss: list[int] = []
    end = first["t"] + config["duration_s"]
    samples: list[list[float]] = []
    sampling = None
    if config.get("sample_every_s"):
        sampling = asyncio.create_task(
            sample(agent, network, config["sample_every_s"], end, samples)
        )
    while time.monotonic() < end:
        rss.append(rss_bytes())
        emit("measuring", done=time.monotonic() - first["t"], total=config["duration_s"])
        await asyncio.sleep(min(_SAMPLE_S, max(end - time.monotonic(), 0.0)))
    last = counters.snapshot(agent, network)
    rss.append(rss_bytes())
    if sampling is not None:
        await sampling
    joiner = config.get("joiner_site")
    ranked = counters.candidates() if joiner is None else counters.candidates_but(joiner)
    node = agent.networks[network].node
    address = node.address if node is not None else "127.0.0.1:0"
    sites = _active_sites(engine, joiner)
    await agent.stop()
    joins = await restarts(config, address, sites)
    return {
        "joins": joins,
        "first": first,
        "last": last,
        "rss_bytes": rss,
        "render_s": counters.render_s[first_render : last["renders"]],
        "render_cpu_s": counters.render_cpu_s[first_render : last["renders"]],
        "probe_seen": [seen for seen in counters.probe_seen if seen[0] >= first["t"]],
        "probe_received": [r for r in counters.probe_received if r[0] >= first["t"]],
        "candidates": ranked,
        "samples": samples,
        "joiner_items_taken": sum(
            count for (origin, _lane), count in counters.lanes_received.items() if origin == joiner
        ),
    }


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[1]).read_text())
    emit("result", **asyncio.run(measure(config)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
