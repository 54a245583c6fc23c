"""A budget switched to escrow within a window: the window's spend so far was counted under
no allowance, so no split of the cap could bound it. It stays lowerBound until the next
window, EscrowHeld says why and from when, and the next window is claimed and held; a site
that saw the switch only after a peer had claimed the window joins it without a share."""

from __future__ import annotations

from datetime import datetime, timedelta

from grid.engine import EscrowCheckpoint
from grid.models.budgets import BudgetEnforcement
from test_engine import SITES, T0
from test_engine_escrow import NAMES, Mesh, escrow_network
from test_escrow_restart import holder, restart

NEXT = T0 + timedelta(hours=1)


def skip_to(mesh: Mesh, moment: datetime) -> None:
    """Idle until ``moment``, a refresh every 30 s (nothing spends meanwhile)."""
    while mesh.now < moment - timedelta(seconds=30):
        mesh.tick(seconds=30)
    mesh.run_until(moment)


def switch(mesh: Mesh, *sites: str) -> None:
    for site in sites or NAMES:
        e = mesh.engines[site]
        e.set_resources(escrow_network(cap=3_000), list(SITES), [])


def test_a_switch_within_a_window_is_lower_bound_until_the_next_one_and_said() -> None:
    mesh = Mesh(escrow_network(cap=3_000, enforcement="lowerBound"))
    mesh.run_until(T0)
    mesh.run_until(T0 + timedelta(seconds=10), {"site-a": 50})
    switch(mesh)
    mesh.run_until(T0 + timedelta(seconds=20), {"site-a": 50})
    for name in NAMES:
        status = mesh.status(name)
        assert (status.enforcement, status.allowance) == (BudgetEnforcement.LOWER_BOUND, None)
        held = mesh.conditions(name)["EscrowHeld"]
        assert (held.status, held.reason) == ("False", "SwitchedWithinWindow")
        assert "acme (from 2026-07-01T13:00:00Z)" in held.message
        assert "lowerBound until the next window starts" in held.message
    assert mesh.refused["site-a"] == 0  # served as lowerBound meanwhile
    items = mesh.engines["site-a"].refresh(mesh.now).items
    assert not [i for i in items if i.key.startswith("escrow/")]  # nothing claimed
    skip_to(mesh, NEXT + timedelta(seconds=2))
    granted_before = mesh.granted
    for name in NAMES:
        status = mesh.status(name)
        assert (status.enforcement, status.allowance) == (BudgetEnforcement.ESCROW, 100)
        held = mesh.conditions(name)["EscrowHeld"]
        assert (held.status, held.reason) == ("True", "CapsHeld")
    mesh.run_until(NEXT + timedelta(seconds=200), {"site-a": 50, "site-b": 50})
    assert mesh.granted - granted_before <= 3_000  # the new window's cap holds


def test_a_site_that_switched_late_joins_a_window_its_peers_claimed() -> None:
    mesh = Mesh(escrow_network(cap=3_000, enforcement="lowerBound"))
    skip_to(mesh, NEXT - timedelta(seconds=5))
    switch(mesh, "site-a", "site-b")  # before the window starts
    mesh.run_until(NEXT + timedelta(seconds=3))
    switch(mesh, "site-c")  # within it: site-a and site-b claimed already
    mesh.run_until(NEXT + timedelta(seconds=60), {"site-c": 50})
    late = mesh.engines["site-c"]
    record = late.state.escrow.record(
        "acme", "w3600-1782910800", f"site-c#{late.state.escrow_epoch}"
    )
    assert record is not None and record.share == 0  # no share: it lives on transfers
    assert mesh.status("site-c").enforcement is BudgetEnforcement.ESCROW
    assert mesh.conditions("site-c")["EscrowHeld"].status == "True"
    assert mesh.status("site-c").allowance > 0  # sent by its peers as it asked


def test_a_restart_within_the_switched_window_claims_none_of_it() -> None:
    mesh = Mesh(escrow_network(cap=3_000, enforcement="lowerBound"))
    mesh.run_until(T0)
    mesh.run_until(T0 + timedelta(seconds=10), {"site-a": 50})
    switch(mesh)
    mesh.run_until(T0 + timedelta(seconds=15), {"site-a": 50})
    # Restarted from a holder file (of its holder before the window), site-a no longer
    # remembers the switch: that holder could claim the window by its epoch, but claims
    # nothing begun before now.
    kept = EscrowCheckpoint("site-a", mesh.engines["site-a"].state.escrow_epoch or 0)
    after = restart(mesh, "site-a", kept)
    mesh.run_until(T0 + timedelta(seconds=30), {"site-a": 50})
    assert after.state.escrow.record("acme", "w3600-1782907200", holder(after)) is None
    assert mesh.status("site-b").enforcement is BudgetEnforcement.LOWER_BOUND
    skip_to(mesh, NEXT + timedelta(seconds=2))
    assert mesh.status("site-a").allowance == 100  # the next window is claimed


def test_a_rolling_window_made_fixed_within_a_window_is_a_switch_too() -> None:
    mesh = Mesh(escrow_network(cap=3_000, window=None, rolling={"length": "2h", "step": "1h"}))
    mesh.run_until(T0 + timedelta(seconds=5))
    switch(mesh)  # escrow all along, but counted as lowerBound while rolling
    mesh.tick()
    held = mesh.conditions("site-a")["EscrowHeld"]
    assert (held.status, held.reason) == ("False", "SwitchedWithinWindow")
    assert mesh.status("site-a").enforcement is BudgetEnforcement.LOWER_BOUND
