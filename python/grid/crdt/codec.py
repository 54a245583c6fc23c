"""Canonical bytes for state items, and a strict reader for them.

An item payload is one format byte followed by canonical JSON: object keys sorted, no
whitespace, ASCII only, integers only (money, ratios and times are fixed-point integers).
Equal values give equal bytes. Decoders re-encode what they read and insist on getting the
payload back (or, for signals items, read them with a grammar that admits only the canonical
form), so every state has exactly one encoding and anything else is refused.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import NoReturn, Protocol, TypeAlias

from grid.errors import CrdtDecodeError, CrdtLimitError

FORMAT_VERSION = 1
"""The first byte of gateway, certificate, metadata and spend payloads; a reader refuses
any other."""

PROVIDER_FORMAT_VERSION = 2
"""The first byte of provider catalogue and signals payloads. Format 1 carried a provider
whole, signals included, in one item; a reader refuses it, and a format 1 reader refuses
these."""

MAX_ITEM_BYTES = 1024
"""Largest item as the gossip transport frames it (origin, lane, key, version, payload and
the origin's signature), so that it fits one UDP packet next to the membership protocol's
own bytes. Larger state is split across keys."""

ITEM_OVERHEAD_BYTES = 75
"""What the transport adds around origin, key and payload: their length bytes, the lane
byte, the 64-bit version and the 64-byte signature."""

MAX_KEY_BYTES = 128
"""Longest item key the transport carries."""

MAX_SAFE_INT = 2**53 - 1
"""Largest integer every JSON reader keeps exactly; every integer on the wire stays below."""

Json: TypeAlias = bool | int | str | list["Json"] | dict[str, "Json"] | None


class WireValue(Protocol):
    """A value with one canonical JSON form."""

    def to_wire(self) -> Json: ...


def canonical_json(value: Json) -> bytes:
    """The canonical JSON bytes of ``value``."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def value_bytes(value: WireValue | Json) -> bytes:
    """Canonical bytes of a register value: what breaks ties between equal stamps."""
    if value is None or isinstance(value, bool | int | str | list | dict):
        return canonical_json(value)
    return canonical_json(value.to_wire())


def item_bytes(origin: str, key: str, payload: bytes) -> int:
    """The size of an item as the transport frames it."""
    return ITEM_OVERHEAD_BYTES + len(origin.encode()) + len(key.encode()) + len(payload)


def frame(body: Json, origin: str, key: str, what: str, version: int = FORMAT_VERSION) -> bytes:
    """The payload of the item ``key`` of ``origin`` in format ``version``, or
    :class:`~grid.errors.CrdtLimitError` if the item would exceed :data:`MAX_ITEM_BYTES`
    (``what`` names it in the message)."""
    payload = bytes((version,)) + canonical_json(body)
    size = item_bytes(origin, key, payload)
    if size > MAX_ITEM_BYTES:
        raise CrdtLimitError(
            f"{what} makes a {size}-byte item, over the {MAX_ITEM_BYTES}-byte limit: "
            "make it smaller or split it across keys"
        )
    return payload


def unframe(payload: object, version: int = FORMAT_VERSION) -> object:
    """The JSON value inside a payload of format ``version``, checked for size, format byte,
    ASCII, duplicate keys, floats and non-finite constants. The caller checks the shape and
    canonical form."""
    if not isinstance(payload, bytes):
        raise CrdtDecodeError("payload must be bytes")
    if len(payload) > MAX_ITEM_BYTES:
        raise CrdtDecodeError(
            f"payload is {len(payload)} bytes, over the {MAX_ITEM_BYTES}-byte item limit"
        )
    if not payload:
        raise CrdtDecodeError("payload is empty")
    if payload[0] != version:
        raise CrdtDecodeError(
            f"payload format {payload[0]} is not supported for this item (format {version})"
        )
    try:
        text = payload[1:].decode("ascii")
        return json.loads(
            text,
            object_pairs_hook=_object_without_duplicates,
            parse_float=_refuse_float,
            parse_constant=_refuse_constant,
        )
    except json.JSONDecodeError as exc:
        raise CrdtDecodeError(f"payload is not JSON: {exc.msg} at byte {exc.pos + 1}") from None
    except UnicodeDecodeError:
        raise CrdtDecodeError("payload is not ASCII") from None
    except RecursionError:
        raise CrdtDecodeError("payload nests too deeply") from None


def require_canonical(payload: bytes, reencoded: bytes) -> None:
    """Refuse a payload that decoded fine but is not the one encoding of what it holds."""
    if payload != reencoded:
        raise CrdtDecodeError("payload is not in canonical form")


def _object_without_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise CrdtDecodeError("payload repeats a key in one object")
    return result


def _refuse_float(_text: str) -> NoReturn:
    raise CrdtDecodeError("payload holds a non-integer number")


def _refuse_constant(_text: str) -> NoReturn:
    raise CrdtDecodeError("payload holds NaN or Infinity")


def fail(where: str, problem: str) -> NoReturn:
    """Raise the decode error for field ``where``."""
    raise CrdtDecodeError(f"{where}: {problem}")


def read_object(
    value: object,
    where: str,
    required: Collection[str],
    optional: Collection[str] = (),
) -> dict[str, object]:
    """A JSON object with exactly the ``required`` keys and any of the ``optional`` ones."""
    if not isinstance(value, dict):
        fail(where, "must be an object")
    missing = [key for key in required if key not in value]
    if missing:
        fail(where, f"lacks {', '.join(sorted(missing))}")
    unknown = [key for key in value if key not in required and key not in optional]
    if unknown:
        fail(where, f"has unknown fields {', '.join(sorted(unknown))}")
    return value


def read_list(value: object, where: str, length: int | None = None) -> list[object]:
    """A JSON array, of exactly ``length`` entries when given."""
    if not isinstance(value, list):
        fail(where, "must be an array")
    if length is not None and len(value) != length:
        fail(where, f"must have {length} entries")
    return value


def read_int(value: object, where: str, low: int = 0, high: int = MAX_SAFE_INT) -> int:
    """A JSON integer between ``low`` and ``high`` (booleans are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        fail(where, "must be an integer")
    if not low <= value <= high:
        fail(where, f"must be between {low} and {high}")
    return value


def read_str(value: object, where: str) -> str:
    """A JSON string (its syntax is checked by the record it belongs to)."""
    if not isinstance(value, str):
        fail(where, "must be a string")
    return value


def read_bool(value: object, where: str) -> bool:
    """A JSON boolean."""
    if not isinstance(value, bool):
        fail(where, "must be true or false")
    return value
