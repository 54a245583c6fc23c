""" "Did you mean" for names given on the command line: a typo'd site, gateway, network or
scenario is refused with the closest known names, never taken as a new one."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

MAX_LISTED = 10
"""Known names listed in a message before the rest are counted ("and 12 more")."""


def close_matches(word: str, known: Iterable[str]) -> list[str]:
    """The known names closest to ``word`` (:func:`difflib.get_close_matches`): the
    closest, and any as close as it (``site-c`` is as close to ``site-a`` as to
    ``site-b``), at most three."""
    matches = difflib.get_close_matches(word, sorted(set(known)), n=3, cutoff=0.6)
    if not matches:
        return []
    best = _similarity(word, matches[0])
    return sorted(match for match in matches if _similarity(word, match) == best)


def _similarity(word: str, name: str) -> float:
    return difflib.SequenceMatcher(None, word, name).ratio()


def listing(names: Iterable[str]) -> str:
    """``names`` sorted and joined with commas, at most :data:`MAX_LISTED` of them;
    ``"none"`` when there are none."""
    ordered = sorted(set(names))
    if not ordered:
        return "none"
    shown = ", ".join(ordered[:MAX_LISTED])
    rest = len(ordered) - MAX_LISTED
    return f"{shown} and {rest} more" if rest > 0 else shown


def unknown_name(
    problem: str, word: str, known: Iterable[str], label: str, *, shown: Iterable[str] = ()
) -> str:
    """One line for a name that is not one of ``known``: ``problem``, then "did you mean"
    with the closest known names (if any is close), then ``label`` and the known names (or
    ``shown``, another spelling of them, such as ``namespace/name``)::

        site 'alpah' is not a GridSite: did you mean 'alpha'? (GridSites: alpha, beta)
    """
    names = sorted(set(known))
    matches = close_matches(word, names)
    listed = listing(shown) if shown else listing(names)
    if not matches:
        return f"{problem} ({label}: {listed})"
    return f"{problem}: did you mean {' or '.join(map(repr, matches))}? ({label}: {listed})"
