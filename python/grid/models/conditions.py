"""Kubernetes-style status conditions and the rule for updating them: the transition time
moves only when a condition's status changes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import AwareDatetime, Field

from grid.models.common import GridModel
from grid.models.fields import list_map, unique_by

CONDITION_TYPE_PATTERN = r"^[A-Z][A-Za-z0-9]*$"
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(GridModel):
    """One aspect of an object's state, as ``kubectl describe`` shows it."""

    type: str = Field(
        pattern=CONDITION_TYPE_PATTERN, max_length=316, description="CamelCase condition type."
    )
    status: ConditionStatus
    reason: str = Field(
        pattern=REASON_PATTERN,
        min_length=1,
        max_length=1024,
        description="CamelCase reason for the last change, for machines.",
    )
    message: str = Field("", max_length=32768, description="Explanation for humans.")
    last_transition_time: AwareDatetime = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation the condition was computed from."
    )


Conditions = Annotated[list[Condition], unique_by("type"), list_map("type")]
"""A status's conditions: at most one of each type."""


class ConditionUpdate(GridModel):
    """A condition as a controller computes it, before its transition time is known."""

    type: str = Field(pattern=CONDITION_TYPE_PATTERN, max_length=316)
    status: ConditionStatus
    reason: str = Field(pattern=REASON_PATTERN, min_length=1, max_length=1024)
    message: str = Field("", max_length=32768)
    observed_generation: int | None = Field(None, ge=0)


def _whole_seconds(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    # Kubernetes stores condition times with one-second resolution.
    return now.replace(microsecond=0)


def set_condition(
    conditions: Sequence[Condition], new: ConditionUpdate, now: datetime
) -> list[Condition]:
    """``conditions`` with ``new`` applied: a condition of a new type is appended; one whose
    status changes gets ``lastTransitionTime = now``; otherwise its reason, message and
    observedGeneration are refreshed and its transition time is kept. Order is preserved."""
    result: list[Condition] = []
    replaced = False
    for existing in conditions:
        if existing.type != new.type:
            result.append(existing)
            continue
        replaced = True
        transition = (
            existing.last_transition_time if existing.status == new.status else _whole_seconds(now)
        )
        result.append(_materialize(new, transition))
    if not replaced:
        result.append(_materialize(new, _whole_seconds(now)))
    return result


def find_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition of type ``type_``, if any."""
    return next((condition for condition in conditions if condition.type == type_), None)


def _materialize(update: ConditionUpdate, transition: datetime) -> Condition:
    return Condition(
        type=update.type,
        status=update.status,
        reason=update.reason,
        message=update.message,
        last_transition_time=transition,
        observed_generation=update.observed_generation,
    )
