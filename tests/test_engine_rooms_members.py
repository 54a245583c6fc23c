"""The membership room on its own: SWIM's reports of each peer, an older generation's
report ignored, this site never a member of itself, and whether a report changed what
routing reads."""

from __future__ import annotations

from datetime import timedelta

from grid.engine.members import LIVE_STATES, MemberInfo, Members
from grid.models.phases import MemberState
from test_engine import T0

LATER = T0 + timedelta(seconds=5)


def members_with_b(generation: int = 2) -> Members:
    """site-a's members, site-b alive at ``generation`` since T0."""
    members = Members("site-a")
    assert members.up("site-b", "b:7946", generation, T0)
    return members


def test_a_peer_joining_is_alive_and_worth_probing() -> None:
    members = Members("site-a")
    assert members.up("site-b", "b:7946", 1, T0) is True
    assert members.get("site-b") == MemberInfo("site-b", "b:7946", 1, MemberState.ALIVE, T0)
    assert members.is_alive("site-b")
    assert len(members) == 1


def test_up_again_while_alive_is_no_transition() -> None:
    members = members_with_b()
    assert members.up("site-b", "b2:7946", 2, LATER) is False
    assert members.up("site-b", "b3:7946", 3, LATER) is False
    # The report is still taken in: the address and generation are the latest.
    assert members.get("site-b") == MemberInfo("site-b", "b3:7946", 3, MemberState.ALIVE, LATER)


def test_up_after_suspect_or_down_is_a_transition() -> None:
    members = members_with_b()
    assert members.suspect("site-b", "b:7946", 2, T0)
    assert members.up("site-b", "b:7946", 2, LATER) is True
    assert members.gone("site-b", "b:7946", 2, MemberState.DOWN, LATER)
    assert members.up("site-b", "b:7946", 3, LATER) is True
    assert members.state_of("site-b") is MemberState.ALIVE


def test_an_older_generation_is_ignored_by_up_suspect_and_gone() -> None:
    members = members_with_b(generation=2)
    before = members.get("site-b")
    assert members.gone("site-b", "b:7946", 2, MemberState.DOWN, LATER)
    down = members.get("site-b")
    assert members.up("site-b", "old:7946", 1, LATER) is False
    assert members.get("site-b") == down
    assert members.up("site-b", "b:7946", 3, LATER)
    back = members.get("site-b")
    assert back is not None and back != before
    assert members.suspect("site-b", "old:7946", 2, LATER) is False
    assert members.gone("site-b", "old:7946", 2, MemberState.DOWN, LATER) is False
    assert members.gone("site-b", "old:7946", 2, MemberState.LEFT, LATER) is False
    assert members.get("site-b") == back


def test_suspect_only_turns_an_alive_member_of_the_same_generation() -> None:
    members = Members("site-a")
    assert members.suspect("site-b", "b:7946", 1, T0) is False  # never heard of
    assert members.get("site-b") is None

    members = members_with_b(generation=2)
    assert members.suspect("site-b", "b:7946", 3, LATER) is False  # a newer identity
    assert members.state_of("site-b") is MemberState.ALIVE
    assert members.suspect("site-b", "b:7946", 2, LATER) is True
    assert members.get("site-b") == MemberInfo("site-b", "b:7946", 2, MemberState.SUSPECT, LATER)
    assert members.suspect("site-b", "b:7946", 2, LATER) is False  # already suspect

    assert members.gone("site-b", "b:7946", 2, MemberState.DOWN, LATER)
    assert members.suspect("site-b", "b:7946", 2, LATER) is False
    assert members.state_of("site-b") is MemberState.DOWN


def test_gone_records_down_or_left_even_for_a_peer_never_seen() -> None:
    members = Members("site-a")
    assert members.gone("site-c", "c:7946", 1, MemberState.LEFT, T0) is True
    assert members.state_of("site-c") is MemberState.LEFT
    assert not members.is_alive("site-c")
    members = members_with_b()
    assert members.gone("site-b", "b:7946", 2, MemberState.DOWN, LATER) is True
    assert members.get("site-b") == MemberInfo("site-b", "b:7946", 2, MemberState.DOWN, LATER)


def test_this_site_is_never_its_own_member() -> None:
    members = Members("site-a")
    assert members.up("site-a", "a:7946", 1, T0) is False
    assert members.suspect("site-a", "a:7946", 1, T0) is False
    assert members.gone("site-a", "a:7946", 1, MemberState.DOWN, T0) is False
    assert len(members) == 0
    assert members.state_of("site-a") is None


def test_alive_unknown_names_alive_peers_no_gridsite_describes_in_order() -> None:
    members = Members("site-a")
    for name in ("site-z", "site-b", "site-c", "site-d"):
        members.up(name, f"{name}:7946", 1, T0)
    members.suspect("site-c", "site-c:7946", 1, T0)
    members.gone("site-d", "site-d:7946", 1, MemberState.DOWN, T0)
    assert members.alive_unknown({"site-b": object()}) == ("site-z",)
    assert members.alive_unknown({}) == ("site-b", "site-z")


def test_the_view_shows_every_peer_read_only() -> None:
    members = members_with_b()
    members.gone("site-c", "c:7946", 1, MemberState.LEFT, T0)
    view = members.view
    assert set(view) == {"site-b", "site-c"}
    assert view["site-c"].state is MemberState.LEFT
    assert not hasattr(view, "__setitem__")
    members.up("site-d", "d:7946", 1, T0)
    assert "site-d" in view  # a live view, not a copy


def test_live_states_are_alive_and_suspect() -> None:
    assert set(LIVE_STATES) == {MemberState.ALIVE, MemberState.SUSPECT}
