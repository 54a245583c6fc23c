"""Tenant budgets as one site sees them: the window a moment falls in, and each tenant's
known spend in its current window against its cap. Pure: every function takes ``now``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

from grid.crdt.state import GridState
from grid.models.network import TenantBudget, TenantBudgetStatus


def budget_window(budget: TenantBudget, now: datetime) -> tuple[str, datetime]:
    """The label and start of the window ``now`` falls in. Windows are aligned to the Unix
    epoch, so every site of a mesh counts into the same window; the label is the one the
    operator's status uses (``w<length>-<start>``, in seconds)."""
    length = budget.window.seconds
    start = math.floor(now.timestamp() / length) * length
    return f"w{int(length)}-{int(start)}", datetime.fromtimestamp(start, UTC)


def window_end(label: str) -> float | None:
    """When (Unix seconds) the window of a :func:`budget_window` label ends; None for a
    label of another form."""
    length, _, start = label.removeprefix("w").partition("-")
    if not (label.startswith("w") and length.isdigit() and start.isdigit()):
        return None
    return float(int(start) + int(length))


def budget_statuses(
    budgets: Sequence[TenantBudget], state: GridState, now: datetime
) -> list[TenantBudgetStatus]:
    """Each tenant's known spend in its current window: the sum of every site's slot this
    site has heard of, a lower bound of the mesh's spend while a partition hides some."""
    found = []
    for budget in budgets:
        label, start = budget_window(budget, now)
        used = state.budget_spend(budget.tenant, label)
        found.append(
            TenantBudgetStatus(
                tenant=budget.tenant,
                used=used,
                cap=budget.cap,
                window_start=start,
                exhausted=used >= budget.cap,
                remaining=max(budget.cap - used, 0),
            )
        )
    return found
