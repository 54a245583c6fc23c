"""Escrowed and lowerBound budgets under a partition, spent through the sites' token
counters (``escrow.py``): the escrowed tenant's gateways never grant past the cap, before,
during or after the split, while the lowerBound tenant's overspend is measured and printed;
after the heal every site shows the exact spend of both."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.escrow import BOUNDED, CAP, ESCROW, escrow_mesh, play

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
