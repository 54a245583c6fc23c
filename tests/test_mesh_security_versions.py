"""The attacks of ``test_mesh_security`` on a mesh mixing two releases, as during an
upgrade: the previous release (``compat/previous.txt``, run by ``support.remote_node``
in its own interpreter) and this one, each attack once with its victims on the previous
release and every other real node on this one, and once the other way round.

The tests are those of ``test_mesh_security``, collected here again with this module's
``sides`` fixture in place of that module's (pytest takes the fixture of the module that
collects a test), so each attack and its assertions are written once.

Every attack there applies across releases and runs here (a new one must be added below,
or named in ``NOT_ACROSS_RELEASES`` with the reason). Their assertions read only what a
``SwimNode`` of either release offers (``members``, ``stats``, events), and only counters
both releases keep, so none needs internals the previous release lacks.
"""

from __future__ import annotations

import secrets
import subprocess

import pytest

import test_mesh_security as attacks
from grid.membership import PROTOCOLS, SwimNode
from support.attacker import wait_until
from support.previous import PreviousRelease
from support.remote_node import CURRENT, Release
from test_mesh_security import Sides


@pytest.fixture(params=["victims-on-previous", "victims-on-current"])
def sides(request: pytest.FixtureRequest, previous_release: PreviousRelease) -> Sides:
    previous = Release(previous_release.version, previous_release.python)
    if request.param == "victims-on-previous":
        return Sides(victims=previous, others=CURRENT)
    return Sides(victims=CURRENT, others=previous)


test_a_million_replayed_frames_are_all_refused_and_reflect_nothing = (
    attacks.test_a_million_replayed_frames_are_all_refused_and_reflect_nothing
)
test_frames_of_an_earlier_life_and_of_a_leaver_are_refused = (
    attacks.test_frames_of_an_earlier_life_and_of_a_leaver_are_refused
)
test_signed_messages_from_outside_the_clock_window_are_refused = (
    attacks.test_signed_messages_from_outside_the_clock_window_are_refused
)
test_a_key_holders_digests_get_bounded_answers_and_its_repairs_only_signed_items = (
    attacks.test_a_key_holders_digests_get_bounded_answers_and_its_repairs_only_signed_items
)
test_an_item_forged_for_another_origin_is_refused_and_the_origin_keeps_publishing = (
    attacks.test_an_item_forged_for_another_origin_is_refused_and_the_origin_keeps_publishing
)
test_a_leave_forged_for_another_site_is_refused = (
    attacks.test_a_leave_forged_for_another_site_is_refused
)
test_a_key_holder_cannot_take_over_another_sites_address = (
    attacks.test_a_key_holder_cannot_take_over_another_sites_address
)
test_a_key_holder_cannot_declare_another_site_down = (
    attacks.test_a_key_holder_cannot_declare_another_site_down
)
test_a_second_node_with_a_taken_site_name_yields_and_the_first_stays = (
    attacks.test_a_second_node_with_a_taken_site_name_yields_and_the_first_stays
)
test_a_flood_of_unvouched_identities_lists_none_and_does_not_slow_detection = (
    attacks.test_a_flood_of_unvouched_identities_lists_none_and_does_not_slow_detection
)
test_garbage_is_counted_by_reason_and_changes_nothing = (
    attacks.test_garbage_is_counted_by_reason_and_changes_nothing
)

#: Attacks of test_mesh_security that do not apply across releases, and why.
NOT_ACROSS_RELEASES: dict[str, str] = {
    "test_a_forged_flood_in_a_live_sites_name_checks_few_signatures_and_does_not_slow_detection": (
        "the budget of signature checks is this release's: a node of the previous release "
        "checks every signed message, so 20,000 forgeries a second cost it more than a core "
        "(docs/security.md, Session keys)"
    ),
}


def test_every_attack_runs_across_releases_or_says_why() -> None:
    attack_names = {name for name in vars(attacks) if name.startswith("test_")}
    here = {name for name, value in globals().items() if getattr(attacks, name, None) is value}
    assert attack_names - here == set(NOT_ACROSS_RELEASES)


def test_a_mixed_mesh_speaks_the_highest_version_each_pair_shares(
    previous_release: PreviousRelease,
) -> None:
    """What the attacks above run on: nodes of this release speak to the previous release's
    at the highest version both hold (1 with 0.1.0, which announces no range), and to each
    other at this release's highest, with nobody refused."""
    shown = subprocess.run(
        [previous_release.python, "-c", PREVIOUS_PROTOCOLS],
        capture_output=True,
        text=True,
        check=True,
    )
    lowest, highest = map(int, shown.stdout.split())
    shared = min(highest, PROTOCOLS[1])
    assert shared >= max(lowest, PROTOCOLS[0]), "the previous release must be spoken"
    previous = Release(previous_release.version, previous_release.python)
    sites = ("site-a", "site-b", "site-c", "site-d")
    releases = {"site-a": CURRENT, "site-b": previous, "site-c": CURRENT, "site-d": previous}
    with attacks.mesh(secrets.token_bytes(32), sites, releases=releases) as m:
        current = [node for node in m.nodes if isinstance(node, SwimNode)]
        expected = {site: PROTOCOLS[1] if releases[site] is CURRENT else shared for site in sites}
        wait_until(
            lambda: all(
                {m.site: m.protocol for m in node.members()}
                == {s: p for s, p in expected.items() if s != node.site}
                for node in current
            ),
            10,
            "each pair speaks its highest shared version",
        )
        for node in m.nodes:
            stats = node.stats()
            # The previous release reads the range bits of this one's HELLOs as flags it
            # ignores: every HELLO verifies and nothing is malformed, either way.
            assert stats["hellos_received"] > 0
            assert stats["dropped_malformed"] == stats["dropped_untrusted_certificate"] == 0
            assert stats.get("dropped_incompatible_version", 0) == 0


PREVIOUS_PROTOCOLS = """
from grid import _native
print(*getattr(_native, "PROTOCOLS", (1, 1)))
"""
