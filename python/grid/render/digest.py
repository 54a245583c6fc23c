"""The overlay's two fingerprints: the content digest (SHA-256 over the RFC 8785 canonical
form of the routing content) and each candidate's ``stable_id`` (FNV-1a, 32 bits)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grid import _native

CONTENT_MEMBERS = ("network", "local_site", "candidates")
"""The members of the overlay object that the content digest covers."""


def content_digest(network: str, local_site: str, candidates: Sequence[Any]) -> str:
    """Lowercase hex SHA-256 of the canonical ``{network, local_site, candidates}``.

    ``candidates`` are taken as they are (unknown fields included). Canonicalization and
    hashing happen in ``grid._native``, which raises :class:`~grid.errors.CanonicalJsonError`
    (a ``ValueError``) for values JSON cannot carry exactly (NaN, infinities, integers beyond
    ±(2**53 - 1)) and for anything that is not a JSON value.
    """
    content = dict(zip(CONTENT_MEMBERS, (network, local_site, list(candidates)), strict=True))
    return _native.canonical_digest(content)


def document_json_and_digest(
    document: Mapping[str, Any], digest_placeholder: object
) -> tuple[bytes, str]:
    """An overlay document as ``json.dumps(document, ensure_ascii=False, separators=(",",
    ":")).encode()`` would write it, and the :func:`content_digest` of its ``overlay``
    member, from one walk (in ``grid._native``) of the document.

    The digest is written wherever ``digest_placeholder`` (by identity; an object that is
    not a JSON value) stands in the document: the envelope carries the digest of the
    content it wraps. Raises :class:`~grid.errors.CanonicalJsonError` as
    :func:`content_digest` does.
    """
    return _native.compact_json_and_digest(
        document, "overlay", list(CONTENT_MEMBERS), digest_placeholder
    )


def fnv1a_32(data: bytes) -> int:
    """FNV-1a over ``data``, 32 bits."""
    return _native.fnv1a_32(data)


def stable_id(kind: str, name: str, site: str, cluster: str) -> str:
    """A candidate's ``stable_id``: FNV-1a 32 over the UTF-8 of ``kind/name/site/cluster``,
    as 8 lowercase hex digits."""
    return _native.stable_id(kind, name, site, cluster)
