"""CPython's cyclic garbage collector, set for a site process that runs for weeks.

A site holds its whole mesh's replicated state (at 100 sites x 100 providers, some 400,000
Python objects beside the ~150,000 of the modules it imports) and builds and drops tens of
thousands of objects in each render pass. With CPython's defaults a young collection runs
every 700 net allocations, and each one walks every young container: the pass's own lists
and dicts of thousands of entries, again and again while they fill. A full collection, which
walks the whole heap (about 0.4 s there), runs whenever a quarter of it is new, every few
passes. Together they took half the CPU of a 100 x 100 site's render passes.

Reference counting frees every object that is not part of a cycle the moment it is dropped,
whatever these settings: they only decide how long cyclic garbage (rare in Grid: an
exception's traceback, some asyncio internals) waits to be found.
"""

from __future__ import annotations

import gc

YOUNG_COLLECTION_EVERY = 50_000
"""Net allocations of tracked objects between young collections (CPython: 700)."""
MIDDLE_COLLECTION_EVERY = 20
"""Young collections between collections of the middle generation (CPython: 10)."""
FULL_COLLECTION_EVERY = 10
"""Middle collections between full ones, which CPython also holds back until a quarter of
the old generation is new (CPython: 10)."""


def settle_collector() -> None:
    """Collect once, move every object alive now (modules, classes, configuration) out of
    the collector's sight for good, and space later collections as above. For a process's
    entry point, once its imports and configuration are done."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, MIDDLE_COLLECTION_EVERY, FULL_COLLECTION_EVERY)
