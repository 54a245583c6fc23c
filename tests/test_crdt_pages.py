"""Signals pages: the codec, and the writer's invariant that the latest version of its pages
holds the latest register of every provider, whatever was written, removed, pruned or
recovered from an earlier life."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from grid.crdt import GridState, Item, ProviderMetrics
from grid.crdt.codec import MAX_ITEM_BYTES, item_bytes
from grid.crdt.pages import (
    CARRY_SHARE,
    PAGE_PREFIX,
    SignalsPage,
    decode_page,
    encode_page,
    room,
)
from grid.crdt.signals import SignalsState
from grid.crdt.snapshot import check_keyed_provider_name, decode_item
from grid.errors import CrdtDecodeError, CrdtForgedItemError, CrdtLimitError, CrdtValueError
from test_crdt_records import NOW, sample_record

SITE = "site-a"


def register(name: str, version: int, queue: float | None = 1.0) -> SignalsState:
    metrics = ProviderMetrics.from_measurements(healthy=True, queue_depth=queue)
    return SignalsState.written(SITE, name, version, version, "Available", metrics)


def decode(payload: bytes, version: int = 10, origin: str = SITE) -> SignalsPage:
    return decode_page(origin, 0, version, payload, lambda _: False, check_keyed_provider_name)


# ---------------------------------------------------------------------------------------
# Codec


def test_a_page_round_trips_its_registers_exactly() -> None:
    states = [register("b", 7), register("a", 9, None), register("c", 3)]
    void = SignalsState.written(SITE, "d", 5, 4, None, None)
    payload = encode_page(SITE, 0, 10, [*states, void])
    assert payload == (
        b'\x02[10,3611959294,[["a",9,0,1,true,null,null,null,null],'
        b'["b",7,0,1,true,1000,null,null,null],["c",3,0,1,true,1000,null,null,null],'
        b'["d",5,1]]]'
    )
    page = decode(payload)
    assert page == SignalsPage(0, 10, (states[1], states[0], states[2], void))
    assert encode_page(SITE, 0, 10, []) == b"\x02[10,3611959294,[]]"
    assert decode(b"\x02[10,3611959294,[]]").states == ()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'\x02[10,3611959294,[["b",7,0],["a",9,0]]]', "sorted by name"),
        (b'\x02[10,3611959294,[["a",7,0],["a",9,0]]]', "sorted by name"),
        (b'\x02[10,3611959294,[["a",11,0]]]', "above the page"),
        (b'\x02[10,3611959294,[["a",9,10]]]', "at offset"),
        (b'\x02[10,3611959294,[["a",9,0,1]]]', "3 or 9 entries"),
        (b'\x02[10,3611959294,[["A",9,0]]]', "canonical form"),
        (b'\x02[10,3611959294,[["a",09,0]]]', "canonical form"),
        (b'\x02[10,3611959294,[["a", 9,0]]]', "canonical form"),
        (b'\x02[10,3611959294,[["a",9,0,1,true,1,2000000,3,4]]]', "kv"),
        (b'\x02[10,3611959294,[["a",9,0]]] ', "canonical form"),
        (b'\x02[11,3611959294,[["a",9,0]]]', "differs from the item version"),
        (b'\x01[10,3611959294,[["a",9,0]]]', "canonical form"),
        (b'\x02[10,3611959294,[["a-",9,0]]]', "entry name"),
        (b"\x02[10,3611959294,[[]]]", "canonical form"),
        (b'\x02{"rev":10}', "canonical form"),
    ],
)
def test_malformed_pages_are_refused_with_the_reason(payload: bytes, message: str) -> None:
    with pytest.raises(CrdtDecodeError, match=message):
        decode(payload)


def test_every_truncation_and_another_sites_tag_are_refused() -> None:
    payload = encode_page(SITE, 0, 10, [register("a", 9), register("b", 8)])
    for end in range(len(payload)):
        with pytest.raises(CrdtDecodeError):
            decode(payload[:end])
    with pytest.raises(CrdtForgedItemError):
        decode(payload, origin="site-b")


def test_the_writer_refuses_what_a_reader_would() -> None:
    with pytest.raises(CrdtValueError, match="twice"):
        encode_page(SITE, 0, 10, [register("a", 9), register("a", 8)])
    with pytest.raises(CrdtValueError, match="newer"):
        encode_page(SITE, 0, 10, [register("a", 11)])
    with pytest.raises(CrdtValueError, match="another site"):
        encode_page("site-b", 0, 10, [register("a", 9)])
    with pytest.raises(CrdtValueError, match="fit"):
        encode_page(SITE, 0, 10_000, [register(f"p{i:03d}", 9) for i in range(40)])


def test_page_keys_are_canonical_numbers() -> None:
    payload = encode_page(SITE, 0, 10, [register("a", 9)])
    for key in ("signals-page/01", "signals-page/-1", "signals-page/4096", "signals-page/x"):
        with pytest.raises(CrdtDecodeError, match="page number"):
            decode_item(SITE, "state", key, 10, payload)
        with pytest.raises(CrdtDecodeError, match="page number"):
            GridState("site-b").apply_item(SITE, "state", key, 10, payload, NOW)


def test_a_page_that_would_pass_the_site_limits_is_refused_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import grid.crdt.site_records

    monkeypatch.setattr(grid.crdt.site_records, "MAX_PROVIDERS_PER_SITE", 2)
    reader = GridState("site-b")
    payload = encode_page(SITE, 0, 10, [register("a", 9), register("b", 8), register("c", 7)])
    with pytest.raises(CrdtLimitError):
        reader.apply_item(SITE, "state", "signals-page/0", 10, payload, NOW)
    assert reader.snapshot(SITE).signals == {}


# ---------------------------------------------------------------------------------------
# The writer's invariant


def latest_pages(gossip: dict[str, Item]) -> GridState:
    """A reader that received only the latest version of each page (a late joiner's sync)."""
    reader = GridState("site-z")
    for item in gossip.values():
        reader.apply_item(SITE, item.lane, item.key, item.version, item.payload, NOW + 10_000)
    return reader


def publish(state: GridState, gossip: dict[str, Item], *, one_life: bool = True) -> list[Item]:
    """What the transport keeps of a site's pages: a version only above the one it holds.
    Within one life every page version is above the last; two lives may collide."""
    items = state.items_to_publish()
    for item in items:
        assert item_bytes(SITE, item.key, item.payload) <= MAX_ITEM_BYTES
        held = gossip.get(item.key)
        assert held is None or item.version > held.version or not one_life
        if item.key.startswith(PAGE_PREFIX) and (held is None or item.version > held.version):
            gossip[item.key] = item
    return items


operations = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "put", "remove", "publish", "prune"]),
        st.integers(0, 59),
        st.floats(0, 100),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(operations)
# A register that left its page for a new version and was pruned before landing in a page
# again: its old page must be written again without it.
@example(
    [("put", 0, 0.0), ("put", 1, 0.0), ("publish", 0, 0.0), ("remove", 1, 0.0)]
    + [("put", 0, 0.0)] * 5
    + [("prune", 0, 0.0)]
)
def test_the_latest_pages_hold_every_latest_register(ops: list[tuple[str, int, float]]) -> None:
    writer = GridState(SITE)
    gossip: dict[str, Item] = {}
    now = NOW
    for op, index, queue in ops:
        now += 1
        name = f"provider-{index:02d}{'x' * (index % 7) * 9}"
        if op == "put":
            metrics = ProviderMetrics.from_measurements(healthy=True, queue_depth=queue)
            writer.put_provider(sample_record(name=name, metrics=metrics), now)
        elif op == "remove":
            writer.remove_provider(name, now)
        elif op == "prune":
            writer.prune_tombstones(before=now - 5)
        else:
            publish(writer, gossip)
    publish(writer, gossip)
    assert latest_pages(gossip).snapshot(SITE).signals == writer.snapshot().signals
    # Pages stay few: a new one only once every page carries more than its share.
    carried = sum(len(item.payload) for item in gossip.values())
    assert len(gossip) <= carried / (CARRY_SHARE * room(SITE, len(gossip))) + 1


@settings(max_examples=100, deadline=None)
@given(operations, operations, st.floats(-3600, 3600), st.randoms(use_true_random=False))
def test_after_recovering_an_earlier_life_the_latest_pages_still_hold_everything(
    old_ops: list[tuple[str, int, float]],
    new_ops: list[tuple[str, int, float]],
    skew: float,
    rnd: object,
) -> None:
    gossip: dict[str, Item] = {}
    old = GridState(SITE)
    for step, (op, index, queue) in enumerate(old_ops):
        name = f"p{index}"
        if op == "remove":
            old.remove_provider(name, NOW + step)
        elif op != "prune":
            metrics = ProviderMetrics.from_measurements(healthy=True, queue_depth=queue)
            old.put_provider(sample_record(name=name, metrics=metrics), NOW + step)
    publish(old, gossip)
    # A new life, its clock off by `skew`: it writes, and the old life's pages come back to
    # it (in any order) while it goes on writing and publishing.
    new = GridState(SITE)
    base = NOW + len(old_ops) + skew
    returning = list(gossip.values())
    rnd.shuffle(returning)  # type: ignore[attr-defined]
    for step, (op, index, queue) in enumerate(new_ops):
        name = f"p{index}"
        if op == "remove":
            new.remove_provider(name, base + step)
        elif op == "publish":
            publish(new, gossip, one_life=False)
        elif op == "prune":
            if returning:
                item = returning.pop()
                new.apply_item(SITE, item.lane, item.key, item.version, item.payload, base)
        else:
            metrics = ProviderMetrics.from_measurements(healthy=True, queue_depth=queue)
            new.put_provider(sample_record(name=name, metrics=metrics), base + step)
    for item in returning:
        new.apply_item(SITE, item.lane, item.key, item.version, item.payload, base)
    publish(new, gossip, one_life=False)
    assert latest_pages(gossip).snapshot(SITE).signals == new.snapshot().signals


def test_a_pass_with_few_changes_resends_little_of_what_did_not_change() -> None:
    writer = GridState(SITE)
    for index in range(100):
        writer.put_provider(sample_record(name=f"provider-{index:03d}"), NOW)
    writer.items_to_publish()
    sizes = []
    for second in range(1, 400):
        for index in range((second * 4) % 100, (second * 4) % 100 + 4):
            metrics = ProviderMetrics.from_measurements(healthy=True, queue_depth=second % 50)
            record = sample_record(name=f"provider-{index:03d}", metrics=metrics)
            writer.put_provider(record, NOW + second)
        (page,) = writer.items_to_publish()
        sizes.append(len(page.payload))
    entry = len(b'["provider-000",1750000000000,0,1,true,1000,420000,700000,850250],')
    assert max(sizes[100:]) <= 30 + 4 * entry + CARRY_SHARE * room(SITE, 99)


def test_a_register_that_fits_no_page_is_refused() -> None:
    # At the page limit, with every page full, a new register has nowhere to go.
    import grid.crdt.pages

    writer = GridState(SITE)
    original = grid.crdt.pages.MAX_PAGES
    try:
        grid.crdt.pages.MAX_PAGES = 1
        for index in range(20):
            writer.put_provider(sample_record(name=f"provider-{index:03d}"), NOW)
        with pytest.raises(CrdtLimitError, match="no room"):
            writer.items_to_publish()
    finally:
        grid.crdt.pages.MAX_PAGES = original


def test_sample_record_names_fit() -> None:
    assert dataclasses.is_dataclass(sample_record())
