"""The live view's ``budgets`` and ``unheardSites`` parts, as the network's status says:
each tenant's spend, cap, state and window, and the sites whose spend may be missing;
built from real engines at an explicit ``now``."""

from __future__ import annotations

from datetime import timedelta

from grid.view import MemberHistory, NetworkSource, NodeInfo, network_document
from test_engine import NETWORK, SITES, T0, engine
from test_engine_spend import budget, scrape, spending

NODE = NodeInfo(True, "10.0.0.1:7946", 7, ("k-1",))


def test_each_tenant_with_its_state_and_window_and_the_unheard_sites() -> None:
    net = spending(budgets=[budget(), budget("globex", cap=50, warnAt=50)])
    a = engine("site-a", [], net=net, sites=SITES[:2])
    scrape(a, T0, acme=0, globex=0)
    scrape(a, T0 + timedelta(seconds=1), acme=900, globex=10)
    a.refresh(T0 + timedelta(seconds=2))
    document = network_document(NetworkSource(NETWORK, a, NODE), MemberHistory(), T0)
    window = {
        "windowStart": "2026-07-01T00:00:00+00:00",
        "windowEnd": "2026-07-02T00:00:00+00:00",
        "allowance": None,
    }
    assert document["budgets"] == [
        {"tenant": "acme", "used": 900, "cap": 1000, "state": "warn", "complete": False, **window},
        {"tenant": "globex", "used": 10, "cap": 50, "state": "ok", "complete": False, **window},
    ]
    assert document["unheardSites"] == [{"site": "site-b", "since": None}]


def test_a_network_without_an_engine_shows_no_budget() -> None:
    document = network_document(NetworkSource(NETWORK, None, None), MemberHistory(), T0)
    assert (document["budgets"], document["unheardSites"]) == ([], [])


def test_an_escrowed_tenant_shows_this_sites_allowance() -> None:
    net = spending(budgets=[budget(cap=3000, window="1h", enforcement="escrow")])
    a = engine("site-a", [], net=net, sites=SITES)
    a.refresh(T0 - timedelta(seconds=120))  # the life begins before the window
    a.refresh(T0 + timedelta(seconds=1))
    document = network_document(NetworkSource(NETWORK, a, NODE), MemberHistory(), T0)
    (acme,) = document["budgets"]
    assert acme["allowance"] == 100  # the floor released of its third of the cap
