"""The overlay's two fingerprints: the content digest (SHA-256 over the RFC 8785 canonical
form of the routing content) and each candidate's ``stable_id`` (FNV-1a, 32 bits)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import rfc8785

FNV_OFFSET_BASIS = 2166136261
FNV_PRIME = 16777619
_MASK_32 = 0xFFFFFFFF


def content_digest(network: str, local_site: str, candidates: Sequence[Any]) -> str:
    """Lowercase hex SHA-256 of the canonical ``{network, local_site, candidates}``.

    ``candidates`` are taken as they are (unknown fields included). Raises
    ``rfc8785.CanonicalizationError`` (a ``ValueError``) for values JSON cannot carry
    exactly: NaN, infinities, integers beyond 2**53.
    """
    canonical = rfc8785.dumps(
        {"network": network, "local_site": local_site, "candidates": list(candidates)}
    )
    return hashlib.sha256(canonical).hexdigest()


def fnv1a_32(data: bytes) -> int:
    """FNV-1a over ``data``, 32 bits."""
    value = FNV_OFFSET_BASIS
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & _MASK_32
    return value


def stable_id(kind: str, name: str, site: str, cluster: str) -> str:
    """A candidate's ``stable_id``: FNV-1a 32 over the UTF-8 of ``kind/name/site/cluster``,
    as 8 lowercase hex digits."""
    return f"{fnv1a_32(f'{kind}/{name}/{site}/{cluster}'.encode()):08x}"
