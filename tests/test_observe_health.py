"""Health checks over real HTTP on 127.0.0.1, and the threshold tracker."""

from __future__ import annotations

import ssl
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from grid.observe import (
    HealthObservation,
    HealthPolicy,
    HealthState,
    HealthStatus,
    check_health,
)
from grid.trust import CertificateAuthority
from support.servers import Mode, PlainTcpServer, ProviderEndpoint, closed_port, tls_server_context

# --- the check -------------------------------------------------------------------------


async def test_a_healthy_endpoint(endpoint: ProviderEndpoint) -> None:
    observation = await check_health(endpoint.health_url)
    assert observation.healthy
    assert observation.status == 200
    assert observation.reason is None
    assert 0 < observation.latency_s < 2


async def test_an_unexpected_status_is_unhealthy(endpoint: ProviderEndpoint) -> None:
    endpoint.health_status = 503
    observation = await check_health(endpoint.health_url)
    assert not observation.healthy
    assert observation.status == 503
    assert observation.reason == "HTTP status 503, expected 200"


async def test_the_expected_status_is_configurable(endpoint: ProviderEndpoint) -> None:
    endpoint.health_status = 204
    assert (await check_health(endpoint.health_url, expected_status=204)).healthy
    assert not (await check_health(endpoint.health_url)).healthy


async def test_redirects_are_not_followed(endpoint: ProviderEndpoint) -> None:
    endpoint.health_status = 302
    observation = await check_health(endpoint.health_url)
    assert not observation.healthy
    assert observation.status == 302


async def test_a_server_error_is_unhealthy(endpoint: ProviderEndpoint) -> None:
    endpoint.health_mode = Mode.ERROR
    observation = await check_health(endpoint.health_url)
    assert (observation.healthy, observation.status) == (False, 500)


async def test_a_hanging_endpoint_times_out(endpoint: ProviderEndpoint) -> None:
    endpoint.health_mode = Mode.HANG
    started = time.perf_counter()
    observation = await check_health(endpoint.health_url, timeout=0.3)
    assert time.perf_counter() - started < 1.5
    assert not observation.healthy
    assert observation.reason == "no complete response within 0.3s"


async def test_a_refused_connection_is_unhealthy() -> None:
    observation = await check_health(f"http://127.0.0.1:{closed_port()}/healthz")
    assert not observation.healthy
    assert observation.reason == "connection refused"


async def test_a_reply_that_is_not_http_is_unhealthy() -> None:
    async with PlainTcpServer(b"SSH-2.0-OpenSSH_9.6\r\n\r\n") as server:
        observation = await check_health(server.url)
    assert not observation.healthy
    assert observation.reason == "the server's reply is not valid HTTP"


async def test_a_silent_server_times_out() -> None:
    async with PlainTcpServer(None) as server:
        observation = await check_health(server.url, timeout=0.2)
    assert observation.reason == "no complete response within 0.2s"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://127.0.0.1/healthz", "http:// or https://"),
        ("healthz", "http:// or https://"),
        ("http:///healthz", "no host"),
        ("http://127.0.0.1:99999/healthz", "not valid"),
        ("http://[::1/healthz", "not valid"),
        ("http://user:pass@127.0.0.1:1/healthz", "embeds credentials"),
    ],
)
async def test_unusable_urls_are_reported(url: str, reason: str) -> None:
    observation = await check_health(url)
    assert not observation.healthy
    assert reason in (observation.reason or "")
    assert observation.status is None


async def test_a_shared_session_is_reused(endpoint: ProviderEndpoint) -> None:
    async with aiohttp.ClientSession() as session:
        results = [await check_health(endpoint.health_url, session=session) for _ in range(3)]
    assert all(result.healthy for result in results)
    assert len([path for path, _ in endpoint.requests if path == "/healthz"]) == 3


async def test_headers_are_sent(endpoint: ProviderEndpoint) -> None:
    await check_health(endpoint.health_url, headers={"X-Grid-Probe": "1"})
    assert endpoint.requests[-1][1]["X-Grid-Probe"] == "1"


# --- the tracker -----------------------------------------------------------------------

OK = HealthObservation(True, 200, 0.01)
FAIL = HealthObservation(False, 503, 0.01, "HTTP status 503, expected 200")
POLICY = HealthPolicy(healthy_threshold=2, unhealthy_threshold=3)


def run(observations: list[HealthObservation], policy: HealthPolicy = POLICY) -> list[HealthStatus]:
    statuses = []
    status = HealthStatus()
    for now, observation in enumerate(observations, start=1):
        status = status.observe(observation, now=float(now), policy=policy)
        statuses.append(status)
    return statuses


def test_health_needs_consecutive_successes() -> None:
    states = [status.state for status in run([OK, FAIL, OK, OK])]
    assert states == [
        HealthState.UNKNOWN,
        HealthState.UNKNOWN,
        HealthState.UNKNOWN,
        HealthState.HEALTHY,
    ]


def test_failures_degrade_then_make_unhealthy() -> None:
    statuses = run([OK, OK, FAIL, FAIL, FAIL, OK, OK])
    assert [status.state for status in statuses] == [
        HealthState.UNKNOWN,
        HealthState.HEALTHY,
        HealthState.DEGRADED,
        HealthState.DEGRADED,
        HealthState.UNHEALTHY,
        HealthState.UNHEALTHY,
        HealthState.HEALTHY,
    ]
    assert statuses[4].reason == FAIL.reason
    assert statuses[4].changed_at == 5.0
    assert statuses[5].changed_at == 5.0
    assert statuses[6].reason is None


def test_one_success_ends_a_degradation() -> None:
    statuses = run([OK, OK, FAIL, OK])
    assert statuses[-1].state is HealthState.HEALTHY
    assert statuses[-1].consecutive_failures == 0


def test_staleness_counts_from_the_last_observation() -> None:
    status = run([OK])[-1]
    assert not status.is_stale(5.0, max_age_s=10)
    assert status.is_stale(12.0, max_age_s=10)
    assert HealthStatus().is_stale(0.0, max_age_s=10)


def test_thresholds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HealthPolicy(healthy_threshold=0)


@given(
    observations=st.lists(st.booleans(), max_size=30),
    healthy_threshold=st.integers(1, 4),
    unhealthy_threshold=st.integers(1, 4),
)
def test_thresholds_decide_the_state(
    observations: list[bool], healthy_threshold: int, unhealthy_threshold: int
) -> None:
    policy = HealthPolicy(healthy_threshold, unhealthy_threshold)
    statuses = run([OK if ok else FAIL for ok in observations], policy)
    for index, status in enumerate(statuses):
        history = observations[: index + 1]
        if history[-unhealthy_threshold:] == [False] * unhealthy_threshold:
            assert status.state is HealthState.UNHEALTHY
        if history[-healthy_threshold:] == [True] * healthy_threshold:
            assert status.state is HealthState.HEALTHY
        if status.state is HealthState.DEGRADED:
            assert not history[-1]
            assert index > 0
            assert statuses[index - 1].state in {HealthState.HEALTHY, HealthState.DEGRADED}


# --- TLS to an address the certificate does not name ----------------------------------


async def test_a_server_name_verifies_a_certificate_that_does_not_name_the_address(
    tmp_path: Path,
) -> None:
    # The provider is reached at 127.0.0.1 but its certificate names only
    # provider.example: serverName is what verification checks against.
    now = datetime.now(UTC)
    ca = CertificateAuthority.generate("Health CA", now=now)
    issued = ca.issue("provider.example", now=now, ip_addresses=())
    files = issued.write(tmp_path, "provider")
    server_tls = tls_server_context(files)
    client_tls = ssl.create_default_context(cadata=ca.certificate_pem)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
    await site.start()
    try:
        port = runner.addresses[0][1]
        url = f"https://127.0.0.1:{port}/healthz"
        named = await check_health(url, tls=client_tls, server_name="provider.example")
        assert named.healthy, named.reason
        unnamed = await check_health(url, tls=client_tls)
        assert not unnamed.healthy
        assert unnamed.reason == "the server's TLS certificate was not accepted"
    finally:
        await runner.cleanup()
