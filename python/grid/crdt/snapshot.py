"""What one site publishes about itself, split into small items on four lanes.

Lanes and keys (one item per key; a newer version of a key supersedes the older one):

- ``state``: ``provider/<name>`` (one provider's catalogue: spec, models, tools, agents),
  ``signals/<name>`` (its phase, health and load signals), ``budget/<digest>/<epoch>``
  (this site's spend slot for a tenant's budget window in one of its lives);
- ``gateway``: ``gateway`` (the site's gateway address and TLS mode);
- ``cert``: ``cert/<i>`` (chunk ``i`` of the site's public certificate PEM);
- ``metadata``: ``metadata`` (geography, labels, grid id).

Every item is written by one site only, its origin. So stamps, dots and causal contexts
inside an item carry no writer ids: the writer is the ``site`` the payload names (a signals
item carries a tag of it instead), which must be the site the transport says sent it.
Revisions inside an item are written as offsets below the item's revision (its version),
which keeps an item small.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeAlias, TypeVar

from grid.crdt.codec import (
    MAX_ITEM_BYTES,
    MAX_KEY_BYTES,
    MAX_SAFE_INT,
    PROVIDER_FORMAT_VERSION,
    Json,
    WireValue,
    canonical_json,
    fail,
    frame,
    item_bytes,
    read_int,
    read_list,
    read_object,
    read_str,
    require_canonical,
    unframe,
    value_bytes,
)
from grid.crdt.lww import LWWRegister, Stamp
from grid.crdt.orset import Dot, ORSet
from grid.crdt.pages import PAGE_PREFIX, SignalsPage, decode_page, page_number
from grid.crdt.records import (
    GatewayRecord,
    ModelEntry,
    ProviderRecord,
    ProviderSpec,
    SiteMetadata,
    check_catalog_name,
    check_provider_name,
    check_site_id,
    check_tenant,
    check_window,
)
from grid.crdt.signals import SignalsState, decode_signals, site_tag
from grid.errors import CrdtDecodeError, CrdtForgedItemError, CrdtValueError

STATE_LANE = "state"
GATEWAY_LANE = "gateway"
CERT_LANE = "cert"
METADATA_LANE = "metadata"
LANES = (STATE_LANE, GATEWAY_LANE, CERT_LANE, METADATA_LANE)

GATEWAY_KEY = "gateway"
METADATA_KEY = "metadata"
_PROVIDER_PREFIX = "provider/"
SIGNALS_PREFIX = "signals/"
MAX_PROVIDER_NAME = MAX_KEY_BYTES - len(_PROVIDER_PREFIX)
"""Longest provider name that leaves both its keys within the transport's key limit."""
SPEND_PREFIX = "budget/"
_CERT_PREFIX = "cert/"

MAX_CERT_PEM_CHARS = 16 * 1024
CERT_CHUNK_CHARS = 640
"""PEM characters per cert item: with JSON escapes and the item's other fields, a chunk
stays under the item limit."""
MAX_CERT_CHUNKS = -(-MAX_CERT_PEM_CHARS // CERT_CHUNK_CHARS)

# Any spelling of a private key marker, in any case, with any separator between the words.
_PRIVATE_KEY = re.compile(r"PRIVATE[\s_-]*KEY", re.IGNORECASE)
_PEM_LABEL = re.compile(r"-----(?:BEGIN|END) ([^-]*)-----")
_PEM_TEXT = re.compile(r"[A-Za-z0-9+/=\r\n -]*")
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")

E = TypeVar("E", bound=Hashable)
V = TypeVar("V", bound="WireValue | Json")


@dataclass(frozen=True, slots=True)
class Item:
    """One unit of gossip: ``payload`` is the canonical encoding; ``version`` rises with
    every change of ``(lane, key)`` at its origin."""

    lane: str
    key: str
    version: int
    payload: bytes

    def __repr__(self) -> str:
        return (
            f"Item(lane={self.lane!r}, key={self.key!r}, version={self.version}, "
            f"{len(self.payload)} bytes)"
        )


def check_keyed_provider_name(name: object, what: str = "provider name") -> str:
    """A provider name short enough for its keys: at most :data:`MAX_PROVIDER_NAME`
    characters of a DNS subdomain."""
    check_provider_name(name, what)
    assert isinstance(name, str)
    if len(name) > MAX_PROVIDER_NAME:
        raise CrdtValueError(f"provider names are limited to {MAX_PROVIDER_NAME} characters")
    return name


def provider_key(name: str) -> str:
    """The ``state`` lane key of a provider's catalogue."""
    return _PROVIDER_PREFIX + check_keyed_provider_name(name)


def signals_key(name: str) -> str:
    """The ``state`` lane key of a provider's signals."""
    return SIGNALS_PREFIX + check_keyed_provider_name(name)


def spend_key(tenant: str, window: str, epoch: int) -> str:
    """The ``state`` lane key of one site's spend slot for a tenant's budget window.

    Tenant and window are named by a digest, so that long names still make a short key;
    the item itself carries them.
    """
    named = f"{check_tenant(tenant)}\n{check_window(window)}".encode()
    return f"{SPEND_PREFIX}{hashlib.sha256(named).hexdigest()[:32]}/{epoch}"


def cert_key(index: int) -> str:
    """The ``cert`` lane key of one certificate chunk."""
    return f"{_CERT_PREFIX}{index}"


# ---------------------------------------------------------------------------------------
# Provider records


@dataclass(frozen=True, slots=True)
class ProviderState:
    """The replicated catalogue of one provider: what it is and what it offers.

    LWW registers hold the declaration (``spec``, None once the provider is removed);
    OR-Sets hold models, tools and agents. The ``header`` register is written on every
    change: its stamp is the catalogue's version and its value the writer's clock
    (milliseconds) at that change. The phase, health and load travel apart, as a
    :class:`~grid.crdt.signals.SignalsState`.
    """

    name: str
    header: LWWRegister[int]
    spec: LWWRegister[ProviderSpec | None]
    models: ORSet[ModelEntry]
    tools: ORSet[str]
    agents: ORSet[str]
    _read: ProviderRecord | None = field(default=None, init=False, repr=False, compare=False)
    """The provider as :meth:`record` last read it: the catalogue part is this state's for
    good, so later reads only change the phase and metrics."""

    @property
    def version(self) -> int:
        """The revision of the latest change."""
        return self.header.stamp.revision

    @property
    def updated_at(self) -> float:
        """The writer's clock at the latest change, in seconds."""
        return self.header.value / 1000

    @property
    def removed(self) -> bool:
        """Whether this is the tombstone of a removed provider."""
        return self.spec.value is None

    @classmethod
    def created(cls, record: ProviderRecord, stamp: Stamp, at_ms: int) -> ProviderState:
        """The catalogue of a provider written for the first time."""
        dot = Dot(stamp.writer, stamp.revision)
        return cls(
            name=record.name,
            header=LWWRegister(at_ms, stamp),
            spec=LWWRegister(record.spec, stamp),
            models=ORSet[ModelEntry]().update(adds=record.models, dot=dot),
            tools=ORSet[str]().update(adds=record.tools, dot=dot),
            agents=ORSet[str]().update(adds=record.agents, dot=dot),
        )

    def holds(self, record: ProviderRecord) -> bool:
        """Whether this is a live catalogue saying what ``record`` says (phase and metrics
        aside)."""
        return (
            self.spec.value == record.spec
            and self.models.elements == frozenset(record.models)
            and self.tools.elements == frozenset(record.tools)
            and self.agents.elements == frozenset(record.agents)
        )

    def written(self, record: ProviderRecord, stamp: Stamp, at_ms: int) -> ProviderState:
        """This catalogue after a local write of ``record``: registers that differ are
        assigned, sets gain and lose what differs."""
        dot = Dot(stamp.writer, stamp.revision)
        return ProviderState(
            name=self.name,
            header=self.header.assign(at_ms, stamp),
            spec=_assigned(self.spec, record.spec, stamp),
            models=_synced(self.models, record.models, dot),
            tools=_synced(self.tools, record.tools, dot),
            agents=_synced(self.agents, record.agents, dot),
        )

    def tombstone(self, stamp: Stamp, at_ms: int) -> ProviderState:
        """This catalogue after the provider's removal: no spec and empty sets."""
        return ProviderState(
            name=self.name,
            header=self.header.assign(at_ms, stamp),
            spec=self.spec.assign(None, stamp),
            models=self.models.update(removes=self.models.elements),
            tools=self.tools.update(removes=self.tools.elements),
            agents=self.agents.update(removes=self.agents.elements),
        )

    def touched(self, stamp: Stamp, at_ms: int) -> ProviderState:
        """This catalogue under a new version and nothing else changed."""
        return ProviderState(
            self.name,
            self.header.assign(at_ms, stamp),
            self.spec,
            self.models,
            self.tools,
            self.agents,
        )

    def merge(self, other: ProviderState) -> ProviderState:
        """The join of two catalogues of the same provider, field by field."""
        if other is self:
            return self
        if other.name != self.name:
            raise CrdtValueError("only states of the same provider merge")
        return ProviderState(
            self.name,
            self.header.merge(other.header),
            self.spec.merge(other.spec),
            self.models.merge(other.models),
            self.tools.merge(other.tools),
            self.agents.merge(other.agents),
        )

    def readable(self, signals: SignalsState | None) -> bool:
        """Whether :meth:`record` reads a provider with these signals (without building
        it)."""
        return self.spec.value is not None and signals is not None and signals.readable

    def record(self, signals: SignalsState | None) -> ProviderRecord | None:
        """The provider as readers see it, whole: None for a removed provider and for one
        whose signals have not arrived (or are void)."""
        spec = self.spec.value
        if signals is None or spec is None or not self.readable(signals):
            return None
        metrics = signals.metrics
        assert metrics is not None and signals.phase is not None  # readable says so
        read = self._read
        if read is not None:
            return read.with_signals(signals.phase, metrics)
        read = ProviderRecord(
            name=self.name,
            spec=spec,
            phase=signals.phase,
            metrics=metrics,
            models=_one_per_name(self.models.elements),
            tools=tuple(self.tools.elements),
            agents=tuple(self.agents.elements),
        )
        object.__setattr__(self, "_read", read)
        return read


def _assigned(register: LWWRegister[V], value: V, stamp: Stamp) -> LWWRegister[V]:
    return register if register.value == value else register.assign(value, stamp)


def _synced(current: ORSet[E], wanted: Iterable[E], dot: Dot) -> ORSet[E]:
    target = frozenset(wanted)
    have = current.elements
    if target == have:
        return current
    return current.update(adds=target - have, removes=have - target, dot=dot)


def _one_per_name(models: Iterable[ModelEntry]) -> tuple[ModelEntry, ...]:
    # Two entries share a name only after concurrent writes of one record; every site keeps
    # the same one.
    chosen: dict[str, ModelEntry] = {}
    for entry in sorted(models, key=value_bytes):
        chosen[entry.name] = entry
    return tuple(chosen.values())


_PROVIDER_FIELDS = ("agents", "at", "models", "name", "rev", "site", "spec", "tools")


def encode_provider(site: str, state: ProviderState) -> Item:
    """The item that publishes ``state`` as ``site``'s provider catalogue."""
    rev = state.version
    spec = state.spec.value
    body: dict[str, Json] = {
        "site": site,
        "name": state.name,
        "rev": rev,
        "at": state.header.value,
        "spec": _register_wire(state.spec, None if spec is None else spec.to_wire(), site, rev),
        "models": _orset_wire(state.models, ModelEntry.to_wire, site, rev),
        "tools": _orset_wire(state.tools, _identity, site, rev),
        "agents": _orset_wire(state.agents, _identity, site, rev),
    }
    key = provider_key(state.name)
    payload = frame(body, site, key, f"provider {state.name!r}", PROVIDER_FORMAT_VERSION)
    return Item(STATE_LANE, key, rev, payload)


def _decode_provider(origin: str, name: str, version: int, payload: bytes) -> ProviderState:
    body = read_object(unframe(payload, PROVIDER_FORMAT_VERSION), "provider item", _PROVIDER_FIELDS)
    rev = _read_header(body, origin, version)
    if read_str(body["name"], "name") != name:
        fail("name", "does not match the item key")
    state = ProviderState(
        name=name,
        header=LWWRegister(read_int(body["at"], "at"), Stamp(rev, origin)),
        spec=_read_register(body["spec"], "spec", origin, rev, _read_spec),
        models=_read_orset(body["models"], "models", origin, rev, ModelEntry.from_wire),
        tools=_read_orset(body["tools"], "tools", origin, rev, _read_catalog_name),
        agents=_read_orset(body["agents"], "agents", origin, rev, _read_catalog_name),
    )
    require_canonical(payload, encode_provider(origin, state).payload)
    return state


def _read_spec(value: object, where: str) -> ProviderSpec | None:
    return None if value is None else ProviderSpec.from_wire(value, where)


def encode_signals(site: str, state: SignalsState) -> Item:
    """The item that publishes ``state`` as ``site``'s signals of one provider (the
    register's payload was encoded for its site when it was written or received)."""
    if state.payload.split(b",", 2)[1] != b"%d" % site_tag(site):
        raise CrdtValueError(f"state written by another site cannot be published as {site!r}")
    return Item(STATE_LANE, signals_key(state.name), state.version, state.payload)


def _read_catalog_name(value: object, where: str) -> str:
    return check_catalog_name(read_str(value, where), where)


def _identity(value: str) -> Json:
    return value


# ---------------------------------------------------------------------------------------
# Registers and sets inside an item


def _offset(revision: int, writer: str, site: str, rev: int) -> int:
    if writer != site or not 0 < revision <= rev:
        raise CrdtValueError(f"state written by another site cannot be published as {site!r}")
    return rev - revision


def _register_wire(register: LWWRegister[V], value: Json, site: str, rev: int) -> Json:
    return [_offset(register.stamp.revision, register.stamp.writer, site, rev), value]


def _read_register(
    value: object,
    where: str,
    site: str,
    rev: int,
    read_value: Callable[[object, str], V],
) -> LWWRegister[V]:
    offset, raw = read_list(value, where, 2)
    revision = rev - read_int(offset, f"{where} offset", 0, rev - 1)
    return LWWRegister(read_value(raw, f"{where} value"), Stamp(revision, site))


def _orset_wire(elements: ORSet[E], to_wire: Callable[[E], Json], site: str, rev: int) -> Json:
    context = elements.context
    if set(context) - {site}:
        raise CrdtValueError(f"state written by another site cannot be published as {site!r}")
    seen = context.get(site, 0)
    entries: list[tuple[bytes, Json]] = []
    for element, dots in elements.entries():
        element_wire = to_wire(element)
        offsets = sorted(_offset(d.counter, d.replica, site, rev) for d in dots)
        entries.append((canonical_json(element_wire), [element_wire, list[Json](offsets)]))
    entries.sort(key=lambda entry: entry[0])
    return [rev - seen, [wire for _, wire in entries]]


def _read_orset(
    value: object,
    where: str,
    site: str,
    rev: int,
    read_element: Callable[[object, str], E],
) -> ORSet[E]:
    raw_seen, raw_entries = read_list(value, where, 2)
    seen = rev - read_int(raw_seen, f"{where} context", 0, rev)
    entries: dict[E, list[Dot]] = {}
    for index, raw in enumerate(read_list(raw_entries, f"{where} entries")):
        at = f"{where}[{index}]"
        raw_element, raw_dots = read_list(raw, at, 2)
        element = read_element(raw_element, at)
        if element in entries:
            fail(at, "repeats an element")
        entries[element] = [
            Dot(site, rev - read_int(offset, f"{at} dot", 0, rev - 1))
            for offset in read_list(raw_dots, f"{at} dots")
        ]
    return ORSet(entries, {site: seen} if seen else {})


def _read_header(body: dict[str, object], origin: str, version: int) -> int:
    site = check_site_id(read_str(body["site"], "site"), "site")
    if site != origin:
        raise CrdtForgedItemError(f"an item sent by {origin!r} describes site {site!r}")
    rev = read_int(body["rev"], "rev", 1)
    if rev != version:
        fail("rev", "differs from the item version")
    return rev


# ---------------------------------------------------------------------------------------
# Budget spend slots


@dataclass(frozen=True, slots=True)
class SpendSlot:
    """One site's spend for a tenant's budget window in one of its lives (``epoch``)."""

    tenant: str
    window: str
    epoch: int
    spend: int
    revision: int


def encode_spend(site: str, slot: SpendSlot) -> Item:
    """The item that publishes ``site``'s spend slot."""
    body: dict[str, Json] = {
        "site": site,
        "rev": slot.revision,
        "spend": slot.spend,
        "tenant": slot.tenant,
        "window": slot.window,
    }
    key = spend_key(slot.tenant, slot.window, slot.epoch)
    return Item(STATE_LANE, key, slot.revision, frame(body, site, key, "spend slot"))


def _decode_spend(origin: str, key: str, version: int, payload: bytes) -> SpendSlot:
    _, separator, raw_epoch = key[len(SPEND_PREFIX) :].partition("/")
    if not separator:
        fail("key", "a budget key is budget/<digest>/<epoch>")
    fields = ("rev", "site", "spend", "tenant", "window")
    body = read_object(unframe(payload), "spend item", fields)
    rev = _read_header(body, origin, version)
    slot = SpendSlot(
        tenant=check_tenant(read_str(body["tenant"], "tenant")),
        window=check_window(read_str(body["window"], "window")),
        epoch=_read_decimal(raw_epoch, "key epoch", 1, MAX_SAFE_INT),
        spend=read_int(body["spend"], "spend"),
        revision=rev,
    )
    encoded = encode_spend(origin, slot)
    if encoded.key != key:
        fail("key", "does not match the tenant and window of the payload")
    require_canonical(payload, encoded.payload)
    return slot


def _read_decimal(text: str, where: str, low: int, high: int) -> int:
    if not text.isdigit() or not text.isascii() or (len(text) > 1 and text[0] == "0"):
        fail(where, "must be a decimal number without leading zeros")
    if len(text) > 16:
        fail(where, f"must be between {low} and {high}")
    return read_int(int(text), where, low, high)


# ---------------------------------------------------------------------------------------
# Gateway and metadata


@dataclass(frozen=True, slots=True)
class GatewayUpdate:
    """A received gateway register."""

    register: LWWRegister[GatewayRecord]


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    """A received metadata register."""

    register: LWWRegister[SiteMetadata]


def encode_gateway(site: str, register: LWWRegister[GatewayRecord]) -> Item:
    """The item that publishes ``site``'s gateway address."""
    return _encode_single(site, GATEWAY_LANE, GATEWAY_KEY, register, "gateway")


def encode_metadata(site: str, register: LWWRegister[SiteMetadata]) -> Item:
    """The item that publishes ``site``'s metadata."""
    return _encode_single(site, METADATA_LANE, METADATA_KEY, register, "metadata")


def _encode_single(
    site: str,
    lane: str,
    key: str,
    register: LWWRegister[GatewayRecord] | LWWRegister[SiteMetadata],
    field_name: str,
) -> Item:
    rev = register.stamp.revision
    _offset(rev, register.stamp.writer, site, rev)
    body: dict[str, Json] = {"site": site, "rev": rev, field_name: register.value.to_wire()}
    return Item(lane, key, rev, frame(body, site, key, f"{field_name} item"))


def _decode_gateway(origin: str, version: int, payload: bytes) -> GatewayUpdate:
    body = read_object(unframe(payload), "gateway item", ("gateway", "rev", "site"))
    rev = _read_header(body, origin, version)
    register = LWWRegister(GatewayRecord.from_wire(body["gateway"], "gateway"), Stamp(rev, origin))
    require_canonical(payload, encode_gateway(origin, register).payload)
    return GatewayUpdate(register)


def _decode_metadata(origin: str, version: int, payload: bytes) -> MetadataUpdate:
    body = read_object(unframe(payload), "metadata item", ("metadata", "rev", "site"))
    rev = _read_header(body, origin, version)
    register = LWWRegister(SiteMetadata.from_wire(body["metadata"], "metadata"), Stamp(rev, origin))
    require_canonical(payload, encode_metadata(origin, register).payload)
    return MetadataUpdate(register)


# ---------------------------------------------------------------------------------------
# Certificate chunks


def check_public_cert_pem(pem: object) -> str:
    """Refuse anything but a bundle of public certificates: non-ASCII or oversized text, no
    certificate block, any block that is not a certificate, and above all any private key
    marker. Messages never quote the PEM. (The trust module parses what passes.)"""
    if not isinstance(pem, str):
        raise CrdtValueError("a certificate PEM must be a string")
    if _PRIVATE_KEY.search(pem):
        raise CrdtValueError("the certificate PEM contains a private key marker")
    if not pem.isascii() or len(pem) > MAX_CERT_PEM_CHARS:
        raise CrdtValueError(
            f"a certificate PEM must be ASCII text of at most {MAX_CERT_PEM_CHARS} characters"
        )
    labels = _PEM_LABEL.findall(pem)
    if not labels or any(label != "CERTIFICATE" for label in labels):
        raise CrdtValueError("a certificate PEM must hold CERTIFICATE blocks and nothing else")
    return pem


@dataclass(frozen=True, slots=True)
class CertChunk:
    """Chunk ``index`` of ``count`` of a certificate PEM whose SHA-256 is ``digest``.

    A chunk at or beyond ``count`` is void (empty text): it overwrites a chunk left from an
    earlier, longer certificate, so stale text never lingers under a current revision.
    """

    index: int
    count: int
    digest: str
    text: str

    def __post_init__(self) -> None:
        if not 0 <= self.index < MAX_CERT_CHUNKS or not 1 <= self.count <= MAX_CERT_CHUNKS:
            raise CrdtValueError(f"a certificate has 1 to {MAX_CERT_CHUNKS} chunks")
        if not _HEX_DIGEST.fullmatch(self.digest):
            raise CrdtValueError("a certificate chunk digest is 64 lowercase hex digits")
        if len(self.text) > CERT_CHUNK_CHARS or not _PEM_TEXT.fullmatch(self.text):
            raise CrdtValueError(
                f"a certificate chunk holds at most {CERT_CHUNK_CHARS} PEM characters"
            )
        if _PRIVATE_KEY.search(self.text):
            raise CrdtValueError("a certificate chunk contains a private key marker")
        if (self.index < self.count) != bool(self.text):
            raise CrdtValueError("only chunks below the chunk count carry text")

    def to_wire(self) -> Json:
        return {"count": self.count, "pem": self.text, "sha256": self.digest}


def cert_chunks(pem: str) -> list[CertChunk]:
    """A checked certificate PEM cut into chunks."""
    check_public_cert_pem(pem)
    digest = hashlib.sha256(pem.encode("ascii")).hexdigest()
    texts = [
        pem[start : start + CERT_CHUNK_CHARS] for start in range(0, len(pem), CERT_CHUNK_CHARS)
    ]
    return [CertChunk(index, len(texts), digest, text) for index, text in enumerate(texts)]


def assemble_cert(chunks: Mapping[int, LWWRegister[CertChunk]]) -> str | None:
    """The certificate the chunks hold, or None while they do not all belong to the one
    chunk 0 names (same count and digest; the digest is then checked).

    Raises :class:`~grid.errors.CrdtValueError` if the assembled text is not a public
    certificate (a private key marker may straddle two chunks).
    """
    first = chunks.get(0)
    if first is None:
        return None
    count, digest = first.value.count, first.value.digest
    texts = []
    for index in range(count):
        chunk = chunks.get(index)
        if chunk is None or chunk.value.count != count or chunk.value.digest != digest:
            return None
        texts.append(chunk.value.text)
    pem = "".join(texts)
    if hashlib.sha256(pem.encode("ascii")).hexdigest() != digest:
        return None
    return check_public_cert_pem(pem)


@dataclass(frozen=True, slots=True)
class CertChunkUpdate:
    """A received certificate chunk register."""

    register: LWWRegister[CertChunk]


def encode_cert_chunk(site: str, register: LWWRegister[CertChunk]) -> Item:
    """The item that publishes one chunk of ``site``'s certificate."""
    rev = register.stamp.revision
    _offset(rev, register.stamp.writer, site, rev)
    chunk = register.value
    body: dict[str, Json] = {
        "site": site,
        "rev": rev,
        "count": chunk.count,
        "sha256": chunk.digest,
        "pem": chunk.text,
    }
    key = cert_key(chunk.index)
    return Item(CERT_LANE, key, rev, frame(body, site, key, "certificate chunk"))


def _decode_cert_chunk(origin: str, index: int, version: int, payload: bytes) -> CertChunkUpdate:
    body = read_object(unframe(payload), "cert item", ("count", "pem", "rev", "sha256", "site"))
    rev = _read_header(body, origin, version)
    chunk = CertChunk(
        index=index,
        count=read_int(body["count"], "count", 1, MAX_CERT_CHUNKS),
        digest=read_str(body["sha256"], "sha256"),
        text=read_str(body["pem"], "pem"),
    )
    register = LWWRegister(chunk, Stamp(rev, origin))
    require_canonical(payload, encode_cert_chunk(origin, register).payload)
    return CertChunkUpdate(register)


# ---------------------------------------------------------------------------------------
# Decoding any item

Fragment: TypeAlias = (
    ProviderState
    | SignalsState
    | SignalsPage
    | SpendSlot
    | GatewayUpdate
    | MetadataUpdate
    | CertChunkUpdate
)


def decode_item(origin: str, lane: str, key: str, version: int, payload: bytes) -> Fragment:
    """What one received item says, fully checked; raises
    :class:`~grid.errors.CrdtDecodeError` (or its :class:`~grid.errors.CrdtForgedItemError`
    when the item describes a site other than ``origin``) and has no effect otherwise."""
    try:
        check_site_id(origin, "origin")
        read_int(version, "version", 1)
        if not isinstance(key, str) or not key.isascii() or not 0 < len(key) <= MAX_KEY_BYTES:
            fail("key", f"must be 1 to {MAX_KEY_BYTES} ASCII characters")
        if isinstance(payload, bytes) and item_bytes(origin, key, payload) > MAX_ITEM_BYTES:
            fail("payload", f"makes an item over the {MAX_ITEM_BYTES}-byte limit")
        if lane == STATE_LANE and key.startswith(PAGE_PREFIX):
            number = page_number(key)
            return decode_page(
                origin, number, version, payload, lambda _: False, check_keyed_provider_name
            )
        if lane == STATE_LANE and key.startswith(SIGNALS_PREFIX):
            name = check_keyed_provider_name(key[len(SIGNALS_PREFIX) :], "key provider name")
            return decode_signals(origin, name, version, payload)
        if lane == STATE_LANE and key.startswith(_PROVIDER_PREFIX):
            name = check_keyed_provider_name(key[len(_PROVIDER_PREFIX) :], "key provider name")
            return _decode_provider(origin, name, version, payload)
        if lane == STATE_LANE and key.startswith(SPEND_PREFIX):
            return _decode_spend(origin, key, version, payload)
        if lane == GATEWAY_LANE and key == GATEWAY_KEY:
            return _decode_gateway(origin, version, payload)
        if lane == METADATA_LANE and key == METADATA_KEY:
            return _decode_metadata(origin, version, payload)
        if lane == CERT_LANE and key.startswith(_CERT_PREFIX):
            index = _read_decimal(key[len(_CERT_PREFIX) :], "key", 0, MAX_CERT_CHUNKS - 1)
            return _decode_cert_chunk(origin, index, version, payload)
    except CrdtValueError as exc:
        raise CrdtDecodeError(str(exc)) from None
    if lane not in LANES:
        raise CrdtDecodeError("unknown lane")
    raise CrdtDecodeError(f"unknown key in the {lane} lane")


# ---------------------------------------------------------------------------------------
# A site's published state as one value


@dataclass(frozen=True, slots=True)
class GridStateSnapshot:
    """Everything one site publishes about itself, except budget slots: its provider
    catalogues (tombstones included) and signals, gateway, certificate chunks and
    metadata.

    Immutable; :meth:`merge` is the join, :meth:`items` the canonical encoding, one item
    per key. Equal snapshots give equal items.
    """

    site: str
    providers: Mapping[str, ProviderState] = field(default_factory=lambda: MappingProxyType({}))
    gateway: LWWRegister[GatewayRecord] | None = None
    metadata: LWWRegister[SiteMetadata] | None = None
    cert_chunks: Mapping[int, LWWRegister[CertChunk]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    signals: Mapping[str, SignalsState] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        check_site_id(self.site)
        object.__setattr__(self, "providers", MappingProxyType(dict(self.providers)))
        object.__setattr__(self, "cert_chunks", MappingProxyType(dict(self.cert_chunks)))
        object.__setattr__(self, "signals", MappingProxyType(dict(self.signals)))

    def merge(self, other: GridStateSnapshot) -> GridStateSnapshot:
        """The join of two snapshots of the same site."""
        if other.site != self.site:
            raise CrdtValueError("only snapshots of the same site merge")
        providers = dict(self.providers)
        for name, state in other.providers.items():
            mine = providers.get(name)
            providers[name] = state if mine is None else mine.merge(state)
        signals = dict(self.signals)
        for name, register in other.signals.items():
            mine_signals = signals.get(name)
            signals[name] = register if mine_signals is None else mine_signals.merge(register)
        chunks = dict(self.cert_chunks)
        for index, chunk in other.cert_chunks.items():
            mine_chunk = chunks.get(index)
            chunks[index] = chunk if mine_chunk is None else mine_chunk.merge(chunk)
        return GridStateSnapshot(
            self.site,
            providers,
            _merge_optional(self.gateway, other.gateway),
            _merge_optional(self.metadata, other.metadata),
            chunks,
            signals,
        )

    def items(self) -> tuple[Item, ...]:
        """Every item of the snapshot, sorted by lane and key."""
        items = [encode_provider(self.site, state) for state in self.providers.values()]
        items.extend(encode_signals(self.site, register) for register in self.signals.values())
        if self.gateway is not None:
            items.append(encode_gateway(self.site, self.gateway))
        if self.metadata is not None:
            items.append(encode_metadata(self.site, self.metadata))
        items.extend(encode_cert_chunk(self.site, chunk) for chunk in self.cert_chunks.values())
        return tuple(sorted(items, key=lambda item: (item.lane, item.key)))

    def cert_pem(self) -> str | None:
        """The certificate the chunks hold, if they are complete and from one write."""
        return assemble_cert(self.cert_chunks)


R = TypeVar("R", LWWRegister[GatewayRecord], LWWRegister[SiteMetadata])


def _merge_optional(mine: R | None, theirs: R | None) -> R | None:
    if mine is None:
        return theirs
    if theirs is None:
        return mine
    return mine.merge(theirs)
