"""What a refresh pays to say who is heard and whether the sites agree, and what the
escrow holder file costs: per mesh size, the median time of
``grid.engine.budgets.unheard_sites`` and ``grid.engine.budget_agreement.disagreements``
over a state holding every peer's heartbeat of every tenant's window, beside the time of
``budget_statuses`` for the same budgets (the status the refresh composes anyway) as the
baseline, as a ratio; then the size, write (encoded, synced) and read (checked) time of a
holder file of 1 and of 400 records.

    .venv/bin/python bench/bench_budget_heard.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from grid.crdt import GridState
from grid.crdt.escrow import EscrowRecord
from grid.crdt.snapshot import SpendSlot, encode_spend
from grid.engine.budget_agreement import disagreements
from grid.engine.budgets import budget_statuses, unheard_sites
from grid.engine.escrow_checkpoint import EscrowCheckpoint
from grid.engine.windows import budget_window
from grid.fsutil import PRIVATE_FILE_MODE, write_atomically
from grid.models.budgets import TenantBudget

NOW = datetime(2026, 7, 1, 12, 0, 30, tzinfo=UTC)


def median_s(run: Callable[[], object], times: int = 9) -> float:
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        run()
        taken.append(time.perf_counter() - started)
    return statistics.median(taken)


def mesh(tenants: int, sites: int) -> None:
    budgets = [
        TenantBudget.model_validate({"tenant": f"tenant-{i}", "cap": 10**6, "window": "24h"})
        for i in range(tenants)
    ]
    names = [f"site-{j}" for j in range(sites)]
    state, at = GridState("site-0"), NOW.timestamp()
    for name in names[1:]:
        peer = GridState(name)
        for budget in budgets:
            peer.heartbeat_spend(budget.tenant, budget_window(budget, NOW).counting, at, 60.0)
        for item in peer.items_to_publish():
            state.apply_item(name, item.lane, item.key, item.version, item.payload, at)
    windows = {budget.tenant: budget_window(budget, NOW) for budget in budgets}
    heard = median_s(lambda: unheard_sites("site-0", names, {}, state, windows, at + 1))
    agreed = median_s(lambda: disagreements(budgets, names, state, NOW))
    base = median_s(lambda: budget_statuses(budgets, state, NOW, unheard={}))
    print(
        f"{tenants} tenants x {sites} sites: unheard_sites {heard * 1000:.1f} ms "
        f"({heard / base:.1f}x budget_statuses), disagreements {agreed * 1000:.1f} ms "
        f"({agreed / base:.1f}x), budget_statuses {base * 1000:.1f} ms"
    )


def holder_file(records: int) -> None:
    held = tuple(
        EscrowRecord(
            f"tenant-{i}",
            "w86400-1782864000",
            1782864000123,
            1000,
            3,
            400,
            {"site-b#1782864000999": 50},
            {"site-c#1782864000777": 20},
            12,
            revision=1782907230123 + i,
        )
        for i in range(records)
    )
    checkpoint = EscrowCheckpoint("site-a", 1782864000123, held)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "holder.json"
        write = median_s(lambda: write_atomically(path, checkpoint.to_json(), PRIVATE_FILE_MODE))
        read = median_s(lambda: EscrowCheckpoint.from_json(path.read_bytes(), "site-a"))
        size = path.stat().st_size
    print(
        f"holder file of {records} record(s): {size:,} bytes, written {write * 1000:.2f} ms, "
        f"read and checked {read * 1000:.2f} ms"
    )


def main() -> None:
    slot = SpendSlot("acme", "w86400-1782864000", 1782864000123, 0, 1782907230123)
    print(f"a heartbeat item: {len(encode_spend('site-a', slot).payload)} bytes of payload")
    for tenants, sites in ((40, 10), (400, 10), (40, 100), (400, 100)):
        mesh(tenants, sites)
    for records in (1, 400):
        holder_file(records)


if __name__ == "__main__":
    main()
