"""The phase machines: every allowed and every disallowed transition, each allowed one
driven by real observations, and the invariants (a site is never Active without a
fingerprint match; an evaluation always settles)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.models import (
    AUTO_DISCOVER_LABEL,
    ConditionStatus,
    GridNetwork,
    GridNetworkPhase,
    GridSite,
    GridSitePhase,
    InferenceProvider,
    InferenceProviderPhase,
    find_condition,
    load_resource,
)
from grid.models.network import GridNetworkStatus
from grid.models.phases import (
    NETWORK_TRANSITIONS,
    PROVIDER_TRANSITIONS,
    SITE_TRANSITIONS,
    CredentialState,
    EventType,
    GatewayRender,
    MemberState,
    NetworkObservation,
    PhaseTable,
    ProbeObservation,
    ProviderObservation,
    SiteObservation,
    Transition,
    evaluate_network,
    evaluate_provider,
    evaluate_site,
)
from grid.models.provider import InferenceProviderStatus
from grid.models.site import GridSiteStatus

T0 = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=10)
PIN = "d8c4fc4a8252de2c918fe9da3b3de03777c25f59d4657a8f1059c15282129162"
OLD_PIN = "c749ff786e47337149a553f0b6afe341bd3c271b66a9c69e2b4be96fa612f1f0"
OTHER = "00" * 32

S = GridSitePhase
P = InferenceProviderPhase
N = GridNetworkPhase

# The tables as the issue states them, written out independently of the implementation:
# (source, reason) -> target. Every pair not listed must be refused.
EXPECTED_SITE = {
    (S.PENDING, "PeerDiscovered"): S.DISCOVERED,
    (S.PENDING, "EgressConfigured"): S.CONNECTING,
    (S.PENDING, "MemberLeft"): S.LEFT,
    (S.DISCOVERED, "EgressAvailable"): S.CONNECTING,
    (S.DISCOVERED, "MemberLeft"): S.LEFT,
    (S.CONNECTING, "TrustVerified"): S.ACTIVE,
    (S.CONNECTING, "ProbeFailed"): S.UNREACHABLE,
    (S.CONNECTING, "EgressRemoved"): S.PENDING,
    (S.CONNECTING, "MemberLeft"): S.LEFT,
    (S.ACTIVE, "ProbeFailed"): S.UNREACHABLE,
    (S.ACTIVE, "FingerprintMismatch"): S.CONNECTING,
    (S.ACTIVE, "CertificateRevoked"): S.CONNECTING,
    (S.ACTIVE, "TrustNotConfigured"): S.CONNECTING,
    (S.ACTIVE, "EgressRemoved"): S.PENDING,
    (S.ACTIVE, "MemberLeft"): S.LEFT,
    (S.UNREACHABLE, "TrustVerified"): S.ACTIVE,
    (S.UNREACHABLE, "FingerprintMismatch"): S.CONNECTING,
    (S.UNREACHABLE, "CertificateRevoked"): S.CONNECTING,
    (S.UNREACHABLE, "TrustNotConfigured"): S.CONNECTING,
    (S.UNREACHABLE, "EgressRemoved"): S.PENDING,
    (S.UNREACHABLE, "MemberLeft"): S.LEFT,
    (S.LEFT, "MemberRejoined"): S.PENDING,
}
EXPECTED_PROVIDER = {
    (P.PENDING, "ProviderReady"): P.AVAILABLE,
    (P.PENDING, "MetricsUnavailable"): P.DEGRADED,
    (P.PENDING, "CredentialsInvalid"): P.UNAVAILABLE,
    (P.PENDING, "HealthCheckFailing"): P.UNAVAILABLE,
    (P.AVAILABLE, "HealthCheckFailures"): P.DEGRADED,
    (P.AVAILABLE, "MetricsUnavailable"): P.DEGRADED,
    (P.AVAILABLE, "CredentialsInvalid"): P.UNAVAILABLE,
    (P.AVAILABLE, "HealthCheckFailing"): P.UNAVAILABLE,
    (P.DEGRADED, "ProviderReady"): P.AVAILABLE,
    (P.DEGRADED, "CredentialsInvalid"): P.UNAVAILABLE,
    (P.DEGRADED, "HealthCheckFailing"): P.UNAVAILABLE,
    (P.UNAVAILABLE, "ProviderReady"): P.AVAILABLE,
    (P.UNAVAILABLE, "MetricsUnavailable"): P.DEGRADED,
}
EXPECTED_NETWORK = {
    (N.PENDING, "ConfigAccepted"): N.INITIALIZING,
    (N.INITIALIZING, "ConfigRejected"): N.PENDING,
    (N.INITIALIZING, "MeshJoined"): N.ACTIVE,
    (N.INITIALIZING, "DegradationDetected"): N.DEGRADED,
    (N.ACTIVE, "ConfigRejected"): N.DEGRADED,
    (N.ACTIVE, "DegradationDetected"): N.DEGRADED,
    (N.ACTIVE, "MembershipStopped"): N.INITIALIZING,
    (N.DEGRADED, "Recovered"): N.ACTIVE,
    (N.DEGRADED, "MembershipStopped"): N.INITIALIZING,
}
MACHINES: list[tuple[PhaseTable[Any], dict[tuple[Any, str], Any]]] = [
    (SITE_TRANSITIONS, EXPECTED_SITE),
    (PROVIDER_TRANSITIONS, EXPECTED_PROVIDER),
    (NETWORK_TRANSITIONS, EXPECTED_NETWORK),
]


def _every_pair() -> list[tuple[PhaseTable[Any], dict[tuple[Any, str], Any], Any, Any]]:
    cases = []
    for table, expected in MACHINES:
        phases = type(next(iter(expected.values())))
        for source, target in itertools.product(phases, phases):
            cases.append((table, expected, source, target))
    return cases


@pytest.mark.parametrize(
    ("table", "expected", "source", "target"),
    _every_pair(),
    ids=lambda value: str(value) if not isinstance(value, PhaseTable | dict) else "",
)
def test_every_phase_pair_is_allowed_exactly_as_specified(
    table: PhaseTable[Any], expected: dict[tuple[Any, str], Any], source: Any, target: Any
) -> None:
    reasons = {reason for (src, reason), dst in expected.items() if src == source and dst == target}
    assert table.reasons(source, target) == reasons
    assert table.allows(source, target) is bool(reasons)


@pytest.mark.parametrize(("table", "expected"), MACHINES)
def test_every_reason_from_every_phase(
    table: PhaseTable[Any], expected: dict[tuple[Any, str], Any]
) -> None:
    phases = type(next(iter(expected.values())))
    reasons = {reason for _, reason in expected}
    for source, reason in itertools.product(phases, reasons):
        transition = table.lookup(source, reason)
        assert (transition.target if transition else None) == expected.get((source, reason))
    assert len(table.transitions) == len(expected)


def test_the_site_table_has_one_way_into_active() -> None:
    into_active = {t.reason for t in SITE_TRANSITIONS.transitions if t.target is S.ACTIVE}
    assert into_active == {"TrustVerified"}
    for source in (S.PENDING, S.DISCOVERED, S.LEFT):
        assert not SITE_TRANSITIONS.allows(source, S.ACTIVE)


def test_a_table_refuses_ambiguous_or_empty_transitions() -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        PhaseTable([Transition(S.PENDING, "X", S.LEFT), Transition(S.PENDING, "X", S.ACTIVE)])
    with pytest.raises(ValueError, match="empty"):
        PhaseTable([Transition(S.PENDING, "X", S.PENDING)])


# --- GridSite, driven by observations ------------------------------------------------------


def make_site(
    phase: GridSitePhase | None = None,
    *,
    auto_discover: bool = False,
    pins: tuple[str, ...] = (PIN,),
    since: datetime = T0,
) -> GridSite:
    trust = dict(zip(("certFingerprint", "previousCertFingerprint"), pins, strict=False))
    labels = {AUTO_DISCOVER_LABEL: "true"} if auto_discover else {}
    loaded = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridSite",
            "metadata": {"name": "east-edge", "labels": labels, "generation": 4},
            "spec": {"gridNetworkRef": "glb-demo", "trust": trust},
        }
    )
    assert isinstance(loaded, GridSite)
    if phase is None:
        return loaded
    return loaded.model_copy(
        update={"status": GridSiteStatus(phase=phase, phase_transition_time=since)}
    )


def probe(
    reachable: bool = True, fingerprint: str | None = PIN, at: datetime = T1
) -> ProbeObservation:
    return ProbeObservation(at=at, reachable=reachable, presented_fingerprint=fingerprint)


ALIVE = MemberState.ALIVE
EGRESS = "east-edge.example:8443"

# (source, reason) -> (site factory kwargs, observation) that must take exactly that step.
SITE_SCENARIOS: dict[tuple[GridSitePhase, str], tuple[dict[str, Any], SiteObservation]] = {
    (S.PENDING, "PeerDiscovered"): ({"auto_discover": True}, SiteObservation(member=ALIVE)),
    (S.PENDING, "EgressConfigured"): ({}, SiteObservation(egress_address=EGRESS)),
    (S.PENDING, "MemberLeft"): ({}, SiteObservation(member=MemberState.LEFT)),
    (S.DISCOVERED, "EgressAvailable"): (
        {"auto_discover": True},
        SiteObservation(member=ALIVE, egress_address=EGRESS),
    ),
    (S.DISCOVERED, "MemberLeft"): (
        {"auto_discover": True},
        SiteObservation(member=MemberState.LEFT),
    ),
    (S.CONNECTING, "TrustVerified"): ({}, SiteObservation(egress_address=EGRESS, probe=probe())),
    (S.CONNECTING, "ProbeFailed"): ({}, SiteObservation(egress_address=EGRESS, probe=probe(False))),
    (S.CONNECTING, "EgressRemoved"): ({}, SiteObservation(member=ALIVE)),
    (S.CONNECTING, "MemberLeft"): (
        {},
        SiteObservation(member=MemberState.LEFT, egress_address=EGRESS),
    ),
    (S.ACTIVE, "ProbeFailed"): ({}, SiteObservation(egress_address=EGRESS, probe=probe(False))),
    (S.ACTIVE, "FingerprintMismatch"): (
        {},
        SiteObservation(egress_address=EGRESS, probe=probe(fingerprint=OTHER)),
    ),
    (S.ACTIVE, "CertificateRevoked"): (
        {},
        SiteObservation(egress_address=EGRESS, probe=probe(), revoked=frozenset({PIN})),
    ),
    (S.ACTIVE, "TrustNotConfigured"): (
        {"pins": ()},
        SiteObservation(egress_address=EGRESS, probe=probe()),
    ),
    (S.ACTIVE, "EgressRemoved"): ({}, SiteObservation(probe=probe())),
    (S.ACTIVE, "MemberLeft"): ({}, SiteObservation(member=MemberState.LEFT, egress_address=EGRESS)),
    (S.UNREACHABLE, "TrustVerified"): (
        {"pins": (OTHER, PIN)},  # the previous pin matches: rotation in progress
        SiteObservation(egress_address=EGRESS, probe=probe()),
    ),
    (S.UNREACHABLE, "FingerprintMismatch"): (
        {},
        SiteObservation(egress_address=EGRESS, probe=probe(fingerprint=None)),
    ),
    (S.UNREACHABLE, "CertificateRevoked"): (
        {},
        SiteObservation(egress_address=EGRESS, probe=probe(), revoked=frozenset({PIN})),
    ),
    (S.UNREACHABLE, "TrustNotConfigured"): (
        {"pins": ()},
        SiteObservation(egress_address=EGRESS, probe=probe()),
    ),
    (S.UNREACHABLE, "EgressRemoved"): ({}, SiteObservation()),
    (S.UNREACHABLE, "MemberLeft"): ({}, SiteObservation(member=MemberState.LEFT)),
    (S.LEFT, "MemberRejoined"): ({}, SiteObservation(member=ALIVE)),
}


def test_every_site_transition_has_a_scenario() -> None:
    assert set(SITE_SCENARIOS) == set(EXPECTED_SITE)


@pytest.mark.parametrize(("key", "scenario"), SITE_SCENARIOS.items(), ids=str)
def test_site_transitions_from_observations(
    key: tuple[GridSitePhase, str], scenario: tuple[dict[str, Any], SiteObservation]
) -> None:
    source, reason = key
    options, observation = scenario
    outcome = evaluate_site(make_site(source, **options), observation, T1)
    first = outcome.transitions[0]
    assert (first.source, first.reason, first.target) == (source, reason, EXPECTED_SITE[key])
    assert outcome.events[0].reason == reason
    assert outcome.phase_transition_time == T1


def test_a_manual_site_walks_to_active_in_one_evaluation() -> None:
    outcome = evaluate_site(
        make_site(), SiteObservation(egress_address=EGRESS, probe=probe(at=T1)), T1
    )
    assert outcome.phase is S.ACTIVE
    assert [t.reason for t in outcome.transitions] == ["EgressConfigured", "TrustVerified"]
    assert all(event.type is EventType.NORMAL for event in outcome.events)
    ready = find_condition(outcome.conditions, "Ready")
    assert ready is not None and ready.status is ConditionStatus.TRUE
    assert ready.observed_generation == 4


def test_a_discovered_site_waits_for_the_label_and_for_the_peer() -> None:
    no_label = evaluate_site(make_site(), SiteObservation(member=ALIVE), T1)
    assert no_label.phase is S.PENDING and no_label.transitions == []
    not_alive = evaluate_site(
        make_site(auto_discover=True), SiteObservation(member=MemberState.SUSPECT), T1
    )
    assert not_alive.phase is S.PENDING


def test_an_old_probe_cannot_make_a_site_active() -> None:
    stale = SiteObservation(egress_address=EGRESS, probe=probe(at=T0 - timedelta(seconds=1)))
    outcome = evaluate_site(make_site(S.CONNECTING), stale, T1)
    assert outcome.phase is S.CONNECTING
    # After rejoining, the probe from before the site left does not count either.
    rejoined = SiteObservation(
        member=ALIVE, egress_address=EGRESS, probe=probe(at=T0 + timedelta(seconds=1))
    )
    outcome = evaluate_site(make_site(S.LEFT), rejoined, T1)
    assert outcome.phase is S.CONNECTING
    assert [t.reason for t in outcome.transitions] == ["MemberRejoined", "EgressConfigured"]


def test_a_mismatch_in_connecting_warns_once() -> None:
    observation = SiteObservation(egress_address=EGRESS, probe=probe(fingerprint=OTHER))
    outcome = evaluate_site(make_site(S.CONNECTING), observation, T1)
    assert outcome.phase is S.CONNECTING
    assert [(e.type, e.reason) for e in outcome.events] == [
        (EventType.WARNING, "FingerprintMismatch")
    ]
    trusted = find_condition(outcome.conditions, "Trusted")
    assert trusted is not None and trusted.status is ConditionStatus.FALSE
    site = make_site(S.CONNECTING).model_copy(
        update={
            "status": GridSiteStatus(
                phase=outcome.phase,
                phase_transition_time=outcome.phase_transition_time,
                conditions=outcome.conditions,
            )
        }
    )
    again = evaluate_site(site, observation, T1 + timedelta(seconds=5))
    assert again.events == []
    assert find_condition(again.conditions, "Trusted") == trusted


def test_losing_trust_while_active_is_a_warning_with_the_reason() -> None:
    observation = SiteObservation(egress_address=EGRESS, probe=probe(fingerprint=OTHER))
    outcome = evaluate_site(make_site(S.ACTIVE), observation, T1)
    assert outcome.phase is S.CONNECTING
    (event,) = outcome.events
    assert (event.type, event.reason) == (EventType.WARNING, "FingerprintMismatch")
    assert "matches neither" in event.message


_phases = st.sampled_from(list(GridSitePhase))
_members = st.sampled_from([None, *MemberState])
_fingerprints = st.sampled_from([None, PIN, OLD_PIN, OTHER, PIN.upper()])
_pins = st.sampled_from([(), (PIN,), (OLD_PIN,), (PIN, OLD_PIN), (OTHER, OLD_PIN)])
_offsets = st.sampled_from([-20, -10, 0, 5, 10])
_probes = st.one_of(
    st.none(),
    st.builds(
        lambda reachable, fingerprint, offset: ProbeObservation(
            at=T1 + timedelta(seconds=offset),
            reachable=reachable,
            presented_fingerprint=fingerprint,
        ),
        st.booleans(),
        _fingerprints,
        st.sampled_from([-20, -10, 0]),
    ),
)


@settings(max_examples=400, deadline=None)
@given(_phases, st.booleans(), _pins, _members, st.booleans(), _probes, _offsets)
def test_a_site_is_never_active_without_a_fingerprint_match(
    phase: GridSitePhase,
    auto_discover: bool,
    pins: tuple[str, ...],
    member: MemberState | None,
    has_egress: bool,
    seen_probe: ProbeObservation | None,
    since_offset: int,
) -> None:
    site = make_site(
        phase, auto_discover=auto_discover, pins=pins, since=T1 + timedelta(seconds=since_offset)
    )
    observation = SiteObservation(
        member=member, egress_address=EGRESS if has_egress else None, probe=seen_probe
    )
    outcome = evaluate_site(site, observation, T1)

    # The walk is a chain of allowed transitions.
    current = phase
    for transition in outcome.transitions:
        assert transition.source == current
        assert SITE_TRANSITIONS.lookup(transition.source, transition.reason) == transition
        current = transition.target
    assert current == outcome.phase

    entered_active = any(t.target is S.ACTIVE for t in outcome.transitions)
    if entered_active:
        assert seen_probe is not None and seen_probe.reachable
        assert site.spec.trust.match(seen_probe.presented_fingerprint) is not None
        assert seen_probe.presented_fingerprint is not None
        assert seen_probe.presented_fingerprint.lower() in pins

    # It settles: evaluating again from the result changes nothing.
    settled = site.model_copy(
        update={
            "status": GridSiteStatus(
                phase=outcome.phase,
                phase_transition_time=outcome.phase_transition_time,
                conditions=outcome.conditions,
            )
        }
    )
    assert evaluate_site(settled, observation, T1).transitions == []


# --- InferenceProvider ---------------------------------------------------------------------


def make_provider(
    phase: InferenceProviderPhase | None = None, *, health_check: bool = True
) -> InferenceProvider:
    spec: dict[str, Any] = {
        "gridNetworkRef": "glb-demo",
        "backendKind": "api_provider",
        "providerKind": "open_ai",
        "models": [{"name": "gpt-4o"}],
        "endpoint": "https://api.openai.com/v1",
        "auth": {
            "strategy": "BearerToken",
            "secretRef": {"name": "openai", "namespace": "grid-system", "key": "token"},
        },
    }
    if health_check:
        spec["healthCheck"] = {"healthyThreshold": 2, "unhealthyThreshold": 3}
    loaded = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": "openai", "generation": 2},
            "spec": spec,
        }
    )
    assert isinstance(loaded, InferenceProvider)
    if phase is None:
        return loaded
    return loaded.model_copy(
        update={"status": InferenceProviderStatus(phase=phase, phase_transition_time=T0)}
    )


VALID = CredentialState.VALID
HEALTHY = ProviderObservation(credentials=VALID, consecutive_successes=2)
PROVIDER_SCENARIOS: dict[tuple[InferenceProviderPhase, str], ProviderObservation] = {
    (P.PENDING, "ProviderReady"): HEALTHY,
    (P.PENDING, "MetricsUnavailable"): ProviderObservation(
        credentials=VALID, consecutive_successes=5, metrics_ok=False, metrics_message="HTTP 503"
    ),
    (P.PENDING, "CredentialsInvalid"): ProviderObservation(
        credentials=CredentialState.SECRET_NOT_FOUND
    ),
    (P.PENDING, "HealthCheckFailing"): ProviderObservation(
        credentials=VALID, consecutive_failures=3
    ),
    (P.AVAILABLE, "HealthCheckFailures"): ProviderObservation(
        credentials=VALID, consecutive_failures=1
    ),
    (P.AVAILABLE, "MetricsUnavailable"): ProviderObservation(
        credentials=VALID, consecutive_successes=9, metrics_ok=False
    ),
    (P.AVAILABLE, "CredentialsInvalid"): ProviderObservation(
        credentials=CredentialState.KEY_NOT_FOUND, consecutive_successes=9
    ),
    (P.AVAILABLE, "HealthCheckFailing"): ProviderObservation(
        credentials=VALID, consecutive_failures=4
    ),
    (P.DEGRADED, "ProviderReady"): ProviderObservation(
        credentials=VALID, consecutive_successes=2, metrics_ok=True
    ),
    (P.DEGRADED, "CredentialsInvalid"): ProviderObservation(credentials=CredentialState.EMPTY),
    (P.DEGRADED, "HealthCheckFailing"): ProviderObservation(
        credentials=VALID, consecutive_failures=3
    ),
    (P.UNAVAILABLE, "ProviderReady"): HEALTHY,
    (P.UNAVAILABLE, "MetricsUnavailable"): ProviderObservation(
        credentials=VALID, consecutive_successes=2, metrics_ok=False
    ),
}


def test_every_provider_transition_has_a_scenario() -> None:
    assert set(PROVIDER_SCENARIOS) == set(EXPECTED_PROVIDER)


@pytest.mark.parametrize(("key", "observation"), PROVIDER_SCENARIOS.items(), ids=str)
def test_provider_transitions_from_observations(
    key: tuple[InferenceProviderPhase, str], observation: ProviderObservation
) -> None:
    source, reason = key
    outcome = evaluate_provider(make_provider(source), observation, T1)
    first = outcome.transitions[0]
    assert (first.source, first.reason, first.target) == (source, reason, EXPECTED_PROVIDER[key])


def test_a_provider_waits_for_enough_checks() -> None:
    outcome = evaluate_provider(
        make_provider(), ProviderObservation(credentials=VALID, consecutive_successes=1), T1
    )
    assert outcome.phase is P.PENDING
    healthy = find_condition(outcome.conditions, "Healthy")
    assert healthy is not None and healthy.status is ConditionStatus.UNKNOWN
    one_failure = evaluate_provider(
        make_provider(), ProviderObservation(credentials=VALID, consecutive_failures=1), T1
    )
    assert one_failure.phase is P.PENDING


def test_without_a_health_check_valid_credentials_suffice() -> None:
    outcome = evaluate_provider(
        make_provider(health_check=False), ProviderObservation(credentials=VALID), T1
    )
    assert outcome.phase is P.AVAILABLE


def test_a_missing_secret_is_a_warning_naming_the_reference_field() -> None:
    outcome = evaluate_provider(
        make_provider(P.AVAILABLE),
        ProviderObservation(credentials=CredentialState.SECRET_NOT_FOUND),
        T1,
    )
    assert outcome.phase is P.UNAVAILABLE
    (event,) = outcome.events  # the condition warning is not repeated
    assert (event.type, event.reason) == (EventType.WARNING, "CredentialsInvalid")
    assert "spec.auth.secretRef" in event.message
    credentials = find_condition(outcome.conditions, "CredentialsValid")
    assert credentials is not None
    assert (credentials.status, credentials.reason) == (ConditionStatus.FALSE, "SecretNotFound")


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(list(InferenceProviderPhase)),
    st.sampled_from(list(CredentialState)),
    st.integers(0, 5),
    st.integers(0, 5),
    st.sampled_from([None, True, False]),
    st.booleans(),
)
def test_providers_settle_and_are_available_only_when_usable(
    phase: InferenceProviderPhase,
    credentials: CredentialState,
    successes: int,
    failures: int,
    metrics_ok: bool | None,
    health_check: bool,
) -> None:
    provider = make_provider(phase, health_check=health_check)
    observation = ProviderObservation(
        credentials=credentials,
        consecutive_successes=successes,
        consecutive_failures=failures,
        metrics_ok=metrics_ok,
    )
    outcome = evaluate_provider(provider, observation, T1)
    if any(t.target is P.AVAILABLE for t in outcome.transitions):
        # A minted token still valid counts, even while refreshing it fails; so does a
        # rendered value in place.
        assert credentials in (
            CredentialState.VALID,
            CredentialState.NOT_REQUIRED,
            CredentialState.MINTED,
            CredentialState.REFRESH_FAILING,
            CredentialState.EXPIRING,
            CredentialState.RENDERED,
        )
        assert metrics_ok is not False
        assert not health_check or successes >= 2
    settled = provider.model_copy(
        update={
            "status": InferenceProviderStatus(
                phase=outcome.phase,
                phase_transition_time=outcome.phase_transition_time,
                conditions=outcome.conditions,
            )
        }
    )
    assert evaluate_provider(settled, observation, T1).transitions == []


# --- GridNetwork ---------------------------------------------------------------------------


def make_network(phase: GridNetworkPhase | None = None) -> GridNetwork:
    loaded = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": "glb-demo", "generation": 1},
            "spec": {},
        }
    )
    assert isinstance(loaded, GridNetwork)
    if phase is None:
        return loaded
    return loaded.model_copy(
        update={"status": GridNetworkStatus(phase=phase, phase_transition_time=T0)}
    )


RUNNING = NetworkObservation(membership_running=True, grid_id="grid-1")
BROKEN_RENDER = (GatewayRender("edge", "grid-system", ok=False, message="zero candidates"),)
NETWORK_SCENARIOS: dict[tuple[GridNetworkPhase, str], NetworkObservation] = {
    (N.PENDING, "ConfigAccepted"): NetworkObservation(),
    (N.INITIALIZING, "ConfigRejected"): NetworkObservation(config_error="Secret swim not found"),
    (N.INITIALIZING, "MeshJoined"): RUNNING,
    (N.INITIALIZING, "DegradationDetected"): NetworkObservation(
        membership_running=True, grid_id="grid-1", unreachable_sites=("west-edge",)
    ),
    (N.ACTIVE, "ConfigRejected"): NetworkObservation(
        config_error="swim key is 16 bytes", membership_running=True, grid_id="grid-1"
    ),
    (N.ACTIVE, "DegradationDetected"): NetworkObservation(
        membership_running=True, grid_id="grid-1", gateway_renders=BROKEN_RENDER
    ),
    (N.ACTIVE, "MembershipStopped"): NetworkObservation(grid_id="grid-1"),
    (N.DEGRADED, "Recovered"): RUNNING,
    (N.DEGRADED, "MembershipStopped"): NetworkObservation(grid_id="grid-1"),
}


def test_every_network_transition_has_a_scenario() -> None:
    assert set(NETWORK_SCENARIOS) == set(EXPECTED_NETWORK)


@pytest.mark.parametrize(("key", "observation"), NETWORK_SCENARIOS.items(), ids=str)
def test_network_transitions_from_observations(
    key: tuple[GridNetworkPhase, str], observation: NetworkObservation
) -> None:
    source, reason = key
    outcome = evaluate_network(make_network(source), observation, T1)
    first = outcome.transitions[0]
    assert (first.source, first.reason, first.target) == (source, reason, EXPECTED_NETWORK[key])


def test_a_new_network_comes_up_in_one_evaluation_and_reports_why_it_degrades() -> None:
    outcome = evaluate_network(make_network(), RUNNING, T1)
    assert outcome.phase is N.ACTIVE
    assert [t.reason for t in outcome.transitions] == ["ConfigAccepted", "MeshJoined"]
    degraded = evaluate_network(
        make_network(N.ACTIVE),
        NetworkObservation(
            membership_running=True,
            grid_id="grid-1",
            unreachable_sites=("west-edge", "east-core"),
            gateway_renders=BROKEN_RENDER,
        ),
        T1,
    )
    (event,) = degraded.events
    assert event.type is EventType.WARNING
    assert event.message == (
        "sites unreachable: east-core, west-edge; overlay not written for: grid-system/edge"
    )
    statuses = {c.type: c.status for c in degraded.conditions}
    assert statuses == {
        "ConfigValid": ConditionStatus.TRUE,
        "MembershipReady": ConditionStatus.TRUE,
        "OverlaysWritten": ConditionStatus.FALSE,
        "SitesReachable": ConditionStatus.FALSE,
        "Ready": ConditionStatus.FALSE,
    }


def test_a_bad_secret_keeps_a_new_network_pending() -> None:
    outcome = evaluate_network(
        make_network(), NetworkObservation(config_error="Secret glb-demo-swim-key not found"), T1
    )
    assert outcome.phase is N.PENDING
    (event,) = outcome.events
    assert (event.type, event.reason) == (EventType.WARNING, "ConfigRejected")


_Evaluate = Callable[[GridNetworkPhase, NetworkObservation], Any]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(list(GridNetworkPhase)),
    st.sampled_from([None, "bad key"]),
    st.booleans(),
    st.sampled_from([None, "grid-1"]),
    st.sampled_from([(), ("west-edge",)]),
    st.sampled_from([(), BROKEN_RENDER, (GatewayRender("edge", "grid-system", ok=True),)]),
)
def test_networks_settle_and_are_active_only_when_whole(
    phase: GridNetworkPhase,
    config_error: str | None,
    running: bool,
    grid_id: str | None,
    unreachable: tuple[str, ...],
    renders: tuple[GatewayRender, ...],
) -> None:
    observation = NetworkObservation(
        config_error=config_error,
        membership_running=running,
        grid_id=grid_id,
        unreachable_sites=unreachable,
        gateway_renders=renders,
    )
    network = make_network(phase)
    outcome = evaluate_network(network, observation, T1)
    if any(t.target is N.ACTIVE for t in outcome.transitions):
        assert running and grid_id and config_error is None and not unreachable
        assert all(render.ok for render in renders)
    settled = network.model_copy(
        update={
            "status": GridNetworkStatus(
                phase=outcome.phase,
                phase_transition_time=outcome.phase_transition_time,
                conditions=outcome.conditions,
            )
        }
    )
    assert evaluate_network(settled, observation, T1).transitions == []


def test_long_observed_messages_are_clipped_to_the_api_limits() -> None:
    huge = "x" * 100_000
    outcome = evaluate_network(make_network(), NetworkObservation(config_error=huge), T1)
    (event,) = outcome.events
    assert len(event.message) == 1024 and event.message.endswith("…")
    config = find_condition(outcome.conditions, "ConfigValid")
    assert config is not None and len(config.message) == 32768
