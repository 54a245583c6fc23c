"""The budget document: what an enforcement point (a gateway's quota filter, an admission
hook) reads of each tenant's budget, written per gateway beside its overlay. Grid is not in
the request path; the document is its answer to "may this tenant still spend?".

The document is content-addressed like the overlay: ``revision.value`` is the lowercase hex
SHA-256 of the RFC 8785 canonical form of its ``budgets`` member, so a reader can tell a
whole, unaltered document from a torn or edited one, and an unchanged revision from a new
one. docs/overlay.md, "The budget document", has the schema. Pure: ``now`` is passed in."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grid.crdt.codec import MAX_SAFE_INT
from grid.models.budgets import (
    BudgetEnforcement,
    BudgetState,
    TenantBudget,
    TenantBudgetStatus,
)
from grid.models.fields import HEX64_PATTERN
from grid.models.network import GridNetworkStatus

SCHEMA_VERSION = 1
KIND = "grid.budgets"
FILE_NAME = "budgets.json"
MAX_DOCUMENT_BYTES = 1024 * 1024
"""The largest document a reader must take. The largest Grid writes, 1,024 tenants of
253-character names and 1,024 unheard sites, is about 620 kB."""


@dataclass(frozen=True, slots=True)
class BudgetScope:
    """Whose document: the network, the gateway that reads it, the site that wrote it."""

    network: str
    gateway: str
    namespace: str
    local_site: str


@dataclass(frozen=True, slots=True)
class RenderedBudgets:
    text: str
    revision: str


def content_revision(budgets: Any) -> str:
    """The revision of a ``budgets`` member: SHA-256 of its RFC 8785 form, lowercase hex."""
    return hashlib.sha256(rfc8785.dumps(budgets)).hexdigest()


def render_budget_document(
    scope: BudgetScope,
    budgets: Sequence[TenantBudget],
    status: GridNetworkStatus,
    now: datetime,
) -> RenderedBudgets:
    """The document of ``scope``'s gateway from the network's status: each budgeted
    tenant's state, spend, cap and window, and whether the figures are complete."""
    units = {budget.tenant: budget.unit for budget in budgets}
    tenants = [
        {
            "tenant": tenant.tenant,
            "unit": units.get(tenant.tenant, ""),
            "state": str(tenant.state or BudgetState.OK),
            "used": _exact(tenant.used),
            "cap": _exact(tenant.cap),
            "remaining": _exact(max(tenant.cap - tenant.used, 0)),
            "window_start": _time(tenant.window_start),
            "window_end": _time(tenant.window_end),
            **_escrow(tenant),
        }
        for tenant in status.budgets
    ]
    content = {
        "network": scope.network,
        "local_site": scope.local_site,
        "complete": not status.unheard_sites,
        "unheard_sites": [
            {"site": unheard.site, "since": _time(unheard.since)}
            for unheard in status.unheard_sites
        ],
        "tenants": tenants,
    }
    revision = content_revision(content)
    document = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "revision": {"kind": "content_addressed", "algorithm": "sha256", "value": revision},
        "scope": {
            "network": scope.network,
            "gateway": scope.gateway,
            "namespace": scope.namespace,
            "local_site": scope.local_site,
        },
        "generated_at": _time(now),
        "budgets": content,
    }
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"
    return RenderedBudgets(text, revision)


# -- reading -------------------------------------------------------------------------------


class _Strict(BaseModel):
    # Unknown members are allowed (a later schema may add some, and the digest covers
    # them); the known ones must have their types exactly.
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class _Revision(_Strict):
    kind: Literal["content_addressed"]
    algorithm: Literal["sha256"]
    value: str = Field(pattern=HEX64_PATTERN)


class _Scope(_Strict):
    network: str
    gateway: str
    namespace: str
    local_site: str


class _Unheard(_Strict):
    site: str
    since: str | None


class _Tenant(_Strict):
    tenant: str
    unit: str
    state: Literal["ok", "warn", "exhausted"]
    used: int = Field(ge=0)
    cap: int = Field(ge=0)
    remaining: int = Field(ge=0)
    window_start: str | None
    window_end: str | None
    enforcement: Literal["escrow"] | None = None
    allowance: int | None = Field(None, ge=0)
    site_used: int | None = Field(None, ge=0)


class _Budgets(_Strict):
    network: str
    local_site: str
    complete: bool
    unheard_sites: list[_Unheard]
    tenants: list[_Tenant]


class _Document(_Strict):
    schema_version: Literal[1]
    kind: Literal["grid.budgets"]
    revision: _Revision
    scope: _Scope
    generated_at: str
    budgets: _Budgets


@dataclass(frozen=True, slots=True)
class BudgetVerdict:
    """Whether a reader may take a budget document: ``revision`` when it may, else the
    ``reason`` (``not_json``, ``too_large``, ``schema``, ``digest_mismatch``,
    ``scope_mismatch``) and which part broke which rule."""

    accepted: bool
    revision: str | None = None
    reason: str | None = None
    detail: str = ""
    tenants: tuple[tuple[str, str], ...] = ()
    """(tenant, state) of an accepted document."""

    def __str__(self) -> str:
        return f"accept {self.revision}" if self.accepted else f"reject {self.reason}"


def verify_budget_document(
    data: bytes, expected: dict[str, str | None] | None = None
) -> BudgetVerdict:
    """Judge a budget document: JSON, at most :data:`MAX_DOCUMENT_BYTES`, of this schema,
    whose revision is the digest of its ``budgets``, and (for each key of ``expected``
    given a value) of that ``scope`` member."""
    if len(data) > MAX_DOCUMENT_BYTES:
        return BudgetVerdict(False, reason="too_large", detail=f"over {MAX_DOCUMENT_BYTES} bytes")
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return BudgetVerdict(False, reason="not_json", detail=str(error))
    try:
        document = _Document.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        return BudgetVerdict(False, reason="schema", detail=f"{where}: {first['msg']}")
    if document.budgets.network != document.scope.network or (
        document.budgets.local_site != document.scope.local_site
    ):
        return BudgetVerdict(
            False, reason="scope_mismatch", detail="budgets and scope name different sites"
        )
    digest = content_revision(raw["budgets"])
    if digest != document.revision.value:
        return BudgetVerdict(
            False,
            reason="digest_mismatch",
            detail=f"revision.value is {document.revision.value}, the budgets' digest {digest}",
        )
    for key, wanted in (expected or {}).items():
        held = getattr(document.scope, key)
        if wanted is not None and held != wanted:
            return BudgetVerdict(
                False, reason="scope_mismatch", detail=f"scope.{key} is {held!r}, not {wanted!r}"
            )
    tenants = tuple((t.tenant, t.state) for t in document.budgets.tenants)
    return BudgetVerdict(True, revision=digest, tenants=tenants)


def _escrow(tenant: TenantBudgetStatus) -> dict[str, Any]:
    """An escrowed tenant's members: ``enforcement`` and this site's ``allowance`` (what
    its gateways may grant in the window, in all) and ``site_used`` (what it counted). A
    lower-bound tenant's document is as before escrow existed."""
    if tenant.enforcement is not BudgetEnforcement.ESCROW or tenant.allowance is None:
        return {}
    return {
        "enforcement": str(BudgetEnforcement.ESCROW),
        "allowance": _exact(tenant.allowance),
        "site_used": _exact(tenant.site_used or 0),
    }


def _exact(value: int) -> int:
    # RFC 8785 numbers are IEEE doubles: past 2**53 - 1 a JSON reader may not read an
    # integer exactly (a cap may be 2**53, and a sum of slots more), so that is written.
    return min(value, MAX_SAFE_INT)


def _time(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
