"""The gateway's acceptance rules for an overlay document, applied in the contract's order.

Any document can be checked, whoever wrote it: the verdict is ``accept <revision>``,
``accept_legacy`` (a bare ``{network, local_site, candidates}`` payload) or
``reject <reason>`` with the contract's reason codes. The contract names no code for its
size rule; Grid reports ``too_large``.

A candidate's ``credential`` (part of rule 6) is a Secret reference and how the gateway
sends it: ``{"strategy": "bearer_token", "secretRef": {name, namespace, key}}``, or
``{"strategy": "apikey", "secretRef": {...}, "header": <HTTP header name>}`` (token
characters, 1..256). A field beyond those three, a missing ``strategy`` or ``secretRef``,
a value of the wrong type, a ``secretRef`` that is not exactly name, namespace and key (each
a non-blank string of at most 256 bytes) or a ``header`` that is not a header name is
``malformed_structure`` (no room for token bytes); a ``strategy`` string other than the two
is ``unsupported_credential_strategy``; ``bearer_token`` with a ``header`` or ``apikey``
without one is ``invalid_credential_combination``.

Where the credential rules sit in the contract's order: last in rule 6, after every other
rule 6 check of every candidate, and in three passes over all candidates (structure, then
strategy, then combination). So ``malformed_structure`` anywhere in the document wins over
the credential codes, and ``unsupported_credential_strategy`` anywhere wins over
``invalid_credential_combination``, whatever the candidates' order; rule 7 (size) comes
after.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from grid.errors import CanonicalJsonError
from grid.models.provider import HTTP_HEADER_NAME_PATTERN, MAX_HEADER_NAME_LENGTH
from grid.render.digest import content_digest
from grid.render.overlay import (
    API_KEY_STRATEGY,
    BEARER_TOKEN_STRATEGY,
    CREDENTIAL_STRATEGIES,
    MAX_CANDIDATES,
    MAX_DOCUMENT_BYTES,
)

SUPPORTED_SCHEMA_VERSION = "1.0.0"
ENVELOPE_FIELDS = ("schema_version", "revision", "content_digest", "scope", "provenance")
CANDIDATE_KINDS = frozenset({"inference_model", "mcp_tool"})
ADMISSION_STATES = frozenset({"new_and_existing", "existing_only", "none"})
SELECTION_TIERS = frozenset({"same_site", "same_zone", "same_region", "cross_region", "unknown"})
BREAKDOWN_FIELDS = frozenset(
    {"locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost", "total"}
)
SCOPE_FIELDS = ("network", "gateway", "namespace", "local_site")
CREDENTIAL_FIELDS = frozenset({"strategy", "secretRef", "header"})
SECRET_REF_FIELDS = frozenset({"name", "namespace", "key"})
MAX_STRING_BYTES = 256

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEADER_NAME = re.compile(HTTP_HEADER_NAME_PATTERN)
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


class VerdictKind(StrEnum):
    ACCEPT = "accept"
    ACCEPT_LEGACY = "accept_legacy"
    REJECT = "reject"


class RejectReason(StrEnum):
    """The contract's reason codes (and ``too_large`` for its size rule)."""

    MALFORMED_STRUCTURE = "malformed_structure"
    MISSING_SCHEMA_VERSION = "missing_schema_version"
    UNSUPPORTED_SCHEMA_VERSION = "unsupported_schema_version"
    DIGEST_MISMATCH = "digest_mismatch"
    REVISION_DIGEST_MISMATCH = "revision_digest_mismatch"
    SCOPE_MISMATCH = "scope_mismatch"
    UNSUPPORTED_CREDENTIAL_STRATEGY = "unsupported_credential_strategy"
    INVALID_CREDENTIAL_COMBINATION = "invalid_credential_combination"
    TOO_LARGE = "too_large"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the gateway would do with a document. ``str()`` is the one-line verdict;
    ``detail`` says which field broke which rule."""

    kind: VerdictKind
    revision: str | None = None
    reason: RejectReason | None = None
    detail: str = ""

    @property
    def accepted(self) -> bool:
        return self.kind is not VerdictKind.REJECT

    def __str__(self) -> str:
        if self.kind is VerdictKind.ACCEPT:
            return f"accept {self.revision}"
        if self.kind is VerdictKind.ACCEPT_LEGACY:
            return "accept_legacy"
        return f"reject {self.reason}"


@dataclass(frozen=True, slots=True)
class ExpectedScope:
    """The scope a reader expects; a field left None is not checked."""

    network: str | None = None
    gateway: str | None = None
    namespace: str | None = None
    local_site: str | None = None


class _Rejected(Exception):
    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _malformed(detail: str) -> _Rejected:
    return _Rejected(RejectReason.MALFORMED_STRUCTURE, detail)


def validate_overlay(raw: bytes | str, expected: ExpectedScope | None = None) -> Verdict:
    """Apply the acceptance rules to a serialized document (the bytes of the file)."""
    data = raw.encode("utf-8", errors="surrogatepass") if isinstance(raw, str) else raw
    try:
        document = _parse(data)
        return _judge(document, len(data), expected or ExpectedScope())
    except _Rejected as rejected:
        return Verdict(VerdictKind.REJECT, reason=rejected.reason, detail=rejected.detail)


def _parse(data: bytes) -> object:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed("the document is not UTF-8") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:
        raise _malformed(f"the document is not JSON: {error}") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            # Two readers could keep different copies: the digest would not pin the content.
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _judge(document: object, size: int, expected: ExpectedScope) -> Verdict:
    # Rule 1: a JSON object whose envelope fields have the right types.
    if not isinstance(document, dict):
        raise _malformed("the document is not a JSON object")
    _check_envelope_types(document)
    # Rule 2: an envelope, or a bare payload.
    if not any(name in document for name in ENVELOPE_FIELDS):
        _check_legacy_payload(document)
        _check_size(size)
        return Verdict(VerdictKind.ACCEPT_LEGACY)
    # Rule 3: the schema version.
    if "schema_version" not in document:
        raise _Rejected(RejectReason.MISSING_SCHEMA_VERSION, "the envelope has no schema_version")
    if document["schema_version"] != SUPPORTED_SCHEMA_VERSION:
        raise _Rejected(
            RejectReason.UNSUPPORTED_SCHEMA_VERSION,
            f"schema_version {document['schema_version']!r} is not {SUPPORTED_SCHEMA_VERSION}",
        )
    # Rule 4: revision and digest.
    revision = _require_object(document, "revision")
    digest = _require_object(document, "content_digest")
    if revision.get("kind") != "content_addressed":
        raise _malformed("revision.kind is not content_addressed")
    if revision.get("algorithm") != "sha256" or digest.get("algorithm") != "sha256":
        raise _malformed("revision.algorithm and content_digest.algorithm must be sha256")
    for name, holder in (("revision", revision), ("content_digest", digest)):
        value = holder.get("value")
        if not isinstance(value, str) or not _HEX64.fullmatch(value):
            raise _malformed(f"{name}.value is not 64 lowercase hex digits")
    overlay = _require_object(document, "overlay")
    for name in ("network", "local_site", "candidates"):
        if name not in overlay:
            raise _malformed(f"overlay.{name} is missing")
    try:
        recomputed = content_digest(
            overlay["network"], overlay["local_site"], overlay["candidates"]
        )
    except CanonicalJsonError as error:
        raise _malformed(f"the overlay has no canonical form: {error}") from None
    if recomputed != digest["value"]:
        raise _Rejected(
            RejectReason.DIGEST_MISMATCH,
            f"content_digest.value is not the digest of the content ({recomputed})",
        )
    if revision["value"] != digest["value"]:
        raise _Rejected(
            RejectReason.REVISION_DIGEST_MISMATCH, "revision.value differs from content_digest"
        )
    # Rule 5: scope.
    scope = _require_object(document, "scope")
    for name in SCOPE_FIELDS:
        if name not in scope:
            raise _malformed(f"scope.{name} is missing")
    if scope["network"] != overlay["network"] or scope["local_site"] != overlay["local_site"]:
        raise _Rejected(
            RejectReason.SCOPE_MISMATCH, "scope.network/local_site differ from the overlay's"
        )
    for name in SCOPE_FIELDS:
        wanted = getattr(expected, name)
        if wanted is not None and scope[name] != wanted:
            raise _Rejected(
                RejectReason.SCOPE_MISMATCH,
                f"scope.{name} is {scope[name]!r}, expected {wanted!r}",
            )
    # Rule 6: provenance and candidates.
    _check_provenance(_require_object(document, "provenance"), scope)
    for name in SCOPE_FIELDS:
        _check_string(scope[name], f"scope.{name}")
    _check_string(overlay["network"], "overlay.network")
    _check_string(overlay["local_site"], "overlay.local_site")
    if "generated_at" in overlay:
        _check_timestamp(overlay["generated_at"], "overlay.generated_at")
    _check_candidates(overlay["candidates"])
    # Rule 7: size.
    _check_size(size)
    return Verdict(VerdictKind.ACCEPT, revision=revision["value"])


_TYPE_NAMES: Mapping[type, str] = {
    str: "a string",
    dict: "an object",
    list: "an array",
    int: "an integer",
}
_ENVELOPE_TYPES: Mapping[str, type] = {
    "schema_version": str,
    "revision": dict,
    "content_digest": dict,
    "scope": dict,
    "provenance": dict,
    "overlay": dict,
}
_REVISION_TYPES: Mapping[str, type] = {"kind": str, "algorithm": str, "value": str}
_DIGEST_TYPES: Mapping[str, type] = {"algorithm": str, "value": str}
_SCOPE_TYPES: Mapping[str, type] = dict.fromkeys(SCOPE_FIELDS, str)
_PROVENANCE_TYPES: Mapping[str, type] = {
    "producer": str,
    "producer_version": str,
    "source_name": str,
    "source_uid": str,
    "source_generation": int,
    "rendered_at": str,
}
_PAYLOAD_TYPES: Mapping[str, type] = {
    "network": str,
    "local_site": str,
    "candidates": list,
    "generated_at": str,
}


def _check_types(holder: Mapping[str, Any], types: Mapping[str, type], where: str) -> None:
    for name, expected_type in types.items():
        if name not in holder:
            continue
        value = holder[name]
        # JSON true/false parse to bool, which Python counts as an int.
        if not isinstance(value, expected_type) or (
            expected_type is int and isinstance(value, bool)
        ):
            raise _malformed(f"{where}{name} is not {_TYPE_NAMES[expected_type]}")


def _check_envelope_types(document: Mapping[str, Any]) -> None:
    _check_types(document, _ENVELOPE_TYPES, "")
    nested = (
        ("revision", _REVISION_TYPES),
        ("content_digest", _DIGEST_TYPES),
        ("scope", _SCOPE_TYPES),
        ("provenance", _PROVENANCE_TYPES),
        ("overlay", _PAYLOAD_TYPES),
    )
    for name, types in nested:
        if name in document:
            _check_types(document[name], types, f"{name}.")


def _check_legacy_payload(document: Mapping[str, Any]) -> None:
    _check_types(document, _PAYLOAD_TYPES, "")
    for name in ("network", "local_site", "candidates"):
        if name not in document:
            raise _malformed(f"neither an envelope nor a payload: {name} is missing")


def _require_object(document: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = document.get(name)
    if not isinstance(value, dict):
        raise _malformed(f"{name} is missing")
    return value


def _check_string(value: object, where: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise _malformed(f"{where} is not a non-blank string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise _malformed(f"{where} is not valid Unicode text") from None
    if size > MAX_STRING_BYTES:
        raise _malformed(f"{where} is longer than {MAX_STRING_BYTES} bytes")


def _check_timestamp(value: object, where: str) -> None:
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise _malformed(f"{where} is not an RFC 3339 timestamp")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    offset = match.group(8)
    try:
        # RFC 3339 allows a leap second (60), which datetime cannot hold.
        datetime(year, month, day, hour, minute, min(second, 59))
    except ValueError:
        raise _malformed(f"{where} is not a valid date and time") from None
    if second > 60 or (len(offset) > 1 and (int(offset[1:3]) > 23 or int(offset[4:6]) > 59)):
        raise _malformed(f"{where} is not a valid date and time")


def _check_provenance(provenance: Mapping[str, Any], scope: Mapping[str, Any]) -> None:
    for name in _PROVENANCE_TYPES:
        if name not in provenance:
            raise _malformed(f"provenance.{name} is missing")
    for name in ("producer", "producer_version", "source_name", "source_uid"):
        _check_string(provenance[name], f"provenance.{name}")
    if provenance["source_name"] != scope["network"]:
        raise _malformed("provenance.source_name is not the scope's network")
    if provenance["source_generation"] <= 0:
        raise _malformed("provenance.source_generation must be > 0")
    _check_timestamp(provenance["rendered_at"], "provenance.rendered_at")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_candidates(candidates: list[Any]) -> None:
    if not 1 <= len(candidates) <= MAX_CANDIDATES:
        raise _malformed(f"the overlay has {len(candidates)} candidates, not 1..{MAX_CANDIDATES}")
    routes: set[tuple[str, str, str, str]] = set()
    for index, candidate in enumerate(candidates):
        where = f"overlay.candidates[{index}]"
        if not isinstance(candidate, dict):
            raise _malformed(f"{where} is not an object")
        for name in ("kind", "name", "site", "cluster"):
            if name not in candidate:
                raise _malformed(f"{where}.{name} is missing")
            _check_string(candidate[name], f"{where}.{name}")
        if candidate["kind"] not in CANDIDATE_KINDS:
            raise _malformed(f"{where}.kind is not one of {sorted(CANDIDATE_KINDS)}")
        route = (candidate["kind"], candidate["name"], candidate["site"], candidate["cluster"])
        if route in routes:
            raise _malformed(f"{where} repeats (kind, name, site, cluster) {route}")
        routes.add(route)
        _check_candidate_fields(candidate, where)
    _check_credentials(candidates)


def _check_candidate_fields(candidate: Mapping[str, Any], where: str) -> None:
    """The optional known fields, when present, must have the contract's types."""
    if "fresh" in candidate and not isinstance(candidate["fresh"], bool):
        raise _malformed(f"{where}.fresh is not a boolean")
    if "stable_id" in candidate and not isinstance(candidate["stable_id"], str):
        raise _malformed(f"{where}.stable_id is not a string")
    if "admission_state" in candidate and candidate["admission_state"] not in ADMISSION_STATES:
        raise _malformed(f"{where}.admission_state is not one of {sorted(ADMISSION_STATES)}")
    if "selection_tier" in candidate and candidate["selection_tier"] not in SELECTION_TIERS:
        raise _malformed(f"{where}.selection_tier is not one of {sorted(SELECTION_TIERS)}")
    if "score" in candidate and not _is_number(candidate["score"]):
        raise _malformed(f"{where}.score is not a number")
    if "score_breakdown" in candidate:
        breakdown = candidate["score_breakdown"]
        if not isinstance(breakdown, dict) or not all(
            name in BREAKDOWN_FIELDS and _is_number(value) for name, value in breakdown.items()
        ):
            raise _malformed(f"{where}.score_breakdown is not an object of known numbers")
    if "rank" in candidate:
        rank = candidate["rank"]
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise _malformed(f"{where}.rank is not an integer >= 0")


def _check_credentials(candidates: list[Any]) -> None:
    """The credential rules, last in rule 6: the structure of every credential, then every
    strategy, then every strategy's fields (see the module's docstring)."""
    credentials = [
        (f"overlay.candidates[{index}].credential", candidate["credential"])
        for index, candidate in enumerate(candidates)
        if "credential" in candidate
    ]
    for where, credential in credentials:
        _check_credential_structure(credential, where)
    for where, credential in credentials:
        if credential["strategy"] not in CREDENTIAL_STRATEGIES:
            # The value is not quoted: a misplaced token could be sitting there.
            raise _Rejected(
                RejectReason.UNSUPPORTED_CREDENTIAL_STRATEGY,
                f"{where}.strategy is not one of {', '.join(sorted(CREDENTIAL_STRATEGIES))}",
            )
    for where, credential in credentials:
        if credential["strategy"] == BEARER_TOKEN_STRATEGY and "header" in credential:
            raise _Rejected(
                RejectReason.INVALID_CREDENTIAL_COMBINATION,
                f"{where} has a header, which {BEARER_TOKEN_STRATEGY} does not take",
            )
        if credential["strategy"] == API_KEY_STRATEGY and "header" not in credential:
            raise _Rejected(
                RejectReason.INVALID_CREDENTIAL_COMBINATION,
                f"{where} has no header, which {API_KEY_STRATEGY} needs",
            )


def _check_credential_structure(credential: object, where: str) -> None:
    if not isinstance(credential, dict):
        raise _malformed(f"{where} is not an object")
    if not CREDENTIAL_FIELDS.issuperset(credential):
        raise _malformed(f"{where} may hold only strategy, secretRef and header")
    for name in ("strategy", "secretRef"):
        if name not in credential:
            raise _malformed(f"{where}.{name} is missing")
    if not isinstance(credential["strategy"], str):
        raise _malformed(f"{where}.strategy is not a string")
    secret_ref = credential["secretRef"]
    if not isinstance(secret_ref, dict) or set(secret_ref) != SECRET_REF_FIELDS:
        raise _malformed(f"{where}.secretRef must hold exactly name, namespace and key")
    for name in ("name", "namespace", "key"):
        _check_string(secret_ref[name], f"{where}.secretRef.{name}")
    if "header" in credential:
        header = credential["header"]
        if (
            not isinstance(header, str)
            or len(header) > MAX_HEADER_NAME_LENGTH
            or not _HEADER_NAME.fullmatch(header)
        ):
            raise _malformed(
                f"{where}.header is not an HTTP header name (token characters, "
                f"1 to {MAX_HEADER_NAME_LENGTH})"
            )


def _check_size(size: int) -> None:
    if size > MAX_DOCUMENT_BYTES:
        raise _Rejected(
            RejectReason.TOO_LARGE, f"the document is {size} bytes, over {MAX_DOCUMENT_BYTES}"
        )
