"""The collector settings of a site process (grid.runtime.collector), in a process of their
own: they are process-wide."""

from __future__ import annotations

import json
import subprocess
import sys

from grid.runtime.collector import (
    FULL_COLLECTION_EVERY,
    MIDDLE_COLLECTION_EVERY,
    YOUNG_COLLECTION_EVERY,
)

_PROGRAM = """
import gc, json
import grid.agent
from grid.runtime.collector import settle_collector

before = gc.get_threshold()
settle_collector()
frozen = gc.get_freeze_count()

class Cycle:
    pass

# A cycle dropped after settling is still found, by a young collection.
collected = []
gc.callbacks.append(lambda phase, info: phase == "stop" and collected.append(info["collected"]))
for _ in range(30_000):
    a, b = Cycle(), Cycle()
    a.peer, b.peer = b, a
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": frozen,
                  "collected": sum(collected)}))
"""


def test_settling_freezes_what_is_loaded_and_still_collects_cycles() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _PROGRAM], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(run.stdout)
    assert seen["before"] == [700, 10, 10]
    assert seen["after"] == [YOUNG_COLLECTION_EVERY, MIDDLE_COLLECTION_EVERY, FULL_COLLECTION_EVERY]
    # The agent's imports alone are tens of thousands of objects, never walked again.
    assert seen["frozen"] > 20_000
    # 30,000 dropped cycles of two objects (and their dicts) pass the young threshold.
    assert seen["collected"] >= YOUNG_COLLECTION_EVERY // 2
