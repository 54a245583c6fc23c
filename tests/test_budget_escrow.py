"""The escrow algebra (grid.crdt.escrow): records, their items, the book's allowances and
the owner's checked writes; and a property test: whatever sites grant, give away, ask and
merge, in any schedule of partitions and restarts, what every holder granted never sums
past the cap, and replicas that received the same records agree."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.crdt.escrow import (
    MAX_PARTNERS,
    EscrowBook,
    EscrowRecord,
    check_holder,
    decode_escrow,
    encode_escrow,
)
from grid.crdt.state import GridState
from grid.errors import CrdtDecodeError, CrdtForgedItemError, CrdtLimitError, CrdtValueError

TENANT, WINDOW = "acme", "w3600-1782907200"


def record(**changes: object) -> EscrowRecord:
    fields: dict[str, object] = {
        "tenant": TENANT,
        "window": WINDOW,
        "epoch": 7,
        "share": 500,
        "of": 2,
        "granted": 120,
        "sent": {"site-b#9": 30},
        "asks": {"site-c#3": 40},
        "rate": 60,
        "revision": 11,
        **changes,
    }
    return EscrowRecord(**fields)  # type: ignore[arg-type]


# -- items ---------------------------------------------------------------------------------


def test_a_record_travels_in_one_item_and_comes_back_equal() -> None:
    item = encode_escrow("site-a", record())
    assert item.key.startswith("escrow/") and item.key.endswith("/7")
    assert decode_escrow("site-a", item.key, item.version, item.payload) == record()


def test_an_item_naming_another_site_is_refused_as_forged() -> None:
    item = encode_escrow("site-a", record())
    with pytest.raises(CrdtForgedItemError):
        decode_escrow("site-b", item.key, item.version, item.payload)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda b: b.update(granted=-1), "granted"),
        (lambda b: b.update(sent={"site-a#2": 5}), "own site"),
        (lambda b: b.update(sent={"nobody": 5}), "site#epoch"),
        (lambda b: b.update(asks={f"site-{i}#1": 1 for i in range(MAX_PARTNERS + 1)}), "more than"),
        (lambda b: b.update(extra=1), "unknown fields"),
        (lambda b: b.update(rev=12), "rev"),
    ],
)
def test_a_malformed_item_is_refused(change: object, problem: str) -> None:
    item = encode_escrow("site-a", record())
    body = json.loads(item.payload[1:])
    change(body)  # type: ignore[operator]
    payload = b"\x01" + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(CrdtDecodeError, match=problem):
        decode_escrow("site-a", item.key, item.version, payload)


def test_a_payload_not_in_canonical_form_is_refused() -> None:
    item = encode_escrow("site-a", record())
    with pytest.raises(CrdtDecodeError, match="canonical"):
        decode_escrow("site-a", item.key, item.version, item.payload.replace(b",", b", ", 1))


def test_holder_ids_are_checked() -> None:
    assert check_holder("site-a#12") == "site-a#12"
    for bad in ("site-a", "site-a#", "site-a#012", "#5", "site a#5", 5):
        with pytest.raises(CrdtValueError):
            check_holder(bad)


# -- the book ------------------------------------------------------------------------------


def test_allowance_is_share_plus_received_less_sent() -> None:
    book = EscrowBook()
    book.merge("site-a", record(epoch=1, share=600, granted=100, sent={"site-b#2": 50}, asks={}))
    book.merge("site-b", record(epoch=2, share=400, granted=0, sent={}, asks={"site-a#1": 50}))
    assert book.allowance(TENANT, WINDOW, "site-a#1") == 550
    assert book.available(TENANT, WINDOW, "site-a#1") == 450
    assert book.allowance(TENANT, WINDOW, "site-b#2") == 450
    assert book.granted_by_site(TENANT, WINDOW, "site-a") == 100


def test_merge_keeps_every_counters_maximum_in_any_order() -> None:
    older = record(granted=100, sent={"site-b#9": 30}, revision=10)
    newer = record(granted=90, sent={"site-b#9": 20, "site-c#1": 5}, revision=12)
    merged = older.merge(newer)
    assert merged == newer.merge(older) == merged.merge(older)
    assert (merged.granted, dict(merged.sent), merged.revision) == (
        100,
        {"site-b#9": 30, "site-c#1": 5},
        12,
    )


def test_the_owner_cannot_grant_or_give_more_than_it_sees() -> None:
    book = EscrowBook()
    claimed = book.write("site-a", TENANT, WINDOW, 1, claim=(100, 2), grant=60, revision=1)
    book.merge("site-a", claimed)
    with pytest.raises(CrdtValueError, match="may grant or give away 40"):
        book.write("site-a", TENANT, WINDOW, 1, grant=30, send={"site-b#2": 11}, revision=2)
    with pytest.raises(CrdtValueError, match="once"):
        book.write("site-a", TENANT, WINDOW, 1, claim=(100, 2), revision=2)
    with pytest.raises(CrdtValueError, match="own site"):
        book.write("site-a", TENANT, WINDOW, 1, send={"site-a#5": 1}, revision=2)
    # What it was sent is its own to grant once it has heard of it.
    book.merge("site-b", record(epoch=2, share=0, granted=0, sent={"site-a#1": 25}, asks={}))
    more = book.write("site-a", TENANT, WINDOW, 1, grant=65, revision=3)
    assert more.granted == 125


def test_a_state_publishes_its_holders_writes_and_merges_its_peers() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    a.take_escrow_epoch(1000.0)
    b_holder = f"site-b#{b.take_escrow_epoch(1000.0)}"
    a.write_escrow(TENANT, WINDOW, 1001.0, claim=(500, 2), grant=100)
    a.write_escrow(TENANT, WINDOW, 1002.0, send={b_holder: 150})
    items = a.items_to_publish()
    assert [i.key.split("/")[0] for i in items] == ["escrow"]  # one item per holder, latest
    for item in items:
        assert b.apply_item("site-a", item.lane, item.key, item.version, item.payload, 1003.0)
    assert b.escrow.allowance(TENANT, WINDOW, b_holder) == 150
    assert not b.apply_item("site-a", items[0].lane, items[0].key, items[0].version,
                            items[0].payload, 1004.0)  # fmt: skip


# -- the property --------------------------------------------------------------------------

SITES = ("site-a", "site-b", "site-c", "site-d")


@dataclass
class Replica:
    """One life of one site: its own book (what it has heard) and its holder's epoch."""

    site: str
    epoch: int
    book: EscrowBook = field(default_factory=EscrowBook)

    @property
    def holder(self) -> str:
        return f"{self.site}#{self.epoch}"


operation = st.one_of(
    st.tuples(st.just("grant"), st.integers(0, 3), st.integers(0, 1000)),
    st.tuples(st.just("send"), st.integers(0, 3), st.integers(0, 3), st.integers(0, 400)),
    st.tuples(st.just("ask"), st.integers(0, 3), st.integers(0, 3), st.integers(1, 400)),
    st.tuples(st.just("deliver"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("partition"), st.frozensets(st.integers(0, 3))),
    st.tuples(st.just("restart"), st.integers(0, 3)),
)


@settings(max_examples=300, deadline=None)
@given(
    cap=st.integers(0, 2000),
    sites=st.integers(2, 4),
    schedule=st.lists(operation, max_size=80),
)
def test_what_holders_grant_never_sums_past_the_cap(
    cap: int, sites: int, schedule: list[tuple[object, ...]]
) -> None:
    names = SITES[:sites]
    shares = {name: cap // sites + (1 if i < cap % sites else 0) for i, name in enumerate(names)}
    revision = iter(range(1, 10**6))
    lives = [Replica(name, 1) for name in names]
    truth: dict[str, EscrowRecord] = {}
    """Every holder's own latest record, across lives: what it really granted and sent."""
    for life in lives:
        record_ = life.book.write(
            life.site, TENANT, WINDOW, 1, claim=(shares[life.site], sites), revision=next(revision)
        )
        life.book.merge(life.site, record_)
        truth[life.holder] = record_
    cut: frozenset[int] = frozenset()

    def write(life: Replica, **changes: object) -> None:
        try:
            new = life.book.write(
                life.site, TENANT, WINDOW, life.epoch, revision=next(revision), **changes
            )  # type: ignore[arg-type]
        except CrdtValueError:
            return
        life.book.merge(life.site, new)
        truth[life.holder] = new

    for step in schedule:
        kind = step[0]
        if kind == "grant":
            life = lives[int(step[1]) % sites]  # type: ignore[call-overload]
            write(life, grant=step[2])
        elif kind in ("send", "ask"):
            life = lives[int(step[1]) % sites]  # type: ignore[call-overload]
            peer = lives[int(step[2]) % sites]  # type: ignore[call-overload]
            if peer.site != life.site:
                write(life, **{kind: {peer.holder: step[3]}})
        elif kind == "deliver":
            # Everything one replica holds reaches another, unless a partition cuts them.
            source = lives[int(step[1]) % sites]  # type: ignore[call-overload]
            target = lives[int(step[2]) % sites]  # type: ignore[call-overload]
            if (int(step[1]) % sites in cut) == (int(step[2]) % sites in cut):
                for holder, held in source.book.holders(TENANT, WINDOW).items():
                    target.book.merge(holder.rpartition("#")[0], held)
        elif kind == "partition":
            cut = step[1]  # type: ignore[assignment]
        else:
            # A new life of the site: an empty book, a new holder that claims nothing (the
            # window started before it began); the earlier life's allowance is stranded.
            index = int(step[1]) % sites  # type: ignore[call-overload]
            old = lives[index]
            lives[index] = Replica(old.site, old.epoch + 1)
        granted = sum(r.granted for r in truth.values())
        assert granted <= cap, (granted, cap)
        for holder, own in truth.items():
            # The lemma the sum rests on: no holder grants or gives away more than its
            # share and what was truly sent to it.
            sent_to = sum(r.sent.get(holder, 0) for r in truth.values())
            assert own.granted + own.sent_total <= own.share + sent_to
        for life in lives:
            # No replica ever sees a holder with more allowance than it truly has.
            true_received = sum(r.sent.get(life.holder, 0) for r in truth.values())
            assert life.book.received(TENANT, WINDOW, life.holder) <= true_received

    # Once every record reaches every replica, they all agree, and the holders' allowances
    # (stranded ones included) make up the cap exactly.
    final = EscrowBook()
    for holder, held in truth.items():
        final.merge(holder.rpartition("#")[0], held)
    for life in lives:
        for holder, held in truth.items():
            life.book.merge(holder.rpartition("#")[0], held)
        assert dict(life.book.holders(TENANT, WINDOW)) == dict(final.holders(TENANT, WINDOW))
    holders = set(truth) | {target for held in truth.values() for target in held.sent}
    assert sum(final.allowance(TENANT, WINDOW, h) for h in holders) == cap


def test_a_record_too_large_for_one_item_is_refused_and_changes_nothing() -> None:
    site = "s" * 63
    state = GridState(site)
    state.take_escrow_epoch(1000.0)
    tenant = "t" * 253
    state.write_escrow(tenant, WINDOW, 1001.0, claim=(10**6, 2))
    partners = [f"{chr(97 + n)}{'y' * 62}#{2**53 - 1 - n}" for n in range(MAX_PARTNERS)]
    for partner in partners[:3]:
        state.write_escrow(tenant, WINDOW, 1002.0, ask={partner: 2**40})
    state.items_to_publish()
    with pytest.raises(CrdtLimitError, match="1024-byte limit"):
        state.write_escrow(tenant, WINDOW, 1003.0, ask={p: 2**40 for p in partners[3:]})
    held = state.escrow.record(tenant, WINDOW, f"{site}#{state.escrow_epoch}")
    assert held is not None and len(held.asks) == 3
    assert state.items_to_publish() == []
