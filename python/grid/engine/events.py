"""Events and conditions as the engine reports them: one event log per pass, and the
condition helper every room uses (messages clipped to what a status field holds)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from grid.models.conditions import Condition, ConditionStatus, ConditionUpdate, set_condition
from grid.models.phases import Event

MAX_MESSAGE = 4096
"""The longest message a condition, an overlay refusal or a status carries."""

NETWORK_KIND = "GridNetwork"
SITE_KIND = "GridSite"
PROVIDER_KIND = "InferenceProvider"

_CONDITION_STATUS = {
    True: ConditionStatus.TRUE,
    False: ConditionStatus.FALSE,
    None: ConditionStatus.UNKNOWN,
}


def clip(text: str) -> str:
    """``text`` cut to :data:`MAX_MESSAGE` characters (an ellipsis marks the cut)."""
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


@dataclass(frozen=True, slots=True)
class ResourceEvent:
    """An event about one resource (a phase change, a condition turning bad)."""

    kind: str
    name: str
    event: Event
    at: datetime


class EventLog:
    """The events of one pass, in the order the rooms recorded them."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: list[ResourceEvent] = []

    def record(self, kind: str, name: str, events: Iterable[Event], now: datetime) -> None:
        self._events.extend(ResourceEvent(kind, name, event, now) for event in events)

    def take(self) -> tuple[ResourceEvent, ...]:
        """The events so far, oldest first; the log starts empty again."""
        taken = tuple(self._events)
        self._events.clear()
        return taken


def with_condition(  # noqa: PLR0917 - one condition's fields
    conditions: list[Condition],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """``conditions`` with the condition ``type_`` set (its transition time kept when its
    status stays)."""
    update = ConditionUpdate(
        type=type_,
        status=_CONDITION_STATUS[status],
        reason=reason,
        message=clip(message),
        observed_generation=generation,
    )
    return set_condition(conditions, update, now)
