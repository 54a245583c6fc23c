"""GridState: a site's own records and its merged view of its peers, exchanged as items.

The convergence test runs 2-5 sites over a simulated gossip that reorders, duplicates,
loses (and later resends) items and partitions the sites, then checks that every site holds
byte-identical state for every origin.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import random
from dataclasses import dataclass, field
from typing import cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

import grid.crdt.budget
import grid.crdt.site_records
import grid.crdt.state
from grid.crdt import (
    MAX_ITEM_BYTES,
    GatewayRecord,
    GridState,
    Item,
    ModelEntry,
    ProviderMetrics,
    SiteMetadata,
)
from grid.crdt.codec import item_bytes
from grid.crdt.snapshot import CERT_CHUNK_CHARS
from grid.errors import CrdtDecodeError, CrdtForgedItemError, CrdtLimitError, CrdtValueError
from support.pages import paged
from test_crdt_records import NOW, gateways, provider_records, sample_record, site_metadata


def deliver(receiver: GridState, origin: str, item: Item, now: float = NOW + 1) -> bool:
    return receiver.apply_item(origin, item.lane, item.key, item.version, item.payload, now)


def deliver_all(receiver: GridState, origin: GridState, now: float = NOW + 1) -> None:
    for item in origin.all_items():
        deliver(receiver, origin.site, item, now)


# ---------------------------------------------------------------------------------------
# Publishing and reading


def test_a_provider_travels_as_catalogue_and_signals_and_reads_back_whole() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    assert a.put_provider(sample_record(), NOW)
    assert not a.put_provider(sample_record(), NOW + 1)  # nothing changed: nothing to send
    catalogue, signals = a.items_to_publish()
    assert (catalogue.lane, catalogue.key) == ("state", "provider/llama")
    assert (signals.lane, signals.key) == ("state", "signals-page/0")
    # One write, one revision: the register in the page has the catalogue's version.
    assert paged([signals], "site-a")["llama"].version == catalogue.version < signals.version
    assert len(signals.payload) <= 128 < len(catalogue.payload)
    assert a.items_to_publish() == []
    assert deliver(b, "site-a", catalogue, now=NOW + 2)
    assert b.providers() == ()  # half a provider is not a provider
    assert deliver(b, "site-a", signals, now=NOW + 3)
    assert not deliver(b, "site-a", signals, now=NOW + 4)  # a duplicate changes nothing
    (entry,) = b.providers()
    assert entry.site == "site-a" and entry.record == sample_record()
    assert entry.updated_at == NOW and entry.received_at == NOW + 3
    assert b.last_received_at("site-a") == NOW + 4
    assert [e.site for e in a.providers()] == ["site-a"]  # a site sees its own providers too


def test_a_load_change_sends_only_the_signals_item() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    a.put_provider(sample_record(), NOW)
    catalogue, first = a.items_to_publish()
    busy = ProviderMetrics.from_measurements(healthy=True, queue_depth=40, p99_latency_ms=3000)
    a.put_provider(sample_record(metrics=busy), NOW + 5)
    (second,) = a.items_to_publish()
    assert second.key == first.key and second.version > first.version
    a.put_provider(sample_record(metrics=busy, phase="Degraded"), NOW + 6)
    (third,) = a.items_to_publish()
    assert third.key == first.key
    # Out of order: the newer arrives first, the older ones are then ignored.
    deliver(b, "site-a", catalogue)
    assert deliver(b, "site-a", third)
    assert not deliver(b, "site-a", second)
    assert not deliver(b, "site-a", first)
    entry = b.provider("site-a", "llama")
    assert entry is not None and entry.record.metrics == busy and entry.updated_at == NOW + 6
    assert entry.record.phase == "Degraded"
    # A catalogue change goes out alone, and readers keep the signals they hold.
    a.put_provider(sample_record(metrics=busy, phase="Degraded", tools=("calculator",)), NOW + 7)
    (changed,) = a.items_to_publish()
    assert changed.key == catalogue.key and changed.version > third.version
    deliver(b, "site-a", changed)
    entry = b.provider("site-a", "llama")
    assert entry is not None and entry.record.tools == ("calculator",)
    assert entry.record.metrics == busy and entry.updated_at == NOW + 7


def test_removal_publishes_a_tombstone_and_void_signals_that_beat_older_versions() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    a.put_provider(sample_record(), NOW)
    added, signals = a.items_to_publish()
    assert a.remove_provider("llama", NOW + 1)
    assert not a.remove_provider("llama", NOW + 2)
    tombstone, void = a.items_to_publish()
    assert (tombstone.key, void.key) == (added.key, signals.key)
    assert len(tombstone.payload) < len(added.payload)
    assert len(void.payload) < len(signals.payload)
    deliver(b, "site-a", tombstone)
    deliver(b, "site-a", void)
    assert not deliver(b, "site-a", added)
    assert not deliver(b, "site-a", signals)
    assert b.providers() == () and b.provider("site-a", "llama") is None
    assert a.own_provider_names() == () and a.providers() == ()
    a.put_provider(sample_record(), NOW + 3)  # and it can come back
    deliver_all(b, a)
    assert [e.record.name for e in b.providers()] == ["llama"]


ORDERS = {
    # Each names the order in which a reader receives a provider's items; what it must see.
    "signals before catalogue": (["signals", "catalogue"], True),
    "catalogue before signals": (["catalogue", "signals"], True),
    "signals after tombstone": (["tombstone", "signals"], False),
    "catalogue after tombstone": (["tombstone", "catalogue", "signals"], False),
    "signals alone": (["signals"], False),
    "void before catalogue": (["void", "catalogue"], False),
    "tombstone, void, then old items": (["tombstone", "void", "catalogue", "signals"], False),
    "re-added after removal": (["tombstone", "void", "again", "again signals"], True),
    "re-added, old signals late": (["again", "void", "signals", "again signals"], True),
    "re-added before its signals": (["catalogue", "void", "again"], False),
}


@pytest.mark.parametrize("order", ORDERS, ids=str)
def test_a_removed_providers_signals_never_bring_it_back(order: str) -> None:
    a = GridState("site-a")
    a.put_provider(sample_record(), NOW)
    items = dict(zip(["catalogue", "signals"], a.items_to_publish(), strict=True))
    a.remove_provider("llama", NOW + 1)
    items.update(zip(["tombstone", "void"], a.items_to_publish(), strict=True))
    a.put_provider(sample_record(phase="Degraded"), NOW + 2)
    items.update(zip(["again", "again signals"], a.items_to_publish(), strict=True))
    sequence, visible = ORDERS[order]
    b = GridState("site-b")
    for name in sequence:
        deliver(b, "site-a", items[name])
    entry = b.provider("site-a", "llama")
    assert (entry is not None) is visible
    assert [e.record.name for e in b.providers()] == (["llama"] if visible else [])
    if entry is not None and "again" in sequence:
        assert entry.record.phase == "Degraded"
    # Whatever arrived first, the same items make the same state.
    reversed_order = GridState("site-c")
    for name in reversed(sequence):
        deliver(reversed_order, "site-a", items[name])
    assert reversed_order.snapshot("site-a") == b.snapshot("site-a")


def test_tombstones_can_be_pruned_once_old() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    a.put_provider(sample_record(), NOW)
    a.put_provider(sample_record(name="other"), NOW)
    a.remove_provider("llama", NOW + 10)
    deliver_all(b, a)
    assert b.prune_tombstones(before=NOW + 10) == 0
    assert b.prune_tombstones(before=NOW + 11) == 1
    assert a.prune_tombstones(before=NOW + 11) == 1
    assert [item.key for item in a.all_items()] == ["provider/other", "signals-page/0"]
    assert list(paged(a.all_items(), "site-a")) == ["other"]  # the page was written again
    assert "llama" not in b.snapshot("site-a").providers
    assert "llama" not in b.snapshot("site-a").signals
    # Signals held without any catalogue (the catalogue never arrived) go once old too.
    c = GridState("site-c")
    for item in a.all_items():
        if item.key.startswith("signals-page/"):
            deliver(c, "site-a", item)
    assert c.prune_tombstones(before=NOW) == 0
    assert c.prune_tombstones(before=NOW + 1) == 1
    assert c.snapshot("site-a").signals == {}


def test_a_later_life_of_a_site_supersedes_the_sets_of_an_earlier_one() -> None:
    # A site restarted without its state declares its provider afresh. Its revisions are
    # above the old life's, so its causal context covers the old adds: what it no longer
    # declares is gone, whichever order readers see the two lives in.
    old, new = GridState("site-a"), GridState("site-a")
    old.put_provider(sample_record(tools=("search",)), NOW)
    new.put_provider(sample_record(tools=("calculator",)), NOW + 60)
    readers = GridState("site-b"), GridState("site-c")
    deliver_all(readers[0], old)
    deliver_all(readers[0], new)
    deliver_all(readers[1], new)
    deliver_all(readers[1], old)
    for reader in readers:
        entry = reader.provider("site-a", "llama")
        assert entry is not None and entry.record.tools == ("calculator",)
    assert readers[0].snapshot("site-a") == readers[1].snapshot("site-a") == new.snapshot()


def test_site_records_and_forgetting_a_site() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    a.set_gateway(GatewayRecord("gw.site-a.example:443", "mtls"), NOW)
    assert not a.set_gateway(GatewayRecord("gw.site-a.example:443", "mtls"), NOW)
    a.set_metadata(SiteMetadata(region="eu-west", labels={"tier": "gold"}, grid_id="g1"), NOW)
    a.put_provider(sample_record(), NOW)
    a.add_spend("acme", "2025-06", 500, NOW)
    deliver_all(b, a)
    assert b.sites() == ("site-a", "site-b")
    gateway = b.gateway("site-a")
    assert gateway is not None and gateway.address == "gw.site-a.example:443"
    metadata = b.metadata("site-a")
    assert metadata is not None and metadata.labels == {"tier": "gold"}
    held = {(item.lane, item.key) for item in a.all_items()}
    forgotten = b.forget_site("site-a")
    # Every item the records came from, so the transport forgets them too; no budget slot.
    assert set(forgotten) == {key for key in held if not key[1].startswith("budget/")}
    assert ("gateway", "gateway") in forgotten and ("metadata", "metadata") in forgotten
    assert not b.forget_site("site-a")
    assert b.sites() == ("site-b",) and b.providers() == () and b.gateway("site-a") is None
    assert b.budget_spend("acme", "2025-06") == 500  # counted spend is not forgotten
    with pytest.raises(CrdtValueError):
        b.forget_site("site-b")


# ---------------------------------------------------------------------------------------
# Refusals change nothing


def test_a_site_cannot_forge_another_sites_record() -> None:
    a, b, c = GridState("site-a"), GridState("site-b"), GridState("site-c")
    a.put_provider(sample_record(), NOW)
    before = c.snapshot("site-a")
    for item in a.items_to_publish():
        with pytest.raises(CrdtForgedItemError):
            deliver(c, "site-b", item)
    assert c.sites() == ("site-c",) and c.snapshot("site-a") == before
    # A site's spend item only ever fills that site's own slot.
    b.add_spend("acme", "w1", 10, NOW)
    (spend,) = b.items_to_publish()
    forged_key = Item(spend.lane, spend.key, spend.version, spend.payload)
    with pytest.raises(CrdtForgedItemError):
        deliver(c, "site-a", forged_key)
    assert c.budget_spend("acme", "w1") == 0


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x01", b"\x01{}", b"\x01null", b"\x01" + b"[" * 600 + b"]" * 400, b"\x00" * 2000],
)
def test_garbage_is_refused_and_changes_nothing(payload: bytes) -> None:
    b = GridState("site-b")
    before = b.snapshot("site-a")
    keys = [("state", "provider/x"), ("state", "signals/x"), ("state", "budget/t/w/1")]
    for lane, key in [*keys, ("gateway", "gateway")]:
        with pytest.raises(CrdtDecodeError):
            b.apply_item("site-a", lane, key, 1, payload, NOW)
    assert b.sites() == ("site-b",) and b.snapshot("site-a") == before


def test_limits_refuse_clearly_and_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grid.crdt.site_records, "MAX_PROVIDERS_PER_SITE", 2)
    monkeypatch.setattr(grid.crdt.state, "MAX_SITES", 2)
    monkeypatch.setattr(grid.crdt.budget, "MAX_COUNTERS", 1)
    a = GridState("site-a")
    a.put_provider(sample_record(name="p1"), NOW)
    a.put_provider(sample_record(name="p2"), NOW)
    with pytest.raises(CrdtLimitError, match="2 provider records"):
        a.put_provider(sample_record(name="p3"), NOW)
    b = GridState("site-b")
    deliver_all(b, a)
    c = GridState("site-c")
    c.put_provider(sample_record(name="p1"), NOW)
    with pytest.raises(CrdtLimitError, match="2 sites"):
        deliver_all(b, c)
    assert b.sites() == ("site-a", "site-b")
    a.add_spend("acme", "w1", 1, NOW)
    with pytest.raises(CrdtLimitError, match="budget counters"):
        a.add_spend("globex", "w1", 1, NOW)
    assert a.budget_spend("globex", "w1") == 0
    a.forget_budget_window("w1")
    a.add_spend("globex", "w1", 1, NOW)


def test_writer_inputs_are_checked() -> None:
    a = GridState("site-a")
    with pytest.raises(CrdtValueError):
        a.put_provider({"name": "x"}, NOW)  # type: ignore[arg-type]
    with pytest.raises(CrdtValueError):
        a.put_provider(sample_record(), float("nan"))
    with pytest.raises(CrdtValueError):
        a.add_spend("acme", "w1", -5, NOW)
    with pytest.raises(CrdtValueError):
        a.add_spend("acme corp", "w1", 5, NOW)
    with pytest.raises(CrdtValueError):
        GridState("site a")
    assert a.all_items() == []


# ---------------------------------------------------------------------------------------
# Restarts: versions keep rising and spend is not lost


class Gossip:
    """What the transport keeps: the latest version of each (origin, lane, key)."""

    def __init__(self) -> None:
        self.latest: dict[tuple[str, str, str], Item] = {}

    def publish(self, state: GridState) -> list[Item]:
        items = state.items_to_publish()
        for item in items:
            key = (state.site, item.lane, item.key)
            held = self.latest.get(key)
            if held is None or item.version > held.version:
                self.latest[key] = item
        return items

    def sync(self, receiver: GridState, now: float = NOW + 100) -> None:
        for (origin, _, _), item in sorted(self.latest.items()):
            deliver(receiver, origin, item, now)


def test_a_restarted_site_supersedes_its_old_items_and_keeps_its_spend() -> None:
    gossip = Gossip()
    a, b = GridState("site-a"), GridState("site-b")
    a.put_provider(sample_record(), NOW)
    a.add_spend("acme", "2025-06", 700, NOW)
    old = {item.key: item.version for item in gossip.publish(a)}
    gossip.sync(b)

    restarted = GridState("site-a")  # lost its state; the wall clock moved on
    restarted.put_provider(sample_record(phase="Degraded"), NOW + 60)
    assert restarted.add_spend("acme", "2025-06", 300, NOW + 60) == 300
    for item in gossip.publish(restarted):
        if item.key in old:
            assert item.version > old[item.key]
    gossip.sync(b)
    late = GridState("site-c")
    gossip.sync(late)
    for reader in (b, late):
        assert reader.budget_spend("acme", "2025-06") == 1000
        entry = reader.provider("site-a", "llama")
        assert entry is not None and entry.record.phase == "Degraded"
    gossip.sync(restarted)  # its own old items come back: the old spend is counted again
    assert restarted.budget_spend("acme", "2025-06") == 1000


def _latest(gossip: Gossip, key: str = "provider/llama") -> tuple[int, bytes]:
    item = gossip.latest[("site-a", "state", key)]
    return item.version, item.payload


def test_a_site_whose_clock_went_back_continues_above_its_recovered_items() -> None:
    gossip = Gossip()
    a = GridState("site-a")
    a.put_provider(sample_record(), NOW)
    a.put_provider(sample_record(name="retired"), NOW)
    a.set_gateway(GatewayRecord("gw.example:443", "mtls"), NOW)
    gossip.publish(a)

    restarted = GridState("site-a")
    gossip.sync(restarted, now=NOW - 3600)  # recovery first, with a clock an hour behind
    assert restarted.own_provider_names() == ("llama", "retired")
    assert restarted.items_to_publish() == []  # recovered items are already in the gossip
    restarted.put_provider(sample_record(phase="Degraded"), NOW - 3600)
    restarted.remove_provider("retired", NOW - 3600)
    for item in gossip.publish(restarted):
        assert item.version > a.snapshot().providers["llama"].version
    reader = GridState("site-b")
    gossip.sync(reader)
    assert [(e.record.name, e.record.phase) for e in reader.providers()] == [("llama", "Degraded")]


def test_an_unrecovered_write_below_old_versions_is_repaired_on_recovery() -> None:
    gossip = Gossip()
    a = GridState("site-a")
    a.put_provider(sample_record(tools=("search",)), NOW)
    gossip.publish(a)
    old_version = a.snapshot().providers["llama"].version
    restarted = GridState("site-a")
    restarted.put_provider(sample_record(tools=("calculator",), phase="Degraded"), NOW - 3600)
    stale = restarted.items_to_publish()
    assert len(stale) == 2 and all(item.version < old_version for item in stale)
    # Recovery merges the old life's items, which are later than the stale writes and so
    # replace them: those items are already in the gossip, nothing needs sending.
    for key in ("provider/llama", "signals-page/0"):
        assert restarted.apply_item("site-a", "state", key, *_latest(gossip, key), NOW)
    assert restarted.items_to_publish() == []
    entry = restarted.provider("site-a", "llama")
    assert entry is not None and entry.record == sample_record(tools=("search",))
    # Re-declaring the provider (what the site's reconcile loop does) then wins everywhere.
    restarted.put_provider(sample_record(tools=("calculator",), phase="Degraded"), NOW - 3599)
    assert len(gossip.publish(restarted)) == 2
    reader = GridState("site-b")
    gossip.sync(reader)
    entry = reader.provider("site-a", "llama")
    assert entry is not None and entry.record.tools == ("calculator",)
    assert entry.record.phase == "Degraded"


def test_a_recovery_that_mixes_two_lives_is_republished_above_both() -> None:
    gossip = Gossip()
    a = GridState("site-a")
    a.put_provider(sample_record(), NOW)
    busy = ProviderMetrics.from_measurements(healthy=True, queue_depth=30)
    # The old life's last write: new tools and new load.
    a.put_provider(sample_record(metrics=busy, tools=("calculator",)), NOW + 100)
    gossip.publish(a)
    restarted = GridState("site-a")  # its clock is behind the old life's last write
    moved = dataclasses.replace(sample_record().spec, endpoint="https://llama-2.svc/v1")
    idle = ProviderMetrics.from_measurements(healthy=True, queue_depth=0)
    restarted.put_provider(sample_record(spec=moved, metrics=idle), NOW + 50)
    restarted.items_to_publish()
    # The catalogue merges to the newer spec of this life and the newer tools of the old
    # one: a state neither life published, so it goes out under a version above both. The
    # signals register takes the old life's later write whole: that item stays current.
    for key in ("provider/llama", "signals-page/0"):
        assert restarted.apply_item("site-a", "state", key, *_latest(gossip, key), NOW + 51)
    (mixed,) = restarted.items_to_publish()
    assert mixed.key == "provider/llama"
    assert mixed.version > gossip.latest[("site-a", "state", "provider/llama")].version
    entry = restarted.provider("site-a", "llama")
    assert entry is not None
    assert (entry.record.spec, entry.record.tools, entry.record.metrics) == (
        moved,
        ("calculator",),
        busy,
    )
    reader = GridState("site-b")
    gossip.sync(reader)
    deliver(reader, "site-a", mixed)
    assert reader.snapshot("site-a") == restarted.snapshot()


# ---------------------------------------------------------------------------------------
# Budgets


def test_budget_status_reports_a_lower_bound_under_partition() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    a.add_spend("acme", "2025-06", 6_000_000, NOW)
    b.add_spend("acme", "2025-06", 3_000_000, NOW)
    status = a.budget_status("acme", "2025-06", cap=8_000_000)
    assert (status.spend, status.cap, status.ratio, status.exceeded) == (
        6_000_000,
        8_000_000,
        0.75,
        False,
    )
    deliver_all(a, b)
    deliver_all(a, b)  # duplicates do not double count
    status = a.budget_status("acme", "2025-06", cap=8_000_000)
    assert status.spend == 9_000_000 and status.exceeded and status.ratio == 1.125
    with pytest.raises(CrdtValueError):
        a.budget_status("acme", "2025-06", cap=0)


def test_spend_items_stay_small_and_ended_windows_are_forgotten() -> None:
    a = GridState("site-a")
    assert a.add_spend("acme", "2025-05", 10, NOW) == 10
    assert a.add_spend("acme", "2025-06", 10, NOW) == 10
    assert a.add_spend("acme", "2025-06", 0, NOW) == 10
    items = a.items_to_publish()
    assert len(items) == 2 and all(len(item.payload) < 100 for item in items)
    assert a.forget_budget_window("2025-05") == 1
    assert a.budget_spend("acme", "2025-05") == 0
    (kept,) = a.all_items()
    assert json.loads(kept.payload[1:])["window"] == "2025-06"
    # Long tenant names still make short keys: the key names them by a digest.
    tenant = "tenant:" + "x" * 246
    a.add_spend(tenant, "2025-06", 5, NOW)
    (item,) = a.items_to_publish()
    assert len(item.key) < 64
    b = GridState("site-b")
    deliver(b, "site-a", item)
    assert b.budget_spend(tenant, "2025-06") == 5


def test_a_spend_item_whose_key_does_not_name_its_tenant_is_refused() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    a.add_spend("acme", "w1", 10, NOW)
    a.add_spend("globex", "w1", 10, NOW)
    acme, globex = sorted(a.items_to_publish(), key=lambda i: json.loads(i.payload[1:])["tenant"])
    with pytest.raises(CrdtDecodeError, match="tenant and window"):
        b.apply_item("site-a", "state", globex.key, acme.version, acme.payload, NOW)
    assert b.budget_spend("acme", "w1") == 0


# ---------------------------------------------------------------------------------------
# Certificates


def _self_signed(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, name: str) -> str:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    start = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture(scope="module")
def rsa_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return _self_signed(key, "site-a.grid.example")


@pytest.fixture(scope="module")
def ec_pem() -> str:
    return _self_signed(ec.generate_private_key(ec.SECP256R1()), "site-a.grid.example")


def test_a_certificate_larger_than_an_item_travels_in_chunks(rsa_pem: str, ec_pem: str) -> None:
    chain = rsa_pem + ec_pem
    a, b = GridState("site-a"), GridState("site-b")
    assert a.set_cert(chain, NOW)
    assert not a.set_cert(chain, NOW + 1)
    items = a.items_to_publish()
    assert len(items) == -(-len(chain) // CERT_CHUNK_CHARS) >= 3
    assert all(len(item.payload) <= MAX_ITEM_BYTES for item in items)
    for item in reversed(items[1:]):
        deliver(b, "site-a", item)
        assert b.cert_pem("site-a") is None  # incomplete
    deliver(b, "site-a", items[0])
    assert b.cert_pem("site-a") == chain == a.cert_pem("site-a")

    # Rotation to a shorter certificate: stale chunks are voided, and readers keep the
    # previous certificate until every chunk of the new one has arrived.
    assert a.set_cert(ec_pem, NOW + 10)
    rotated = a.items_to_publish()
    assert len(rotated) == len(items)
    for item in rotated[1:]:
        deliver(b, "site-a", item)
    assert b.cert_pem("site-a") == chain
    deliver(b, "site-a", rotated[0])
    assert b.cert_pem("site-a") == ec_pem
    assert b.snapshot("site-a").items() == a.snapshot().items()


def test_certificate_chunks_fit_an_item_even_for_the_longest_site_name(rsa_pem: str) -> None:
    site = "s" * 63
    a = GridState(site)
    pem = rsa_pem * (16 * 1024 // len(rsa_pem))  # a chain as long as the cap allows
    assert 16 * 1024 - len(rsa_pem) < len(pem) <= 16 * 1024
    a.set_cert(pem, NOW)
    items = a.items_to_publish()
    assert all(item_bytes(site, i.key, i.payload) <= MAX_ITEM_BYTES for i in items)
    b = GridState("site-b")
    for item in items:
        deliver(b, site, item)
    assert b.cert_pem(site) == pem
    with pytest.raises(CrdtValueError, match="at most 16384"):
        a.set_cert(pem + rsa_pem, NOW)


def test_private_keys_never_travel(ec_pem: str) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    body = key_pem.splitlines()[1]
    a = GridState("site-a")
    for pem in (key_pem, ec_pem + key_pem, ec_pem.replace("CERTIFICATE", "EC PRIVATE KEY")):
        with pytest.raises(CrdtValueError, match="private key") as caught:
            a.set_cert(pem, NOW)
        assert body not in str(caught.value)
    assert a.all_items() == []

    # A chunk carrying a marker is refused on receipt.
    a.set_cert(ec_pem, NOW)
    (item,) = a.items_to_publish()
    doc = json.loads(item.payload[1:])
    doc["pem"] = doc["pem"].replace("CERTIFICATE", "PRIVATE KEY", 1)
    bad = b"\x01" + json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    b = GridState("site-b")
    with pytest.raises(CrdtDecodeError, match="private key"):
        b.apply_item("site-a", "cert", "cert/0", item.version, bad, NOW)


def test_a_private_key_marker_split_across_chunks_is_refused_on_assembly() -> None:
    # Craft the chunks of a malicious peer by hand: "PRIVATE" ends chunk 0, " KEY" starts
    # chunk 1, so each chunk alone looks harmless.
    import hashlib

    head = "-----BEGIN CERTIFICATE-----\n"
    first = head + "A" * (CERT_CHUNK_CHARS - len(head) - len("PRIVATE")) + "PRIVATE"
    second = " KEY\n-----END CERTIFICATE-----\n"
    digest = hashlib.sha256((first + second).encode()).hexdigest()
    b = GridState("site-b")
    for index, text in enumerate((first, second)):
        body = {"count": 2, "pem": text, "rev": 5, "sha256": digest, "site": "site-m"}
        payload = b"\x01" + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        if index == 0:
            assert b.apply_item("site-m", "cert", "cert/0", 5, payload, NOW)
        else:
            with pytest.raises(CrdtDecodeError, match="private key"):
                b.apply_item("site-m", "cert", "cert/1", 5, payload, NOW)
    assert b.cert_pem("site-m") is None
    assert list(b.snapshot("site-m").cert_chunks) == [0]


# ---------------------------------------------------------------------------------------
# Strong eventual consistency under a hostile gossip


def _fake_cert(size: int) -> str:
    body = "".join(random.Random(size).choice("ABCDEFGHIJKLMNOP+/") for _ in range(size))
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN CERTIFICATE-----\n{lines}\n-----END CERTIFICATE-----\n"


@dataclass
class Network:
    sites: dict[str, GridState]
    sent: list[tuple[str, Item]] = field(default_factory=list)
    lost: list[tuple[str, str, Item]] = field(default_factory=list)
    spend: dict[str, int] = field(default_factory=dict)
    partition: frozenset[str] | None = None

    def reachable(self, origin: str, receiver: str) -> bool:
        return self.partition is None or (origin in self.partition) == (receiver in self.partition)


site_ops = st.one_of(
    st.tuples(st.just("put"), provider_records(st.sampled_from(["p1", "p2", "p3"]))),
    st.tuples(st.just("remove"), st.sampled_from(["p1", "p2", "p3"])),
    st.tuples(st.just("gateway"), gateways),
    st.tuples(st.just("metadata"), site_metadata),
    st.tuples(st.just("cert"), st.integers(100, 3000)),
    st.tuples(
        st.just("spend"), st.tuples(st.sampled_from(["acme", "globex"]), st.integers(0, 10**6))
    ),
)
network_ops = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 4), site_ops),
    st.tuples(st.just("publish"), st.integers(0, 4), st.none()),
    st.tuples(st.just("deliver"), st.integers(0, 4), st.integers(0, 10**6)),
    st.tuples(st.just("partition"), st.integers(0, 4), st.integers(1, 30)),
    st.tuples(st.just("heal"), st.integers(0, 4), st.none()),
)


def _write(state: GridState, op: tuple[str, object], now: float, net: Network) -> None:
    kind, arg = op
    if kind == "put":
        state.put_provider(arg, now)  # type: ignore[arg-type]
    elif kind == "remove":
        state.remove_provider(arg, now)  # type: ignore[arg-type]
    elif kind == "gateway":
        state.set_gateway(arg, now)  # type: ignore[arg-type]
    elif kind == "metadata":
        state.set_metadata(arg, now)  # type: ignore[arg-type]
    elif kind == "cert":
        state.set_cert(_fake_cert(arg), now)  # type: ignore[arg-type]
    else:
        tenant, amount = cast(tuple[str, int], arg)
        state.add_spend(tenant, "w1", amount, now)
        net.spend[tenant] = net.spend.get(tenant, 0) + amount


def _deliver(net: Network, receiver: str, origin: str, item: Item, now: float) -> None:
    state = net.sites[receiver]
    changed = state.apply_item(origin, item.lane, item.key, item.version, item.payload, now)
    if origin == receiver:
        assert not changed  # a live site already holds everything it published


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.lists(network_ops, max_size=50), st.randoms(use_true_random=False))
def test_every_site_converges_to_identical_state(
    site_count: int, ops: list[tuple[str, int, object]], rnd: random.Random
) -> None:
    names = [f"site-{i}" for i in range(site_count)]
    net = Network({name: GridState(name) for name in names})
    now = NOW
    for kind, who, arg in ops:
        now += 0.25
        name = names[who % site_count]
        if kind == "write":
            _write(net.sites[name], arg, now, net)  # type: ignore[arg-type]
        elif kind == "publish":
            net.sent.extend((name, item) for item in net.sites[name].items_to_publish())
        elif kind == "deliver" and net.sent:
            # Any item ever sent, old or new, possibly again: reordering and duplication.
            origin, item = net.sent[arg % len(net.sent)]  # type: ignore[operator]
            if net.reachable(origin, name):
                _deliver(net, name, origin, item, now)
            else:
                net.lost.append((name, origin, item))
        elif kind == "partition":
            net.partition = frozenset(n for i, n in enumerate(names) if arg >> i & 1)  # type: ignore[operator]
        elif kind == "heal":
            net.partition = None
        for state in net.sites.values():
            for tenant, issued in net.spend.items():
                assert state.budget_spend(tenant, "w1") <= issued  # a lower bound, always

    # Heal, resend what was lost, and let every site announce everything once more, in a
    # random order per receiver.
    net.partition = None
    for name in names:
        net.sent.extend((name, item) for item in net.sites[name].items_to_publish())
    for receiver in names:
        backlog = [(o, i) for r, o, i in net.lost if r == receiver] + list(net.sent)
        rnd.shuffle(backlog)
        for origin, item in backlog:
            _deliver(net, receiver, origin, item, now)

    for origin in names:
        reference = net.sites[origin].snapshot()
        reference_items = reference.items()
        for receiver in names:
            held = net.sites[receiver].snapshot(origin)
            assert held == reference
            assert held.items() == reference_items  # byte-identical
            assert net.sites[receiver].cert_pem(origin) == net.sites[origin].cert_pem(origin)
    views = [net.sites[name].providers() for name in names]
    assert all(view == views[0] or _same_records(view, views[0]) for view in views)
    for state in net.sites.values():
        for tenant, issued in net.spend.items():
            assert state.budget_spend(tenant, "w1") == issued


def _same_records(left: tuple[object, ...], right: tuple[object, ...]) -> bool:
    # received_at is each site's own clock; everything else must agree.
    strip = [
        [dataclasses.replace(entry, received_at=0.0) for entry in view]  # type: ignore[type-var]
        for view in (left, right)
    ]
    return strip[0] == strip[1]


def test_changes_name_the_providers_changed_since_a_stamp_and_stay_bounded() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    assert b.provider_changes("site-a", None) is None
    for name in ("llama", "qwen"):
        a.put_provider(sample_record(name), NOW)
    deliver_all(b, a)
    first = b.providers_stamp("site-a")
    assert b.provider_changes("site-a", first) == []
    a.put_provider(
        sample_record(
            "llama", metrics=ProviderMetrics.from_measurements(healthy=True, queue_depth=30)
        ),
        NOW + 1,
    )
    deliver_all(b, a)
    assert b.provider_changes("site-a", first) == ["llama"]
    b.forget_site("site-a")
    deliver_all(b, a)
    # Records built again: a stamp of their earlier life says nothing.
    assert b.provider_changes("site-a", first) is None
    # Providers that come and go (each pruned tombstone a name gone for good) do not pile
    # up: past the bound, readers of older stamps read the site whole once.
    stamp = b.providers_stamp("site-a")
    for serial in range(300):
        name = f"short-lived-{serial}"
        a.put_provider(sample_record(name), NOW + 2)
        a.remove_provider(name, NOW + 2)
        deliver_all(b, a)
        a.prune_tombstones(NOW + 3)
        b.prune_tombstones(NOW + 3)
    assert b.provider_changes("site-a", stamp) is None
    assert b.provider_changes("site-a", b.providers_stamp("site-a")) == []
    assert {e.record.name for e in b.providers("site-a")} == {"llama", "qwen"}


def test_model_entries_keep_their_capabilities_and_context_windows() -> None:
    a, b = GridState("site-a"), GridState("site-b")
    models = (ModelEntry("gpt-4o", ("chat", "vision"), 128_000), ModelEntry("o1"))
    a.put_provider(sample_record(models=models), NOW)
    deliver_all(b, a)
    entry = b.provider("site-a", "llama")
    assert entry is not None and entry.record.models == (models[0], models[1])
    a.put_provider(sample_record(models=(ModelEntry("gpt-4o", ("chat",), 128_000),)), NOW + 1)
    deliver_all(b, a)
    entry = b.provider("site-a", "llama")
    assert entry is not None and entry.record.models == (ModelEntry("gpt-4o", ("chat",), 128_000),)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_a_sites_stamp_moves_whenever_its_providers_read_differently(seed: int) -> None:
    """What readers cache a peer's providers by (the engine's candidates): a stamp that
    stayed the same must mean the same providers."""
    rng = random.Random(seed)
    a, b = GridState("site-a"), GridState("site-b")
    sent: list[Item] = []
    held = (b.providers_stamp("site-a"), b.providers("site-a"))
    clock = NOW
    for _ in range(40):
        clock += 1
        action = rng.choice(("put", "put", "remove", "deliver", "deliver", "deliver", "forget"))
        name = rng.choice(("llama", "qwen", "mistral"))
        if action == "put":
            load = ProviderMetrics.from_measurements(healthy=True, queue_depth=rng.randint(0, 50))
            a.put_provider(sample_record(name, metrics=load), clock)
            sent += a.items_to_publish()
        elif action == "remove":
            a.remove_provider(name, clock)
            sent += a.items_to_publish()
        elif action == "deliver" and sent:
            deliver(b, "site-a", sent.pop(rng.randrange(len(sent))), now=clock)
        elif action == "forget":
            b.forget_site("site-a")
        now_held = (b.providers_stamp("site-a"), b.providers("site-a"))
        if now_held[1] != held[1]:
            assert now_held[0] != held[0]
        # A reader that read the providers at the last stamp and reads again only those
        # named as changed since holds what reading them all would give.
        changed = b.provider_changes("site-a", held[0])
        if changed is None:
            mirror = {entry.record.name: entry for entry in now_held[1]}
        else:
            mirror = {entry.record.name: entry for entry in held[1]}
            for name in changed:
                entry = b.provider("site-a", name)
                if entry is None:
                    mirror.pop(name, None)
                else:
                    mirror[name] = entry
        assert tuple(mirror[name] for name in sorted(mirror)) == now_held[1]
        held = now_held
        assert b.provider_names() == {entry.record.name for entry in b.providers()}
