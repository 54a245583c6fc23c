"""The operator's own Kubernetes client under faults, over TLS, and what the operator makes
of an API server that stops answering; and SWIM ports of networks that do not set one.

Under faults, the client talks to kmock through a fault-injecting proxy
(:mod:`support.faulty_api`): 429s with ``Retry-After``, 500s, stalls, dropped connections,
a server that is down, none of which a real API server can be made to produce on cue. Each
test checks that the call succeeds after the faults, how many attempts it took and that the
waits between them stayed within the policy's bounds. The rest runs on a real API server too.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client as k8s

from grid.errors import KubernetesApiError
from grid.operator import Operator, build_registry, post_event
from grid.operator.kube import KubeApi, Reachability, RetryPolicy, _retry_after
from grid.operator.ports import ASSIGNED, FROM_DEFAULT, FROM_SPEC, Claim, SwimPorts, recorded_port
from k8s.cluster import Cluster
from k8s.emulator import CONFIGMAPS, GRID_NETWORKS
from k8s.grid_install import ACCOUNT
from k8s.kopf_runner import fast_settings, run_operator
from k8s.operator_support import (
    NAMESPACE,
    WATCHED,
    OperatorUnderTest,
    b64,
    captured_logs,
    condition,
    free_udp_port,
    network_body,
    operator_for,
    prepare_namespaces,
    put_secret,
    put_trust,
    status_of,
    test_options,
    wait_condition,
)
from k8s.rbac import ServedRequest, served_requests
from k8s.waiting import eventually
from support.faulty_api import Answer, Drop, FaultyApi, Stall, matching
from support.pki import Pki, make_pki
from support.servers import tls_server_context

pytestmark = [pytest.mark.timeout(60), pytest.mark.both_backends]
INJECTED_FAULTS = pytest.mark.kmock_only(reason="faults injected by a proxy; reads kmock's log")

SITE = "site-a"
# Quick enough for tests, with the shape of the default policy.
FAST = RetryPolicy(
    attempts=5, base_s=0.05, cap_s=0.4, timeout_s=0.5, budget_s=5.0, retry_after_cap_s=2.0
)
CONFIGMAP_BODY = {"metadata": {"name": "cm"}, "data": {"k": "v"}}


@pytest.fixture
async def proxy(cluster: Cluster) -> AsyncIterator[FaultyApi]:
    await prepare_namespaces(cluster)
    async with FaultyApi(cluster.url) as running:
        yield running


@contextlib.asynccontextmanager
async def client(
    server: str | k8s.Configuration, policy: RetryPolicy = FAST, **settings: Any
) -> AsyncIterator[KubeApi]:
    """Grid's client for ``server`` (a URL, or the whole configuration) and ``settings``."""
    configuration = k8s.Configuration(host=server) if isinstance(server, str) else server
    for name, value in settings.items():
        setattr(configuration, name, value)
    kube = KubeApi(configuration, retry=policy, rng=random.Random(19))
    await kube.start()
    try:
        yield kube
    finally:
        await kube.close()


def gaps(proxy: FaultyApi, path: str) -> list[float]:
    """Seconds between successive attempts at ``path``."""
    times = [seen.at for seen in proxy.seen_for(path)]
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def within_backoff(policy: RetryPolicy, waits: list[float]) -> bool:
    """Each wait within ``[c/2, c]``, ``c = min(cap, base * 2**(n-1))``."""
    for attempt, wait in enumerate(waits, start=1):
        ceiling = min(policy.cap_s, policy.base_s * 2 ** (attempt - 1))
        if not ceiling / 2 <= wait <= ceiling:
            return False
    return True


# --- retries -----------------------------------------------------------------------------------


@INJECTED_FAULTS
async def test_a_429_is_retried_after_its_retry_after(cluster: Cluster, proxy: FaultyApi) -> None:
    await put_secret(cluster, "token", {"token": b"value"})
    proxy.inject(
        Answer(429, {"Retry-After": "1"}), times=2, match=matching("GET", "/secrets/token")
    )
    async with client(proxy.url) as kube:
        started = time.monotonic()
        data = await kube.read_secret(NAMESPACE, "token")
        elapsed = time.monotonic() - started
    assert data == {"token": b64("value")}
    outcomes = [seen.outcome for seen in proxy.seen_for("/secrets/token")]
    assert outcomes == ["answered 429", "answered 429", "forwarded"]
    # Retry-After (1 s) wins over the backoff (at most 0.1 s here), and nothing waits longer.
    assert all(1.0 <= gap < 1.5 for gap in gaps(proxy, "/secrets/token"))
    assert list(kube.recent_waits) == [1.0, 1.0]
    assert kube.retries == {"429": 2}
    assert 2.0 <= elapsed < 3.0


@INJECTED_FAULTS
async def test_5xx_answers_are_retried_with_a_bounded_exponential_backoff(
    cluster: Cluster, proxy: FaultyApi
) -> None:
    await cluster.create(GRID_NETWORKS, network_body("mesh", port=7946))
    status = "/gridnetworks/mesh/status"
    proxy.inject(Answer(500), times=2, match=matching("PATCH", status))
    proxy.inject(Answer(503), times=1, match=matching("PATCH", status))
    async with client(proxy.url) as kube:
        answer = await kube.patch_status("GridNetwork", "mesh", {"phase": "Active"})
    assert answer is not None and answer["status"] == {"phase": "Active"}
    outcomes = [seen.outcome for seen in proxy.seen_for(status)]
    assert outcomes == ["answered 500", "answered 500", "answered 503", "forwarded"]
    waits = list(kube.recent_waits)
    assert len(waits) == 3 and within_backoff(FAST, waits), waits
    # The proxy saw the attempts no sooner than the waits allowed.
    assert all(gap >= wait - 0.01 for gap, wait in zip(gaps(proxy, status), waits, strict=True))
    assert kube.retries == {"5xx": 3}
    assert (await status_of(cluster, GRID_NETWORKS, "mesh")) == {"phase": "Active"}


@INJECTED_FAULTS
async def test_a_timed_out_attempt_is_retried(cluster: Cluster, proxy: FaultyApi) -> None:
    cluster.emulator.create_object(CONFIGMAPS, {**CONFIGMAP_BODY}, NAMESPACE)
    proxy.inject(Stall(), match=matching("GET", "/configmaps/cm"))
    async with client(proxy.url) as kube:
        started = time.monotonic()
        found = await kube.read_configmap(NAMESPACE, "cm")
        elapsed = time.monotonic() - started
    assert found is not None and found["data"] == {"k": "v"}
    assert [seen.outcome for seen in proxy.seen_for("/configmaps/cm")] == ["stalled", "forwarded"]
    assert kube.retries == {"timeout": 1}
    # One attempt's timeout (0.5 s) and one short wait, not more.
    assert FAST.timeout_s <= elapsed < FAST.timeout_s + FAST.base_s + 0.5


@INJECTED_FAULTS
async def test_dropped_connections_are_retried_and_a_lost_create_is_read_back(
    cluster: Cluster, proxy: FaultyApi
) -> None:
    # The API server creates the ConfigMap, the answer is lost; the retry is told it exists.
    proxy.inject(Drop(after_forwarding=True), match=matching("POST", "/configmaps"))
    # The connection drops before a delete reaches the server.
    proxy.inject(Drop(), match=matching("DELETE", "/configmaps/cm"))
    async with client(proxy.url) as kube:
        created = await kube.create_configmap(NAMESPACE, dict(CONFIGMAP_BODY))
        assert created["data"] == {"k": "v"}
        version = created["metadata"]["resourceVersion"]
        assert await kube.delete_configmap(NAMESPACE, "cm", resource_version=version)
    assert [(seen.method, seen.outcome) for seen in proxy.seen_for("/configmaps")] == [
        ("POST", "dropped after forwarding"),
        ("POST", "forwarded"),  # answered 409 AlreadyExists
        ("GET", "forwarded"),  # read back
        ("DELETE", "dropped"),
        ("DELETE", "forwarded"),
    ]
    # The create is retried here; aiohttp itself may retry the delete once on a reused
    # connection the server closed (a DELETE is idempotent), before this client sees it.
    assert 1 <= kube.retries["connection"] <= 2 and set(kube.retries) == {"connection"}
    assert cluster.emulator.get_object(CONFIGMAPS, "cm", NAMESPACE) is None
    posts = [r for r in served_requests(cluster.emulator) if r.method.value == "POST"]
    assert len([r for r in posts if r.resource == CONFIGMAPS]) == 2


@INJECTED_FAULTS
async def test_retries_are_bounded_and_other_4xx_are_final(
    cluster: Cluster, proxy: FaultyApi
) -> None:
    everything = matching("GET", "/configmaps/cm")
    proxy.inject(Answer(500), times=100, match=everything)
    async with client(proxy.url) as kube:
        started = time.monotonic()
        with pytest.raises(KubernetesApiError) as raised:
            await kube.read_configmap(NAMESPACE, "cm")
        elapsed = time.monotonic() - started
    assert str(raised.value) == (
        f"cannot read configmaps {NAMESPACE}/cm: 500 Internal Server Error (5 attempts)"
    )
    assert raised.value.status == 500
    assert len(proxy.seen_for("/configmaps/cm")) == FAST.attempts
    # Four waits, each at most its ceiling: 0.05 + 0.1 + 0.2 + 0.4 s.
    assert within_backoff(FAST, list(kube.recent_waits))
    assert elapsed < 0.75 + 0.5

    # The whole call's budget ends it sooner.
    proxy.seen.clear()
    tight = RetryPolicy(attempts=50, base_s=0.1, cap_s=0.1, timeout_s=0.5, budget_s=0.35)
    async with client(proxy.url, tight) as kube:
        started = time.monotonic()
        with pytest.raises(KubernetesApiError):
            await kube.read_configmap(NAMESPACE, "cm")
        assert time.monotonic() - started < tight.budget_s + 0.2
    assert 2 <= len(proxy.seen_for("/configmaps/cm")) <= 5

    # A Retry-After beyond what a call may wait ends it at once.
    proxy.seen.clear()
    proxy.inject(Answer(429, {"Retry-After": "30"}), match=matching("GET", "/configmaps/slow"))
    async with client(proxy.url) as kube:
        with pytest.raises(KubernetesApiError) as raised:
            await kube.read_configmap(NAMESPACE, "slow")
    assert raised.value.status == 429
    assert "Retry-After 30s" in str(raised.value) and "(1 attempt)" in str(raised.value)

    # A 403 (or any 4xx but 429) is final: one attempt.
    proxy.inject(Answer(403, body=b'{"reason":"Forbidden"}'), match=matching("GET", "/secrets"))
    async with client(proxy.url) as kube:
        with pytest.raises(KubernetesApiError) as raised:
            await kube.read_secret(NAMESPACE, "token")
        assert kube.retries == {}
    assert str(raised.value) == f"cannot read secrets {NAMESPACE}/token: 403 Forbidden"
    assert len(proxy.seen_for("/secrets/token")) == 1


async def test_the_official_token_refresh_hook_runs_before_each_request(cluster: Cluster) -> None:
    await prepare_namespaces(cluster)
    configuration = cluster.configuration()
    # As the in-cluster loader leaves it: a token with its scheme, and a hook that reads the
    # rotated one (here the operator's, then one that is not valid).
    configuration.api_key = {"BearerToken": "Bearer loaded"}
    configuration.api_key_prefix = {}
    operator_token = await cluster.service_account_token(NAMESPACE, ACCOUNT)
    tokens = iter([operator_token, "revoked"])

    def refresh(official: Any) -> None:
        official.api_key = {"BearerToken": f"Bearer {next(tokens)}"}

    configuration.refresh_api_key_hook = refresh
    async with client(configuration) as kube:
        # Read with the operator's token: a 404 (the loaded token would be refused, 401).
        assert await kube.read_secret(NAMESPACE, "one") is None
        if cluster.backend == "real":
            # The real server tells the tokens apart: the next one is refused.
            with pytest.raises(KubernetesApiError) as raised:
                await kube.read_secret(NAMESPACE, "two")
            assert raised.value.status == 401
            return
        assert await kube.read_secret(NAMESPACE, "two") is None
    # kmock takes any token, and its log shows which one each request carried.
    seen = {
        r.name: r.headers.get("Authorization")
        for r in served_requests(cluster.emulator)
        if r.name in ("one", "two")
    }
    assert seen == {
        "one": f"Bearer {operator_token}",
        "two": "Bearer revoked",
    }


async def test_no_log_level_shows_a_secret_s_body(cluster: Cluster) -> None:
    await prepare_namespaces(cluster)
    await put_secret(cluster, "token", {"token": b"grid-canary-value"})
    with captured_logs() as logs:
        async with client(cluster.configuration()) as kube:
            assert await kube.read_secret(NAMESPACE, "token") == {"token": b64("grid-canary-value")}
    # The generated client logs every response body at DEBUG; the operator drops those.
    assert not [line for line in logs.lines if b64("grid-canary-value") in line]
    assert not [line for line in logs.lines if "response body" in line]


def test_retry_after_is_read_as_seconds_or_a_date_and_the_policy_is_checked() -> None:
    class Answered:
        def __init__(self, value: str | None) -> None:
            self.headers = {} if value is None else {"Retry-After": value}

    assert _retry_after(Answered("3")) == 3.0
    assert _retry_after(Answered(None)) is None
    assert _retry_after(Answered("soon")) is None
    assert _retry_after(Answered("Wed, 21 Oct 2015 07:28:00 GMT")) == 0.0
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    policy = RetryPolicy(base_s=1.0, cap_s=4.0)
    rng = random.Random(1)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 4.0), (9, 4.0)):
        assert ceiling / 2 <= policy.backoff(attempt, rng) <= ceiling

    reach = Reachability()
    assert reach.unreachable_for(10.0) is None
    reach.failed(10.0, "refused")
    reach.failed(12.0, "refused again")
    assert reach.unreachable_for(15.0) == 5.0 and reach.problem == "refused again"
    reach.answered(16.0)
    assert reach.unreachable_for(20.0) is None


# --- TLS ---------------------------------------------------------------------------------------


def server_context(pki: Pki) -> ssl.SSLContext:
    """The API server's TLS: its own certificate, and clients signed by the CA only."""
    files = pki["kube-apiserver"].files
    return tls_server_context(files, client_ca_file=pki.ca_file, require_client_cert=True)


@contextlib.asynccontextmanager
async def tls_api_server(
    cluster: Cluster, tmp_path: Path, token: str | None = None
) -> AsyncIterator[k8s.Configuration]:
    """The cluster's API over TLS, and a configuration that trusts it (logging in with
    ``token``, None: the admin). The real server is TLS itself (its own CA; it asks for no
    client certificate); kmock is put behind a TLS proxy with a CA the test makes, which
    asks for the client's certificate."""
    if cluster.backend == "real":
        yield cluster.configuration(token)
        return
    pki = make_pki(tmp_path, ("kube-apiserver", "grid-operator"))
    client_files = pki["grid-operator"].files
    async with FaultyApi(cluster.url, tls=server_context(pki)) as proxy:
        configuration = cluster.configuration(token)
        configuration.host = proxy.url
        configuration.ssl_ca_cert = str(pki.ca_file)
        configuration.cert_file = str(client_files.certificate)
        configuration.key_file = str(client_files.private_key)
        yield configuration


def grid_client_requests(cluster: Cluster, resource: str, name: str) -> list[ServedRequest]:
    """The requests for ``resource`` ``name`` that Grid's client (not the test's) made."""
    return [
        request
        for request in cluster.requests()
        if request.user_agent.startswith("grid-operator")
        and request.access is not None
        and (request.access.resource, request.access.name) == (resource, name)
    ]


async def test_the_client_verifies_the_api_server_and_presents_its_certificate(
    cluster: Cluster, tmp_path: Path
) -> None:
    await prepare_namespaces(cluster)
    await put_secret(cluster, "token", {"token": b"value"})
    async with tls_api_server(cluster, tmp_path) as trusting:
        assert trusting.host.startswith("https://")
        async with client(trusting) as kube:
            assert await kube.read_secret(NAMESPACE, "token") == {"token": b64("value")}

        # A server whose certificate the configuration does not trust: refused at once, and
        # not retried (another attempt would not change the certificate).
        async with client(trusting.host) as kube:
            with pytest.raises(KubernetesApiError) as raised:
                await kube.read_secret(NAMESPACE, "token")
            assert kube.retries == {}
        assert "TLS handshake failed" in str(raised.value)
    # Only the trusting client's request reached the API server.
    reads = await eventually(
        lambda: grid_client_requests(cluster, "secrets", "token"), what="the trusted read"
    )
    assert [request.access.verb for request in reads if request.access] == ["get"]


@contextlib.asynccontextmanager
async def operator_through(
    cluster: Cluster, configuration: Any, **overrides: Any
) -> AsyncIterator[OperatorUnderTest]:
    """The operator with its own client configured by ``configuration`` (kopf talks to the
    cluster directly), both as the operator's ServiceAccount."""
    port = free_udp_port()
    operator = Operator(test_options(SITE, port, **overrides), configuration, post_event)
    async with run_operator(
        build_registry(operator),
        cluster,
        watching=WATCHED,
        settings=fast_settings(),
        namespace=NAMESPACE,
        token=await cluster.service_account_token(NAMESPACE, ACCOUNT),
        name=f"grid-operator@{cluster.name}",
    ) as running:
        yield OperatorUnderTest(operator, running, port)


async def healthz(address: str | None) -> tuple[int, str]:
    assert address is not None
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{address}/healthz") as answer,
    ):
        return answer.status, await answer.text()


async def test_the_operator_writes_through_a_tls_api_server(
    cluster: Cluster, tmp_path: Path
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    token = await cluster.service_account_token(NAMESPACE, ACCOUNT)
    async with (
        tls_api_server(cluster, tmp_path, token) as configuration,
        operator_through(cluster, configuration) as running,
    ):
        await cluster.create(GRID_NETWORKS, network_body("mesh", port=running.swim_port))
        await wait_condition(cluster, GRID_NETWORKS, "mesh", "MembershipReady", "True")
        assert (await healthz(running.operator.health_address))[0] == 200
    # Secrets were read and the status written over TLS (with the operator's certificate
    # where the server asks for one).
    assert grid_client_requests(cluster, "secrets", "swim-key")
    assert grid_client_requests(cluster, "gridnetworks/status", "mesh")


# --- health ------------------------------------------------------------------------------------


@pytest.mark.kmock_only(reason="a server that stops answering: the proxy goes down")
async def test_healthz_is_503_while_the_api_server_does_not_answer(
    cluster: Cluster, proxy: FaultyApi
) -> None:
    configuration = k8s.Configuration(host=proxy.url)
    settings = {"api_probe_interval_s": 0.1, "api_unreachable_s": 0.5}
    async with operator_through(cluster, configuration, **settings) as running:
        address = running.operator.health_address
        await eventually(
            lambda: _answered(proxy), what="the operator asking the API server for its version"
        )
        assert (await healthz(address))[0] == 200
        reachability = running.operator.kube.reachability
        await eventually(lambda: reachability.failing_since is None, what="answers only")

        await proxy.down()
        down_at = time.monotonic()
        _, text = await eventually(
            lambda: _healthz_is(address, 503), timeout=10, what="/healthz answering 503"
        )
        assert time.monotonic() - down_at >= 0.5
        assert text.startswith(f"the Kubernetes API server {proxy.url} has not answered for ")
        assert "did not answer" in text  # the cause: a refused connection

        await proxy.up()
        await eventually(
            lambda: _healthz_is(address, 200), timeout=10, what="/healthz answering 200 again"
        )


def _answered(proxy: FaultyApi) -> bool:
    return any(seen.path.startswith("/version") for seen in proxy.seen)


async def _healthz_is(address: str | None, expected: int) -> tuple[int, str] | None:
    status, text = await healthz(address)
    return (status, text) if status == expected else None


# --- SWIM ports --------------------------------------------------------------------------------


def _without_port(name: str) -> dict[str, Any]:
    body = network_body(name, port=7946)
    del body["spec"]["swim"]["port"]
    return body


async def test_networks_without_a_swim_port_each_get_their_own(cluster: Cluster) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    async with operator_for(cluster, SITE) as running:
        default = running.swim_port
        await cluster.create(GRID_NETWORKS, _without_port("mesh"))
        first = await wait_condition(cluster, GRID_NETWORKS, "mesh", "MembershipReady", "True")
        assert first["message"] == f"SWIM on UDP port {default} ({FROM_DEFAULT})"

        await cluster.create(GRID_NETWORKS, _without_port("mesh-b"))
        second = await wait_condition(cluster, GRID_NETWORKS, "mesh-b", "MembershipReady", "True")
        port = recorded_port(await status_of(cluster, GRID_NETWORKS, "mesh-b"))
        assert port is not None and port != default
        assert second["message"] == (
            f"SWIM on UDP port {port} ({ASSIGNED}: {FROM_DEFAULT} {default} is network mesh's)"
        )
        nodes = [running.runtime(name).node for name in ("mesh", "mesh-b")]
        assert all(node is not None and node.running for node in nodes)
        assert {node.address for node in nodes if node is not None} == {
            f"127.0.0.1:{default}",
            f"127.0.0.1:{port}",
        }
        for name in ("mesh", "mesh-b"):
            status = await status_of(cluster, GRID_NETWORKS, name)
            assert condition(status, "ConfigValid")["status"] == "True"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe, pytest.raises(OSError):
            probe.bind(("127.0.0.1", port))  # really bound by mesh-b's node


async def test_two_networks_asking_for_one_port_the_newer_is_refused(cluster: Cluster) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    async with operator_for(cluster, SITE) as running:
        port = free_udp_port()
        await cluster.create(GRID_NETWORKS, network_body("mesh", port=port))
        await wait_condition(cluster, GRID_NETWORKS, "mesh", "MembershipReady", "True")
        await cluster.create(GRID_NETWORKS, network_body("mesh-b", port=port))
        refused = await wait_condition(cluster, GRID_NETWORKS, "mesh-b", "ConfigValid", "False")
        assert (
            f"spec.swim.port {port} is network mesh's too (it runs on it)" in (refused["message"])
        )
        status = await status_of(cluster, GRID_NETWORKS, "mesh-b")
        assert condition(status, "MembershipReady")["status"] == "False"
        node = running.runtime("mesh").node
        assert node is not None and node.running


def test_swim_ports_are_kept_recorded_and_yield_to_an_explicit_claim() -> None:
    busy = {7947}
    ports = SwimPorts(7946, lambda port: port not in busy)
    a = Claim("a", None, created="2026-01-01T00:00:00Z")
    b = Claim("b", None, created="2026-01-02T00:00:00Z")
    c = Claim("c", None, created="2026-01-03T00:00:00Z")
    # The oldest gets GRID_SWIM_PORT, whoever asks first; busy ports are skipped.
    assert ports.assign("c", [a, b, c]).port == 7949
    assert ports.assign("a", [a, b, c]).port == 7946
    assert ports.assign("b", [a, b, c]).port == 7948
    # Kept while running, even when an older network appears.
    older = Claim("z", None, created="2025-01-01T00:00:00Z")
    assert ports.assign("c", [older, a, b, c]).port == 7949
    assert ports.assign("z", [older, a, b, c]).port == 7950
    # An explicit claim takes a port from a network that did not ask for one.
    explicit = Claim("x", 7948, created="2026-02-01T00:00:00Z")
    assert ports.assign("x", [a, b, c, explicit]).how == FROM_SPEC
    moved = ports.assign("b", [older, a, b, c, explicit])
    assert moved.port == 7951 and moved.how == ASSIGNED
    # After a restart, the port recorded in status is taken again when free.
    restarted = SwimPorts(7946, lambda port: True)
    recorded = Claim("b", None, created="2026-01-02T00:00:00Z", recorded=7951)
    assert restarted.assign("b", [a, recorded]).port == 7951
    assert restarted.assign("a", [a, recorded]).port == 7946
    # Two explicit claims: the one running keeps the port, else the older.
    fresh = SwimPorts(7946, lambda port: True)
    one = Claim("one", 8000, created="2026-01-02T00:00:00Z")
    two = Claim("two", 8000, created="2026-01-01T00:00:00Z")
    assert fresh.assign("one", [one]).port == 8000
    refused = fresh.assign("two", [one, two])
    assert refused.port is None and "is network one's too (it runs on it)" in (
        refused.problem or ""
    )
    other = SwimPorts(7946, lambda port: True)
    assert other.assign("one", [one, two]).port is None  # two is older
    # No free port within the span: refused with a reason.
    crowded = SwimPorts(7946, lambda port: False, span=2)
    assert crowded.assign("a", [a, b]).port == 7946
    assert "no free UDP port from 7946 to 7948" in (crowded.assign("b", [a, b]).problem or "")
    assert (
        recorded_port(
            {"conditions": [{"type": "MembershipReady", "message": "SWIM on UDP port 7951 (x)"}]}
        )
        == 7951
    )
    assert recorded_port({}) is None
