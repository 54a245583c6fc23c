"""The phase machines of the three resources, as pure functions.

Each machine is an explicit table of transitions ``(source phase, reason) -> target
phase``. An evaluation looks at what was observed and lists the reasons that currently
hold, in priority order; the first one the table allows from the current phase is taken,
and evaluation repeats from the new phase until no listed reason applies (so one call can
walk Pending -> Discovered -> Connecting when everything is already known). A reason the
table does not list for the current phase changes nothing. The result is the new phase,
the object's conditions (recomputed from the observation) and the events to post.

No clock is read: every function takes ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Generic, TypeVar

from grid.models.conditions import Condition, ConditionStatus, ConditionUpdate, set_condition
from grid.models.network import GridNetwork, GridNetworkPhase
from grid.models.provider import InferenceProvider, InferenceProviderPhase
from grid.models.site import GridSite, GridSitePhase, TrustPin

# --- the machinery -----------------------------------------------------------------------

P = TypeVar("P", GridSitePhase, InferenceProviderPhase, GridNetworkPhase)


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post about the object."""

    type: EventType
    reason: str
    message: str


@dataclass(frozen=True)
class Transition(Generic[P]):
    """An allowed move: from ``source``, when ``reason`` holds, to ``target``."""

    source: P
    reason: str
    target: P
    event_type: EventType = EventType.NORMAL


@dataclass(frozen=True)
class Verdict:
    """A reason that holds now, with the human explanation for its event."""

    reason: str
    message: str


class PhaseTable(Generic[P]):
    """The transitions a machine allows, looked up by ``(source, reason)``."""

    def __init__(self, transitions: Iterable[Transition[P]]) -> None:
        self.transitions: tuple[Transition[P], ...] = tuple(transitions)
        self._by_key: dict[tuple[P, str], Transition[P]] = {}
        for transition in self.transitions:
            key = (transition.source, transition.reason)
            if key in self._by_key or transition.source == transition.target:
                raise ValueError(f"ambiguous or empty transition {transition}")
            self._by_key[key] = transition

    def lookup(self, source: P, reason: str) -> Transition[P] | None:
        """The transition ``reason`` triggers from ``source``, if it is allowed."""
        return self._by_key.get((source, reason))

    def allows(self, source: P, target: P) -> bool:
        """Whether any reason leads from ``source`` to ``target``."""
        return any(t.source == source and t.target == target for t in self.transitions)

    def reasons(self, source: P, target: P) -> set[str]:
        """The reasons that lead from ``source`` to ``target``."""
        return {t.reason for t in self.transitions if t.source == source and t.target == target}


@dataclass(frozen=True)
class PhaseOutcome(Generic[P]):
    """What an evaluation decided: write ``phase``, ``phase_transition_time`` and
    ``conditions`` to status, post ``events``."""

    phase: P
    phase_transition_time: datetime | None
    conditions: list[Condition]
    events: list[Event] = field(default_factory=list)
    transitions: list[Transition[P]] = field(default_factory=list)


def _walk(
    table: PhaseTable[P],
    phase: P,
    since: datetime | None,
    now: datetime,
    verdicts: Callable[[P, datetime | None], Sequence[Verdict]],
) -> tuple[P, datetime | None, list[Transition[P]], list[Event]]:
    taken: list[Transition[P]] = []
    events: list[Event] = []
    # Each phase can be entered at most once per evaluation; the bound only guards against
    # a table that would cycle (the tests prove this one does not).
    for _ in range(len(type(phase))):
        step = next(
            (
                (transition, verdict)
                for verdict in verdicts(phase, since)
                if (transition := table.lookup(phase, verdict.reason)) is not None
            ),
            None,
        )
        if step is None:
            break
        transition, verdict = step
        phase, since = transition.target, now
        taken.append(transition)
        message = _clip(verdict.message, _MAX_EVENT_MESSAGE)
        events.append(Event(transition.event_type, transition.reason, message))
    return phase, since, taken, events


def _apply_conditions(
    previous: Sequence[Condition],
    updates: Iterable[ConditionUpdate],
    now: datetime,
    warn_when_false: frozenset[str],
    events: list[Event],
) -> list[Condition]:
    """Apply ``updates``; a condition of ``warn_when_false`` turning False (or changing its
    reason while False) adds a Warning event, unless an event already told the same (same
    reason or same message)."""
    conditions = list(previous)
    told = {event.reason for event in events} | {event.message for event in events}
    for update in updates:
        before = next((c for c in conditions if c.type == update.type), None)
        conditions = set_condition(conditions, update, now)
        newly_bad = update.status == ConditionStatus.FALSE and (
            before is None or (before.status, before.reason) != (update.status, update.reason)
        )
        message = _clip(update.message, _MAX_EVENT_MESSAGE)
        already_told = update.reason in told or message in told
        if update.type in warn_when_false and newly_bad and not already_told:
            events.append(Event(EventType.WARNING, update.reason, message))
            told |= {update.reason, message}
    return conditions


_MAX_CONDITION_MESSAGE = 32768
_MAX_EVENT_MESSAGE = 1024


def _clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters: observations can carry long error texts, and
    the API refuses messages past its limits."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ready(phase: StrEnum, ready_phase: StrEnum, generation: int | None) -> ConditionUpdate:
    ready = phase == ready_phase
    return ConditionUpdate(
        type="Ready",
        status=ConditionStatus.TRUE if ready else ConditionStatus.FALSE,
        reason=str(phase),
        message=f"phase is {phase}",
        observed_generation=generation,
    )


def condition_update(
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
    *,
    limit: int = _MAX_CONDITION_MESSAGE,
) -> ConditionUpdate:
    """A condition to set: ``status`` True, False or None (Unknown), ``message`` cut to
    ``limit`` characters."""
    value = {
        True: ConditionStatus.TRUE,
        False: ConditionStatus.FALSE,
        None: ConditionStatus.UNKNOWN,
    }
    return ConditionUpdate(
        type=type_,
        status=value[status],
        reason=reason,
        message=_clip(message, limit),
        observed_generation=generation,
    )


# --- GridSite ----------------------------------------------------------------------------


class MemberState(StrEnum):
    """A site's SWIM membership as last observed."""

    ALIVE = "alive"
    SUSPECT = "suspect"
    DOWN = "down"
    LEFT = "left"


@dataclass(frozen=True)
class ProbeObservation:
    """One TCP/TLS probe of the site's egress endpoint."""

    at: datetime
    reachable: bool
    presented_fingerprint: str | None = None
    latency_ms: float | None = None
    error: str = ""
    advertised: bool = False
    """The fingerprint is the one the site advertises, not one read off TLS (a plaintext
    egress): None then means its certificate has not arrived yet, not that it showed none."""


@dataclass(frozen=True)
class SiteObservation:
    """What the engine knows about a site right now."""

    member: MemberState | None = None
    egress_address: str | None = None
    probe: ProbeObservation | None = None
    revoked: frozenset[str] = frozenset()
    """Fingerprints of the certificates the network revoked (never trusted)."""


_S = GridSitePhase
SITE_TRANSITIONS: PhaseTable[GridSitePhase] = PhaseTable(
    [
        Transition(_S.PENDING, "PeerDiscovered", _S.DISCOVERED),
        Transition(_S.PENDING, "EgressConfigured", _S.CONNECTING),
        Transition(_S.DISCOVERED, "EgressAvailable", _S.CONNECTING),
        Transition(_S.CONNECTING, "TrustVerified", _S.ACTIVE),
        Transition(_S.CONNECTING, "ProbeFailed", _S.UNREACHABLE, EventType.WARNING),
        Transition(_S.CONNECTING, "EgressRemoved", _S.PENDING, EventType.WARNING),
        Transition(_S.ACTIVE, "ProbeFailed", _S.UNREACHABLE, EventType.WARNING),
        Transition(_S.ACTIVE, "FingerprintMismatch", _S.CONNECTING, EventType.WARNING),
        Transition(_S.ACTIVE, "CertificateRevoked", _S.CONNECTING, EventType.WARNING),
        Transition(_S.ACTIVE, "TrustNotConfigured", _S.CONNECTING, EventType.WARNING),
        Transition(_S.ACTIVE, "EgressRemoved", _S.PENDING, EventType.WARNING),
        Transition(_S.UNREACHABLE, "TrustVerified", _S.ACTIVE),
        Transition(_S.UNREACHABLE, "FingerprintMismatch", _S.CONNECTING, EventType.WARNING),
        Transition(_S.UNREACHABLE, "CertificateRevoked", _S.CONNECTING, EventType.WARNING),
        Transition(_S.UNREACHABLE, "TrustNotConfigured", _S.CONNECTING, EventType.WARNING),
        Transition(_S.UNREACHABLE, "EgressRemoved", _S.PENDING, EventType.WARNING),
        *(
            Transition(source, "MemberLeft", _S.LEFT)
            for source in (_S.PENDING, _S.DISCOVERED, _S.CONNECTING, _S.ACTIVE, _S.UNREACHABLE)
        ),
        Transition(_S.LEFT, "MemberRejoined", _S.PENDING),
    ]
)
"""GridSite: Pending -> Discovered -> Connecting -> Active -> Unreachable -> Left. The only
way into Active is ``TrustVerified``: a fresh probe reached the site and its certificate
matched a pinned fingerprint."""


@dataclass(frozen=True)
class _TrustCheck:
    pin: TrustPin | None
    reason: str
    message: str


def _check_trust(
    site: GridSite, presented: str | None, revoked: frozenset[str] = frozenset()
) -> _TrustCheck:
    if presented is not None and presented in revoked:
        return _TrustCheck(
            None,
            "CertificateRevoked",
            f"the certificate {presented} is revoked by the network "
            "(spec.tls.revokedCertificates); the site needs a new one",
        )
    trust = site.spec.trust
    if trust.cert_fingerprint is None:
        return _TrustCheck(
            None, "TrustNotConfigured", "spec.trust.certFingerprint is not set; pin it to trust"
        )
    if presented is None:
        return _TrustCheck(None, "FingerprintMismatch", "the site presented no certificate")
    pin = trust.match(presented)
    if pin is None:
        return _TrustCheck(
            None,
            "FingerprintMismatch",
            "the presented certificate matches neither certFingerprint nor previousCertFingerprint",
        )
    field_name = "certFingerprint" if pin is TrustPin.CURRENT else "previousCertFingerprint"
    return _TrustCheck(pin, "FingerprintMatched", f"certificate matches {field_name}")


def _site_verdicts(
    site: GridSite, seen: SiteObservation
) -> Callable[[GridSitePhase, datetime | None], list[Verdict]]:
    def verdicts(phase: GridSitePhase, since: datetime | None) -> list[Verdict]:
        found: list[Verdict] = []
        if seen.member is MemberState.LEFT:
            found.append(Verdict("MemberLeft", "the site left the mesh"))
        if seen.member is MemberState.ALIVE:
            found.append(Verdict("MemberRejoined", "the site is alive in the mesh again"))
        if seen.egress_address is None:
            found.append(Verdict("EgressRemoved", "no egress address is known for the site"))
        probe = seen.probe
        if probe is not None and (since is None or probe.at >= since):
            if not probe.reachable:
                found.append(Verdict("ProbeFailed", probe.error or "egress probe failed"))
            else:
                check = _check_trust(site, probe.presented_fingerprint, seen.revoked)
                reason = "TrustVerified" if check.pin is not None else check.reason
                found.append(Verdict(reason, f"egress probe passed; {check.message}"))
        if site.auto_discover and seen.member is MemberState.ALIVE:
            found.append(Verdict("PeerDiscovered", "SWIM reports the site alive"))
        if seen.egress_address is not None:
            address = seen.egress_address
            if not site.auto_discover:
                found.append(Verdict("EgressConfigured", f"egress address {address}"))
            found.append(Verdict("EgressAvailable", f"egress address {address}"))
        return found

    return verdicts


def evaluate_site(
    site: GridSite, observation: SiteObservation, now: datetime
) -> PhaseOutcome[GridSitePhase]:
    """Advance a GridSite's phase from what membership and probes report."""
    status = site.status
    phase = status.phase if status else GridSitePhase.PENDING
    since = status.phase_transition_time if status else None
    previous = status.conditions if status else []
    generation = site.metadata.generation

    phase, since, taken, events = _walk(
        SITE_TRANSITIONS, phase, since, now, _site_verdicts(site, observation)
    )

    probe = observation.probe
    if probe is None:
        reachable = condition_update("Reachable", None, "NotProbed", "no probe yet", generation)
        trusted = condition_update(
            "Trusted", None, "NotProbed", "no certificate seen yet", generation
        )
    elif not probe.reachable:
        reachable = condition_update(
            "Reachable", False, "ProbeFailed", probe.error or "egress probe failed", generation
        )
        trusted = condition_update(
            "Trusted", None, "NotProbed", "the last probe did not reach the site", generation
        )
    else:
        reachable = condition_update(
            "Reachable", True, "ProbeSucceeded", "egress probe passed", generation
        )
        check = _check_trust(site, probe.presented_fingerprint, observation.revoked)
        if probe.advertised and probe.presented_fingerprint is None:
            # A site that just joined learns the certificates a little after the egresses:
            # not a mismatch, only not yet known.
            trusted = condition_update(
                "Trusted",
                None,
                "CertificateNotAdvertised",
                "the site's certificate has not reached this site yet "
                "(a plaintext egress is pinned by the certificate the site advertises)",
                generation,
            )
        else:
            trusted = condition_update(
                "Trusted", check.pin is not None, check.reason, check.message, generation
            )
    conditions = _apply_conditions(
        previous,
        [reachable, trusted, _ready(phase, GridSitePhase.ACTIVE, generation)],
        now,
        frozenset({"Trusted"}),
        events,
    )
    return PhaseOutcome(phase, since, conditions, events, taken)


# --- InferenceProvider -------------------------------------------------------------------


class CredentialState(StrEnum):
    """What was found where ``spec.auth.secretRef`` points and, for a strategy whose
    tokens the site mints (Oauth2, ServiceAccount, Sigv4) or whose value it renders (Custom
    with ``custom``), how the token or value in place stands."""

    NOT_REQUIRED = "NotRequired"
    VALID = "Valid"
    SECRET_NOT_FOUND = "SecretNotFound"
    KEY_NOT_FOUND = "KeyNotFound"
    EMPTY = "Empty"
    SECRET_UNUSABLE = "SecretUnusable"
    """The Secret's entry cannot be used to mint a token: missing, or not what the grant
    needs (a PEM key, a key file, AWS credentials that have not lapsed)."""
    MINTED = "Minted"
    """A token is in place and its last refresh worked."""
    REFRESH_FAILING = "RefreshFailing"
    """The token in place is still valid, but refreshing it fails."""
    EXPIRING = "Expiring"
    """Refreshing fails and the token in place is in the last tenth of its life."""
    MINTING = "Minting"
    """No token yet: the first one is being asked for."""
    ISSUER_UNREACHABLE = "IssuerUnreachable"
    """No valid token, and the token endpoint cannot be reached."""
    TOKEN_REFUSED = "TokenRefused"
    """No valid token, and the token endpoint refuses or answers with no usable token."""
    TOKEN_NOT_WRITTEN = "TokenNotWritten"
    """No valid token where the gateway reads it: a minted one could not be written there."""
    RENDERED = "Rendered"
    """A Custom provider's value, rendered from its Secret's template, is in place."""
    RENDERING = "Rendering"
    """No Custom value yet: the first one is being rendered."""


_CREDENTIAL_PROBLEMS = {
    CredentialState.SECRET_NOT_FOUND: "the Secret named by spec.auth.secretRef does not exist",
    CredentialState.KEY_NOT_FOUND: "the Secret has no entry for spec.auth.secretRef.key",
    CredentialState.EMPTY: "the credential in the Secret is empty",
    CredentialState.SECRET_UNUSABLE: "the Secret's entry cannot be used to mint a token",
    CredentialState.MINTING: "no token minted yet",
    CredentialState.ISSUER_UNREACHABLE: "no valid token: the token endpoint cannot be reached",
    CredentialState.TOKEN_REFUSED: "no valid token: the token endpoint gives none",
    CredentialState.TOKEN_NOT_WRITTEN: "no valid token: a minted one could not be written",
    CredentialState.RENDERING: "no value rendered yet",
}
"""States in which the provider has no usable credential, with what its condition says when
the observation brings no message of its own."""


@dataclass(frozen=True)
class ProviderObservation:
    """What the engine knows about a provider right now. Health counts are of consecutive
    check results; ``metrics_ok`` is None when metrics are not configured or not yet
    scraped."""

    credentials: CredentialState = CredentialState.NOT_REQUIRED
    credentials_message: str = ""
    """What the site says about a minted token (when, until when, what fails since when)."""
    consecutive_successes: int = 0
    consecutive_failures: int = 0
    health_message: str = ""
    metrics_ok: bool | None = None
    metrics_message: str = ""


_P = InferenceProviderPhase
PROVIDER_TRANSITIONS: PhaseTable[InferenceProviderPhase] = PhaseTable(
    [
        *(
            Transition(source, "CredentialsInvalid", _P.UNAVAILABLE, EventType.WARNING)
            for source in (_P.PENDING, _P.AVAILABLE, _P.DEGRADED)
        ),
        *(
            Transition(source, "HealthCheckFailing", _P.UNAVAILABLE, EventType.WARNING)
            for source in (_P.PENDING, _P.AVAILABLE, _P.DEGRADED)
        ),
        *(
            Transition(source, "MetricsUnavailable", _P.DEGRADED, EventType.WARNING)
            for source in (_P.PENDING, _P.AVAILABLE, _P.UNAVAILABLE)
        ),
        Transition(_P.AVAILABLE, "HealthCheckFailures", _P.DEGRADED, EventType.WARNING),
        *(
            Transition(source, "ProviderReady", _P.AVAILABLE)
            for source in (_P.PENDING, _P.DEGRADED, _P.UNAVAILABLE)
        ),
    ]
)
"""InferenceProvider: Pending -> Available -> Degraded -> Unavailable. Available needs valid
credentials, passing health checks and (when configured) readable metrics."""


def _provider_verdicts(
    provider: InferenceProvider, seen: ProviderObservation
) -> Callable[[InferenceProviderPhase, datetime | None], list[Verdict]]:
    check = provider.spec.health_check
    healthy_after = check.healthy_threshold if check else 0
    unhealthy_after = check.unhealthy_threshold if check else None

    def verdicts(phase: InferenceProviderPhase, since: datetime | None) -> list[Verdict]:
        found: list[Verdict] = []
        failing = seen.consecutive_failures if check else 0
        credentials_ok = seen.credentials not in _CREDENTIAL_PROBLEMS
        unhealthy = unhealthy_after is not None and failing >= unhealthy_after
        passing = check is None or (seen.consecutive_successes >= healthy_after and not failing)
        if not credentials_ok:
            found.append(
                Verdict(
                    "CredentialsInvalid",
                    seen.credentials_message or _CREDENTIAL_PROBLEMS[seen.credentials],
                )
            )
        if unhealthy:
            detail = f": {seen.health_message}" if seen.health_message else ""
            found.append(
                Verdict("HealthCheckFailing", f"{failing} health checks failed in a row{detail}")
            )
        if credentials_ok and not unhealthy:
            if passing and seen.metrics_ok is False:
                found.append(Verdict("MetricsUnavailable", seen.metrics_message or "scrape failed"))
            elif passing:
                found.append(
                    Verdict("ProviderReady", "credentials valid and health checks passing")
                )
            if failing:
                found.append(
                    Verdict("HealthCheckFailures", f"{failing} health check(s) failed in a row")
                )
        return found

    return verdicts


def evaluate_provider(
    provider: InferenceProvider, observation: ProviderObservation, now: datetime
) -> PhaseOutcome[InferenceProviderPhase]:
    """Advance an InferenceProvider's phase from its health checks, credentials and
    metrics."""
    status = provider.status
    phase = status.phase if status else InferenceProviderPhase.PENDING
    since = status.phase_transition_time if status else None
    previous = status.conditions if status else []
    generation = provider.metadata.generation

    phase, since, taken, events = _walk(
        PROVIDER_TRANSITIONS, phase, since, now, _provider_verdicts(provider, observation)
    )

    credentials = observation.credentials
    credentials_ok = credentials not in _CREDENTIAL_PROBLEMS
    check = provider.spec.health_check
    if check is None:
        healthy = condition_update(
            "Healthy", True, "HealthCheckNotConfigured", "no health check configured", generation
        )
    elif observation.consecutive_failures >= check.unhealthy_threshold:
        healthy = condition_update(
            "Healthy", False, "HealthCheckFailing", observation.health_message, generation
        )
    elif observation.consecutive_successes >= check.healthy_threshold:
        healthy = condition_update("Healthy", True, "HealthCheckPassing", "", generation)
    else:
        healthy = condition_update(
            "Healthy", None, "HealthCheckPending", "not enough checks yet", generation
        )
    if observation.metrics_ok is None:
        metrics = condition_update("MetricsAvailable", None, "NotScraped", "", generation)
    elif observation.metrics_ok:
        metrics = condition_update("MetricsAvailable", True, "Scraped", "", generation)
    else:
        metrics = condition_update(
            "MetricsAvailable", False, "ScrapeFailed", observation.metrics_message, generation
        )
    conditions = _apply_conditions(
        previous,
        [
            condition_update(
                "CredentialsValid",
                credentials_ok,
                str(credentials),
                observation.credentials_message or _CREDENTIAL_PROBLEMS.get(credentials, ""),
                generation,
            ),
            healthy,
            metrics,
            _ready(phase, InferenceProviderPhase.AVAILABLE, generation),
        ],
        now,
        frozenset({"CredentialsValid"}),
        events,
    )
    return PhaseOutcome(phase, since, conditions, events, taken)


# --- GridNetwork -------------------------------------------------------------------------


@dataclass(frozen=True)
class GatewayRender:
    """The outcome of the last overlay render for one gateway."""

    name: str
    namespace: str
    ok: bool
    message: str = ""


@dataclass(frozen=True)
class NetworkObservation:
    """What the engine knows about a network right now. ``config_error`` says why the
    network's settings (or the Secrets they name) cannot be used."""

    config_error: str | None = None
    membership_running: bool = False
    grid_id: str | None = None
    unreachable_sites: tuple[str, ...] = ()
    gateway_renders: tuple[GatewayRender, ...] = ()


_N = GridNetworkPhase
NETWORK_TRANSITIONS: PhaseTable[GridNetworkPhase] = PhaseTable(
    [
        Transition(_N.PENDING, "ConfigAccepted", _N.INITIALIZING),
        Transition(_N.INITIALIZING, "ConfigRejected", _N.PENDING, EventType.WARNING),
        Transition(_N.INITIALIZING, "MeshJoined", _N.ACTIVE),
        Transition(_N.INITIALIZING, "DegradationDetected", _N.DEGRADED, EventType.WARNING),
        Transition(_N.ACTIVE, "ConfigRejected", _N.DEGRADED, EventType.WARNING),
        Transition(_N.ACTIVE, "DegradationDetected", _N.DEGRADED, EventType.WARNING),
        Transition(_N.ACTIVE, "MembershipStopped", _N.INITIALIZING, EventType.WARNING),
        Transition(_N.DEGRADED, "Recovered", _N.ACTIVE),
        Transition(_N.DEGRADED, "MembershipStopped", _N.INITIALIZING, EventType.WARNING),
    ]
)
"""GridNetwork: Pending -> Initializing -> Active -> Degraded. A running network whose
settings turn invalid keeps running on the last accepted ones and reports Degraded."""


def _degradation(seen: NetworkObservation) -> list[str]:
    causes = []
    if seen.unreachable_sites:
        causes.append(f"sites unreachable: {', '.join(sorted(seen.unreachable_sites))}")
    failed = [f"{r.namespace}/{r.name}" for r in seen.gateway_renders if not r.ok]
    if failed:
        causes.append(f"overlay not written for: {', '.join(sorted(failed))}")
    return causes


def _network_verdicts(
    seen: NetworkObservation,
) -> Callable[[GridNetworkPhase, datetime | None], list[Verdict]]:
    causes = _degradation(seen)

    def verdicts(phase: GridNetworkPhase, since: datetime | None) -> list[Verdict]:
        found: list[Verdict] = []
        if seen.config_error is not None:
            found.append(Verdict("ConfigRejected", seen.config_error))
        if not seen.membership_running:
            found.append(Verdict("MembershipStopped", "SWIM membership is not running"))
        if seen.config_error is None:
            found.append(Verdict("ConfigAccepted", "settings and Secrets are valid"))
        if seen.membership_running and seen.grid_id:
            if causes:
                found.append(Verdict("DegradationDetected", "; ".join(causes)))
            elif seen.config_error is None:
                found.append(Verdict("MeshJoined", f"joined grid {seen.grid_id}"))
                found.append(Verdict("Recovered", "all sites reachable, all overlays written"))
        return found

    return verdicts


def evaluate_network(
    network: GridNetwork, observation: NetworkObservation, now: datetime
) -> PhaseOutcome[GridNetworkPhase]:
    """Advance a GridNetwork's phase from its settings, membership, sites and renders."""
    status = network.status
    phase = status.phase if status else GridNetworkPhase.PENDING
    since = status.phase_transition_time if status else None
    previous = status.conditions if status else []
    generation = network.metadata.generation

    phase, since, taken, events = _walk(
        NETWORK_TRANSITIONS, phase, since, now, _network_verdicts(observation)
    )

    error = observation.config_error
    failed = sorted(f"{r.namespace}/{r.name}" for r in observation.gateway_renders if not r.ok)
    unreachable = sorted(observation.unreachable_sites)
    conditions = _apply_conditions(
        previous,
        [
            condition_update(
                "ConfigValid",
                error is None,
                "ConfigAccepted" if error is None else "ConfigRejected",
                error or "",
                generation,
            ),
            condition_update(
                "MembershipReady",
                observation.membership_running,
                "MembershipRunning" if observation.membership_running else "MembershipStopped",
                "",
                generation,
            ),
            condition_update(
                "OverlaysWritten",
                not failed,
                "OverlaysWritten" if not failed else "RenderFailed",
                f"not written for: {', '.join(failed)}" if failed else "",
                generation,
            ),
            condition_update(
                "SitesReachable",
                not unreachable,
                "SitesReachable" if not unreachable else "SitesUnreachable",
                f"unreachable: {', '.join(unreachable)}" if unreachable else "",
                generation,
            ),
            _ready(phase, GridNetworkPhase.ACTIVE, generation),
        ],
        now,
        frozenset({"ConfigValid"}),
        events,
    )
    return PhaseOutcome(phase, since, conditions, events, taken)
