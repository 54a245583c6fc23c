"""The inputs room on its own: the resources of one network as a site holds them, which
providers it observes, and what it observed of them (health checks, scrapes, credentials)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from grid.engine.events import MAX_MESSAGE
from grid.engine.inputs import Observed, SiteInputs, same_inputs
from grid.errors import ConfigError
from grid.models.phases import CredentialState
from grid.models.provider import HealthCheckStatus, InferenceProvider, ScrapeStatus
from grid.observe.scrape import ScrapeResult
from grid.observe.tracker import HealthObservation, HealthState
from test_engine import T0, network, provider, scrape, site

LATER = T0 + timedelta(seconds=1)


def inputs_at(
    name: str, providers: list[InferenceProvider], *, sites: tuple[str, ...] = ()
) -> SiteInputs:
    """Site ``name``'s inputs holding ``providers`` and the GridSites ``sites``."""
    inputs = SiteInputs(network(), name)
    inputs.set_resources(network(), [site(s) for s in sites], providers)
    return inputs


def observed(inputs: SiteInputs) -> dict[str, Observed]:
    return {p.metadata.name: o for p, o in inputs.observations()}


def broken_mapping(name: str) -> InferenceProvider:
    """A provider whose ``metricsConfig.signals`` the extractor refuses (a quantile on the
    queue depth, which only p99LatencyMs may read)."""
    resource = provider(name, "site-a", metrics=True).model_copy(deep=True)
    signals = resource.spec.metrics_config.signals  # type: ignore[union-attr]
    assert signals.queue_depth is not None
    signals.queue_depth.quantile = 0.5
    return resource


# --- the resources ---------------------------------------------------------------------


def test_only_this_networks_resources_are_kept() -> None:
    inputs = SiteInputs(network(), "site-a")
    inputs.set_resources(
        network(),
        [site("site-a"), site("site-b", network_name="other")],
        [provider("llama-a", "site-a"), provider("qwen-a", "site-a", network_name="other")],
    )
    assert list(inputs.sites) == ["site-a"]
    assert list(inputs.providers) == ["llama-a"]
    assert inputs.local_site is inputs.sites["site-a"]


def test_another_networks_configuration_is_refused_and_changes_nothing() -> None:
    inputs = inputs_at("site-a", [provider("llama-a", "site-a")], sites=("site-a",))
    with pytest.raises(ConfigError, match="'mesh'"):
        inputs.set_resources(network(name="other"), [], [])
    assert inputs.network.metadata.name == "mesh"
    assert list(inputs.providers) == ["llama-a"]
    assert [p.metadata.name for p in inputs.observing] == ["llama-a"]


def test_a_site_observes_its_own_providers_and_those_of_no_site_in_name_order() -> None:
    providers = [
        provider("zeta", None),
        provider("llama-b", "site-b"),
        provider("llama-a", "site-a"),
        provider("alpha", None),
    ]
    inputs = inputs_at("site-a", providers, sites=("site-a", "site-b"))
    assert [p.metadata.name for p in inputs.observing] == ["alpha", "llama-a", "zeta"]
    assert list(observed(inputs)) == ["alpha", "llama-a", "zeta"]
    assert [t.provider for t in inputs.observation_targets()] == ["alpha", "llama-a", "zeta"]


def test_without_its_own_gridsite_a_site_observes_only_providers_of_no_site() -> None:
    inputs = inputs_at("site-a", [provider("llama-a", "site-a"), provider("openai", None)])
    assert inputs.local_site is None
    assert [p.metadata.name for p in inputs.observing] == ["openai"]


def test_providers_no_longer_observed_are_returned_and_their_observations_dropped() -> None:
    llama, openai = provider("llama-a", "site-a"), provider("openai", None, token=True)
    inputs = inputs_at("site-a", [llama, openai], sites=("site-a",))
    inputs.observe_credentials("llama-a", CredentialState.VALID)
    inputs.observe_credentials("openai", CredentialState.VALID)
    # site-a's labels no longer match llama-a's selector once its GridSite is gone.
    assert inputs.set_resources(network(), [], [llama, openai]) == {"llama-a"}
    assert list(observed(inputs)) == ["openai"]
    assert observed(inputs)["openai"].credentials is CredentialState.VALID
    assert inputs.set_resources(network(), [site("site-a")], [llama, openai]) == frozenset()
    assert observed(inputs)["llama-a"] == Observed()


def test_credential_refs_name_the_secret_of_each_observed_provider_that_has_one() -> None:
    providers = [
        provider("llama-a", "site-a", token=True),
        provider("qwen-a", "site-a"),
        provider("llama-b", "site-b", token=True),
    ]
    inputs = inputs_at("site-a", providers, sites=("site-a", "site-b"))
    assert inputs.credential_refs() == {"llama-a": ("grid", "llama-a-token", "token")}


def test_a_config_error_is_clipped_and_cleared_with_none() -> None:
    inputs = SiteInputs(network(), "site-a")
    inputs.set_config_error("e" * (MAX_MESSAGE + 1))
    assert inputs.config_error is not None and len(inputs.config_error) == MAX_MESSAGE
    inputs.set_config_error(None)
    assert inputs.config_error is None


# --- observations ----------------------------------------------------------------------


def test_observations_of_unknown_or_unobserved_providers_are_ignored() -> None:
    providers = [
        provider("llama-a", "site-a"),
        provider("llama-b", "site-b", health=True, metrics=True),
    ]
    inputs = inputs_at("site-a", providers, sites=("site-a", "site-b"))
    for name in ("nobody", "llama-b"):
        inputs.observe_health(name, HealthObservation(True, 200, 0.001), T0)
        inputs.observe_scrape(name, scrape(queue=1, kv=0.1), T0)
        inputs.observe_credentials(name, CredentialState.EMPTY)
    assert observed(inputs) == {"llama-a": Observed()}


def test_checks_and_scrapes_a_provider_is_not_configured_for_are_ignored() -> None:
    inputs = inputs_at("site-a", [provider("llama-a", "site-a")], sites=("site-a",))
    inputs.observe_health("llama-a", HealthObservation(False, 500, 0.001, "down"), T0)
    inputs.observe_scrape("llama-a", scrape(queue=1, kv=0.1), T0)
    assert observed(inputs)["llama-a"] == Observed()


def test_health_checks_follow_the_providers_thresholds() -> None:
    # The helper's check: healthy after 1 success, unhealthy after 2 failures in a row.
    inputs = inputs_at("site-a", [provider("llama-a", "site-a", health=True)], sites=("site-a",))
    inputs.observe_health("llama-a", HealthObservation(True, 200, 0.0012344), T0)
    assert observed(inputs)["llama-a"].health.state is HealthState.HEALTHY
    assert observed(inputs)["llama-a"].last_health == HealthCheckStatus(
        at=T0, healthy=True, status_code=200, latency_ms=1.234, consecutive_successes=1
    )
    inputs.observe_health("llama-a", HealthObservation(False, 503, 0.5, "HTTP status 503"), LATER)
    assert observed(inputs)["llama-a"].health.state is HealthState.DEGRADED
    inputs.observe_health("llama-a", HealthObservation(False, None, 0.5, "refused"), LATER)
    health = observed(inputs)["llama-a"]
    assert health.health.state is HealthState.UNHEALTHY
    assert health.last_health == HealthCheckStatus(
        at=LATER,
        healthy=False,
        status_code=None,
        latency_ms=500.0,
        consecutive_failures=2,
        message="refused",
    )


def test_a_status_code_outside_http_is_not_shown_and_a_long_reason_is_clipped() -> None:
    inputs = inputs_at("site-a", [provider("llama-a", "site-a", health=True)], sites=("site-a",))
    inputs.observe_health(
        "llama-a", HealthObservation(False, 999, 0.1, "r" * (MAX_MESSAGE + 9)), T0
    )
    last = observed(inputs)["llama-a"].last_health
    assert last is not None
    assert last.status_code is None
    assert len(last.message) == MAX_MESSAGE


def test_a_scrape_yields_the_providers_signals() -> None:
    inputs = inputs_at("site-a", [provider("llama-a", "site-a", metrics=True)], sites=("site-a",))
    inputs.observe_scrape("llama-a", scrape(queue=3, kv=0.25), T0)
    seen = observed(inputs)["llama-a"]
    assert seen.signals is not None
    assert (seen.signals.queue_depth, seen.signals.kv_cache_utilization) == (3.0, 0.25)
    assert (seen.metrics_ok, seen.metrics_message) == (True, "")
    assert seen.scrape == ScrapeStatus(at=T0, ok=True, message="")


def test_a_failed_scrape_or_one_with_nothing_usable_counts_as_failed() -> None:
    inputs = inputs_at("site-a", [provider("llama-a", "site-a", metrics=True)], sites=("site-a",))
    inputs.observe_scrape("llama-a", ScrapeResult(None, 0.5, "connection refused"), T0)
    seen = observed(inputs)["llama-a"]
    assert seen.metrics_ok is False
    assert "connection refused" in seen.metrics_message
    assert seen.scrape == ScrapeStatus(at=T0, ok=False, message=seen.metrics_message)
    inputs.observe_scrape("llama-a", scrape(unrelated=1), LATER)
    seen = observed(inputs)["llama-a"]
    assert seen.metrics_ok is False
    assert seen.metrics_message


def test_a_signal_mapping_the_extractor_refuses_fails_the_scrape_and_says_why() -> None:
    inputs = inputs_at("site-a", [broken_mapping("llama-a")], sites=("site-a",))
    inputs.observe_scrape("llama-a", scrape(queue=3, kv=0.25), T0)
    seen = observed(inputs)["llama-a"]
    assert seen.metrics_ok is False
    assert seen.signals is None
    assert seen.metrics_message.startswith("metricsConfig.signals cannot be read: queue_depth:")
    assert "Value error" not in seen.metrics_message
    assert seen.scrape == ScrapeStatus(at=T0, ok=False, message=seen.metrics_message)


def test_a_mapping_that_breaks_after_a_good_scrape_drops_the_signals_it_read() -> None:
    good = provider("llama-a", "site-a", metrics=True)
    inputs = inputs_at("site-a", [good], sites=("site-a",))
    inputs.observe_scrape("llama-a", scrape(queue=3, kv=0.25), T0)
    signals = observed(inputs)["llama-a"].signals
    assert signals is not None and signals.queue_depth == 3
    inputs.set_resources(network(), [site("site-a")], [broken_mapping("llama-a")])
    inputs.observe_scrape("llama-a", scrape(queue=9, kv=0.5), LATER)
    seen = observed(inputs)["llama-a"]
    assert seen.metrics_ok is False
    assert seen.signals is None


def test_credentials_found_are_recorded_per_provider() -> None:
    inputs = inputs_at("site-a", [provider("llama-a", "site-a", token=True)], sites=("site-a",))
    assert observed(inputs)["llama-a"].credentials is CredentialState.NOT_REQUIRED
    inputs.observe_credentials("llama-a", CredentialState.KEY_NOT_FOUND)
    assert observed(inputs)["llama-a"].credentials is CredentialState.KEY_NOT_FOUND


# --- same_inputs -----------------------------------------------------------------------


def test_same_inputs_needs_the_very_same_resource_and_equal_observations() -> None:
    resource = provider("llama-a", "site-a")
    held = (resource, 1, "x")
    assert same_inputs(held, (resource, 1, "x"))
    assert not same_inputs(None, (resource, 1, "x"))
    assert not same_inputs(held, (resource, 2, "x"))
    assert not same_inputs(held, (resource.model_copy(), 1, "x"))
