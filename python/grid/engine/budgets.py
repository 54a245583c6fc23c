"""Tenant budgets as one site sees them: each tenant's known spend in its current window
(grid.engine.windows) against its cap. Pure: every function takes ``now``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from grid.crdt.state import GridState
from grid.engine.windows import budget_window
from grid.models.budgets import TenantBudget, TenantBudgetStatus


def budget_statuses(
    budgets: Sequence[TenantBudget], state: GridState, now: datetime
) -> list[TenantBudgetStatus]:
    """Each tenant's known spend in its current window: the sum of every site's slot this
    site has heard of, a lower bound of the mesh's spend while a partition hides some."""
    found = []
    for budget in budgets:
        window = budget_window(budget, now)
        used = sum(state.budget_spend(budget.tenant, label) for label in window.summed)
        found.append(
            TenantBudgetStatus(
                tenant=budget.tenant,
                used=used,
                cap=budget.cap,
                window_start=window.start,
                window_end=window.end,
                exhausted=used >= budget.cap,
                remaining=max(budget.cap - used, 0),
            )
        )
    return found
