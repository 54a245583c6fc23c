"""The Python face of the SWIM node: configuration, errors, events (blocking and asyncio)."""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives import serialization

from grid.crdt.codec import MAX_ITEM_BYTES, item_bytes
from grid.errors import (
    BindError,
    BroadcastRefused,
    ConfigError,
    GridError,
    InvalidKeyError,
    NodeStateError,
    NodeStopped,
    PayloadTooLarge,
    SiteCredentialsError,
    SwimConfigError,
)
from grid.membership import (
    MAX_ITEM_LEN,
    ItemEvent,
    Member,
    MemberEvent,
    SwimConfig,
    SwimCredentials,
    SwimNode,
    parse_address,
)
from grid.trust import CertificateAuthority, IssuedCertificate
from support import swim
from support.swim import credentials, site_certificate

FAST = SwimConfig(probe_interval=0.2, suspicion_timeout=0.6, push_pull_interval=2.0)
KEY = bytes.fromhex("5a" * 32)


def node(site: str = "a", config: SwimConfig = FAST, generation: int | None = None) -> SwimNode:
    return SwimNode(
        "127.0.0.1:0",
        site,
        None,
        [KEY],
        config,
        credentials=credentials(site),
        generation=generation,
    )


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# --- configuration ------------------------------------------------------------------


def test_defaults_follow_the_spec() -> None:
    config = SwimConfig()
    assert (config.probe_interval, config.suspicion_timeout, config.gossip_nodes) == (5.0, 10.0, 3)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"probe_interval": "5s"}, "probe_interval must be a number of seconds"),
        ({"probe_interval": True}, "probe_interval must be a number of seconds"),
        ({"suspicion_timeout": 0}, "suspicion_timeout must be a positive"),
        ({"suspicion_timeout": float("nan")}, "suspicion_timeout must be a positive"),
        ({"gossip_nodes": 0}, "gossip_nodes must be an integer from 1 to 32"),
        ({"gossip_nodes": 33}, "gossip_nodes must be an integer from 1 to 32"),
        ({"gossip_nodes": 2.0}, "gossip_nodes must be an integer"),
        ({"probe_interval": 60.0}, "push_pull_interval must not be shorter"),
        ({"probe_interval": 0.005}, "at least 10ms"),
        ({"event_capacity": 0}, "event_capacity"),
    ],
)
def test_bad_settings_are_named(settings: dict[str, object], message: str) -> None:
    with pytest.raises(SwimConfigError, match=message):
        SwimConfig(**settings)  # type: ignore[arg-type]


def test_settings_from_the_network_model() -> None:
    from grid.models.network import SwimSettings

    swim = SwimSettings.model_validate(
        {"probeInterval": "1s", "suspicionTimeout": "3s", "gossipNodes": 32}
    )
    config = SwimConfig(
        probe_interval=swim.probe_interval.seconds,
        suspicion_timeout=swim.suspicion_timeout.seconds,
        gossip_nodes=swim.gossip_nodes,
    )
    assert (config.probe_interval, config.suspicion_timeout, config.gossip_nodes) == (1, 3, 32)
    with SwimNode("127.0.0.1:0", "a", None, [KEY], config, credentials=credentials("a")) as n:
        assert n.running


def test_detection_bound_formula() -> None:
    assert SwimConfig().detection_bound(32) == pytest.approx(2 * 31 * 5 + 10)
    assert FAST.detection_bound(5) == pytest.approx(8 * 0.2 + 0.6)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:7946", "127.0.0.1:7946"),
        ("[::1]:9", "[::1]:9"),
        ("localhost:80", "127.0.0.1:80"),
    ],
)
def test_addresses_are_parsed(text: str, expected: str) -> None:
    assert parse_address(text, "seed") == expected


@pytest.mark.parametrize(
    "bad", ["127.0.0.1", "127.0.0.1:0", "1.2.3.4:70000", "::1:80", "a b:1", ""]
)
def test_malformed_seeds_are_refused(bad: str) -> None:
    with node() as n, pytest.raises(SwimConfigError, match="seed"):
        n.join([bad])


def test_unresolvable_seed_is_refused() -> None:
    with pytest.raises(SwimConfigError, match="cannot resolve"):
        parse_address("no-such-host.invalid:7946", "seed")


def test_seeds_must_be_a_list() -> None:
    with node() as n, pytest.raises(SwimConfigError, match="sequence"):
        n.join("127.0.0.1:7946")


# --- construction errors ------------------------------------------------------------


@pytest.mark.parametrize("keys", [[b"short"], [KEY, b"x" * 33]])
def test_wrong_key_length_is_refused(keys: list[bytes]) -> None:
    with pytest.raises(InvalidKeyError, match="32 bytes"):
        SwimNode("127.0.0.1:0", "a", None, keys, credentials=credentials("a"))


@pytest.mark.parametrize("keys", [[], KEY])
def test_keys_must_be_a_non_empty_list(keys: object) -> None:
    with pytest.raises(SwimConfigError, match="non-empty sequence"):
        SwimNode("127.0.0.1:0", "a", None, keys, credentials=credentials("a"))


@pytest.mark.parametrize("site", ["", "x" * 64, "has space", "ünï"])
def test_bad_site_names_are_refused(site: str) -> None:
    with pytest.raises(SwimConfigError, match="site name"):
        SwimNode("127.0.0.1:0", site, None, [KEY], credentials=credentials("a"))


def test_an_address_in_use_cannot_be_bound() -> None:
    with node() as first, pytest.raises(BindError, match="cannot bind UDP"):
        SwimNode(first.bound_address, "b", None, [KEY], credentials=credentials("b"))


def test_a_foreign_address_cannot_be_bound() -> None:
    with pytest.raises(BindError, match=r"192\.0\.2\.1"):
        SwimNode("192.0.2.1:7946", "a", None, [KEY], credentials=credentials("a"))


def test_a_wildcard_bind_needs_an_advertise_address() -> None:
    with pytest.raises(SwimConfigError, match="advertise address"):
        SwimNode("0.0.0.0:0", "a", None, [KEY], credentials=credentials("a"))
    n = SwimNode("0.0.0.0:0", "a", "127.0.0.1:7999", [KEY], credentials=credentials("a"))
    assert n.address == "127.0.0.1:7999"
    assert n.bound_address.startswith("0.0.0.0:")
    n.close()


def test_errors_belong_to_the_grid_hierarchy() -> None:
    for cls in (SwimConfigError, BindError, InvalidKeyError):
        assert issubclass(cls, ConfigError)
    for cls in (BroadcastRefused, PayloadTooLarge, NodeStopped):
        assert issubclass(cls, GridError)


# --- lifecycle ----------------------------------------------------------------------


def test_lifecycle_errors() -> None:
    n = node()
    with pytest.raises(NodeStopped):
        n.publish("state", "k", 1, b"")  # not started yet
    n.start()
    with pytest.raises(NodeStateError, match="already started"):
        n.start()
    n.close()
    assert not n.running
    n.close()  # idempotent
    with pytest.raises(NodeStopped):
        n.join(["127.0.0.1:9"])
    with pytest.raises(NodeStopped):
        n.leave()
    with pytest.raises(NodeStopped):
        n.start()
    assert n.next_event(5) is None  # returns at once: nothing can come any more


def test_context_manager_starts_and_leaves() -> None:
    with node("seed") as seed:
        with node("visitor") as visitor:
            assert visitor.running
            visitor.join([seed.address])
            wait_for(lambda: [m.state for m in seed.members()] == ["alive"])
            address = visitor.address
        assert not visitor.running
        wait_for(lambda: [m.state for m in seed.members()] == ["left"])
        assert seed.members() == [Member("visitor", address, "left", visitor.generation)]


def test_publish_validates_before_sending() -> None:
    with node() as n:
        with pytest.raises(BroadcastRefused, match='unknown lane "weather"'):
            n.publish("weather", "k", 1, b"")
        with pytest.raises(PayloadTooLarge, match="split"):
            n.publish("state", "k", 1, bytes(MAX_ITEM_LEN))
        # The budget holds origin, lane, key, version, payload and the 64-byte signature.
        room = MAX_ITEM_LEN - (1 + len("a") + 1 + 1 + len("k") + 8 + 64)
        with pytest.raises(PayloadTooLarge, match=f"{MAX_ITEM_LEN + 1} encoded bytes"):
            n.publish("state", "k", 1, bytes(room + 1))
        assert n.publish("state", "k", 1, bytes(room))
        with pytest.raises(BroadcastRefused, match="key must be 1 to 128 bytes"):
            n.publish("state", "", 1, b"")
        with pytest.raises(BroadcastRefused, match="version"):
            n.publish("state", "k", -1, b"")
        with pytest.raises(BroadcastRefused, match="version"):
            n.publish("state", "k", 2**64, b"")
        assert n.publish("state", "k", 2**64 - 1, b"max")
        assert not n.publish("state", "k", 5, b"older")


# --- secrets ------------------------------------------------------------------------


def test_no_key_bytes_in_reprs_errors_or_stats() -> None:
    secret = bytes.fromhex("c0ffee" * 10 + "beef")
    n = SwimNode("127.0.0.1:0", "a", None, [secret], FAST, credentials=credentials("a"))
    texts = [repr(n), str(n.stats()), str(n.key_ids())]
    for bad in (secret[:31], b"\x00" * 32):
        try:
            n.use_key(bad)
        except InvalidKeyError as err:
            texts.append(str(err))
    try:
        n.remove_key(secret)
    except InvalidKeyError as err:
        texts.append(str(err))
    for text in texts:
        assert "c0ffee" not in text.lower()
        assert secret.hex() not in text
        assert repr(secret) not in text
    n.close()


# --- site credentials ---------------------------------------------------------------


@functools.cache
def other_ca() -> CertificateAuthority:
    return CertificateAuthority.generate("Not The Network CA", now=datetime.now(UTC))


def der_of(issued: IssuedCertificate) -> bytes:
    return issued.certificate.public_bytes(serialization.Encoding.DER)


def pkcs8(private_key_pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(private_key_pem, None)
    return key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def private_key_forms(private_key_pem: bytes) -> list[str]:
    """The ways a private key could show up in text: its PEM base64, the DER as raw
    characters, hex (both cases) and bytes repr, and the private scalar in hex."""
    body = "".join(
        line for line in private_key_pem.decode().splitlines() if not line.startswith("-----")
    )
    der = base64.b64decode(body)
    key = serialization.load_pem_private_key(private_key_pem, None)
    scalar = key.private_numbers().private_value.to_bytes(32, "big")  # type: ignore[union-attr]
    return [
        body,
        base64.b64encode(der).decode(),
        der.decode("latin-1"),
        der.hex(),
        der.hex().upper(),
        repr(der)[2:-1],
        scalar.hex(),
        scalar.hex().upper(),
        scalar.decode("latin-1"),
        base64.b64encode(scalar).decode(),
    ]


def assert_no_key_material(message: str, *private_key_pems: bytes) -> None:
    for pem in private_key_pems:
        for form in private_key_forms(pem):
            for start in range(len(form) - 7):
                window = form[start : start + 8]
                assert window not in message, f"key material {window!r} in {message!r}"


def refused(site: str, creds: SwimCredentials, match: str, *pems: bytes) -> None:
    with pytest.raises(SiteCredentialsError, match=match) as err:
        SwimNode("127.0.0.1:0", site, None, [KEY], FAST, credentials=creds)
    text = str(err.value)
    assert_no_key_material(text + repr(err.value), *pems)


def test_credentials_that_name_another_site_are_refused() -> None:
    refused(
        "site-a",
        credentials("site-b"),
        'does not name site "site-a"',
        site_certificate("site-b").private_key_pem(),
    )


def test_a_key_that_is_not_the_certificates_is_refused() -> None:
    mine, theirs = credentials("site-a"), credentials("site-b")
    mixed = SwimCredentials(
        certificate_chain=mine.certificate_chain,
        private_key=theirs.private_key,
        trust_anchors=mine.trust_anchors,
    )
    refused(
        "site-a",
        mixed,
        "does not belong to the site certificate",
        site_certificate("site-a").private_key_pem(),
        site_certificate("site-b").private_key_pem(),
    )


def test_a_certificate_from_an_untrusted_ca_is_refused() -> None:
    stranger = other_ca().issue("site-a", now=datetime.now(UTC))
    pem = stranger.private_key_pem()
    issued_elsewhere = SwimCredentials(
        certificate_chain=(der_of(stranger),),
        private_key=pkcs8(pem),
        trust_anchors=(der_of(swim.test_ca()),),
    )
    refused("site-a", issued_elsewhere, "does not chain to the network CA", pem)
    # And the network's own certificate under another network's CA.
    ours = credentials("site-a")
    foreign_anchor = SwimCredentials(
        certificate_chain=ours.certificate_chain,
        private_key=ours.private_key,
        trust_anchors=(der_of(other_ca()),),
    )
    refused(
        "site-a",
        foreign_anchor,
        "does not chain to the network CA",
        site_certificate("site-a").private_key_pem(),
    )


def test_a_certificate_that_does_not_match_the_pin_is_refused() -> None:
    pinned = credentials("site-a", pins={"site-a": [site_certificate("site-b").fingerprint]})
    refused(
        "site-a",
        pinned,
        "does not match the site's pinned fingerprint",
        site_certificate("site-a").private_key_pem(),
    )
    # The right pin is accepted.
    good = credentials("site-a", pins={"site-a": [site_certificate("site-a").fingerprint]})
    SwimNode("127.0.0.1:0", "site-a", None, [KEY], FAST, credentials=good).close()


# --- events -------------------------------------------------------------------------


def test_next_event_releases_the_gil() -> None:
    with node() as n:
        ticks = 0
        stop = threading.Event()

        def spin() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                time.sleep(0.001)

        spinner = threading.Thread(target=spin)
        spinner.start()
        start = time.monotonic()
        assert n.next_event(0.3) is None
        waited = time.monotonic() - start
        stop.set()
        spinner.join()
        assert 0.25 <= waited < 2
        assert ticks > 50, "another Python thread ran while next_event waited"


def test_blocking_events_in_order() -> None:
    with node("a") as a, node("b") as b:
        b.join([a.address])
        up = b.next_event(5)
        assert up == MemberEvent("member_up", "a", a.address, a.generation)
        assert a.next_event(5) == MemberEvent("member_up", "b", b.address, b.generation)
        assert a.publish("metadata", "region", 3, b"eu-west")
        item = b.next_event(5)
        assert item == ItemEvent("a", "metadata", "region", 3, b"eu-west")
        assert "eu-west" not in repr(item), "payloads stay out of reprs"


async def test_async_events_until_the_node_stops() -> None:
    a, b = node("a"), node("b")
    a.start()
    b.start()
    try:
        b.join([a.address])

        async def publish_later() -> None:
            await asyncio.sleep(0.1)
            a.publish("state", "provider/x", 1, b"hello")

        task = asyncio.create_task(publish_later())
        seen: list[object] = []
        async for event in b.events():
            seen.append(event)
            if isinstance(event, ItemEvent):
                b.close()  # the iterator ends once the node stopped and was drained
        await task
        assert seen[0] == MemberEvent("member_up", "a", a.address, a.generation)
        assert seen[-1] == ItemEvent("a", "state", "provider/x", 1, b"hello")
    finally:
        a.close()
        b.close()


async def test_async_iterators_do_not_block_the_loop() -> None:
    with node("a") as a, node("b") as b:
        beats = 0

        async def heartbeat() -> None:
            nonlocal beats
            while True:
                beats += 1
                await asyncio.sleep(0.01)

        beat = asyncio.create_task(heartbeat())
        b.join([a.address])
        first = await asyncio.wait_for(anext(aiter(a.events())), timeout=5)
        await asyncio.sleep(0.2)
        beat.cancel()
        assert first == MemberEvent("member_up", "b", b.address, b.generation)
        assert beats > 10


def test_a_slow_reader_loses_membership_events_but_never_an_item() -> None:
    small = SwimConfig(
        probe_interval=0.2, suspicion_timeout=0.6, push_pull_interval=2, event_capacity=1
    )
    with node("a", small) as a, node("b") as b, node("c") as c:
        # Nobody reads a's events: b's arrival fills the one place, c's is dropped.
        b.join([a.address])
        c.join([a.address])
        wait_for(lambda: len(a.members()) == 2)
        wait_for(lambda: a.stats()["events_dropped"] >= 1)

        def delivered(count: int) -> Callable[[], bool]:
            return lambda: a.stats()["items_delivered"] == count

        # Items are never dropped; versions that wait are replaced by newer ones. Each
        # newer version is published once a holds the one before: published faster, b
        # would only ever send the newest.
        for key in ("k1", "k2", "k3"):
            b.publish("state", key, 1, b"first")
        wait_for(delivered(3))
        for version in range(2, 6):
            b.publish("state", "k2", version, f"v{version}".encode())
            wait_for(delivered(2 + version))
        assert a.stats()["items_coalesced"] == 4
        events = list(iter(lambda: a.next_event(0), None))
        members = [e for e in events if isinstance(e, MemberEvent)]
        items = [(e.key, e.version, e.payload) for e in events if isinstance(e, ItemEvent)]
        assert [e.kind for e in members] == ["member_up"]
        # One event per key, holding its latest version (the three keys may arrive in any
        # order: they go out together).
        assert sorted(items) == [("k1", 1, b"first"), ("k2", 5, b"v5"), ("k3", 1, b"first")]


def test_stats_name_every_drop_reason_and_foca_error_kind() -> None:
    with node() as n:
        stats = n.stats()
    frame_drops = ("too_short", "too_long", "bad_magic", "unknown_version", "auth_failed")
    message_drops = (
        "malformed",
        "bad_identity",
        "misdirected",
        "stale",
        "replayed",
        "unknown_sender",
        "bad_signature",
        "untrusted_certificate",
        "superseded",
    )
    for reason in frame_drops + message_drops:
        assert stats[f"dropped_{reason}"] == 0
    assert stats["dropped"] == 0
    for kind in ("decode", "not_connected", "incomplete_probe_cycle", "data_too_big"):
        assert f"foca_error_{kind}" in stats
    for gauge in (
        "members",
        "broadcast_backlog",
        "syncs_done",
        "private_key_drops",
        "events_dropped",
        "hellos_sent",
        "hellos_received",
        "name_conflicts",
        "members_unverified",
        "items_bad_signature",
        "items_unverified_origin",
        "packets_in",
        "packets_out",
        "bytes_in",
        "bytes_out",
    ):
        assert gauge in stats


def test_a_stray_datagram_does_not_disturb_a_lonely_node() -> None:
    with node() as n:
        host, port = n.address.rsplit(":", 1)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"hello", (host, int(port)))
        wait_for(lambda: n.stats()["dropped_too_short"] == 1)
        assert n.running and n.members() == []


def test_generation_is_given_or_from_the_clock() -> None:
    before = int(time.time() * 1000)
    with node() as n:
        assert before <= n.generation <= int(time.time() * 1000)
    with node(generation=42) as n:
        assert n.generation == 42
        assert n.local() == Member("a", n.address, "alive", 42)


def test_random_keys_work() -> None:
    with SwimNode(
        "127.0.0.1:0", "a", None, [os.urandom(32)], FAST, credentials=credentials("a")
    ) as n:
        assert len(n.key_ids()) == 1


def test_the_largest_item_the_state_counts_as_fitting_is_one_the_node_publishes() -> None:
    # grid.crdt sizes items (and fills signals pages) by item_bytes: it must count exactly
    # what the transport counts, signature included.
    with SwimNode("127.0.0.1:0", "site-a", None, [KEY], credentials=credentials("site-a")) as n:
        key = "signals-page/0"
        payload = b"x" * (MAX_ITEM_BYTES - item_bytes("site-a", key, b""))
        assert item_bytes("site-a", key, payload) == MAX_ITEM_BYTES
        assert n.publish("state", key, 1, payload)
        with pytest.raises(PayloadTooLarge):
            n.publish("state", key, 2, payload + b"x")
