"""Adversaries for SWIM attack tests on 127.0.0.1: a tap that relays a node's traffic and
records it, a key holder with its own site certificate speaking from a raw UDP socket, and
small helpers to wait on conditions and read counters.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

from cryptography.hazmat.primitives import serialization

from grid.membership import SwimNode
from grid.trust import IssuedCertificate
from grid.trust.authority import self_signed_certificate
from support.swim import site_certificate
from support.wire import (
    BROADCAST,
    ENTRY_ITEM,
    KIND_FOCA,
    KIND_SYNC_RESPONSE,
    Forger,
    Identity,
    Signer,
    foca_body,
    split_address,
    sync_body,
)

# The counters a refused replay lands in. A release before session keys cannot read a
# message in the session form at all: it counts it as malformed.
REPLAY_DROPS = ("dropped_replayed", "dropped_stale", "dropped_misdirected", "dropped_malformed")


def wait_until(predicate: Callable[[], bool], timeout: float, what: str = "condition") -> float:
    """Polls ``predicate`` until it holds; returns the seconds it took, or fails the test
    after ``timeout`` seconds."""
    start = time.monotonic()
    while not predicate():
        elapsed = time.monotonic() - start
        if elapsed > timeout:
            raise AssertionError(f"{what}: not within {timeout:.1f}s")
        time.sleep(0.01)
    return time.monotonic() - start


def hold(predicate: Callable[[], bool], seconds: float, what: str = "condition") -> None:
    """Watches ``predicate`` for ``seconds``, failing the test the moment it does not hold."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{what}: no longer holds"
        time.sleep(0.01)
    assert predicate(), f"{what}: no longer holds"


def counter_sum(node: SwimNode, names: Iterable[str]) -> int:
    stats = node.stats()
    return sum(stats[name] for name in names)


def socket_drops(address: str) -> int:
    """Datagrams the kernel dropped for the IPv4 UDP socket bound to ``address`` (its
    receive buffer was full), from /proc/net/udp."""
    host, port = split_address(address)
    local = f"{int.from_bytes(socket.inet_aton(host), 'little'):08X}:{port:04X}"
    with open("/proc/net/udp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[1] == local:
                return int(fields[-1])
    raise LookupError(f"no UDP socket bound to {address}")


def der(issued: IssuedCertificate) -> bytes:
    return issued.certificate.public_bytes(serialization.Encoding.DER)


def signer_of(issued: IssuedCertificate) -> Signer:
    return Signer.from_pem(issued.private_key_pem())


def self_signed(site: str) -> IssuedCertificate:
    """A certificate naming ``site`` that no network CA issued."""
    return self_signed_certificate(site, now=datetime.now(UTC))


class Tap:
    """A UDP relay in front of a node. The node advertises the tap's address (so peers send
    there); the tap forwards every datagram to the node's bound address unchanged and, while
    ``recording``, keeps a copy. ``forwarded`` counts what it passed on; :meth:`counted`
    reads a node's counters at a moment when all of that has arrived."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.socket.bind(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.socket.getsockname()[1]}"
        self.target: tuple[str, int] | None = None
        self.recording = True
        self.captured: list[bytes] = []
        self.forwarded = 0
        self._out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._lock = threading.Lock()
        self._held: list[bytes] | None = None
        self._thread = threading.Thread(target=self._relay, name=f"tap-{self.address}", daemon=True)
        self._closed = False

    def start(self, node: SwimNode) -> None:
        """Relays to ``node``, which must advertise :attr:`address`."""
        assert node.address == self.address, (node.address, self.address)
        self.target = split_address(node.bound_address)
        self._thread.start()

    def _relay(self) -> None:
        while True:
            datagram = self.socket.recv(65536)
            with self._lock:
                if self._closed:
                    return
                if self.recording:
                    self.captured.append(datagram)
                if self._held is not None:
                    self._held.append(datagram)
                else:
                    self._forward(datagram)

    def _forward(self, datagram: bytes) -> None:
        assert self.target is not None
        self._out.sendto(datagram, self.target)
        self.forwarded += 1

    def counted(self, node: SwimNode) -> tuple[dict[str, int], int]:
        """``node``'s counters and :attr:`forwarded`, read while the tap holds new datagrams
        back and once ``node`` has taken in everything forwarded before (its ``packets_in``
        stays put for a while), so each forwarded datagram is in both or in neither."""
        with self._lock:
            self._held = []
        try:
            last, since = node.stats()["packets_in"], time.monotonic()
            while time.monotonic() - since < 0.03:
                time.sleep(0.002)
                now = node.stats()["packets_in"]
                if now != last:
                    last, since = now, time.monotonic()
            return node.stats(), self.forwarded
        finally:
            with self._lock:
                held, self._held = self._held or [], None
                for datagram in held:
                    self._forward(datagram)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._thread.is_alive():
            # Wake the relay with one last datagram; it sees the flag and ends.
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as poke:
                poke.sendto(b"", split_address(self.address))
            self._thread.join(timeout=5)
        self.socket.close()
        self._out.close()


class Mallory:
    """A holder of the shared SWIM key with a valid certificate of its own site (issued by
    the network CA), sending whatever it likes from one UDP socket."""

    def __init__(
        self,
        key: bytes,
        site: str = "mallory",
        *,
        certificate: IssuedCertificate | None = None,
        generation: int | None = None,
    ) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.certificate = certificate or site_certificate(site)
        self.chain = [der(self.certificate)]
        self.signer = signer_of(self.certificate)
        identity = Identity.at(site, self.address, generation or int(time.time() * 1000))
        self.forger = Forger(key, self.signer, identity)

    @property
    def identity(self) -> Identity:
        return self.forger.identity

    def send(self, node: SwimNode | str, frame: bytes) -> None:
        """Sends to a node's bound socket (a tap in front of it never sees the frame)."""
        address = node if isinstance(node, str) else node.bound_address
        self.sock.sendto(frame, split_address(address))

    def introduce(self, nodes: Sequence[SwimNode], identity: Identity | None = None) -> None:
        """A signed HELLO with this site's certificate to each node (as ``identity``, our
        own by default)."""
        for node in nodes:
            self.send(node, self.forger.hello(Identity.of(node), self.chain, identity=identity))

    def broadcast_items(self, node: SwimNode, items: Sequence[bytes]) -> None:
        """Items piggybacked on a foca ``Broadcast`` to ``node``."""
        dst = Identity.of(node)
        body = foca_body(self.identity, dst, BROADCAST, items=items)
        self.send(node, self.forger.frame(KIND_FOCA, body, dst))

    def sync_items(self, node: SwimNode, items: Sequence[bytes], sync_id: int = 7) -> None:
        """Items in a one-chunk ``SYNC_RESPONSE`` to ``node``."""
        body = sync_body(self.identity, [(ENTRY_ITEM, item) for item in items], sync_id=sync_id)
        self.send(node, self.forger.frame(KIND_SYNC_RESPONSE, body, Identity.of(node)))

    def close(self) -> None:
        self.sock.close()
