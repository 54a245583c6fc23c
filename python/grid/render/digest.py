"""The overlay's two fingerprints: the content digest (SHA-256 over the RFC 8785 canonical
form of the routing content) and each candidate's ``stable_id`` (FNV-1a, 32 bits)."""

from __future__ import annotations

import hashlib
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import rfc8785

FNV_OFFSET_BASIS = 2166136261
FNV_PRIME = 16777619
_MASK_32 = 0xFFFFFFFF


def _content(network: str, local_site: str, candidates: Sequence[Any]) -> dict[str, Any]:
    return {"network": network, "local_site": local_site, "candidates": list(candidates)}


def content_digest(network: str, local_site: str, candidates: Sequence[Any]) -> str:
    """Lowercase hex SHA-256 of the canonical ``{network, local_site, candidates}``.

    ``candidates`` are taken as they are (unknown fields included). Raises
    ``rfc8785.CanonicalizationError`` (a ``ValueError``) for values JSON cannot carry
    exactly: NaN, infinities, integers beyond 2**53.
    """
    return hashlib.sha256(rfc8785.dumps(_content(network, local_site, candidates))).hexdigest()


def rendered_content_digest(network: str, local_site: str, candidates: Sequence[Any]) -> str:
    """:func:`content_digest` of candidates that share their shape, as rendered ones do:
    the same bytes are hashed, serialized faster because rfc8785's output for what the
    candidates share (member names, repeated values) is made once and reused.

    Meant for the renderer's own, shallow documents; :func:`content_digest` remains the
    reference for arbitrary ones (this takes two Python frames per level of nesting where
    rfc8785 takes one, so a deeply nested value meets the recursion limit sooner).
    """
    canonical = _CanonicalWriter().serialize(_content(network, local_site, candidates))
    return hashlib.sha256(canonical).hexdigest()


_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})

_SLOT = re.compile(rb':"\\u0000(\d+)\\u0000"')
"""A member's placeholder value in rfc8785's output. Anchored on the colon: inside a
canonical string every quote is escaped, so this matches only where a value starts."""


class _ObjectShape:
    """RFC 8785 serialization of objects with given member names, from one serialization
    of that shape by rfc8785.

    JCS is compositional: an object's canonical form is fixed by its member names (which
    decide the order) and by each value's own canonical form. So rfc8785 serializes the
    names once with a numbered placeholder as each value, and an object of this shape is
    that output with each placeholder replaced by the canonical form of its value.
    """

    __slots__ = ("_format", "_values_in_order")

    def __init__(self, names: tuple[str, ...]) -> None:
        placeholders = {name: f"\x00{index}\x00" for index, name in enumerate(names)}
        parts = _SLOT.split(rfc8785.dumps(placeholders))
        fixed, slots = parts[0::2], [names[int(index)] for index in parts[1::2]]
        # The pattern took the colon before each placeholder: put it back with the slot.
        self._format = b":%b".join(part.replace(b"%", b"%%") for part in fixed)
        self._values_in_order: Callable[[Mapping[str, bytes]], tuple[bytes, ...]]
        if len(slots) > 1:
            self._values_in_order = operator.itemgetter(*slots)
        else:  # itemgetter returns a tuple only for two names or more
            self._values_in_order = lambda values: tuple(values[name] for name in slots)

    def serialize(self, canonical_values: Mapping[str, bytes]) -> bytes:
        """The object whose members' canonical forms are ``canonical_values``."""
        return self._format % self._values_in_order(canonical_values)


class _CanonicalWriter:
    """RFC 8785 serialization of one document, remembering rfc8785's output for every
    object shape and every scalar it has seen: a rendered overlay repeats the same member
    names, names, sites, states and contributions many times."""

    __slots__ = ("_scalars", "_shapes")

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, ...], _ObjectShape] = {}
        self._scalars: dict[tuple[type, Any], bytes] = {}

    def serialize(self, value: Any) -> bytes:
        """The canonical form of ``value``; rfc8785 refuses what it cannot carry."""
        value_type = type(value)
        if value_type in _SCALAR_TYPES:
            # Keyed by type too: True == 1 == 1.0, but they are written differently.
            key = (value_type, value)
            known = self._scalars.get(key)
            if known is None:
                known = self._scalars[key] = rfc8785.dumps(value)
            return known
        if isinstance(value, dict):
            names = tuple(value)
            shape = self._shapes.get(names)
            if shape is None:
                shape = self._shapes[names] = _ObjectShape(names)
            serialize = self.serialize
            return shape.serialize({name: serialize(member) for name, member in value.items()})
        if isinstance(value, list | tuple):
            # An array is its elements' canonical forms, comma-separated (no whitespace).
            return b"[" + b",".join([self.serialize(element) for element in value]) + b"]"
        return rfc8785.dumps(value)


def fnv1a_32(data: bytes) -> int:
    """FNV-1a over ``data``, 32 bits."""
    return _fnv1a_32_from(FNV_OFFSET_BASIS, data)


def _fnv1a_32_from(value: int, data: bytes) -> int:
    """FNV-1a over ``data``, continuing from ``value``, the state reached over what came
    before it."""
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & _MASK_32
    return value


@lru_cache(maxsize=16)
def _state_after_kind(kind: str) -> int:
    """The FNV-1a state after ``kind/``, which starts every stable_id of that kind (a
    third of the bytes hashed, and there are only a couple of kinds)."""
    return fnv1a_32(f"{kind}/".encode())


def stable_id(kind: str, name: str, site: str, cluster: str) -> str:
    """A candidate's ``stable_id``: FNV-1a 32 over the UTF-8 of ``kind/name/site/cluster``,
    as 8 lowercase hex digits."""
    return f"{_fnv1a_32_from(_state_after_kind(kind), f'{name}/{site}/{cluster}'.encode()):08x}"
