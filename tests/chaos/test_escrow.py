"""Escrowed and lowerBound budgets under a partition, spent through the sites' token
counters (``escrow.py``): the escrowed tenant's gateways never grant past the cap, before,
during or after the split, while the lowerBound tenant's overspend is measured and printed;
after the heal every site shows the exact spend of both. And a mesh with a site of the
previous release, which knows no escrow."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.escrow import (
    BOUNDED,
    CAP,
    ESCROW,
    OLD_SITE,
    Gate,
    condition,
    escrow_mesh,
    first_claimable_window,
    play,
)
from chaos.mesh import ChaosMesh, wait_until
from chaos.upgrade import previous_of
from support.previous import PreviousRelease

pytestmark = pytest.mark.slow


def test_an_escrowed_cap_holds_through_a_partition_and_lower_bound_overspends(
    tmp_path: Path, netns_available: None
) -> None:
    with escrow_mesh(tmp_path / "mesh") as mesh:
        outcome = play(mesh)
    print(outcome.report())
    assert outcome.granted[ESCROW] > CAP // 2, "the escrowed tenant was served"
    assert outcome.granted[ESCROW] <= CAP
    assert outcome.peak_during_partition[ESCROW] <= CAP
    # The same load, counted as a lower bound, spends past the cap while the halves cannot
    # hear each other: the overspend escrow prevents.
    assert outcome.overspend(BOUNDED) > 0
    for site, used in outcome.statuses.items():
        assert used == outcome.granted, (
            f"{site} shows {used}, the gateways granted {outcome.granted}"
        )
    assert outcome.exhausted_here, "a cut-off half ran out of its allowance before the mesh did"
    assert max(outcome.rebalancing_s) < 10.0


# The first use of the previous release may build it (minutes on a small machine).
@pytest.mark.timeout(900)
def test_a_site_of_the_previous_release_holds_escrow_back_until_it_leaves(
    tmp_path: Path, netns_available: None, previous_release: PreviousRelease
) -> None:
    """0.2.0 refuses ``escrow/`` items and would spend without an allowance: while it is a
    member, the other sites claim, release and publish nothing of the escrowed budget and
    say why; once it left, the window's shares are claimed."""
    with escrow_mesh(tmp_path / "mesh", previous_of(previous_release)) as mesh:
        begun = time.time()  # escrow_mesh returns once every current site's life began
        current = [site for name, site in mesh.sites.items() if name != OLD_SITE]

        def held_back() -> bool:
            conditions = [condition(site, "EscrowHeld") for site in current]
            return all(
                c.get("reason") == "PeerWithoutEscrow" and OLD_SITE in c.get("message", "")
                for c in conditions
            )

        wait_until("every current site holding escrow back", held_back, 90.0)

        def old_site_holds_the_mesh() -> bool:
            # The current sites see the old one as soon as it joins them; its own view
            # lists them, and their items, a moment later.
            view = mesh.view(OLD_SITE)
            names = {site.name for site in current}
            return (
                view is not None and names <= set(view["members"]) and names <= set(view["sites"])
            )

        wait_until(
            "the old site holding every current site's records", old_site_holds_the_mesh, 60.0
        )
        # What the old site refuses of this release's other items (a gateway record with a
        # TLS server name) is refused once per version; escrow items would add to it.
        refused_before = refused(mesh)
        start = first_claimable_window(mesh, begun)
        wait_until("a window the sites could claim", lambda: time.time() > start + 5, 200.0)
        assert held_back()
        gates = [Gate(site) for site in current]
        for gate in gates:
            gate.read()
            assert gate.tenants[ESCROW]["allowance"] == 0, gate.site.name
        assert refused(mesh) == refused_before, "no escrow item reached the old site"

        assert mesh.leave(OLD_SITE) == 0

        def claimed() -> bool:
            for gate in gates:
                gate.read()
            return all(g.tenants[ESCROW].get("allowance", 0) > 0 for g in gates) and all(
                condition(site, "EscrowHeld").get("status") == "True" for site in current
            )

        wait_until("the shares claimed once the old site left", claimed, 30.0)


def refused(mesh: ChaosMesh) -> dict[str, int]:
    """The items the old site's engine refused so far, by reason."""
    view = mesh.view(OLD_SITE)
    assert view is not None and view["members"], "the old site is in the mesh"
    return dict(view["refused_items"])
