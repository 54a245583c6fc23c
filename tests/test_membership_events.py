"""What a SWIM node hands its reader (:meth:`SwimNode.events`) while it catches up: every
site's heads (gateway, metadata, certificates) before the records that came with them, and
turns for the event loop while thousands of events are taken. Real nodes on loopback."""

from __future__ import annotations

import asyncio

from grid.membership import EVENTS_PER_TURN, ItemEvent
from test_membership import node, wait_for

RECORDS_PER_SITE = 150


async def test_every_sites_heads_come_before_the_records_and_the_loop_runs_meanwhile() -> None:
    with node("a") as a, node("c") as c:
        for site in (a, c):
            assert site.publish("gateway", "gateway", 1, b"10.0.0.1:8443")
            for k in range(RECORDS_PER_SITE):
                assert site.publish("state", f"provider/p{k:03}", 1, bytes(200))
        c.join([a.address])
        items = 2 * (RECORDS_PER_SITE + 1)
        wait_for(lambda: a.stats()["items_stored"] == items, timeout=20)
        with node("b") as b:
            b.join([a.address])
            # Everything is stored, and so queued for the reader, before it reads: in walk
            # order, a's gateway, a's records, then c's gateway and c's records.
            wait_for(lambda: b.stats()["items_stored"] == items, timeout=20)

            turns = 0

            async def count_turns() -> None:
                nonlocal turns
                while True:
                    turns += 1
                    await asyncio.sleep(0)

            counting = asyncio.create_task(count_turns())
            taken: list[tuple[str, str]] = []
            async for event in b.events():
                if isinstance(event, ItemEvent):
                    taken.append((event.origin, event.lane))
                if len(taken) == items:
                    break
            counting.cancel()

    lanes = [lane for _, lane in taken]
    first_record = lanes.index("state")
    assert sorted(taken[:first_record]) == [("a", "gateway"), ("c", "gateway")]
    assert set(lanes[first_record:]) == {"state"}
    # The loop ran between turns, not only once all 300 records were taken.
    assert turns >= items // EVENTS_PER_TURN, turns
