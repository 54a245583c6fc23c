"""Conditions follow the Kubernetes rule: the transition time moves only with the status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from grid.models import Condition, ConditionStatus, ConditionUpdate, find_condition, set_condition

T0 = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)


def update(
    type_: str, status: str, reason: str, message: str = "", generation: int = 1
) -> ConditionUpdate:
    return ConditionUpdate(
        type=type_,
        status=ConditionStatus(status),
        reason=reason,
        message=message,
        observed_generation=generation,
    )


def test_a_new_condition_is_appended_with_now() -> None:
    conditions = set_condition([], update("Ready", "False", "Pending"), T0)
    (ready,) = conditions
    assert ready.last_transition_time == T0
    assert ready.observed_generation == 1
    assert (
        ready.model_dump(mode="json", by_alias=True)["lastTransitionTime"] == "2026-07-01T12:00:00Z"
    )


def test_same_status_keeps_the_transition_time_but_refreshes_the_rest() -> None:
    first = set_condition([], update("Ready", "False", "Pending", "waiting"), T0)
    later = set_condition(
        first, update("Ready", "False", "Connecting", "probing", 2), T0 + timedelta(minutes=5)
    )
    (ready,) = later
    assert ready.last_transition_time == T0
    assert (ready.reason, ready.message, ready.observed_generation) == ("Connecting", "probing", 2)


def test_a_status_change_moves_the_transition_time() -> None:
    first = set_condition([], update("Ready", "False", "Pending"), T0)
    changed = set_condition(first, update("Ready", "True", "Active"), T0 + timedelta(seconds=30.7))
    (ready,) = changed
    assert ready.status is ConditionStatus.TRUE
    # Kubernetes keeps whole seconds.
    assert ready.last_transition_time == T0 + timedelta(seconds=30)


def test_other_conditions_and_order_are_untouched() -> None:
    conditions = set_condition([], update("Reachable", "True", "ProbeSucceeded"), T0)
    conditions = set_condition(conditions, update("Ready", "False", "Connecting"), T0)
    conditions = set_condition(
        conditions, update("Reachable", "False", "ProbeFailed"), T0 + timedelta(1)
    )
    assert [c.type for c in conditions] == ["Reachable", "Ready"]
    ready = find_condition(conditions, "Ready")
    assert ready is not None and ready.last_transition_time == T0
    assert find_condition(conditions, "Trusted") is None


def test_the_input_list_is_not_modified() -> None:
    original = set_condition([], update("Ready", "False", "Pending"), T0)
    snapshot = list(original)
    set_condition(original, update("Ready", "True", "Active"), T0 + timedelta(1))
    assert original == snapshot


def test_now_must_be_timezone_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        set_condition([], update("Ready", "True", "Active"), datetime(2026, 1, 1))


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"type": "ready", "status": "True", "reason": "Active"}, "type"),
        ({"type": "Ready", "status": "Yes", "reason": "Active"}, "status"),
        ({"type": "Ready", "status": "True", "reason": "not camel case"}, "reason"),
        ({"type": "Ready", "status": "True", "reason": ""}, "reason"),
    ],
)
def test_malformed_conditions_are_rejected(fields: dict[str, str], complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        ConditionUpdate.model_validate(fields)


def test_conditions_need_an_aware_rfc3339_time() -> None:
    with pytest.raises(ValidationError, match="timezone"):
        Condition.model_validate(
            {
                "type": "Ready",
                "status": "True",
                "reason": "Active",
                "lastTransitionTime": "2026-01-01T00:00:00",
            }
        )
