"""Budgets under partition, spent through the real input: four ``grid agent`` processes in
network namespaces, each scraping the token counter its site's provider process serves,
and beside each site a gateway that grants a tenant's requests only as the site's budget
document allows (what a quota filter reading the document does). Two tenants spend the
same way at once: ``escrow``, whose gateways grant only this site's allowance, and
``bounded``, a lowerBound budget whose gateways grant until the document says exhausted.

One run: the load sits at east-a, moves to east-b, then the mesh splits in two halves (the
regions) and both halves spend; the gateways stop, the partition heals, and every site's
status must show the exact sum of what the gateways granted. The run reports what each tenant granted
against its cap (the overspend) and how long a site that the load moved to took to have
allowance for all of it (the rebalancing time). ``test_escrow.py`` checks it;
``bench/bench_escrow.py`` repeats it for medians."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from chaos import netns
from chaos.mesh import (
    NETWORK,
    ChaosMesh,
    MeshSettings,
    Release,
    Site,
    default_plans,
    read_json,
    wait_until,
)
from grid.demo.builder import GATEWAY_NAME, GATEWAY_NAMESPACE
from grid.engine.escrow import CLAIM_SLACK_S
from grid.render.budgets import verify_budget_document
from support.windows import soonest_window, window_length

ESCROW, BOUNDED = "escrow", "bounded"
CAP = 2400
WINDOW_S = 90
"""The shortest window: long enough that the sites settle on the exact sums after the heal
(:data:`STOP_S`) well before the window ends, on a loaded machine too. A mesh takes the
length up to :data:`LONGEST_WINDOW_S` whose window starts soonest after it is up."""
LONGEST_WINDOW_S = 150
AGENTS_UP_S = 15.0
"""What the agents take, from :func:`escrow_mesh` choosing the window length, to their
first refresh, where their lives begin: the window they can first claim should start just
after that and their slack. Agents slower than this (a loaded machine) play in the window
after it (:func:`first_claimable_window` is told when their lives had begun)."""
RATE = 80
"""Tokens a second a loaded site's gateway is asked for, per tenant."""
GATE_TICK_S = 0.1
SPEND_METRIC = "chaos_tokens_total"
COVERED_FOR_S = 2.0
"""A site has allowance for its load once it refused nothing for this long."""

PHASES = (
    (0.0, ("east-a",), False),
    (12.0, ("east-b",), False),
    (24.0, ("east-b", "west-a"), True),
)
"""(seconds into the window, the loaded sites, whether the mesh is split) from then on."""
STOP_S = 54.0
HALVES = (("east-a", "east-b"), ("west-a", "west-b"))
OLD_SITE = "west-b"


@dataclass
class Gate:
    """One site's gateway: what it granted and refused of each tenant, from the budget
    documents it read."""

    site: Site
    granted: dict[str, int] = field(default_factory=lambda: {ESCROW: 0, BOUNDED: 0})
    refused_at: list[float] = field(default_factory=list)
    """When (seconds into the window) it refused some of the escrow tenant's load."""
    tenants: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The tenants of the last whole budget document read."""
    by_window: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """The last figures read of each tenant, by the start of their window."""
    revision: str | None = None

    @property
    def document(self) -> Path:
        return (
            self.site.state_dir
            / "overlays"
            / NETWORK
            / GATEWAY_NAMESPACE
            / GATEWAY_NAME
            / "budgets.json"
        )

    def read(self) -> None:
        """Take the document if a whole new one is there; keep the last good one else."""
        try:
            data = self.document.read_bytes()
        except OSError:
            return
        verdict = verify_budget_document(data, {"local_site": self.site.name})
        if verdict.accepted and verdict.revision != self.revision:
            self.revision = verdict.revision
            tenants = json.loads(data)["budgets"]["tenants"]
            self.tenants = {t["tenant"]: t for t in tenants}
            for tenant in tenants:
                window = self.by_window.setdefault(tenant["window_start"], {})
                window[tenant["tenant"]] = tenant

    def grant(self, tenant: str, asked: int) -> int:
        """What the gateway grants of ``asked`` tokens: escrow, up to this site's allowance
        in all; lowerBound, all of it while the document does not say exhausted."""
        figures = self.tenants.get(tenant)
        if figures is None:
            return 0
        if tenant == ESCROW:
            room = max(int(figures.get("allowance", 0)) - self.granted[tenant], 0)
        else:
            room = asked if figures["state"] != "exhausted" else 0
        given = min(asked, room)
        self.granted[tenant] += given
        return given


@dataclass(frozen=True, slots=True)
class EscrowOutcome:
    granted: dict[str, int]
    """What every gateway granted of each tenant in the window, together."""
    peak_during_partition: dict[str, int]
    statuses: dict[str, dict[str, int]]
    """Each site's status after the heal: each tenant's ``used``."""
    rebalancing_s: list[float]
    """Per load shift, seconds until the site the load moved to had allowance for all of
    it (the shift to a site cut off from any donor is not counted)."""
    exhausted_here: list[str]
    """Sites whose document said the escrow tenant exhausted while the mesh total was not."""

    def overspend(self, tenant: str) -> int:
        return max(self.granted[tenant] - CAP, 0)

    def report(self) -> str:
        rebalancing = ", ".join(f"{s:.2f}" for s in self.rebalancing_s)
        return (
            f"cap {CAP} per tenant; granted: escrow {self.granted[ESCROW]} (overspend "
            f"{self.overspend(ESCROW)}), lowerBound {self.granted[BOUNDED]} (overspend "
            f"{self.overspend(BOUNDED)}); rebalancing after a load shift: {rebalancing} s "
            f"(median {statistics.median(self.rebalancing_s):.2f} s); exhausted at one site "
            f"only: {', '.join(self.exhausted_here) or 'none'}"
        )


@contextmanager
def escrow_mesh(root: Path, previous: Release | None = None) -> Iterator[ChaosMesh]:
    """The four sites with both budgets in windows of :data:`WINDOW_S` to
    :data:`LONGEST_WINDOW_S` (the length whose first window the agents can claim starts
    soonest after they start), scraping their token counters every second (with
    ``previous``, west-b runs that release instead, and is given neither field it does not
    know); torn down after."""
    names = [plan.name for plan in default_plans()]
    lab = netns.Lab(names)
    mesh: ChaosMesh | None = None
    try:
        lab.create()
        budgets = [
            {"tenant": ESCROW, "cap": CAP, "enforcement": "escrow"},
            {"tenant": BOUNDED, "cap": CAP},
        ]
        mesh = ChaosMesh(
            root,
            lab,
            settings=MeshSettings(budget_window=f"{WINDOW_S}s"),
            budgets=budgets,
            spend_metric=SPEND_METRIC,
        )
        if previous is not None:
            mesh.sites[OLD_SITE].release = previous
        mesh.prepare()
        for name in names:
            mesh.serve_spend(name, {ESCROW: 0, BOUNDED: 0})
        mesh.start_services()
        # The length is chosen with only the agents left to start, however long the rest of
        # the set-up took: their first claimable window starts seconds after their slack.
        up = time.time() + AGENTS_UP_S + CLAIM_SLACK_S
        mesh.set_budget_window(f"{soonest_window(up, WINDOW_S, LONGEST_WINDOW_S)}s")
        mesh.start_agents()
        # A status is written on an agent's first refresh, after its life began.
        current = [site for site in mesh.sites.values() if site.release.name == "current"]
        wait_until(
            "every agent's first status", lambda: all(network_status(s) for s in current), 60.0
        )
        yield mesh
    finally:
        if mesh is not None:
            mesh.stop()
        lab.destroy()
        shutil.rmtree(root, ignore_errors=True)


def first_claimable_window(mesh: ChaosMesh, begun: float) -> float:
    """The start (epoch seconds) of the first window of ``mesh`` that lives begun by
    ``begun`` claim a share of."""
    length = window_length(mesh.settings.budget_window)
    return math.ceil((begun + CLAIM_SLACK_S) / length) * length


def play(mesh: ChaosMesh, log: Callable[[str], None] = print) -> EscrowOutcome:
    """The run of the module's docstring, from the first window the agents may claim."""
    gates = {name: Gate(site) for name, site in mesh.sites.items()}
    start = first_claimable_window(mesh, time.time())  # the lives began in escrow_mesh
    log(f"escrow: waiting {start - time.time():.0f} s for a window the sites claim shares of")
    while time.time() < start:
        for gate in gates.values():
            gate.read()
        time.sleep(0.5)
    log(f"escrow: window from {start:.0f}; {gates['east-a'].tenants.get(ESCROW)}")
    split = False
    peak = {ESCROW: 0, BOUNDED: 0}
    exhausted_here: set[str] = set()
    while (elapsed := time.time() - start) < STOP_S:
        loaded, cut = next((s, c) for at, s, c in reversed(PHASES) if elapsed >= at)
        if cut and not split:
            mesh.lab.partition(HALVES)
            split = True
        for name, gate in gates.items():
            gate.read()
            asked = round(RATE * GATE_TICK_S) if name in loaded else 0
            for tenant in (ESCROW, BOUNDED):
                if gate.grant(tenant, asked) < asked and tenant == ESCROW:
                    gate.refused_at.append(elapsed)
            figures = gate.tenants.get(ESCROW, {})
            if figures.get("state") == "exhausted" and figures.get("used", CAP) < CAP:
                exhausted_here.add(name)
            mesh.serve_spend(name, gate.granted)
        if split:
            for tenant, highest in peak.items():
                peak[tenant] = max(highest, sum(g.granted[tenant] for g in gates.values()))
        time.sleep(GATE_TICK_S)
    mesh.lab.heal()
    granted = {t: sum(g.granted[t] for g in gates.values()) for t in (ESCROW, BOUNDED)}
    statuses = settle(gates, granted, played_window(gates, start))
    return EscrowOutcome(
        granted,
        peak,
        statuses,
        rebalancing(gates),
        sorted(exhausted_here),
    )


def played_window(gates: dict[str, Gate], start: float) -> str:
    """The ``window_start`` the documents give the window played from ``start``."""
    for gate in gates.values():
        for window in gate.by_window:
            if abs(datetime.fromisoformat(window).timestamp() - start) < 1.0:
                return window
    raise AssertionError(f"no budget document names the window from {start:.0f}")


def settle(
    gates: dict[str, Gate], granted: dict[str, int], window: str
) -> dict[str, dict[str, int]]:
    """Each site's documented ``used`` in ``window`` once every site shows the exact sum
    granted (or after 60 s, as they stand: the figures last read in that window, should it
    have ended meanwhile)."""

    def used() -> dict[str, dict[str, int]]:
        for gate in gates.values():
            gate.read()
        return {
            n: {t: g.by_window.get(window, {}).get(t, {}).get("used", -1) for t in granted}
            for n, g in gates.items()
        }

    def exact() -> bool:
        return all(seen == granted for seen in used().values())

    with contextlib.suppress(TimeoutError):  # the caller reports what the sites show
        wait_until("every site's status showing the exact spend", exact, 60.0)
    return used()


def rebalancing(gates: dict[str, Gate]) -> list[float]:
    """Per load shift to a site with a donor in reach (the phases before the split),
    seconds until it refused nothing for :data:`COVERED_FOR_S`."""
    found = []
    for (at, loaded, _), (until, _, _) in itertools.pairwise(PHASES):
        for name in loaded:
            covered = at
            for moment in (t for t in gates[name].refused_at if at <= t < until):
                if moment - covered >= COVERED_FOR_S:
                    break
                covered = moment
            found.append(round(covered - at, 2))
    return found


def network_status(site: Site) -> dict[str, Any]:
    """The GridNetwork status ``site``'s agent last wrote (empty before the first)."""
    document = read_json(site.state_dir / "status" / "GridNetwork" / f"{NETWORK}.json")
    return dict(document.get("status", {})) if isinstance(document, dict) else {}


def condition(site: Site, kind: str) -> dict[str, Any]:
    return next((c for c in network_status(site).get("conditions", []) if c["type"] == kind), {})
