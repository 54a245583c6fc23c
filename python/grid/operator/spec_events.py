"""The Events a resource's latest spec is owed, each told once.

Every reconcile pass looks at every resource again, and an Event per pass would bury the
resource's history (and cost an API call each time). So a refused spec gets one
``SpecRejected`` Warning per distinct set of problems, and a spec carrying fields this
release does not know one ``FieldsIgnored`` Warning per distinct set of fields: those
fields are left out and the rest is reconciled (:mod:`grid.operator.validation`), so
``SpecValid`` stays True and only this Event and the log say it. Once a resource's
problems or ignored fields are gone, the same set coming back is told again.

Pure: the caller posts the Events and logs them.
"""

from __future__ import annotations

from collections.abc import Sequence

from grid import __version__
from grid.models.phases import Event, EventType
from grid.operator.cache import Entry

SPEC_REJECTED = "SpecRejected"
FIELDS_IGNORED = "FieldsIgnored"
MAX_LISTED = 20
"""Ignored fields named in one message; the rest are counted."""


def ignored_fields_message(paths: Sequence[str], release: str = __version__) -> str:
    """What a ``FieldsIgnored`` Event says: this release, and the fields' paths."""
    listed = ", ".join(paths[:MAX_LISTED])
    more = len(paths) - MAX_LISTED
    if more > 0:
        listed += f" (and {more} more)"
    return f"fields unknown to release {release} ignored (a newer release's?): {listed}"


class SpecEvents:
    """Remembers what was told about each resource's spec (by kind and name)."""

    def __init__(self, release: str = __version__) -> None:
        self._release = release
        self._told_problems: dict[tuple[str, str], tuple[str, ...]] = {}
        self._told_ignored: dict[tuple[str, str], frozenset[str]] = {}

    def untold(self, entry: Entry) -> list[Event]:
        """The Events ``entry``'s latest spec is owed and has not been given yet (now
        counted as told)."""
        key = (entry.kind, entry.name)
        events: list[Event] = []
        if self._told_problems.get(key, ()) != entry.problems:
            self._told_problems[key] = entry.problems
            if entry.problems:
                message = "; ".join(entry.problems)
                events.append(Event(EventType.WARNING, SPEC_REJECTED, message))
        # A set, not a sequence: the same fields in another order were already told.
        ignored = frozenset(entry.ignored)
        if self._told_ignored.get(key, frozenset()) != ignored:
            self._told_ignored[key] = ignored
            if ignored:
                message = ignored_fields_message(entry.ignored, self._release)
                events.append(Event(EventType.WARNING, FIELDS_IGNORED, message))
        return events
