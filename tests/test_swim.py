"""SWIM over real UDP on 127.0.0.1: membership, failure detection, keys, lanes and fuzzing.

Every node here is a real ``grid._native`` node thread with its own socket; the crashed node
is a separate process killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import pytest

from grid import _native
from grid.errors import PrivateKeyMaterial
from grid.membership import Event, ItemEvent, MemberEvent, SwimConfig, SwimNode
from support import swim
from support.attacker import Mallory, wait_until
from support.swim import credentials, site_certificate
from support.wire import encode_item

FAST = SwimConfig(probe_interval=0.3, suspicion_timeout=1.0, push_pull_interval=3.0)


def wait_for(what: str, predicate: Callable[[], bool], timeout: float) -> float:
    """Polls until ``predicate`` holds; returns the seconds it took."""
    return wait_until(predicate, timeout, what)


def state_of(viewer: SwimNode, address: str) -> tuple[str, int] | None:
    for member in viewer.members():
        if member.address == address:
            return member.state, member.generation
    return None


def drain(node: SwimNode, into: list[Event]) -> list[Event]:
    while (event := node.next_event(0)) is not None:
        into.append(event)
    return into


def sees_all_alive(nodes: list[SwimNode], extra: Sequence[str] = ()) -> bool:
    addresses = [n.address for n in nodes] + list(extra)
    for viewer in nodes:
        seen = {m.address: m.state for m in viewer.members()}
        if any(seen.get(a) != "alive" for a in addresses if a != viewer.address):
            return False
    return True


@contextmanager
def cluster(
    size: int, key: bytes, config: SwimConfig = FAST, prefix: str = "site"
) -> Iterator[list[SwimNode]]:
    nodes = [
        SwimNode(
            "127.0.0.1:0",
            f"{prefix}-{i}",
            None,
            [key],
            config,
            credentials=credentials(f"{prefix}-{i}"),
        )
        for i in range(size)
    ]
    try:
        for node in nodes:
            node.start()
        for node in nodes[1:]:
            node.join([nodes[0].address])
        yield nodes
    finally:
        for node in nodes:
            node.close()


PEER = """
import json, sys, time
from grid.membership import SwimConfig, SwimNode
from grid.runtime.credentials import swim_credentials
secrets = json.loads(sys.stdin.readline())
key = bytes.fromhex(secrets["key"])
credentials = swim_credentials(secrets["certificate"], secrets["private_key"], secrets["ca"])
bind, seed, probe, suspicion, push_pull = sys.argv[1:6]
config = SwimConfig(float(probe), float(suspicion), push_pull_interval=float(push_pull))
node = SwimNode(bind, "victim", None, [key], config, credentials=credentials)
node.start()
node.join([seed])
print(node.address, node.generation, flush=True)
time.sleep(600)
"""


class Peer:
    """A node in its own process, so it can really be killed."""

    def __init__(self, bind: str, seed: str, key: bytes, config: SwimConfig = FAST) -> None:
        args = [config.probe_interval, config.suspicion_timeout, config.push_pull_interval]
        self.process = subprocess.Popen(
            [sys.executable, "-c", PEER, bind, seed, *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdin and self.process.stdout
        issued = site_certificate("victim")
        secrets = {
            "key": key.hex(),
            "certificate": issued.certificate_pem,
            "private_key": issued.private_key_pem().decode(),
            "ca": swim.test_ca().certificate_pem,
        }
        self.process.stdin.write(json.dumps(secrets) + "\n")
        self.process.stdin.flush()
        address, generation = self.process.stdout.readline().split()
        self.address, self.generation = address, int(generation)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def test_five_nodes_form_one_cluster_from_a_single_seed() -> None:
    with cluster(5, os.urandom(32)) as nodes:
        took = wait_for("all see all", lambda: sees_all_alive(nodes), timeout=10)
        # The seed's sync answer teaches each joiner the whole cluster at once.
        assert took < 5 * FAST.probe_interval, took
        for node in nodes:
            ups = [e for e in drain(node, []) if isinstance(e, MemberEvent)]
            assert {e.address for e in ups if e.kind == "member_up"} == {
                n.address for n in nodes if n is not node
            }
            stats = node.stats()
            assert stats["dropped"] == 0
            assert stats["foca_error_not_connected"] == 0
            assert stats["foca_error_incomplete_probe_cycle"] == 0
        assert sum(n.stats()["syncs_done"] for n in nodes) >= 4


def test_killed_node_is_declared_down_everywhere_within_the_bound_and_rejoins() -> None:
    key = os.urandom(32)
    with cluster(4, key) as nodes:
        victim = Peer("127.0.0.1:0", nodes[0].address, key)
        try:
            wait_for("5 alive", lambda: sees_all_alive(nodes, [victim.address]), timeout=10)
            bound = FAST.detection_bound(5)
            victim.kill()
            took = wait_for(
                "victim down everywhere",
                lambda: all(
                    state_of(n, victim.address) == ("down", victim.generation) for n in nodes
                ),
                timeout=bound + 5,
            )
            # The bound is the protocol's worst case; a loaded two-core machine adds
            # scheduling delay on top of it (threads woken late), hence the allowance.
            allowance = 2 * FAST.probe_interval
            assert took <= bound + allowance, f"declared down in {took:.2f}s, bound {bound:.2f}s"
            print(f"crash detected everywhere after {took:.2f}s (bound {bound:.2f}s)")
            for node in nodes:
                events = drain(node, [])
                assert any(
                    isinstance(e, MemberEvent)
                    and e.kind == "member_down"
                    and e.address == victim.address
                    for e in events
                ), events

            # Restarted on the same address: alive again with a higher generation.
            old = victim.generation
            victim = Peer(victim.address, nodes[0].address, key)
            assert victim.generation > old
            wait_for(
                "restarted victim alive everywhere",
                lambda: all(
                    state_of(n, victim.address) == ("alive", victim.generation) for n in nodes
                ),
                timeout=10,
            )
            for node in nodes:
                renamed = [
                    e
                    for e in drain(node, [])
                    if isinstance(e, MemberEvent) and e.kind == "member_renamed"
                ]
                assert renamed, "the new life replaced the old one"
                assert (renamed[0].previous_generation, renamed[0].generation) == (
                    old,
                    victim.generation,
                )
        finally:
            victim.kill()


def test_leaving_node_is_seen_as_left_not_failed() -> None:
    with cluster(5, os.urandom(32)) as nodes:
        wait_for("all see all", lambda: sees_all_alive(nodes), timeout=10)
        leaver, stay = nodes[4], nodes[:4]
        address = leaver.address
        leaver.leave()
        assert not leaver.running
        wait_for(
            "left everywhere",
            lambda: all(state_of(n, address) == ("left", leaver.generation) for n in stay),
            timeout=2,
        )
        # Still "left" once a failure would have been declared.
        time.sleep(FAST.suspicion_timeout + 2 * FAST.probe_interval)
        for node in stay:
            assert state_of(node, address) == ("left", leaver.generation)
            about = [
                e.kind
                for e in drain(node, [])
                if isinstance(e, MemberEvent) and e.address == address
            ]
            assert about == ["member_up", "member_left"], about
            assert node.stats()["leave_notices"] == 1
        assert sees_all_alive(stay)


def test_node_with_the_wrong_key_never_joins() -> None:
    with cluster(3, os.urandom(32)) as nodes:
        wait_for("all see all", lambda: sees_all_alive(nodes), timeout=10)
        intruder = SwimNode(
            "127.0.0.1:0",
            "intruder",
            None,
            [os.urandom(32)],
            FAST,
            credentials=credentials("intruder"),
        )
        intruder.start()
        try:
            intruder.join([nodes[0].address])
            # Long enough for the join to be retried and for periodic gossip to run.
            time.sleep(6 * FAST.probe_interval)
            assert intruder.members() == []
            assert drain(intruder, []) == []
            for node in nodes:
                assert state_of(node, intruder.address) is None
            seed = nodes[0].stats()
            assert seed["dropped_auth_failed"] >= 2  # the announce and its retry
            assert seed["dropped_auth_failed"] == seed["dropped"]
            assert sees_all_alive(nodes)
        finally:
            intruder.close()


def sessions_settled(nodes: list[SwimNode]) -> Callable[[], bool]:
    """A condition: every node holds a session with every other, and no node has started a
    handshake for three probe intervals (each sends under a session it may use)."""
    last: list[int] = []
    since = time.monotonic()

    def settled() -> bool:
        nonlocal last, since
        started = [n.stats()["handshakes_started"] for n in nodes]
        if started != last:
            last, since = started, time.monotonic()
        held = all(n.stats()["sessions"] >= len(nodes) - 1 for n in nodes)
        return held and time.monotonic() - since >= 3 * FAST.probe_interval

    return settled


def test_key_rotation_across_three_nodes_drops_no_valid_frame() -> None:
    old, new = os.urandom(32), os.urandom(32)
    with cluster(3, old) as nodes:
        wait_for("all see all", lambda: sees_all_alive(nodes), timeout=10)
        # Session keys sit inside the frames: a rotation of the frame key leaves them be.
        wait_for("sessions settled", sessions_settled(nodes), timeout=10)
        before = [n.stats()["packets_in"] for n in nodes]
        sessions_before = [n.stats() for n in nodes]
        version = 0

        def traffic() -> None:
            # Broadcasts in flight while keys change, on top of probes and gossip.
            nonlocal version
            version += 1
            nodes[version % 3].publish("state", "load", version, b"%d" % version)
            time.sleep(FAST.probe_interval)

        for node in nodes:
            node.install_key(new)
            traffic()
        for node in nodes:
            node.use_key(new)
            traffic()
        traffic()  # frames sealed with the old key are delivered before it goes
        for node in nodes:
            node.remove_key(old)
            traffic()
        traffic()

        new_id = _native.Keyring(new).key_ids()
        for node, packets, earlier in zip(nodes, before, sessions_before, strict=True):
            stats = node.stats()
            assert stats["packets_in"] > packets + 10, "traffic flowed during the rotation"
            assert stats["dropped"] == 0, stats
            assert node.key_ids() == new_id
            grew = stats["session_messages_accepted"] - earlier["session_messages_accepted"]
            assert grew > 10, "messages came under sessions throughout"
            assert stats["handshakes_started"] == earlier["handshakes_started"]
        assert sees_all_alive(nodes)
        # A node still on the old key is now an outsider.
        with cluster(1, old, prefix="stale") as (stale,):
            stale.join([nodes[0].address])
            time.sleep(4 * FAST.probe_interval)
            assert stale.members() == []
            assert nodes[0].stats()["dropped_auth_failed"] > 0


def items(events: list[Event]) -> list[ItemEvent]:
    return [e for e in events if isinstance(e, ItemEvent)]


def test_a_gateway_flood_does_not_delay_a_state_item() -> None:
    with cluster(4, os.urandom(32)) as nodes:
        wait_for("all see all", lambda: sees_all_alive(nodes), timeout=10)
        origin, receivers = nodes[0], nodes[1:]
        # 2,000 updates of 600 bytes over 10 keys: without supersession this backlog alone
        # would fill ~2,000 packets ahead of the state item.
        for version in range(1, 2001):
            origin.publish("gateway", f"gw-{version % 10}", version, bytes(600))
        assert origin.publish("state", "provider/a", 1, b"urgent")
        seen: dict[str, list[Event]] = {n.address: [] for n in receivers}

        def state_everywhere() -> bool:
            return all(
                any(e.lane == "state" for e in items(drain(n, seen[n.address]))) for n in receivers
            )

        took = wait_for("state item everywhere", state_everywhere, timeout=5)
        assert took < 2 * FAST.probe_interval, f"state item took {took:.2f}s"
        # Only the latest versions wait, and the node hands foca at most 16 at a time.
        stats = origin.stats()
        assert stats["relay_queue"] <= 11
        assert stats["broadcast_backlog"] - stats["relay_queue"] <= 16

        # Newer versions supersede: each receiver ends on the latest version of every key,
        # and never sees a version older than one it already had.
        def latest_everywhere() -> bool:
            return all(
                {e.key for e in items(drain(n, seen[n.address])) if e.version > 1990}
                >= {f"gw-{k}" for k in range(10)}
                for n in receivers
            )

        wait_for("latest gateway versions", latest_everywhere, timeout=5)
        for node in receivers:
            by_key: dict[str, list[int]] = {}
            for event in items(seen[node.address]):
                if event.lane == "gateway":
                    by_key.setdefault(event.key, []).append(event.version)
            for versions in by_key.values():
                assert versions == sorted(set(versions)), "out of order or duplicated"
            assert sum(map(len, by_key.values())) < 2000, "superseded versions were skipped"


def test_private_key_payloads_are_refused_and_never_delivered() -> None:
    key = os.urandom(32)
    with cluster(3, key) as nodes:
        wait_for("all see all", lambda: sees_all_alive(nodes), timeout=10)
        with pytest.raises(PrivateKeyMaterial, match="PRIVATE KEY"):
            nodes[0].publish("cert", "tls", 1, b"-----BEGIN PRIVATE KEY-----\nMIIE...")
        assert nodes[0].publish("cert", "tls", 1, b"-----BEGIN CERTIFICATE-----\nMIIB...")

        # A peer with a valid certificate that skips the check, on both paths an item can
        # take: piggybacked on a foca message, and inside a push/pull sync chunk. Its items
        # are properly signed: only the payload check stands in the way.
        target = nodes[1]
        rogue = Mallory(key, "rogue")
        try:
            rogue.introduce([target])
            wait_for(
                "rogue introduced",
                lambda: any(m.site == "rogue" for m in target.members()),
                timeout=3,
            )
            pem = b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE...\n-----END EC PRIVATE KEY-----"
            rogue.broadcast_items(
                target, [encode_item("rogue", "cert", "tls", 1, pem, rogue.signer)]
            )
            rogue.sync_items(target, [encode_item("rogue", "cert", "tls", 2, pem, rogue.signer)])
        finally:
            rogue.close()
        wait_for("both refused", lambda: target.stats()["private_key_drops"] == 2, timeout=3)
        time.sleep(2 * FAST.probe_interval)
        for node in nodes:
            delivered = items(drain(node, []))
            assert all(b"PRIVATE KEY" not in e.payload for e in delivered)
            if node is not nodes[0]:
                assert [(e.origin, e.lane, e.version) for e in delivered] == [
                    (nodes[0].site, "cert", 1)
                ]
        assert target.stats()["bad_messages"] == 0
        assert target.stats()["dropped"] == 0


def fuzz_datagrams(count: int, key: bytes, seed: int) -> Iterator[bytes]:
    """Seeded junk: random bytes, our magic with junk, unknown versions, short frames, and
    validly sealed frames with bits flipped or cut short."""
    rng = random.Random(seed)
    ring = _native.Keyring(key)
    valid = [ring.seal(bytes([k]) + rng.randbytes(rng.randrange(0, 600))) for k in range(1, 5)]
    valid += [ring.seal(rng.randbytes(n)) for n in (0, 1, 100, 1367)]
    for i in range(count):
        kind = i % 5
        if kind == 0:
            yield rng.randbytes(rng.randrange(0, 1500))
        elif kind == 1:
            yield b"GRID\x01" + rng.randbytes(rng.randrange(0, 1400))
        elif kind == 2:
            yield (
                b"GRID"
                + bytes([rng.choice([0, 2, 3, 255])])
                + rng.randbytes(rng.randrange(28, 200))
            )
        elif kind == 3:
            yield rng.randbytes(rng.randrange(0, 33))
        else:
            frame = bytearray(rng.choice(valid))
            # Distinct bits: flipping one bit twice would restore a valid frame.
            for bit in rng.sample(range(len(frame) * 8), rng.randrange(1, 9)):
                frame[bit // 8] ^= 1 << (bit % 8)
            if rng.random() < 0.25:
                del frame[rng.randrange(0, len(frame)) :]
            yield bytes(frame)


def fuzz_live_node(count: int) -> None:
    key = os.urandom(32)
    with cluster(3, key) as nodes:
        wait_for("all see all", lambda: sees_all_alive(nodes), timeout=10)
        target = nodes[1]
        host, port = target.address.rsplit(":", 1)
        before = target.stats()["dropped"]
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sent = 0
        for datagram in fuzz_datagrams(count, key, seed=20240601):
            sender.sendto(datagram, (host, int(port)))
            sent += 1
            if sent % 500 == 0:
                # Pace to the node so the kernel never discards any: every one is counted.
                wait_for(
                    "node keeps up",
                    lambda sent=sent: target.stats()["dropped"] - before >= sent,
                    timeout=30,
                )
        sender.close()
        wait_for("all counted", lambda: target.stats()["dropped"] - before == sent, timeout=30)
        stats = target.stats()
        assert stats["dropped"] - before == sent
        assert stats["bad_messages"] == 0, "no junk frame got past authentication"
        assert all(
            stats[f"dropped_{r}"] > 0
            for r in ("too_short", "bad_magic", "unknown_version", "auth_failed")
        )
        # The cluster is as healthy as before.
        time.sleep(2 * FAST.probe_interval)
        assert sees_all_alive(nodes)
        assert target.running
        assert [e for e in drain(target, []) if not isinstance(e, MemberEvent)] == []


def test_junk_datagrams_are_all_dropped_and_counted() -> None:
    fuzz_live_node(10_000)


@pytest.mark.slow
def test_a_hundred_thousand_junk_datagrams_leave_the_cluster_healthy() -> None:
    fuzz_live_node(100_000)


def test_authenticated_garbage_is_counted_and_changes_nothing() -> None:
    key = os.urandom(32)
    with cluster(3, key) as nodes:
        wait_for("all see all", lambda: sees_all_alive(nodes), timeout=10)
        target = nodes[2]
        host, port = target.address.rsplit(":", 1)
        ring = _native.Keyring(key)
        rng = random.Random(7)
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        members_before = sorted((m.site, m.address, m.generation) for m in target.members())
        before = target.stats()
        for i in range(2000):
            body = bytes([rng.choice([0, 1, 2, 3, 4, 5, 6, 200])]) + rng.randbytes(
                rng.randrange(0, 300)
            )
            sender.sendto(ring.seal(body), (host, int(port)))
            if i % 200 == 0:
                time.sleep(0.01)
        sender.close()

        # Sealed with the shared key but neither signed nor addressed: the signed session
        # refuses all of it before foca or the sync code sees a byte.
        wait_for(
            "garbage counted",
            lambda: target.stats()["dropped"] - before["dropped"] == 2000,
            timeout=10,
        )
        stats = target.stats()
        message_drops = ("malformed", "bad_identity", "misdirected", "stale", "unknown_sender")
        assert sum(stats[f"dropped_{r}"] - before[f"dropped_{r}"] for r in message_drops) == 2000
        assert stats["dropped_malformed"] > 1000
        assert stats["bad_messages"] == before["bad_messages"] == 0
        assert all(stats[k] == before[k] for k in stats if k.startswith("foca_error_"))
        assert sorted((m.site, m.address, m.generation) for m in target.members()) == (
            members_before
        )
        assert sees_all_alive(nodes)
