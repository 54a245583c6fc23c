"""Two SWIM nodes, each in its own process, under a burst: 300 publishes as fast as the node
takes them, event queues much smaller than the burst, and slow readers (a thread on
``next_event`` or an asyncio loop on ``events()``, as the agent reads them). Both must keep
reporting afterwards: their status lines keep coming, their stats keep changing, and the
heartbeat items each publishes after the burst keep reaching the other's reader.

Hunting a rare stall, run it many times and print what each node was doing:

    .venv/bin/python tests/test_swim_stress.py --runs 50 [--reader thread|async|both]

A stalled node is described by its last status line, whether its SWIM thread still runs,
the state of each of its threads (``/proc``), and a Python stack dump (faulthandler on
SIGUSR1).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import swim
from support.swim import site_certificate

pytestmark = pytest.mark.slow

NODE = r"""
import asyncio, faulthandler, json, os, signal, sys, threading, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
from grid.membership import ItemEvent, SwimConfig, SwimNode
from grid.runtime.credentials import swim_credentials

setup = json.loads(sys.stdin.readline())
credentials = swim_credentials(setup["certificate"], setup["private_key"], setup["ca"])
config = SwimConfig(
    probe_interval=setup["probe"],
    suspicion_timeout=setup["suspicion"],
    push_pull_interval=setup["push_pull"],
    event_capacity=setup["capacity"],
)
node = SwimNode(
    "127.0.0.1:0", setup["site"], None, [bytes.fromhex(setup["key"])], config,
    credentials=credentials,
)
node.start()
print(json.dumps({"address": node.address}), flush=True)
node.join([json.loads(sys.stdin.readline())["peer"]])
started = time.monotonic()
seen = {"events": 0, "items": 0, "heartbeats": 0, "phase": "joining", "publish_errors": 0}
delay = setup["reader_delay"]

def record(event):
    seen["events"] += 1
    if isinstance(event, ItemEvent):
        seen["items"] += 1
        if event.lane == "metadata":
            seen["heartbeats"] += 1

def thread_reader():
    while True:
        event = node.next_event(0.5)
        if event is None:
            if not node.running:
                return
            continue
        record(event)
        time.sleep(delay)

async def async_reader():
    async for event in node.events():
        record(event)
        time.sleep(delay)  # a slow handler that blocks the loop, as a busy agent would
        await asyncio.sleep(0)

if setup["reader"] == "thread":
    threading.Thread(target=thread_reader, daemon=True).start()
else:
    threading.Thread(target=lambda: asyncio.run(async_reader()), daemon=True).start()

def report():
    stats = node.stats()
    line = {
        "t": round(time.monotonic() - started, 3),
        "running": node.running,
        **seen,
        "members": [[m.site, m.state, m.generation] for m in node.members()],
        "stats": {k: stats.get(k, 0) for k in setup["stats"]},
    }
    print(json.dumps(line), flush=True)

def reporter():
    while True:
        report()
        time.sleep(0.25)

threading.Thread(target=reporter, daemon=True).start()
while not any(m.state == "alive" for m in node.members()):
    time.sleep(0.01)
seen["phase"] = "burst"
payload = os.urandom(setup["payload"])
for index in range(setup["publishes"]):
    node.publish("state", f"provider/p{index}", index + 1, payload)
seen["phase"] = "steady"
seen["burst_done_at"] = round(time.monotonic() - started, 3)
version = 0
while True:  # heartbeats until the parent kills the process
    version += 1
    try:
        node.publish("metadata", "metadata", version, b"heartbeat %d" % version)
    except Exception:
        seen["publish_errors"] += 1
    time.sleep(0.2)
"""
STATS = (
    "packets_in",
    "packets_out",
    "items_delivered",
    "events_dropped",
    "members",
    "broadcast_backlog",
    "updates_backlog",
    "syncs_done",
    "send_errors",
    "recv_errors",
    "bad_messages",
    "dropped",
    "dropped_replayed",
    "dropped_stale",
    "dropped_too_long",
    "probes_failed",
    "local_health",
    "refutations",
    "answers_withheld",
)
FAST = {"probe": 0.3, "suspicion": 1.0, "push_pull": 3.0}
WATCH_S = 9.0
"""How long both nodes are watched after the burst (syncs every 3 s: three of them)."""


@dataclass
class NodeRun:
    site: str
    process: subprocess.Popen[str]
    address: str = ""
    lines: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    def read(self) -> None:
        assert self.process.stdout is not None
        for text in self.process.stdout:
            try:
                document = json.loads(text)
            except ValueError:
                continue
            self.lines.append((time.monotonic(), document))

    def read_errors(self) -> None:
        assert self.process.stderr is not None
        self.stderr.extend(self.process.stderr)


def _threads(pid: int) -> list[str]:
    """Each thread of a process: name, state and what it waits in (``/proc``)."""
    described = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            name = (task / "comm").read_text().strip()
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = (task / "wchan").read_text().strip() or "-"
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
        described.append(f"{task.name} {name} state={state} wchan={wchan} cpu={cpu:.2f}s")
    return described


def _start(site: str, reader: str, key: bytes, capacity: int, delay: float) -> NodeRun:
    issued = site_certificate(site)
    process = subprocess.Popen(
        [sys.executable, "-c", NODE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    setup = {
        "site": site,
        "key": key.hex(),
        "certificate": issued.certificate_pem,
        "private_key": issued.private_key_pem().decode(),
        "ca": swim.test_ca().certificate_pem,
        "capacity": capacity,
        "reader": reader,
        "reader_delay": delay,
        "publishes": 300,
        "payload": 600,
        "stats": list(STATS),
        **FAST,
    }
    process.stdin.write(json.dumps(setup) + "\n")
    process.stdin.flush()
    run = NodeRun(site, process)
    run.address = json.loads(process.stdout.readline())["address"]
    return run


def _stalls(run: NodeRun, watch_from: float, until: float) -> list[str]:
    """Where ``run`` stopped reporting between two moments (monotonic): a second with no
    status line, or one in which its stats, its events or the peer's heartbeats did not
    move."""
    problems = []
    lines = [(at, doc) for at, doc in run.lines if watch_from <= at <= until]
    moment = watch_from
    previous: dict[str, Any] | None = None
    for at, document in run.lines:
        if at < watch_from:
            previous = document
    while moment + 1.0 <= until:
        window = [doc for at, doc in lines if moment <= at < moment + 1.0]
        if not window:
            problems.append(f"{run.site}: no status line in [{moment - watch_from:.0f}s, +1s)")
        elif previous is not None:
            last = window[-1]
            if not last["running"]:
                problems.append(f"{run.site}: SWIM node stopped at t={last['t']}")
            if last["stats"]["packets_in"] == previous["stats"]["packets_in"]:
                problems.append(f"{run.site}: packets_in frozen at t={last['t']}")
            if last["stats"]["packets_out"] == previous["stats"]["packets_out"]:
                problems.append(f"{run.site}: packets_out frozen at t={last['t']}")
            if last["heartbeats"] == previous["heartbeats"]:
                problems.append(f"{run.site}: no heartbeat item read in a second at t={last['t']}")
        if window:
            previous = window[-1]
        moment += 1.0
    return problems


@dataclass
class PairOutcome:
    reader: str
    problems: list[str]
    details: str

    @property
    def ok(self) -> bool:
        return not self.problems


def run_pair(reader: str, *, capacity: int = 32, delay: float = 0.02) -> PairOutcome:
    """Two nodes, the burst, then :data:`WATCH_S` seconds of watching both."""
    key = os.urandom(32)
    suffix = os.urandom(3).hex()
    runs = [_start(f"stress-{n}-{suffix}", reader, key, capacity, delay) for n in ("a", "b")]
    readers = [threading.Thread(target=r.read, daemon=True) for r in runs]
    readers += [threading.Thread(target=r.read_errors, daemon=True) for r in runs]
    for thread in readers:
        thread.start()
    try:
        for run, peer in ((runs[0], runs[1]), (runs[1], runs[0])):
            assert run.process.stdin is not None
            run.process.stdin.write(json.dumps({"peer": peer.address}) + "\n")
            run.process.stdin.flush()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(
            r.lines and r.lines[-1][1]["phase"] == "steady" for r in runs
        ):
            time.sleep(0.05)
        burst_done = time.monotonic()
        time.sleep(WATCH_S)  # the bounded watch: stalls are what is looked for
        until = time.monotonic()
        problems = []
        if not all(r.lines and r.lines[-1][1]["phase"] == "steady" for r in runs):
            problems.append("the burst did not finish within 20 s")
        # The first second after the burst is the readers' backlog: watch from then on.
        for run in runs:
            problems += _stalls(run, burst_done + 1.0, until)
        details = []
        if problems:
            for run in runs:
                details.append(f"--- {run.site} (pid {run.process.pid})")
                details += [f"last status: {json.dumps(run.lines[-1][1]) if run.lines else None}"]
                details += _threads(run.process.pid)
                run.process.send_signal(signal.SIGUSR1)
            time.sleep(1.0)  # let faulthandler write the stacks before the process goes
            for run in runs:
                details.append(f"--- {run.site} stderr (Python stacks):")
                details += [line.rstrip() for line in run.stderr[-60:]]
        return PairOutcome(reader, problems, "\n".join(details))
    finally:
        for run in runs:
            if run.process.poll() is None:
                run.process.kill()
            run.process.wait(timeout=10)
        for thread in readers:
            thread.join(timeout=5)


@pytest.mark.parametrize("reader", ["thread", "async"])
def test_two_nodes_keep_reporting_after_a_burst_with_full_event_queues(reader: str) -> None:
    outcome = run_pair(reader)
    assert outcome.ok, "\n".join(outcome.problems) + "\n" + outcome.details


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--reader", choices=["thread", "async", "both"], default="both")
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.02)
    args = parser.parse_args()
    readers = ["thread", "async"] if args.reader == "both" else [args.reader]
    failures = 0
    for index in range(args.runs):
        reader = readers[index % len(readers)]
        started = time.monotonic()
        outcome = run_pair(reader, capacity=args.capacity, delay=args.delay)
        verdict = "ok" if outcome.ok else "STALLED"
        print(
            f"run {index + 1} ({reader}): {verdict} in {time.monotonic() - started:.1f}s",
            flush=True,
        )
        if not outcome.ok:
            failures += 1
            print("\n".join(outcome.problems[:20]))
            print(outcome.details, flush=True)
    print(f"{failures} of {args.runs} runs stalled")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
