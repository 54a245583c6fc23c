"""Grid's SWIM wire format, written again from its description with pyca/cryptography, for
attack tests: open captured frames and read what is inside, and forge signed messages and
items as a holder of the shared key and of some site's certificate key.

Layouts (every integer big-endian; see ``rust/grid-core/src/wire/mod.rs``):

- frame: ``GRID`` | 0x01 | nonce (12) | AES-256-GCM ciphertext | tag (16), AAD = the first
  5 bytes; at most 1,400 bytes;
- message: ``kind u8 | body | seq u64 | sent_at_ms u64 | dst ip (16, IPv4-mapped) |
  dst port u16 | signature (64)``, the signature over ``b"grid message v1\\0"`` and
  everything before it; every body starts with the sender's identity;
- identity: ``site_len u8 | site | family u8 (4 or 6) | ip | port u16 | generation u64``;
- item: ``origin_len u8 | origin | lane u8 | key_len u8 | key | version u64 | payload |
  signature (64)``, signed by the origin over ``b"grid item v1\\0"`` and the rest;
- sync chunk: ``sender identity | sync_id u32 | index u16 | count u16 | entry*``, each
  entry ``tag u8 (1 member, 2 item, 3 certificate) | len u16 | body``, a certificate entry
  ``site_len u8 | site | count u8 | (len u16 | DER)*``.

Signatures are ECDSA P-256 with SHA-256 in the fixed ``r | s`` form, or Ed25519.
"""

from __future__ import annotations

import ipaddress
import os
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from grid._native import PROTOCOLS

MAGIC = b"GRID"
VERSION = 0x01
AAD = MAGIC + bytes([VERSION])
NONCE_LEN = 12
TAG_LEN = 16
OVERHEAD = len(AAD) + NONCE_LEN + TAG_LEN
MAX_FRAME_LEN = 1400
MAX_MESSAGE_LEN = MAX_FRAME_LEN - OVERHEAD

SIGNATURE_LEN = 64
MESSAGE_DOMAIN = b"grid message v1\0"
ITEM_DOMAIN = b"grid item v1\0"
RAW_ADDR_LEN = 18
TRAILER_LEN = 8 + 8 + RAW_ADDR_LEN + SIGNATURE_LEN
TAG_LEN = 16
SESSION_TRAILER_LEN = 8 + 8 + RAW_ADDR_LEN + 4 + TAG_LEN
SESSION_FORM = 0x80
"""Set in the kind byte of a message authenticated under a session key instead of signed."""

KIND_FOCA = 0x01
KIND_SYNC_REQUEST = 0x02
KIND_SYNC_RESPONSE = 0x03
KIND_LEAVE = 0x04
KIND_HELLO = 0x05
KIND_CONFLICT = 0x06
KIND_DIGEST = 0x07
KIND_REPAIR = 0x08
KIND_HANDSHAKE_INIT = 0x09
KIND_HANDSHAKE_RESPONSE = 0x0A
KIND_HANDSHAKE_CONFIRM = 0x0B
KIND_NAMES = {
    KIND_FOCA: "foca",
    KIND_SYNC_REQUEST: "sync_request",
    KIND_SYNC_RESPONSE: "sync_response",
    KIND_LEAVE: "leave",
    KIND_HELLO: "hello",
    KIND_CONFLICT: "conflict",
    KIND_DIGEST: "digest",
    KIND_REPAIR: "repair",
    KIND_HANDSHAKE_INIT: "handshake_init",
    KIND_HANDSHAKE_RESPONSE: "handshake_response",
    KIND_HANDSHAKE_CONFIRM: "handshake_confirm",
}

PING, ACK, PING_REQ, INDIRECT_PING, INDIRECT_ACK, FORWARDED_ACK = range(6)
ANNOUNCE, FEED, GOSSIP, BROADCAST, TURN_UNDEAD = range(6, 11)
FOCA_NAMES = (
    "ping",
    "ack",
    "ping_req",
    "indirect_ping",
    "indirect_ack",
    "forwarded_ack",
    "announce",
    "feed",
    "gossip",
    "broadcast",
    "turn_undead",
)
# Messages whose tag is followed by an identity and a probe number.
_WITH_IDENTITY = {PING_REQ, INDIRECT_PING, INDIRECT_ACK, FORWARDED_ACK}

ALIVE, SUSPECT, DOWN, LEFT = range(4)
LANES = ("state", "gateway", "cert", "metadata")
ENTRY_MEMBER = 1
ENTRY_ITEM = 2
ENTRY_CERTIFICATE = 3
ENTRY_RESUME = 4
"""A request's first entry: the item name after which the answer's items start."""
ENTRY_WALK_END = 5
"""In an answer's first chunk: where its items ended."""
ENTRY_HEADS, ENTRY_UNTIL, ENTRY_VERSIONS, ENTRY_VERSION, ENTRY_WANT = 6, 7, 8, 9, 10
"""Protocol 3: what a request asks (the heads alone, a bound, names and versions alone, an
item by name), and an answer's name and version standing for an item."""
_ASKING = (ENTRY_HEADS, ENTRY_UNTIL, ENTRY_VERSIONS, ENTRY_WANT)
ENTRY_VIEW = 11
"""Protocol 3: in a request's or an answer's first chunk, the sender's view digest (u64)."""
HELLO_WANT_REPLY = 0x01
"""HELLO flag bit 0; bits 1-3 hold the sender's highest protocol version minus its lowest,
bits 4-7 its highest (0: no range, as release 0.1.0 sends: protocol 1 alone)."""


class WireError(ValueError):
    """Bytes that do not decode."""


# --- frame ----------------------------------------------------------------------------


def seal(key: bytes, plaintext: bytes, nonce: bytes | None = None) -> bytes:
    """One frame around ``plaintext``."""
    nonce = os.urandom(NONCE_LEN) if nonce is None else nonce
    return AAD + nonce + AESGCM(key).encrypt(nonce, plaintext, AAD)


def open_frame(key: bytes, frame: bytes) -> bytes:
    """The plaintext of a frame; raises :class:`WireError` if it is not one under ``key``."""
    if len(frame) < OVERHEAD or len(frame) > MAX_FRAME_LEN or frame[:5] != AAD:
        raise WireError("not a frame")
    try:
        return AESGCM(key).decrypt(frame[5:17], frame[17:], AAD)
    except Exception as error:  # cryptography's InvalidTag
        raise WireError("does not authenticate") from error


# --- primitives -----------------------------------------------------------------------


class Reader:
    """A cursor over bytes that raises :class:`WireError` on short input."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise WireError("truncated")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def u64(self) -> int:
        return int.from_bytes(self.take(8), "big")

    def rest(self) -> bytes:
        out = self.data[self.at :]
        self.at = len(self.data)
        return out

    @property
    def remaining(self) -> int:
        return len(self.data) - self.at


def split_address(address: str) -> tuple[str, int]:
    """``"127.0.0.1:7946"`` or ``"[::1]:9"`` as (host, port)."""
    host, port = address.rsplit(":", 1)
    return host.strip("[]"), int(port)


def raw_address(host: str, port: int) -> bytes:
    """The 18-byte address of an envelope's ``dst``: IPv4 mapped into IPv6, then the port."""
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv4Address):
        ip = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)
    return ip.packed + port.to_bytes(2, "big")


def parse_raw_address(raw: bytes) -> tuple[str, int]:
    ip = ipaddress.IPv6Address(raw[:16])
    host = str(ip.ipv4_mapped) if ip.ipv4_mapped is not None else str(ip)
    return host, int.from_bytes(raw[16:18], "big")


@dataclass(frozen=True)
class Identity:
    """Who a node is. ``site`` may be bytes to spell names no node would accept."""

    site: str | bytes
    host: str
    port: int
    generation: int

    @classmethod
    def at(cls, site: str | bytes, address: str, generation: int) -> Identity:
        host, port = split_address(address)
        return cls(site, host, port, generation)

    @classmethod
    def of(cls, node: object) -> Identity:
        """The current identity of a ``SwimNode`` (its advertised address)."""
        return cls.at(node.site, node.address, node.generation)  # type: ignore[attr-defined]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def site_bytes(self) -> bytes:
        return self.site.encode() if isinstance(self.site, str) else self.site

    def encode(self) -> bytes:
        site = self.site_bytes
        ip = ipaddress.ip_address(self.host)
        family = b"\x04" if ip.version == 4 else b"\x06"
        return (
            bytes([len(site)])
            + site
            + family
            + ip.packed
            + self.port.to_bytes(2, "big")
            + self.generation.to_bytes(8, "big")
        )

    @classmethod
    def decode(cls, r: Reader) -> Identity:
        length = r.u8()
        if length > 63:
            raise WireError(f"site name of {length} bytes")
        try:
            site = r.take(length).decode()
        except UnicodeDecodeError as error:
            raise WireError("site name is not UTF-8") from error
        family = r.u8()
        if family == 4:
            host = str(ipaddress.IPv4Address(r.take(4)))
        elif family == 6:
            ip = ipaddress.IPv6Address(r.take(16))
            host = str(ip.ipv4_mapped) if ip.ipv4_mapped is not None else str(ip)
        else:
            raise WireError(f"address family {family}")
        port = r.u16()
        return cls(site, host, port, r.u64())


@dataclass(frozen=True)
class Member:
    identity: Identity
    incarnation: int = 0
    state: int = ALIVE

    def encode(self) -> bytes:
        return self.identity.encode() + struct.pack(">HB", self.incarnation, self.state)

    @classmethod
    def decode(cls, r: Reader) -> Member:
        identity = Identity.decode(r)
        incarnation = r.u16()
        return cls(identity, incarnation, r.u8())


# --- signatures -----------------------------------------------------------------------

PublicKey: TypeAlias = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


class Signer:
    """A site's private key (ECDSA P-256 or Ed25519) signing as Grid nodes do."""

    def __init__(self, private_key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
        if isinstance(private_key, ec.EllipticCurvePrivateKey):
            if not isinstance(private_key.curve, ec.SECP256R1):
                raise ValueError("only P-256 keys sign Grid messages")
        elif not isinstance(private_key, ed25519.Ed25519PrivateKey):
            raise ValueError("only P-256 or Ed25519 keys sign Grid messages")
        self._key = private_key

    @classmethod
    def from_pem(cls, pem: bytes) -> Signer:
        key = serialization.load_pem_private_key(pem, None)
        assert isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey)
        return cls(key)

    @property
    def public_key(self) -> PublicKey:
        return self._key.public_key()

    def sign(self, domain: bytes, signed: bytes) -> bytes:
        message = domain + signed
        if isinstance(self._key, ed25519.Ed25519PrivateKey):
            return self._key.sign(message)
        r, s = decode_dss_signature(self._key.sign(message, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    def __repr__(self) -> str:
        return "Signer()"


def verify(
    public_key: PublicKey,
    domain: bytes,
    signed: bytes,
    signature: bytes,
) -> bool:
    """Whether ``signature`` is ``public_key``'s over ``domain | signed``."""
    if len(signature) != SIGNATURE_LEN:
        return False
    try:
        if isinstance(public_key, ed25519.Ed25519PublicKey):
            public_key.verify(signature, domain + signed)
        else:
            der = encode_dss_signature(
                int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
            )
            public_key.verify(der, domain + signed, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


# --- messages -------------------------------------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


def seal_message(
    kind: int,
    body: bytes,
    *,
    seq: int,
    sent_at_ms: int,
    dst: tuple[str, int],
    signer: Signer | None,
) -> bytes:
    """A whole message (plaintext of one frame); ``signer`` None leaves a zero signature."""
    signed = bytes([kind]) + body + struct.pack(">QQ", seq, sent_at_ms) + raw_address(*dst)
    signature = bytes(SIGNATURE_LEN) if signer is None else signer.sign(MESSAGE_DOMAIN, signed)
    return signed + signature


@dataclass(frozen=True)
class Envelope:
    """A decoded message (not verified). ``signature`` is the tag for a message in the
    session form (``in_session``), whose trailer also carries the receiver's ``index``."""

    kind: int
    sender: Identity
    body: bytes
    seq: int
    sent_at_ms: int
    dst: tuple[str, int]
    signed: bytes = field(repr=False)
    signature: bytes = field(repr=False)
    in_session: bool = False
    index: int = 0

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.kind, f"kind_{self.kind}")

    @classmethod
    def decode(cls, message: bytes) -> Envelope:
        in_session = bool(message) and bool(message[0] & SESSION_FORM)
        trailer_len, proof_len = (
            (SESSION_TRAILER_LEN, TAG_LEN) if in_session else (TRAILER_LEN, SIGNATURE_LEN)
        )
        if len(message) < 1 + trailer_len or len(message) > MAX_MESSAGE_LEN:
            raise WireError("truncated")
        signed, proof = message[:-proof_len], message[-proof_len:]
        unsealed, trailer = (
            signed[: -(trailer_len - proof_len)],
            signed[-(trailer_len - proof_len) :],
        )
        seq, sent_at = struct.unpack(">QQ", trailer[:16])
        dst = parse_raw_address(trailer[16 : 16 + RAW_ADDR_LEN])
        index = int.from_bytes(trailer[16 + RAW_ADDR_LEN :], "big") if in_session else 0
        kind, body = unsealed[0] & ~SESSION_FORM, unsealed[1:]
        sender = Identity.decode(Reader(body))
        return cls(kind, sender, body, seq, sent_at, dst, signed, proof, in_session, index)

    def verifies(self, public_key: PublicKey) -> bool:
        """Whether the site key signed it (a message in the session form never verifies:
        only the session's two ends hold its key)."""
        return not self.in_session and verify(
            public_key, MESSAGE_DOMAIN, self.signed, self.signature
        )


# --- items ----------------------------------------------------------------------------


def unsigned_item(
    origin: str | bytes, lane: str | int, key: str, version: int, payload: bytes
) -> bytes:
    origin_bytes = origin.encode() if isinstance(origin, str) else origin
    lane_byte = LANES.index(lane) if isinstance(lane, str) else lane
    key_bytes = key.encode()
    return (
        bytes([len(origin_bytes)])
        + origin_bytes
        + bytes([lane_byte, len(key_bytes)])
        + key_bytes
        + version.to_bytes(8, "big")
        + payload
    )


def encode_item(
    origin: str | bytes,
    lane: str | int,
    key: str,
    version: int,
    payload: bytes,
    signer: Signer | None,
) -> bytes:
    """An item signed by ``signer`` (whoever that is: the receiver checks it is the
    origin's), or with a zero signature."""
    signed = unsigned_item(origin, lane, key, version, payload)
    signature = bytes(SIGNATURE_LEN) if signer is None else signer.sign(ITEM_DOMAIN, signed)
    return signed + signature


@dataclass(frozen=True)
class Item:
    origin: str
    lane: str
    key: str
    version: int
    payload: bytes = field(repr=False)
    signed: bytes = field(repr=False)
    signature: bytes = field(repr=False)
    in_session: bool = False
    index: int = 0

    @classmethod
    def decode(cls, data: bytes) -> Item:
        if len(data) < SIGNATURE_LEN:
            raise WireError("truncated item")
        signed, signature = data[:-SIGNATURE_LEN], data[-SIGNATURE_LEN:]
        r = Reader(signed)
        origin = r.take(r.u8()).decode()
        lane = r.u8()
        if lane >= len(LANES):
            raise WireError(f"lane {lane}")
        key = r.take(r.u8()).decode()
        version = r.u64()
        return cls(origin, LANES[lane], key, version, r.rest(), signed, signature)

    def verifies(self, public_key: PublicKey) -> bool:
        return verify(public_key, ITEM_DOMAIN, self.signed, self.signature)


# --- bodies ---------------------------------------------------------------------------


def foca_body(
    src: Identity,
    dst: Identity,
    tag: int,
    *,
    incarnation: int = 0,
    probe_number: int = 0,
    other: Identity | None = None,
    members: Sequence[Member] | None = None,
    items: Iterable[bytes] = (),
) -> bytes:
    """A foca packet. ``members`` is left out for ``Announce``/``TurnUndead``/``Broadcast``
    (pass None); ``items`` follow as length-prefixed custom broadcasts."""
    out = src.encode() + incarnation.to_bytes(2, "big") + dst.encode() + bytes([tag])
    if tag in (PING, ACK):
        out += bytes([probe_number])
    elif tag in _WITH_IDENTITY:
        assert other is not None
        out += other.encode() + bytes([probe_number])
    if members is not None:
        out += len(members).to_bytes(2, "big") + b"".join(m.encode() for m in members)
    for item in items:
        out += len(item).to_bytes(2, "big") + item
    return out


@dataclass(frozen=True)
class FocaPacket:
    src: Identity
    incarnation: int
    dst: Identity
    tag: int
    other: Identity | None
    members: tuple[Member, ...]
    items: tuple[bytes, ...]

    @property
    def name(self) -> str:
        return FOCA_NAMES[self.tag] if self.tag < len(FOCA_NAMES) else f"tag_{self.tag}"

    @classmethod
    def decode(cls, body: bytes) -> FocaPacket:
        r = Reader(body)
        src = Identity.decode(r)
        incarnation = r.u16()
        dst = Identity.decode(r)
        tag = r.u8()
        other = None
        if tag in (PING, ACK):
            r.u8()
        elif tag in _WITH_IDENTITY:
            other = Identity.decode(r)
            r.u8()
        elif tag >= len(FOCA_NAMES):
            raise WireError(f"foca tag {tag}")
        members: list[Member] = []
        if r.remaining >= 2 and tag != BROADCAST:
            members = [Member.decode(r) for _ in range(r.u16())]
        items = []
        while r.remaining > 2:
            items.append(r.take(r.u16()))
        if r.remaining:
            raise WireError("trailing bytes after the foca packet")
        return cls(src, incarnation, dst, tag, other, tuple(members), tuple(items))


def protocol_flags(protocols: tuple[int, int] | None) -> int:
    """The HELLO flag bits that announce ``(lowest, highest)`` (None: no range)."""
    if protocols is None:
        return 0
    lowest, highest = protocols
    return highest << 4 | (highest - lowest) << 1


def protocols_of_flags(flags: int) -> tuple[int, int]:
    """The range a HELLO's flags announce."""
    highest = flags >> 4
    if highest == 0:
        return (1, 1)
    return (max(highest - (flags >> 1 & 0b111), 1), highest)


def hello_body(
    identity: Identity,
    chain: Sequence[bytes],
    *,
    want_reply: bool = False,
    protocols: tuple[int, int] | None = None,
) -> bytes:
    flags = (HELLO_WANT_REPLY if want_reply else 0) | protocol_flags(protocols)
    out = identity.encode() + bytes([flags, len(chain)])
    for der in chain:
        out += len(der).to_bytes(2, "big") + der
    return out


def decode_hello(body: bytes) -> tuple[Identity, bool, list[bytes]]:
    r = Reader(body)
    identity = Identity.decode(r)
    flags = r.u8()
    chain = [r.take(r.u16()) for _ in range(r.u8())]
    if r.remaining:
        raise WireError("trailing bytes after the HELLO chain")
    return identity, bool(flags & HELLO_WANT_REPLY), chain


def hello_protocols(body: bytes) -> tuple[int, int]:
    """The protocol range a HELLO body announces."""
    r = Reader(body)
    Identity.decode(r)
    return protocols_of_flags(r.u8())


def sync_body(
    sender: Identity,
    entries: Sequence[tuple[int, bytes]],
    *,
    sync_id: int = 1,
    index: int = 0,
    count: int = 1,
) -> bytes:
    """One sync chunk: ``entries`` are (ENTRY_MEMBER, ENTRY_ITEM or ENTRY_CERTIFICATE,
    encoded entry)."""
    out = sender.encode() + struct.pack(">IHH", sync_id, index, count)
    for tag, entry in entries:
        out += bytes([tag]) + len(entry).to_bytes(2, "big") + entry
    return out


@dataclass(frozen=True)
class SyncChunk:
    sender: Identity
    sync_id: int
    index: int
    count: int
    members: tuple[tuple[Member, bool], ...]
    items: tuple[bytes, ...]
    certificates: tuple[tuple[str, tuple[bytes, ...]], ...] = ()
    resume: bytes | None = None
    walk_end: bytes | None = None
    asked: tuple[tuple[int, bytes], ...] = ()
    versions: tuple[bytes, ...] = ()
    view: int | None = None

    @classmethod
    def decode(cls, body: bytes) -> SyncChunk:
        r = Reader(body)
        sender = Identity.decode(r)
        sync_id, index, count = r.u32(), r.u16(), r.u16()
        members, items, certificates = [], [], []
        asked: list[tuple[int, bytes]] = []
        versions: list[bytes] = []
        resume = walk_end = None
        view: int | None = None
        while r.remaining:
            tag, entry = r.u8(), r.take(r.u16())
            if tag == ENTRY_MEMBER:
                er = Reader(entry)
                member = Member.decode(er)
                if er.remaining:
                    raise WireError("trailing bytes after a member entry")
                members.append((member, member.state == LEFT))
            elif tag == ENTRY_ITEM:
                items.append(entry)
            elif tag == ENTRY_CERTIFICATE:
                certificates.append(decode_certificate_entry(entry))
            elif tag == ENTRY_RESUME and index == 0 and resume is None:
                resume = entry
            elif tag == ENTRY_WALK_END and index == 0 and walk_end is None:
                walk_end = entry
            elif tag in _ASKING and index == 0:
                asked.append((tag, entry))
            elif tag == ENTRY_VERSION:
                versions.append(entry)
            elif tag == ENTRY_VIEW and index == 0 and view is None:
                if len(entry) != 8:
                    raise WireError(f"a view entry of {len(entry)} bytes")
                view = int.from_bytes(entry, "big")
            else:
                raise WireError(f"sync entry tag {tag}")
        return cls(
            sender,
            sync_id,
            index,
            count,
            tuple(members),
            tuple(items),
            tuple(certificates),
            resume,
            walk_end,
            tuple(asked),
            tuple(versions),
            view,
        )


def certificate_entry(site: str | bytes, chain: Sequence[bytes]) -> bytes:
    """A sync entry carrying a site's certificate chain (leaf first)."""
    name = site.encode() if isinstance(site, str) else site
    out = bytes([len(name)]) + name + bytes([len(chain)])
    for der in chain:
        out += len(der).to_bytes(2, "big") + der
    return out


def decode_certificate_entry(entry: bytes) -> tuple[str, tuple[bytes, ...]]:
    r = Reader(entry)
    site = r.take(r.u8()).decode()
    chain = tuple(r.take(r.u16()) for _ in range(r.u8()))
    if r.remaining:
        raise WireError("trailing bytes after a certificate entry")
    return site, chain


def conflict_body(sender: Identity, holder: Identity) -> bytes:
    return sender.encode() + holder.encode()


@dataclass(frozen=True)
class Parsed:
    """What one captured frame holds, fully decoded."""

    envelope: Envelope
    foca: FocaPacket | None = None
    sync: SyncChunk | None = None
    hello_chain: tuple[bytes, ...] = ()

    @property
    def name(self) -> str:
        """``foca:ping``, ``sync_request``, ``hello``..."""
        if self.foca is not None:
            return f"foca:{self.foca.name}"
        return self.envelope.kind_name

    @property
    def items(self) -> tuple[Item, ...]:
        raw = self.foca.items if self.foca else self.sync.items if self.sync else ()
        return tuple(Item.decode(data) for data in raw)


def parse(plaintext: bytes) -> Parsed:
    """Decodes a message completely; raises :class:`WireError` on anything left over."""
    envelope = Envelope.decode(plaintext)
    if envelope.kind == KIND_FOCA:
        return Parsed(envelope, foca=FocaPacket.decode(envelope.body))
    if envelope.kind in (KIND_SYNC_REQUEST, KIND_SYNC_RESPONSE):
        return Parsed(envelope, sync=SyncChunk.decode(envelope.body))
    if envelope.kind == KIND_HELLO:
        return Parsed(envelope, hello_chain=tuple(decode_hello(envelope.body)[2]))
    if envelope.kind == KIND_LEAVE:
        r = Reader(envelope.body)
        Identity.decode(r)
        if r.remaining:
            raise WireError("trailing bytes after a LEAVE")
        return Parsed(envelope)
    if envelope.kind == KIND_CONFLICT:
        r = Reader(envelope.body)
        Identity.decode(r)
        Identity.decode(r)
        return Parsed(envelope)
    if envelope.kind == KIND_DIGEST:
        r = Reader(envelope.body)
        Identity.decode(r)
        _seed, _window_ms = r.u64(), r.u16()
        if not 1 <= r.u8() <= 16 or not 8 <= r.remaining <= 1000:
            raise WireError("a digest's hash count or filter size is out of bounds")
        return Parsed(envelope)
    if envelope.kind == KIND_REPAIR:
        chunk = SyncChunk.decode(envelope.body)
        if chunk.members or chunk.certificates or chunk.resume or chunk.walk_end:
            raise WireError("a repair chunk carries only items")
        return Parsed(envelope, sync=chunk)
    if envelope.kind in (KIND_HANDSHAKE_INIT, KIND_HANDSHAKE_RESPONSE):
        r = Reader(envelope.body)
        Identity.decode(r)
        Identity.decode(r)
        r.u32()
        if envelope.kind == KIND_HANDSHAKE_RESPONSE:
            r.u32()
        r.take(32)
        if r.remaining or envelope.in_session:
            raise WireError("a handshake message is signed and ends after its public key")
        return Parsed(envelope)
    if envelope.kind == KIND_HANDSHAKE_CONFIRM:
        r = Reader(envelope.body)
        Identity.decode(r)
        if r.remaining or not envelope.in_session:
            raise WireError("a handshake confirm is an identity in the session form")
        return Parsed(envelope)
    raise WireError(f"message kind {envelope.kind}")


# --- forging --------------------------------------------------------------------------


class Forger:
    """A holder of the shared key and of one site key (``signer``; None signs with zeros),
    writing whole frames: it signs as itself, or puts any identity in a body and signs it
    anyway. Sequence numbers count up from 1 unless given."""

    def __init__(self, key: bytes, signer: Signer | None, identity: Identity) -> None:
        self.key = key
        self.signer = signer
        self.identity = identity
        self.seq = 0

    def frame(
        self,
        kind: int,
        body: bytes,
        dst: Identity | tuple[str, int] | str,
        *,
        seq: int | None = None,
        sent_at_ms: int | None = None,
    ) -> bytes:
        """A sealed frame of one message to ``dst`` (a node's identity or address)."""
        if isinstance(dst, Identity):
            dst = (dst.host, dst.port)
        elif isinstance(dst, str):
            dst = split_address(dst)
        if seq is None:
            self.seq += 1
            seq = self.seq
        message = seal_message(
            kind,
            body,
            seq=seq,
            sent_at_ms=now_ms() if sent_at_ms is None else sent_at_ms,
            dst=dst,
            signer=self.signer,
        )
        return seal(self.key, message)

    def hello(
        self,
        dst: Identity,
        chain: Sequence[bytes],
        *,
        identity: Identity | None = None,
        want_reply: bool = False,
        protocols: tuple[int, int] | None = PROTOCOLS,
        seq: int | None = None,
        sent_at_ms: int | None = None,
    ) -> bytes:
        """A ``HELLO`` presenting ``chain`` as ``identity`` (this forger's by default),
        announcing ``protocols`` (this build's range by default; None announces none, as
        release 0.1.0 did)."""
        body = hello_body(
            identity or self.identity, chain, want_reply=want_reply, protocols=protocols
        )
        return self.frame(KIND_HELLO, body, dst, seq=seq, sent_at_ms=sent_at_ms)

    def announce(self, dst: Identity, *, src: Identity | None = None) -> bytes:
        """A foca ``Announce`` to a seed: its destination is a placeholder at the address."""
        placeholder = Identity(b"", dst.host, dst.port, 0)
        body = foca_body(src or self.identity, placeholder, ANNOUNCE)
        return self.frame(KIND_FOCA, body, dst)
