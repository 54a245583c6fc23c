"""What a SWIM node hands its reader (:meth:`SwimNode.events`) while it catches up: every
site's heads (gateway, metadata, certificates) before the records that came with them, the
catalogues before the signals, and turns for the event loop while thousands of events are
taken. Real nodes on loopback."""

from __future__ import annotations

import asyncio

from grid.crdt.pages import PAGE_PREFIX
from grid.crdt.snapshot import SIGNALS_PREFIX
from grid.membership import EVENTS_PER_TURN, ItemEvent
from test_membership import node, wait_for

RECORDS_PER_SITE = 150
SIGNALS_PER_SITE = 20


async def test_heads_come_first_then_catalogues_then_signals_and_the_loop_runs_meanwhile() -> None:
    with node("a") as a, node("c") as c:
        for site in (a, c):
            assert site.publish("gateway", "gateway", 1, b"10.0.0.1:8443")
            for k in range(RECORDS_PER_SITE):
                assert site.publish("state", f"provider/p{k:03}", 1, bytes(200))
            # Signals sort before the catalogues of the next site in the walk, and a
            # page is a signals record too (the keys the engine publishes them under).
            for k in range(SIGNALS_PER_SITE):
                assert site.publish("state", f"{SIGNALS_PREFIX}p{k:03}", 1, bytes(60))
            assert site.publish("state", f"{PAGE_PREFIX}0", 1, bytes(600))
        c.join([a.address])
        items = 2 * (RECORDS_PER_SITE + SIGNALS_PER_SITE + 2)
        wait_for(lambda: a.stats()["items_stored"] == items, timeout=20)
        with node("b") as b:
            b.join([a.address])
            # Everything is stored, and so queued for the reader, before it reads: in walk
            # order, a's gateway, a's catalogues and signals, then c's.
            wait_for(lambda: b.stats()["items_stored"] == items, timeout=20)

            turns = 0

            async def count_turns() -> None:
                nonlocal turns
                while True:
                    turns += 1
                    await asyncio.sleep(0)

            counting = asyncio.create_task(count_turns())
            taken: list[tuple[str, str, str]] = []
            async for event in b.events():
                if isinstance(event, ItemEvent):
                    taken.append((event.origin, event.lane, event.key.split("/")[0]))
                if len(taken) == items:
                    break
            counting.cancel()

    kinds = [kind if lane == "state" else lane for _, lane, kind in taken]
    heads = kinds.index("provider")
    signals = heads + 2 * RECORDS_PER_SITE
    assert sorted(taken[:heads]) == [("a", "gateway", "gateway"), ("c", "gateway", "gateway")]
    assert kinds[heads:signals] == ["provider"] * 2 * RECORDS_PER_SITE
    assert set(kinds[signals:]) == {SIGNALS_PREFIX.rstrip("/"), PAGE_PREFIX.rstrip("/")}
    # The loop ran between turns, not only once every record was taken.
    assert turns >= items // EVENTS_PER_TURN, turns
