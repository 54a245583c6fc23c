"""Escrowed budgets in the site engine (grid.engine.escrow): three engines exchange their
items as gossip would, spend comes in through each site's spend source (Prometheus text, as
a scrape reads it), and each site's gateway grants spend only while the site's status gives
it allowance. Shares when a window starts, a life begun too late, allowance following the
load, the cap under partition (and the overspend of lowerBound beside it), peers of 0.2.0
and rolling windows."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from grid.engine import SiteEngine
from grid.engine.escrow import CLAIM_SLACK_S
from grid.engine.windows import CLOSE_AFTER_S
from grid.models.budgets import BudgetEnforcement, BudgetState, TenantBudgetStatus
from grid.models.conditions import Condition
from grid.observe.scrape import ScrapeResult
from grid.render.budgets import BudgetScope, render_budget_document, verify_budget_document
from test_engine import T0, connect, engine, network

METRIC = "litellm_total_tokens_metric_total"
NAMES = ("site-a", "site-b", "site-c")
START = T0 - timedelta(seconds=2 * CLAIM_SLACK_S)
"""When the engines' lives begin: early enough to claim the window T0 starts."""


def spend_source(site: str) -> dict[str, Any]:
    return {
        "name": f"tokens-{site}",
        "siteSelector": {"matchLabels": {"grid.praxis-proxy.io/site": site}},
        "url": f"http://{site}.test:4000/metrics",
        "metric": METRIC,
        "tenantLabel": "team",
    }


def escrow_network(cap: int = 30_000, **budget: Any) -> Any:
    spec = {"tenant": "acme", "cap": cap, "window": "1h", "enforcement": "escrow", **budget}
    return network(budgets=[spec], spendSources=[spend_source(s) for s in NAMES])


class Mesh:
    """Three engines, what links them, and a gateway per site that grants spend while the
    site's status allows it, counted in the counter the site's source serves."""

    def __init__(self, net: Any, started: datetime = START, names: Iterable[str] = NAMES) -> None:
        self.engines = {name: engine(name, [], net=net) for name in names}
        self.links = {(a, b) for a in self.engines for b in self.engines if a != b}
        self.counters = dict.fromkeys(self.engines, 0)
        self.refused = dict.fromkeys(self.engines, 0)
        connect(list(self.engines.values()), started)
        self.now = started
        self.sent_items = 0

    def cut(self, site: str) -> None:
        """``site`` hears no one and no one hears it; its peers see it go down."""
        self.links = {link for link in self.links if site not in link}
        for name, e in self.engines.items():
            if name != site:
                e.member_down(site, f"{site}:7946", 1, self.now)
        self.engines[site].member_down("site-a", "site-a:7946", 1, self.now)
        self.engines[site].member_down("site-b", "site-b:7946", 1, self.now)

    def heal(self) -> None:
        """Every link back; each site's whole state reaches every peer, as a SWIM sync
        after a partition brings it."""
        self.links = {(a, b) for a in self.engines for b in self.engines if a != b}
        for name, e in self.engines.items():
            for peer, other in self.engines.items():
                if peer != name:
                    e.member_up(peer, f"{peer}:7946", 2, self.now)
                    for item in other.state.all_items():
                        e.receive_item(peer, item.lane, item.key, item.version, item.payload,
                                       self.now)  # fmt: skip

    def status(self, site: str) -> TenantBudgetStatus:
        network_status = self.engines[site].statuses()[("GridNetwork", "mesh")]
        return {b.tenant: b for b in network_status.budgets}["acme"]  # type: ignore[union-attr]

    def conditions(self, site: str) -> dict[str, Condition]:
        status = self.engines[site].statuses()[("GridNetwork", "mesh")]
        return {c.type: c for c in status.conditions}

    def tick(self, demand: dict[str, int] | None = None, seconds: float = 1.0) -> None:
        """One second: every engine refreshes and its items reach the peers it is linked
        to; each gateway grants what it is asked within the allowance (lowerBound: while
        the tenant is not exhausted there); each site scrapes its counter."""
        outputs = {name: e.refresh(self.now).items for name, e in self.engines.items()}
        for origin, items in outputs.items():
            for receiver, e in self.engines.items():
                if (origin, receiver) in self.links:
                    for item in items:
                        e.receive_item(origin, item.lane, item.key, item.version, item.payload,
                                       self.now)  # fmt: skip
                        self.sent_items += 1
        for name, e in self.engines.items():
            status = self.status(name)
            wanted = (demand or {}).get(name, 0)
            if status.enforcement is BudgetEnforcement.ESCROW:
                room = max((status.allowance or 0) - self.counters[name], 0)
            else:
                room = wanted if status.state is not BudgetState.EXHAUSTED else 0
            granted = min(wanted, room)
            self.counters[name] += granted
            self.refused[name] += wanted - granted
            text = f'# TYPE {METRIC[:-6]} counter\n{METRIC}{{team="acme"}} {self.counters[name]}\n'
            counted = e.count_spend(f"tokens-{name}", ScrapeResult(200, 0.01, text=text), self.now)
            if counted is not None:
                e.commit_spend(counted, self.now)
        self.now += timedelta(seconds=seconds)

    def run_until(
        self, moment: datetime, demand: dict[str, int] | None = None, *, step: float = 1.0
    ) -> None:
        while self.now < moment:
            self.tick(demand, step)

    @property
    def granted(self) -> int:
        return sum(self.counters.values())


def test_lives_begun_before_the_window_split_the_cap_and_a_later_life_starts_at_zero() -> None:
    mesh = Mesh(escrow_network(cap=3_000))
    mesh.run_until(T0 + timedelta(seconds=1))
    # An even third each, of which a tenth (the floor) is released to each gateway.
    for name in NAMES:
        status = mesh.status(name)
        assert (status.enforcement, status.allowance, status.site_used) == ("escrow", 100, 0)
        assert mesh.engines[name].state.escrow.allowance(
            "acme", "w3600-1782907200", f"{name}#{mesh.engines[name].state.escrow_epoch}"
        ) == 1_000  # fmt: skip
    # A life begun after the window started claims nothing: it asks a peer and lives on
    # what it is sent.
    late = Mesh(escrow_network(cap=3_000), started=T0 + timedelta(seconds=5))
    late.tick()
    assert late.status("site-a").allowance == 0
    late.run_until(T0 + timedelta(seconds=15))
    assert all(late.status(name).allowance == 0 for name in NAMES)  # nobody has a share


def test_allowance_follows_the_load_and_the_cap_holds_through_a_partition() -> None:
    cap = 12_000
    mesh = Mesh(escrow_network(cap=cap))
    mesh.run_until(T0)
    mesh.run_until(T0 + timedelta(seconds=40), {"site-a": 60})
    assert mesh.refused["site-a"] < 60 * 5, "site-a's allowance should have grown with its load"
    # site-c is cut off; the load moves to site-b and site-c.
    mesh.cut("site-c")
    shift = mesh.now
    mesh.run_until(shift + timedelta(seconds=20), {"site-b": 60, "site-c": 60})
    served_b = mesh.counters["site-b"]
    assert served_b > 60 * 10, "site-b gets allowance from site-a within seconds of the shift"
    mesh.run_until(shift + timedelta(seconds=200), {"site-b": 60, "site-c": 60})
    assert mesh.granted <= cap
    c = mesh.status("site-c")
    # site-c used what it held and is exhausted here, though the mesh's total is not.
    assert c.state is BudgetState.EXHAUSTED and c.used < cap
    assert c.site_used == c.allowance == mesh.counters["site-c"]
    # Healed, everyone's total is the exact sum, never past the cap.
    mesh.heal()
    mesh.run_until(mesh.now + timedelta(seconds=5))
    assert {mesh.status(name).used for name in NAMES} == {mesh.granted}
    assert mesh.granted <= cap


def test_lower_bound_lets_a_partition_spend_past_the_cap() -> None:
    cap = 6_000
    mesh = Mesh(escrow_network(cap=cap, enforcement="lowerBound"))
    mesh.run_until(T0)
    mesh.cut("site-c")
    mesh.run_until(T0 + timedelta(seconds=120), {"site-b": 60, "site-c": 60})
    assert mesh.status("site-b").enforcement is BudgetEnforcement.LOWER_BOUND
    assert mesh.granted > cap  # each side spent up to the cap it saw
    assert "EscrowHeld" not in mesh.conditions("site-a")


def test_a_peer_without_escrow_holds_it_back_and_says_why() -> None:
    mesh = Mesh(escrow_network(cap=3_000))
    mesh.engines["site-a"].note_protocols({"site-b": 2, "site-c": 3})
    mesh.run_until(T0 + timedelta(seconds=3))
    held = mesh.conditions("site-a")["EscrowHeld"]
    assert (held.status, held.reason) == ("False", "PeerWithoutEscrow")
    assert "site-b" in held.message
    items = mesh.engines["site-a"].refresh(mesh.now).items
    assert not [i for i in items if i.key.startswith("escrow/")]
    assert mesh.status("site-a").allowance == 0  # nothing claimed, nothing to grant
    assert mesh.conditions("site-b")["EscrowHeld"].status == "True"


def test_a_rolling_window_is_counted_as_lower_bound_and_said() -> None:
    mesh = Mesh(escrow_network(window=None, rolling={"length": "2h", "step": "1h"}))
    mesh.tick()
    held = mesh.conditions("site-a")["EscrowHeld"]
    assert (held.status, held.reason) == ("False", "RollingWindow")
    assert mesh.status("site-a").enforcement is BudgetEnforcement.LOWER_BOUND


def test_the_budget_document_gives_this_sites_allowance() -> None:
    mesh = Mesh(escrow_network(cap=3_000))
    mesh.run_until(T0 + timedelta(seconds=10), {"site-a": 30})
    e: SiteEngine = mesh.engines["site-a"]
    rendered = render_budget_document(
        BudgetScope("mesh", "edge-gateway", "grid-system", "site-a"),
        e.network.spec.budgets,
        e.statuses()[("GridNetwork", "mesh")],  # type: ignore[arg-type]
        mesh.now,
    )
    assert verify_budget_document(rendered.text.encode()).accepted
    (tenant,) = __import__("json").loads(rendered.text)["budgets"]["tenants"]
    assert tenant["enforcement"] == "escrow"
    assert tenant["site_used"] == mesh.counters["site-a"] - 30  # the last grant not scraped
    assert tenant["allowance"] > tenant["site_used"]


def test_a_new_window_is_claimed_afresh_and_the_old_one_forgotten() -> None:
    mesh = Mesh(escrow_network(cap=3_000))
    mesh.run_until(T0 + timedelta(seconds=30), {"site-a": 50})
    first = mesh.status("site-a")
    assert first.allowance is not None and first.allowance > 1_000  # it took from its peers
    next_window = T0 + timedelta(hours=1)
    # Nothing is spent through the rest of the hour: the engines are refreshed once a minute
    # until a minute before the next window (an engine takes whatever pace its host refreshes
    # it at; 3,500 one-second ticks of three engines took 10 s), then every second across
    # the window's start and its close.
    mesh.run_until(next_window - timedelta(minutes=1), step=60.0)
    mesh.run_until(next_window + timedelta(seconds=1))
    for name in NAMES:
        status = mesh.status(name)
        assert status.window_start == next_window
        assert (status.used, status.allowance) == (0, 100)  # a third each again, the floor out
    state = mesh.engines["site-a"].state
    assert {window for _, window in state.escrow.windows()} == {
        "w3600-1782907200",
        "w3600-1782910800",
    }
    mesh.run_until(next_window + timedelta(seconds=CLOSE_AFTER_S + 2))
    assert [window for _, window in state.escrow.windows()] == ["w3600-1782910800"]
