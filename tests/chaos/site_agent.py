"""``grid agent`` for the chaos suite: the same argument parser, options and
:class:`grid.agent.Agent` as ``python -m grid.cli agent``, plus two test hooks in a
directory of their own (``--chaos-dir``):

- **Spends.** The agent has no input for budget spend; ``GridState.add_spend`` is the only
  way to make one. A request file ``inbox/<id>.json`` (``{"id", "tenant", "amount"}``) is
  counted with it, in the window the GridNetwork's budget for the tenant is in (windows are
  aligned to the epoch, as the operator labels them), and acknowledged by a line in
  ``spends.jsonl`` before the request file goes. A request whose id is already acknowledged
  (a crash between the two) is not counted twice.
- **Wedges.** A request file ``wedge.json`` (``{"seconds": S}``) blocks the agent's event
  loop for S seconds, logged in ``wedges.jsonl`` first: the agent writes nothing, while its
  SWIM thread goes on answering probes and relaying (a wedged agent, not a stopped one).
- **Views.** ``view.json`` (rewritten atomically every 0.2 s) holds what the engine holds:
  members, the provider records of every site, budget totals and slots, the current
  overlay's candidates, and (``refreshed``) the members and overlay as the latest refresh
  left them, with the render it put off (``render_due``, epoch seconds: the engine paces
  renders, so a refresh may take in a change, a departure included, and render it up to
  a second later). ``overlays.jsonl`` gets a line for every overlay file written, with the
  members as the engine saw them when it rendered it.

    python site_agent.py --chaos-dir DIR agent --resources ... (every ``grid agent`` option)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from grid.agent import Agent, NameConflictError
from grid.commands import agent as agent_command
from grid.engine import GatewayOverlay
from grid.errors import ConfigError, GridError

VIEW_INTERVAL_S = 0.2
INBOX_INTERVAL_S = 0.05


def window_label(window_seconds: float, now: float) -> str:
    """The budget window ``now`` falls in, labelled as the operator labels it."""
    start = math.floor(now / window_seconds) * window_seconds
    return f"w{int(window_seconds)}-{int(start)}"


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def _append_line(path: Path, document: dict[str, Any]) -> None:
    """One ``write`` per line, so a reader never sees half of one (a killed process's
    page cache still reaches the file)."""
    data = (json.dumps(document, sort_keys=True) + "\n").encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, data)
    finally:
        os.close(descriptor)


def _acknowledged(path: Path) -> set[str]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return set()
    acknowledged = set()
    for line in lines:
        with contextlib.suppress(ValueError, KeyError):
            acknowledged.add(json.loads(line)["id"])
    return acknowledged


class Hooks:
    """The spend inbox and the view files of one agent (its first network)."""

    def __init__(self, agent: Agent, directory: Path) -> None:
        self.agent = agent
        self.directory = directory
        self.inbox = directory / "inbox"
        self.inbox.mkdir(parents=True, exist_ok=True)
        self.spends = directory / "spends.jsonl"
        self.overlays = directory / "overlays.jsonl"
        self.view = directory / "view.json"
        self.acknowledged = _acknowledged(self.spends)
        self.started = time.time()
        self.refreshed: dict[str, Any] | None = None
        """Members and overlay as the engine's latest refresh left them (consistent: the
        overlay was rendered from those members)."""
        self._wrapped: Any = None

    def _runtime(self) -> Any:
        if not self.agent.networks:
            return None
        return self.agent.networks[min(self.agent.networks)]

    # -- spends ---------------------------------------------------------------------------

    async def spend_loop(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                for request in sorted(self.inbox.glob("*.json")):
                    self._spend(request)
            await asyncio.sleep(INBOX_INTERVAL_S)

    def _spend(self, path: Path) -> None:
        runtime = self._runtime()
        if runtime is None:
            return
        try:
            request = json.loads(path.read_text())
        except (OSError, ValueError):
            return  # still being written
        identifier = str(request["id"])
        if identifier in self.acknowledged:
            path.unlink(missing_ok=True)
            return
        engine = runtime.engine
        tenant, amount = str(request["tenant"]), int(request["amount"])
        budgets = {budget.tenant: budget for budget in engine.network.spec.budgets}
        now = time.time()
        window = window_label(budgets[tenant].window.seconds, now)
        # No await between counting, acknowledging and removing the request: a crash
        # before the acknowledgement loses an unpublished count and the request stays to be
        # counted again; a crash after it leaves an acknowledged id, which is skipped.
        total = engine.state.add_spend(tenant, window, amount, now)
        _append_line(
            self.spends,
            {
                "id": identifier,
                "site": engine.site,
                "tenant": tenant,
                "window": window,
                "amount": amount,
                "known_total": total,
                "pid": os.getpid(),
                "at": now,
            },
        )
        self.acknowledged.add(identifier)
        path.unlink(missing_ok=True)
        runtime.wake()

    # -- wedges ---------------------------------------------------------------------------

    async def wedge_loop(self) -> None:
        request = self.directory / "wedge.json"
        while True:
            await asyncio.sleep(INBOX_INTERVAL_S)
            try:
                seconds = float(json.loads(request.read_text())["seconds"])
            except (OSError, ValueError, KeyError):
                continue
            request.unlink(missing_ok=True)
            started = time.time()
            _append_line(
                self.directory / "wedges.jsonl",
                {"pid": os.getpid(), "start": started, "seconds": seconds},
            )
            time.sleep(seconds)  # blocks the event loop: nothing is refreshed or written

    # -- views ----------------------------------------------------------------------------

    def overlay_written(self, network: str, overlay: GatewayOverlay, path: Path) -> None:
        runtime = self._runtime()
        if runtime is None or overlay.overlay is None:
            return
        _append_line(
            self.overlays,
            {
                "at": time.time(),
                "pid": os.getpid(),
                "revision": overlay.overlay.revision,
                "candidates": _candidates(overlay),
                "members": _members(runtime.engine),
            },
        )

    def _follow_refreshes(self, engine: Any) -> None:
        """Record members and overlay right after each refresh of ``engine``. Between a
        membership event and the refresh it wakes, the engine's members are newer than its
        overlay; a snapshot taken then would not be one the engine ever rendered from."""
        if self._wrapped is engine:
            return
        self._wrapped = engine
        original = engine.refresh

        def refresh(now: Any, **options: Any) -> Any:
            result = original(now, **options)
            overlays = list(engine.overlays.values())
            overlay = overlays[0] if overlays else None
            due = result.next_render_at
            self.refreshed = {
                "at": time.time(),
                "members": _members(engine),
                "candidates": None
                if overlay is None or overlay.overlay is None
                else _candidates(overlay),
                "render_due": None if due is None else due.timestamp(),
            }
            return result

        engine.refresh = refresh

    async def view_loop(self) -> None:
        while True:
            runtime = self._runtime()
            if runtime is not None:
                self._follow_refreshes(runtime.engine)
            try:
                document = self.document()
            except Exception as error:  # a view must never stop the agent
                document = {"error": f"{type(error).__name__}: {error}", "at": time.time()}
            with contextlib.suppress(OSError):
                _write_atomically(self.view, json.dumps(document, sort_keys=True))
            await asyncio.sleep(VIEW_INTERVAL_S)

    def document(self) -> dict[str, Any]:
        runtime = self._runtime()
        document: dict[str, Any] = {
            "at": time.time(),
            "pid": os.getpid(),
            "started": self.started,
            "site": self.agent.site,
            "spends_acknowledged": len(self.acknowledged),
            "inbox": len(list(self.inbox.glob("*.json"))),
        }
        if runtime is None:
            return document
        engine = runtime.engine
        state = engine.state
        node = runtime.node
        records: dict[str, dict[str, Any]] = {}
        for entry in state.providers():
            record = entry.record
            cost = record.spec.cost
            records.setdefault(entry.site, {})[record.name] = {
                "models": [model.name for model in record.models],
                "cost": None if cost is None else [cost.input_micro_usd, cost.output_micro_usd],
                "phase": record.phase,
                "healthy": record.metrics.healthy,
                "updated_at": entry.updated_at,
            }
        budgets: dict[str, int] = {}
        slots: dict[str, dict[str, int]] = {}
        # The ledger's slots have no public reader; they are read for the crash guard and
        # for diagnostics, and left out if the engine's internals change.
        counters = getattr(getattr(state, "_ledger", None), "_counters", None)
        if isinstance(counters, dict):
            for (tenant, window), counter in counters.items():
                slots[f"{tenant}|{window}"] = dict(counter.slots)
                budgets[f"{tenant}|{window}"] = state.budget_spend(tenant, window)
        overlays = list(engine.overlays.values())
        overlay = overlays[0] if overlays else None
        document.update(
            {
                "generation": None if node is None else node.generation,
                # Messages from peers this node authenticated but could not read: a
                # peer of the other release sent something this one does not speak.
                "undecodable": None if node is None else node.stats().get("bad_messages"),
                "swim_running": runtime.swim.running,
                "members": _members(engine),
                "trusted": sorted(engine.trusted_sites),
                "records": records,
                "sites": state.sites(),
                "budgets": budgets,
                "slots": slots,
                "overlay": None
                if overlay is None or overlay.overlay is None
                else {"revision": overlay.overlay.revision, "candidates": _candidates(overlay)},
                "overlay_message": None if overlay is None else overlay.message,
                "refreshed": self.refreshed,
                "refused_items": dict(engine.refused_items),
            }
        )
        return document


def _members(engine: Any) -> dict[str, dict[str, Any]]:
    return {
        site: {"state": str(member.state), "generation": member.generation}
        for site, member in engine.members.items()
    }


def _candidates(overlay: GatewayOverlay) -> list[list[str]]:
    assert overlay.overlay is not None
    return [
        [c["site"], c["name"], c["cluster"]]
        for c in overlay.overlay.document["overlay"]["candidates"]
    ]


async def serve(agent: Agent, directory: Path) -> None:
    """:meth:`Agent.run` (start, serve until SIGINT or SIGTERM, leave), with the hooks
    beside it."""
    hooks = Hooks(agent, directory)
    agent.overlay_listeners.append(hooks.overlay_written)
    tasks = [
        asyncio.create_task(loop())
        for loop in (hooks.spend_loop, hooks.view_loop, hooks.wedge_loop)
    ]
    try:
        await agent.run()
    finally:
        for task in tasks:
            task.cancel()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="site_agent.py")
    parser.add_argument("--chaos-dir", required=True, type=Path)
    ours, rest = parser.parse_known_args(argv)
    grid_parser = argparse.ArgumentParser(prog="grid")
    agent_command.register(grid_parser.add_subparsers(dest="command"))
    args = grid_parser.parse_args(rest)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        agent = Agent(agent_command.options_from(args))
        asyncio.run(serve(agent, ours.chaos_dir))
    except NameConflictError as error:
        print(f"grid agent: {error}", file=sys.stderr)
        return agent_command.EXIT_NAME_CONFLICT
    except (ConfigError, GridError) as error:
        print(f"grid agent: {error}", file=sys.stderr)
        return agent_command.EXIT_CONFIG
    return agent_command.EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
