"""Grid's SWIM membership and broadcast lanes: the Python face of ``grid._native``.

A :class:`SwimNode` runs foca over AES-256-GCM encrypted UDP on its own native thread. Python
starts it, joins seeds, publishes versioned items on the four lanes and reads events, either
blocking (:meth:`SwimNode.next_event`, which releases the GIL) or from asyncio
(``async for event in node.events()``). The protocol loop never waits for Python.

This is the only module that imports ``grid._native`` (tests and benchmarks aside).
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import re
import socket
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self, TypeAlias

from grid import _native
from grid.errors import BroadcastRefused, SiteCredentialsError, SwimConfigError

MemberState: TypeAlias = Literal["alive", "suspect", "down", "left"]
Lane: TypeAlias = Literal["state", "gateway", "cert", "metadata"]
MemberEventKind: TypeAlias = Literal["member_up", "member_down", "member_left", "member_renamed"]
FINGERPRINT_LEN = 32

LANES: tuple[str, ...] = tuple(_native.LANES)
#: Largest encoded item (origin, lane, key, version and payload) that fits one packet.
MAX_ITEM_LEN: int = _native.MAX_ITEM_LEN
MAX_KEY_LEN: int = _native.MAX_KEY_LEN
DEFAULT_PORT = 7946

_MAX_GOSSIP_NODES = 32
_MAX_VERSION = 2**64 - 1


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SwimConfigError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise SwimConfigError(f"{name} must be a positive number of seconds, got {value!r}")


@dataclass(frozen=True)
class SwimConfig:
    """SWIM tuning, in seconds: ``GridNetwork.spec.swim``'s ``probeInterval``,
    ``suspicionTimeout`` and ``gossipNodes`` (docs/swim.md maps them onto foca).

    ``push_pull_interval`` is the base period of full-state syncs (it grows with the cluster
    above 32 nodes); ``event_capacity`` bounds the membership events kept for a slow reader
    (more are dropped and counted); items are never dropped: one still waiting is replaced
    by its newer version.
    """

    probe_interval: float = 5.0
    suspicion_timeout: float = 10.0
    gossip_nodes: int = 3
    push_pull_interval: float = 30.0
    event_capacity: int = 4096

    def __post_init__(self) -> None:
        for name in ("probe_interval", "suspicion_timeout", "push_pull_interval"):
            _check_seconds(name, getattr(self, name))
        if self.probe_interval < 0.01:
            raise SwimConfigError(
                f"probe_interval must be at least 10ms, got {self.probe_interval}"
            )
        if self.push_pull_interval < self.probe_interval:
            raise SwimConfigError("push_pull_interval must not be shorter than probe_interval")
        for name, top in (("gossip_nodes", _MAX_GOSSIP_NODES), ("event_capacity", 1 << 24)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise SwimConfigError(f"{name} must be an integer from 1 to {top}, got {value!r}")

    def detection_bound(self, cluster_size: int) -> float:
        """Seconds from a crash until every survivor has declared the node down, in the worst
        case and without counting on gossip: ``2·(N-1)·probe_interval + suspicion_timeout``
        (each survivor probes everyone within 2(N-1)-1 periods, notices the failure at its
        next probe and waits the suspicion timeout). Typical detection is far quicker."""
        return 2 * max(cluster_size - 1, 1) * self.probe_interval + self.suspicion_timeout


@dataclass(frozen=True, slots=True)
class SwimCredentials:
    """What a SWIM node signs with and trusts, DER-encoded.

    ``certificate_chain`` is the site certificate (it must name the site as a DNS subject
    alternative name) then any intermediates; ``private_key`` its PKCS#8 key (ECDSA P-256 or
    Ed25519); ``trust_anchors`` the network CA certificates; ``pins`` the SHA-256
    fingerprints pinned per site (two while a site's certificate rotates); ``revoked`` the
    SHA-256 fingerprints of certificates the network revoked. A peer is heard only once its
    certificate chains to an anchor, or matches its pin where it has one, and is not
    revoked. The repr names no key material.
    """

    certificate_chain: tuple[bytes, ...] = field(repr=False)
    private_key: bytes = field(repr=False)
    trust_anchors: tuple[bytes, ...] = field(default=(), repr=False)
    pins: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict, repr=False)
    revoked: tuple[bytes, ...] = field(default=(), repr=False)

    def __repr__(self) -> str:
        return (
            f"SwimCredentials(certificates={len(self.certificate_chain)}, "
            f"anchors={len(self.trust_anchors)}, pinned_sites={len(self.pins)}, "
            f"revoked={len(self.revoked)})"
        )

    def native_pins(self) -> dict[str, list[bytes]]:
        return native_pins(self.pins)

    def check(self, site: str) -> None:
        """Raise :class:`~grid.errors.SiteCredentialsError` if a node of ``site`` would
        refuse these credentials (as :class:`SwimNode` checks them, binding nothing)."""
        _native.check_site_credentials(
            site,
            list(self.certificate_chain),
            self.private_key,
            list(self.trust_anchors),
            self.native_pins(),
            list(self.revoked),
        )


def native_pins(pins: Mapping[str, Sequence[bytes]]) -> dict[str, list[bytes]]:
    """Pins as ``grid._native`` takes them; raises :class:`SiteCredentialsError` for a pin
    that is not a SHA-256."""
    out: dict[str, list[bytes]] = {}
    for site, fingerprints in pins.items():
        for pin in fingerprints:
            if not isinstance(pin, bytes) or len(pin) != FINGERPRINT_LEN:
                raise SiteCredentialsError(
                    f"a pin of site {site!r} must be {FINGERPRINT_LEN} bytes of SHA-256"
                )
        out[site] = list(fingerprints)
    return out


@dataclass(frozen=True)
class Member:
    """A member as this node sees it."""

    site: str
    address: str
    state: MemberState
    generation: int
    protocol: int | None = field(default=None, compare=False)
    """The SWIM protocol version spoken with it: the highest both nodes speak (None until
    its ``HELLO`` was heard; see docs/upgrading.md). Not part of the member's equality: it
    says how this node speaks with it, not who it is."""


@dataclass(frozen=True)
class MemberEvent:
    """A membership change: up, down (failed), left (on purpose), or renamed (the same
    address came back with a newer generation: ``previous_generation`` is set)."""

    kind: MemberEventKind
    site: str
    address: str
    generation: int
    previous_generation: int | None = None


@dataclass(frozen=True)
class ItemEvent:
    """A new version of an item from a peer, delivered at most once per (origin, lane, key,
    version): a version still waiting for the reader when a newer one arrives is replaced
    by it."""

    origin: str
    lane: Lane
    key: str
    version: int
    payload: bytes = field(repr=False)


@dataclass(frozen=True)
class NameConflict:
    """Another live node claims this node's site name. ``yielded``: the other one started
    first, so this node stopped (its thread ended; nothing more is sent or taken).
    Otherwise this node keeps the name and the other one was refused."""

    site: str
    address: str
    generation: int
    yielded: bool


@dataclass(frozen=True)
class VersionRefused:
    """A peer whose ``HELLO`` names SWIM protocol versions this node shares none of: nothing
    from that node is taken (and it refuses this node in turn). Reported once per identity.
    ``theirs`` and ``ours`` are ``(lowest, highest)`` version ranges."""

    site: str
    address: str
    generation: int
    theirs: tuple[int, int]
    ours: tuple[int, int]

    def describe(self) -> str:
        """One line naming both ranges and what to do."""
        return (
            f"refused site {self.site} at {self.address}: it speaks SWIM protocol versions "
            f"{format_protocols(self.theirs)}, this node speaks {format_protocols(self.ours)}; "
            "a mesh may only mix releases next to each other (docs/upgrading.md)"
        )


def format_protocols(protocols: tuple[int, int]) -> str:
    """``(1, 2)`` as ``1..2``."""
    return f"{protocols[0]}..{protocols[1]}"


PROTOCOLS: tuple[int, int] = _native.PROTOCOLS
"""The SWIM protocol versions this build speaks, lowest and highest."""

Event: TypeAlias = MemberEvent | ItemEvent | NameConflict | VersionRefused

EVENTS_PER_TURN = 100
"""Events :meth:`SwimNode.events` hands over before it lets the event loop run: about
30 ms of a site's work on received catalogues."""

_SIGNALS_KEYS = "signals"
"""How the keys of signals records begin (``signals/`` and ``signals-page/``, from
:mod:`grid.crdt`, which stands above this module): they move scores only, so they wait
behind the catalogues."""

_EVENT_TIERS = 3


def _event_tier(event: Event) -> int:
    """The order :meth:`SwimNode.events` hands waiting events over in: 0, heads (membership
    and every lane but records); 1, records other than signals (catalogues, budgets); 2,
    signals."""
    if not isinstance(event, ItemEvent) or event.lane != "state":
        return 0
    return 2 if event.key.startswith(_SIGNALS_KEYS) else 1


# What grid._native hands over, see _native.pyi.
_RawEvent: TypeAlias = (
    tuple[str, str, str, int]
    | tuple[str, str, str, int, int]
    | tuple[str, str, str, int, bool]
    | tuple[str, str, str, str, int, bytes]
    | tuple[str, str, str, int, tuple[int, int], tuple[int, int]]
)

_STATES: dict[str, MemberState] = {
    "alive": "alive",
    "suspect": "suspect",
    "down": "down",
    "left": "left",
}
_LANE_NAMES: dict[str, Lane] = {
    "state": "state",
    "gateway": "gateway",
    "cert": "cert",
    "metadata": "metadata",
}
_MEMBER_KINDS: dict[str, MemberEventKind] = {
    "member_up": "member_up",
    "member_down": "member_down",
    "member_left": "member_left",
}


def _event(raw: _RawEvent) -> Event:
    if len(raw) == 6:
        _, first, second, third, fourth, fifth = raw
        if isinstance(fourth, tuple) and isinstance(fifth, tuple) and isinstance(third, int):
            return VersionRefused(first, second, third, fourth, fifth)
        assert isinstance(third, str) and isinstance(fourth, int) and isinstance(fifth, bytes)
        return ItemEvent(first, _LANE_NAMES[second], third, fourth, fifth)
    if len(raw) == 5:
        kind, site, address, generation, last = raw
        if kind == "name_conflict":
            return NameConflict(site, address, generation, bool(last))
        return MemberEvent("member_renamed", site, address, generation, int(last))
    kind, site, address, generation = raw
    return MemberEvent(_MEMBER_KINDS[kind], site, address, generation)


def parse_address(text: str, what: str, *, allow_port_zero: bool = False) -> str:
    """Turns ``host:port`` (``[v6]:port`` for IPv6 literals) into ``IP:port``, resolving
    a host name. Raises :class:`SwimConfigError` naming ``what`` on anything else."""
    if not isinstance(text, str):
        raise SwimConfigError(f"{what} must be a 'host:port' string, got {type(text).__name__}")
    match = re.fullmatch(r"\[([^\]]+)\]:(\d{1,5})|([^:\[\]\s]+):(\d{1,5})", text.strip())
    if not match:
        raise SwimConfigError(f"{what} {text!r} is not 'host:port' (IPv6 as '[addr]:port')")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not (0 if allow_port_zero else 1) <= port <= 65535:
        raise SwimConfigError(f"{what} {text!r} has port {port} out of range")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if match.group(1):
            raise SwimConfigError(f"{what} {text!r}: {host!r} is not an IPv6 address") from None
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
        except (OSError, UnicodeError) as err:
            raise SwimConfigError(f"{what} {text!r}: cannot resolve {host!r} ({err})") from None
        ip = ipaddress.ip_address(
            next((i[4][0] for i in infos if i[0] == socket.AF_INET), infos[0][4][0])
        )
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


class SwimNode:
    """One site's SWIM node: membership, failure detection and broadcast lanes.

    ``bind`` is the local UDP ``host:port`` (port 0 picks one); ``advertise`` is what peers
    use to reach this node (default: the bound address; required when binding a wildcard
    address). ``keys`` are 32-byte AES-256 keys: the first seals, all of them open.
    ``credentials`` are the site's certificate and key, which sign every message and item,
    and what vouches for other sites (see :class:`SwimCredentials`); they are checked here
    and refused with :class:`~grid.errors.SiteCredentialsError`. ``generation`` defaults to
    wall-clock milliseconds so a restart wins over its previous life. The socket is bound
    here; the protocol runs from :meth:`start` (or ``with``).
    """

    def __init__(
        self,
        bind: str,
        site: str,
        advertise: str | None,
        keys: Sequence[bytes],
        config: SwimConfig | None = None,
        *,
        credentials: SwimCredentials,
        generation: int | None = None,
    ) -> None:
        if isinstance(keys, bytes | str) or not keys:
            raise SwimConfigError("keys must be a non-empty sequence of 32-byte keys")
        if not isinstance(site, str):
            raise SwimConfigError(f"site must be a string, got {type(site).__name__}")
        self.config = config or SwimConfig()
        self._node = _native.SwimNode(
            parse_address(bind, "bind address", allow_port_zero=True),
            site,
            [bytes(k) for k in keys],
            certificate_chain=list(credentials.certificate_chain),
            private_key=credentials.private_key,
            trust_anchors=list(credentials.trust_anchors),
            pins=credentials.native_pins(),
            revoked=list(credentials.revoked),
            advertise=None if advertise is None else parse_address(advertise, "advertise address"),
            probe_interval=self.config.probe_interval,
            suspicion_timeout=self.config.suspicion_timeout,
            gossip_nodes=self.config.gossip_nodes,
            push_pull_interval=self.config.push_pull_interval,
            event_capacity=self.config.event_capacity,
            generation=generation,
        )

    def __repr__(self) -> str:
        return repr(self._node)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.running:
            self.leave()
        else:
            self.close()

    @property
    def address(self) -> str:
        """The advertised ``IP:port``."""
        return self._node.address

    @property
    def bound_address(self) -> str:
        return self._node.bound_address

    @property
    def site(self) -> str:
        return self._node.site

    @property
    def generation(self) -> int:
        """The current generation; it goes up by one if the cluster wrongly declared this
        node down and it rejoined."""
        return self._node.generation

    @property
    def running(self) -> bool:
        return self._node.running

    def start(self) -> None:
        """Starts the protocol thread."""
        self._node.start()

    def forget(self, site: str, items: Sequence[tuple[str, str]]) -> None:
        """Forgets these ``(lane, key)`` items of ``site`` (its records went stale here):
        their versions are kept and their payloads dropped (syncs stop carrying them), and
        the same versions are delivered again once the site is live and they come back, so
        nothing forgotten is lost. A site going down forgets nothing by itself."""
        self._node.forget(site, list(items))

    def set_pins(self, pins: Mapping[str, Sequence[bytes]]) -> None:
        """Replaces the pinned certificate fingerprints (site → SHA-256s). A site whose
        verified certificate no longer matches is not heard until it presents one that
        does."""
        self._node.set_pins(native_pins(pins))

    def renew(self, credentials: SwimCredentials) -> None:
        """Signs and verifies with ``credentials`` from now on, without a restart: a renewed
        site certificate and key, a new CA bundle (a CA rotation), new pins. Checked as the
        constructor checks them; refused with :class:`~grid.errors.SiteCredentialsError`,
        and the node keeps the credentials it has. Certificates newly listed in ``revoked``
        are refused at once: their sites are taken out of the membership as if they had
        left, and what those certificates signed is dropped. A new certificate is introduced
        to every member at once, and what the node signed under the previous one stays
        verifiable until it has signed it again (docs/security.md, "Certificate renewal")."""
        self._node.renew(
            list(credentials.certificate_chain),
            credentials.private_key,
            list(credentials.trust_anchors),
            credentials.native_pins(),
            list(credentials.revoked),
        )

    def join(self, seeds: Sequence[str]) -> None:
        """Announces to the seeds (``host:port``) and pulls one seed's full state; retried
        with backoff while no member is known. Returns at once."""
        if isinstance(seeds, str):
            raise SwimConfigError("seeds must be a sequence of 'host:port' strings")
        self._node.join([parse_address(s, "seed") for s in seeds])

    def leave(self) -> None:
        """Tells every member this node is leaving (they record it as ``left``), then stops."""
        self._node.leave()

    def close(self) -> None:
        """Stops at once without telling anyone: peers will detect a failure."""
        self._node.close()

    def members(self) -> list[Member]:
        """Every member this node knows, itself excluded, down and left ones included."""
        spoken = {(s, a, g): p for s, a, g, p in self._node.protocols()}
        return [
            Member(
                site, address, _STATES[state], generation, spoken.get((site, address, generation))
            )
            for site, address, state, generation in self._node.members()
        ]

    def local(self) -> Member:
        return Member(self.site, self.address, "alive", self.generation)

    def publish(self, lane: str, key: str, version: int, payload: bytes) -> bool:
        """Offers a new version of this site's item ``(lane, key)``. Returns False if this
        node already published that version or a newer one. Versions must grow across
        restarts (peers remember the highest version seen).

        Raises :class:`~grid.errors.PayloadTooLarge` above :data:`MAX_ITEM_LEN` encoded
        bytes, :class:`~grid.errors.PrivateKeyMaterial` for a cert-lane payload holding a
        private key, :class:`~grid.errors.BroadcastRefused` for an unknown lane or bad key.
        """
        if isinstance(version, bool) or not isinstance(version, int):
            raise BroadcastRefused(f"version must be an integer, got {type(version).__name__}")
        if not 0 <= version <= _MAX_VERSION:
            raise BroadcastRefused(f"version must be from 0 to 2**64-1, got {version}")
        if not isinstance(key, str):
            raise BroadcastRefused(f"key must be a string, got {type(key).__name__}")
        return self._node.publish(lane, key, version, bytes(payload))

    def stats(self) -> dict[str, int]:
        """Counters and gauges: packets and bytes in and out, ``dropped_<reason>`` per
        dropped frame or message (``too_long``, ``auth_failed``, ``replayed``, ``stale``,
        ``misdirected``, ``unknown_sender``, ``bad_signature``, ``untrusted_certificate``...),
        ``items_bad_signature``, ``name_conflicts``, ``foca_error_<kind>``,
        ``private_key_drops``, ``events_dropped``, ``items_coalesced``, ``members``,
        ``broadcast_backlog``, ``syncs_done`` and more."""
        return self._node.stats()

    def install_key(self, key: bytes) -> str:
        """Step 1 of a rotation, on every node: the new key may open frames. Returns its
        public id."""
        return self._node.install_key(key)

    def use_key(self, key: bytes) -> None:
        """Step 2, on every node: the new key seals."""
        self._node.use_key(key)

    def remove_key(self, key: bytes) -> None:
        """Step 3, on every node: the old key is forgotten."""
        self._node.remove_key(key)

    def key_ids(self) -> list[str]:
        """Public ids of the keys, primary first (never the key bytes)."""
        return self._node.key_ids()

    def next_event(self, timeout: float | None = None) -> Event | None:
        """Waits up to ``timeout`` seconds (forever if None) with the GIL released; None on
        timeout, or once the node stopped and every event was taken."""
        raw = self._node.next_event(timeout)
        return None if raw is None else _event(raw)

    async def events(self) -> AsyncIterator[Event]:
        """Yields events as they come, without a thread per waiter; ends once the node has
        stopped and every event was taken.

        Of the events waiting, records (state items) come last, and of them, signals come
        after the catalogues: a node catching up takes every site's certificates, gateway
        and metadata (a few items each) before the thousands of records that arrive with
        them, so it can trust and probe the sites while it takes the rest, and it can rank
        every candidate (which needs its catalogue) before it has taken every site's
        signals (which only move its score). Every :data:`EVENTS_PER_TURN` events the loop
        gets a turn, so probes and renders run meanwhile instead of after the whole
        catch-up."""
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        fd = self._node.event_fd()
        loop.add_reader(fd, ready.set)
        waiting: tuple[deque[Event], ...] = tuple(deque() for _ in range(_EVENT_TIERS))
        try:
            while True:
                # Reset the wake-ups before draining: anything queued later re-arms them.
                ready.clear()
                self._node.clear_event_fd()
                for raw in self._node.poll_events():
                    event = _event(raw)
                    waiting[_event_tier(event)].append(event)
                if any(waiting):
                    for _ in range(EVENTS_PER_TURN):
                        tier = next((queue for queue in waiting if queue), None)
                        if tier is None:
                            break
                        yield tier.popleft()
                    await asyncio.sleep(0)
                    continue
                if not self._node.running:
                    return
                await ready.wait()
        finally:
            loop.remove_reader(fd)
