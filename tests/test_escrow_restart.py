"""An escrow holder across restarts: a site that restarts from the holder file its shell
wrote before publishing goes on as the same holder, keeping its allowance (nothing claimed
twice, nothing granted or given twice, nothing lost); one that restarts without it takes a
new holder and the old one's allowance stays unused until the window ends; a new SWIM node
in the same life keeps the holder; a site whose GridSite is removed while it runs gives
what it holds to the peers that ask. The file's bad inputs are refused, saying why."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest

from grid.engine import EscrowCheckpoint, SiteEngine
from grid.engine.budgets import HEARD_WITHIN_S
from grid.engine.escrow_checkpoint import items_to_send
from test_engine import SITES, T0, connect, engine
from test_engine_escrow import NAMES, Mesh, escrow_network

WINDOW = "w3600-1782907200"


def holder(e: SiteEngine) -> str:
    return f"{e.site}#{e.state.escrow_epoch}"


def restart(mesh: Mesh, site: str, kept: EscrowCheckpoint | None) -> SiteEngine:
    """``site`` crashes and starts again (from ``kept``, if given); what it published in
    its earlier life and what its peers hold come to it as a SWIM catch-up brings them."""
    old = mesh.engines[site]
    fresh = engine(site, [], net=old.network)
    if kept is not None:
        fresh.restore_escrow(kept)
    for origin, e in mesh.engines.items():
        for item in e.state.all_items():
            fresh.receive_item(origin, item.lane, item.key, item.version, item.payload, mesh.now)
    mesh.engines[site] = fresh
    connect(list(mesh.engines.values()), mesh.now)
    return fresh


def kept_after(mesh: Mesh, site: str, seconds: float, demand: dict[str, int]) -> EscrowCheckpoint:
    """Run ``seconds``, keeping ``site``'s holder as its shell does after each refresh."""
    kept = None
    for _ in range(int(seconds)):
        mesh.tick(demand)
        kept = mesh.engines[site].take_escrow_checkpoint() or kept
    assert kept is not None
    return kept


def test_a_restart_from_the_holder_file_keeps_the_allowance_and_the_cap() -> None:
    cap = 3_000
    mesh = Mesh(escrow_network(cap=cap))
    mesh.run_until(T0)
    kept = kept_after(mesh, "site-b", 20, {"site-b": 40})
    before = mesh.engines["site-b"]
    book = before.state.escrow
    allowance = book.allowance("acme", WINDOW, holder(before))
    available = book.available("acme", WINDOW, holder(before))
    record = book.record("acme", WINDOW, holder(before))
    assert record is not None and record.share == 1_000 and available > 0

    after = restart(mesh, "site-b", kept)
    mesh.tick({"site-b": 40})
    assert holder(after) == holder(before)  # the same holder goes on
    resumed = after.state.escrow.record("acme", WINDOW, holder(after))
    assert resumed is not None
    assert (resumed.share, resumed.of) == (record.share, record.of)  # claimed once
    assert resumed.granted >= record.granted  # what it granted still counts
    assert after.state.escrow.allowance("acme", WINDOW, holder(after)) >= allowance
    mesh.run_until(T0 + timedelta(seconds=200), {"site-a": 20, "site-b": 40, "site-c": 20})
    assert mesh.granted <= cap
    assert mesh.granted >= cap - 3 * 100  # only floors left over: nothing stranded
    seen = {mesh.engines[name].state.escrow.granted_by_site("acme", WINDOW, "site-b")
            for name in NAMES}  # fmt: skip
    assert len(seen) == 1  # every site agrees on what site-b granted


def test_a_restart_without_the_file_takes_a_new_holder_and_strands_the_old_one() -> None:
    cap = 3_000
    mesh = Mesh(escrow_network(cap=cap))
    mesh.run_until(T0)
    kept_after(mesh, "site-b", 10, {"site-b": 10})
    before = mesh.engines["site-b"]
    old = holder(before)
    stranded = before.state.escrow.available("acme", WINDOW, old)
    after = restart(mesh, "site-b", None)
    mesh.run_until(T0 + timedelta(seconds=HEARD_WITHIN_S), {"site-a": 30, "site-b": 30})
    assert holder(after) != old
    record = after.state.escrow.record("acme", WINDOW, holder(after))
    assert record is not None and record.share == 0  # a life begun late claims nothing
    for e in mesh.engines.values():
        assert e.state.escrow.available("acme", WINDOW, old) == stranded  # never reclaimed
    assert mesh.granted <= cap - stranded


def test_a_new_swim_node_in_the_same_life_keeps_the_holder() -> None:
    mesh = Mesh(escrow_network(cap=3_000))
    mesh.run_until(T0 + timedelta(seconds=5))
    e = mesh.engines["site-a"]
    before, allowance = holder(e), mesh.status("site-a").allowance
    e.reset_state()
    mesh.tick()
    assert holder(e) == before
    assert mesh.status("site-a").allowance == allowance
    record = e.state.escrow.record("acme", WINDOW, before)
    assert record is not None and record.share == 1_000


def test_a_holder_file_round_trips_and_bad_ones_are_refused() -> None:
    mesh = Mesh(escrow_network(cap=3_000))
    mesh.run_until(T0)
    kept = kept_after(mesh, "site-a", 3, {"site-a": 5})
    data = kept.to_json()
    assert EscrowCheckpoint.from_json(data, "site-a") == kept
    document = json.loads(data)
    key, version, payload = document["records"][0]
    tampered = base64.b64decode(payload).replace(b'"granted":', b'"granted": ')
    cases = {
        b"{": "not JSON",
        json.dumps({**document, "format": 2}).encode(): "format 1",
        json.dumps({**document, "epoch": 0}).encode(): "epoch must be",
        json.dumps({**document, "records": {}}).encode(): "records must be a list",
        json.dumps({**document, "records": [[key, version]]}).encode(): r"\[key, version",
        json.dumps({**document, "records": [[key, version, "%%"]]}).encode(): "records",
        json.dumps(
            {**document, "records": [[key, version, base64.b64encode(tampered).decode()]]}
        ).encode(): "records",
        json.dumps({**document, "epoch": kept.epoch + 1}).encode(): "of holder epoch",
    }
    for bad, message in cases.items():
        with pytest.raises(ValueError, match=message):
            EscrowCheckpoint.from_json(bad, "site-a")
    with pytest.raises(ValueError, match="site 'site-a'"):
        EscrowCheckpoint.from_json(data, "site-b")
    with pytest.raises(ValueError, match="site 'site-a'"):
        mesh.engines["site-b"].restore_escrow(kept)


def test_a_retiring_site_gives_what_it_holds_to_the_peers_that_ask() -> None:
    cap = 3_000
    mesh = Mesh(escrow_network(cap=cap))
    mesh.run_until(T0 + timedelta(seconds=5))
    retiring = mesh.engines["site-c"]
    before = retiring.state.escrow.available("acme", WINDOW, holder(retiring))
    assert before > 0
    # Its GridSite is removed (everywhere) while its agent still runs.
    for e in mesh.engines.values():
        e.set_resources(e.network, list(SITES[:2]), [])
    mesh.run_until(T0 + timedelta(seconds=120), {"site-a": 20, "site-b": 20})
    for e in mesh.engines.values():
        assert e.state.escrow.available("acme", WINDOW, holder(retiring)) == 0
    assert mesh.granted <= cap
    assert mesh.granted >= cap - 2 * 100 - retiring.state.escrow.granted_by_site(
        "acme", WINDOW, "site-c"
    )  # what it had not released went to the loaded sites


def test_what_goes_out_while_the_holder_cannot_be_kept_and_after() -> None:
    mesh = Mesh(escrow_network(cap=3_000))
    mesh.run_until(T0)
    e = mesh.engines["site-a"]
    e.take_escrow_checkpoint()  # kept as of now
    mesh.run_until(T0 + timedelta(seconds=3), {"site-a": 40})
    result = e.refresh(mesh.now)
    assert e.take_escrow_checkpoint() is not None  # the holder changed since
    # Not kept: nothing of it goes out, and the engine hands the holder over again.
    e.escrow_not_kept()
    held = items_to_send(result.items, (), kept=False, withheld=False)
    assert not [i for i in held if i.key.startswith("escrow/")]
    assert [i for i in result.items if not i.key.startswith("escrow/")] == list(held)
    again = e.take_escrow_checkpoint()
    assert again is not None
    # Kept at last: every escrow item of this site goes out, the held-back versions too.
    own = e.state.all_items()
    sent = items_to_send((), own, kept=True, withheld=True)
    assert {i.key for i in sent} == {i.key for i in own if i.key.startswith("escrow/")}
    assert sent and items_to_send(result.items, own, kept=True, withheld=False) == result.items
