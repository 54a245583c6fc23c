"""The routing overlay document (``grid-config.json``) per the overlay contract, version
1.0.0: envelope, content digest, scope, provenance and the ordered candidates."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import compress, islice
from typing import Any

from grid import __version__, _native
from grid.errors import EmptyOverlayError, OverlayRenderError, ScoringInputError
from grid.models.common import ScoringWeights
from grid.render.digest import document_json_and_digest, stable_id
from grid.scoring.inputs import CredentialStrategy, SecretRef, check_name
from grid.scoring.ranking import LeftOut, LeftOutReason, RankedCandidate, Ranking
from grid.scoring.signals import DECIMALS, ScoreBreakdown, SignalValues

SCHEMA_VERSION = "1.0.0"
PRODUCER = "grid"
KIND_INFERENCE_MODEL = "inference_model"
BEARER_TOKEN_STRATEGY = CredentialStrategy.BEARER_TOKEN.value
"""``credential.strategy`` of a bearer token: ``{strategy, secretRef}``."""
API_KEY_STRATEGY = CredentialStrategy.API_KEY.value
"""``credential.strategy`` of an API key sent in a header: ``{strategy, secretRef, header}``."""
CREDENTIAL_STRATEGIES = frozenset({BEARER_TOKEN_STRATEGY, API_KEY_STRATEGY})
CREDENTIAL_STRATEGY = BEARER_TOKEN_STRATEGY
"""The bearer strategy under its name from when it was the only one. A credential's own
``strategy`` (and ``header``) is what counts: see :func:`credential_document`."""
MAX_CANDIDATES = 1024
MAX_DOCUMENT_BYTES = 2 * 1024 * 1024
_DIGEST_PENDING = object()
"""Where the content digest goes in a document being rendered, until it is known."""
RANK_MEMBER = "rank"
"""A candidate's place in the list, 0 first: the last member of its document."""


@dataclass(frozen=True, slots=True)
class OverlayScope:
    """Which gateway the overlay is for; the gateway refuses a document scoped to another."""

    network: str
    gateway: str
    namespace: str
    local_site: str

    def __post_init__(self) -> None:
        for field_name in ("network", "gateway", "namespace", "local_site"):
            _check(getattr(self, field_name), f"overlay scope {field_name}")


@dataclass(frozen=True, slots=True)
class OverlaySource:
    """The GridNetwork the overlay was rendered from (its name must be the scope's
    network)."""

    name: str
    uid: str
    generation: int

    def __post_init__(self) -> None:
        _check(self.name, "overlay source name")
        _check(self.uid, "overlay source uid")
        if isinstance(self.generation, bool) or not isinstance(self.generation, int):
            raise OverlayRenderError("overlay source generation must be an integer")
        if self.generation <= 0:
            raise OverlayRenderError("overlay source generation must be > 0")


@dataclass(frozen=True, slots=True)
class RenderedOverlay:
    """A rendered document, ready to write under the ConfigMap key."""

    text: str
    """The document serialized: what the ConfigMap holds."""
    revision: str
    candidates: tuple[RankedCandidate, ...]
    """The published candidates, in order."""
    truncated: tuple[LeftOut, ...]
    """Candidates cut to respect :data:`MAX_CANDIDATES`."""
    _document: Mapping[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def document(self) -> Mapping[str, Any]:
        """The document as JSON values, read from :attr:`text` when first asked for (a
        site's renders write the text; only inline gateway configuration, the agent's API
        and the commands read the values)."""
        document = self._document
        if document is None:
            document = json.loads(self.text)
            object.__setattr__(self, "_document", document)
        return document


def _check(value: object, what: str) -> None:
    try:
        check_name(value, what)
    except ScoringInputError as error:
        raise OverlayRenderError(str(error)) from None


def rfc3339(moment: datetime) -> str:
    """``moment`` in UTC as RFC 3339 with whole seconds, e.g. ``2026-07-29T00:00:00Z``."""
    if moment.utcoffset() is None:
        raise OverlayRenderError("timestamps must carry a time zone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def select_candidates(
    ranked: Sequence[RankedCandidate], limit: int = MAX_CANDIDATES
) -> tuple[tuple[RankedCandidate, ...], tuple[LeftOut, ...]]:
    """At most ``limit`` candidates, in their order: first the best candidate of every model
    (so no model disappears while a lower-ranked copy of another survives), then the best of
    the rest. Returns the kept candidates and the ones cut."""
    if len(ranked) <= limit:
        return tuple(ranked), ()
    best_of_model: dict[str, int] = {}
    for index, entry in enumerate(ranked):
        best_of_model.setdefault(entry.candidate.model, index)
    chosen = set(islice(best_of_model.values(), limit))
    index = 0
    while len(chosen) < limit:
        chosen.add(index)
        index += 1
    kept_flags = [False] * len(ranked)
    for index in chosen:
        kept_flags[index] = True
    kept = tuple(compress(ranked, kept_flags))
    detail = f"beyond the overlay's limit of {limit} candidates"
    cut = tuple(
        LeftOut(entry.candidate, LeftOutReason.TRUNCATED, detail)
        for entry, is_kept in zip(ranked, kept_flags, strict=True)
        if not is_kept
    )
    return kept, cut


def credential_document(credential: SecretRef) -> dict[str, Any]:
    """A candidate's ``credential`` as the contract spells it: ``{"strategy":
    "bearer_token", "secretRef": {...}}``, or ``{"strategy": "apikey", "secretRef": {...},
    "header": <header name>}``. A reference only: never the Secret's bytes."""
    document: dict[str, Any] = {
        # Plain str, not the enum: YAML writers refuse str subclasses.
        "strategy": credential.strategy.value,
        "secretRef": {
            "name": credential.name,
            "namespace": credential.namespace,
            "key": credential.key,
        },
    }
    if credential.strategy is CredentialStrategy.API_KEY:
        document["header"] = credential.header
    return document


def score_breakdown_documents(entries: Sequence[RankedCandidate]) -> list[dict[str, float]]:
    """Each entry's ``score_breakdown`` object, the numbers of ``entry.breakdown.as_wire()``
    (the reference), computed for all entries at once in ``grid._native``: done in Python,
    the rounding of the contributions is most of what rendering 1,024 candidates costs."""
    weights_rows: list[tuple[float, ...]] = []
    weights: ScoringWeights | None = None
    row: tuple[float, ...] = ()
    for entry in entries:
        if entry.weights is not weights:  # one ranking shares one weights object
            weights = entry.weights
            row = tuple(getattr(weights, name) for name in SignalValues._fields)
        weights_rows.append(row)
    return _native.score_breakdowns(
        [entry.signals for entry in entries], weights_rows, DECIMALS, ScoreBreakdown._fields
    )


class DocumentMemo:
    """Each ranked candidate's document, written as JSON both ways but for its rank (a
    ``grid._native.ObjectForms``: the rank is its place in the list), kept from one render
    to the next by ranked entry object. Ranking keeps the entry objects of the routes that
    did not change (and a route's winner while nothing about it changed), so a large
    mesh's render builds and walks only its new candidates' documents: at 100 sites x 100
    providers, building them all again was a fifth of the render, and walking them all a
    tenth."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[int, tuple[RankedCandidate, _native.ObjectForms]] = {}

    def forms(self, entries: Sequence[RankedCandidate]) -> list[_native.ObjectForms]:
        """The documents of ``entries``, ranked in the order given; afterwards only these
        entries are held."""
        held = self._held
        new = [entry for entry in entries if held.get(id(entry), (None,))[0] is not entry]
        breakdowns = iter(score_breakdown_documents(new))
        kept: dict[int, tuple[RankedCandidate, _native.ObjectForms]] = {}
        forms = []
        for entry in entries:
            known = held.get(id(entry))
            if known is None or known[0] is not entry:
                fields = _candidate_fields(entry, next(breakdowns))
                known = (entry, _native.ObjectForms(fields, RANK_MEMBER))
            kept[id(entry)] = known
            forms.append(known[1])
        self._held = kept
        return forms


def candidate_document(entry: RankedCandidate, rank: int) -> dict[str, Any]:
    """One candidate as the contract spells it."""
    return _candidate_document(entry, rank, score_breakdown_documents([entry])[0])


def _candidate_document(
    entry: RankedCandidate, rank: int, breakdown: dict[str, float]
) -> dict[str, Any]:
    document = _candidate_fields(entry, breakdown)
    document[RANK_MEMBER] = rank
    return document


def _candidate_fields(entry: RankedCandidate, breakdown: dict[str, float]) -> dict[str, Any]:
    """A candidate's document but its rank (which goes last)."""
    candidate = entry.candidate
    name, site, cluster = candidate.model, candidate.site, candidate.cluster
    document: dict[str, Any] = {
        "kind": KIND_INFERENCE_MODEL,
        "name": name,
        "site": site,
        "cluster": cluster,
        "fresh": entry.fresh,
    }
    credential = candidate.credential
    if credential is not None:
        document["credential"] = credential_document(credential)
    document["stable_id"] = stable_id(KIND_INFERENCE_MODEL, name, site, cluster)
    document["admission_state"] = entry.admission.wire
    document["selection_tier"] = entry.tier.wire
    document["score"] = entry.score
    document["score_breakdown"] = breakdown
    return document


def render_overlay(
    ranking: Ranking,
    scope: OverlayScope,
    source: OverlaySource,
    now: datetime,
    *,
    max_candidates: int = MAX_CANDIDATES,
    documents: DocumentMemo | None = None,
) -> RenderedOverlay:
    """The overlay document for ``scope``'s gateway, rendered at ``now``.

    Raises :class:`EmptyOverlayError` when no candidate is left (the gateway rejects such a
    document: keep the previous one) and :class:`OverlayRenderError` when the scope, the
    source or the ranking disagree or the document would exceed 2 MiB.
    """
    if source.name != scope.network:
        raise OverlayRenderError(
            f"overlay source {source.name!r} is not the scope's network {scope.network!r}"
        )
    if ranking.consumer.name != scope.local_site:
        raise OverlayRenderError(
            f"the ranking was made for site {ranking.consumer.name!r}, "
            f"not for the scope's local site {scope.local_site!r}"
        )
    if not 1 <= max_candidates <= MAX_CANDIDATES:
        raise OverlayRenderError(f"max_candidates must be between 1 and {MAX_CANDIDATES}")
    if not ranking.candidates:
        reasons = sorted({entry.reason.value for entry in ranking.left_out})
        raise EmptyOverlayError(
            f"no candidate for site {scope.local_site!r} "
            f"({len(ranking.left_out)} left out: {', '.join(reasons) or 'no provider'}); "
            "keeping the previous overlay",
            tuple(ranking.left_out),
        )
    kept, cut = select_candidates(ranking.candidates, max_candidates)
    candidates = (documents or DocumentMemo()).forms(kept)
    rendered_at = rfc3339(now)
    document = {
        "schema_version": SCHEMA_VERSION,
        "revision": {"kind": "content_addressed", "algorithm": "sha256", "value": _DIGEST_PENDING},
        "content_digest": {"algorithm": "sha256", "value": _DIGEST_PENDING},
        "scope": {
            "network": scope.network,
            "gateway": scope.gateway,
            "namespace": scope.namespace,
            "local_site": scope.local_site,
        },
        "provenance": {
            "producer": PRODUCER,
            "producer_version": __version__,
            "source_name": source.name,
            "source_uid": source.uid,
            "source_generation": source.generation,
            "rendered_at": rendered_at,
        },
        "overlay": {
            "network": scope.network,
            "local_site": scope.local_site,
            "candidates": candidates,
            "generated_at": rendered_at,
        },
    }
    encoded, digest = document_json_and_digest(document, _DIGEST_PENDING)
    size = len(encoded)
    if size > MAX_DOCUMENT_BYTES:
        raise OverlayRenderError(
            f"the overlay would be {size} bytes, over the contract's {MAX_DOCUMENT_BYTES}"
        )
    return RenderedOverlay(text=encoded.decode(), revision=digest, candidates=kept, truncated=cut)
