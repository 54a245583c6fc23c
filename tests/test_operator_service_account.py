"""The operator mints a ServiceAccount provider's tokens on a real API server (kmock has no
TokenRequest API): the token is the API server's own, for the provider's audience (its
``aud`` claim, and a TokenReview with that audience), asked for through the shipped RBAC's
token requester and written to the Secret ``grid-token-<provider>`` in the ServiceAccount's
namespace, which the overlay names. With ``exchange``, that token is the subject of an RFC
8693 exchange at a real STS (tests/support/token_server.py), and the STS's token is what is
written. A missing ServiceAccount, or one the operator may not ask tokens of, withdraws the
provider with a reason. No token reaches a ConfigMap, status, Event, log line or metric."""

from __future__ import annotations

import base64
import json
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from kubernetes import client as k8s

from grid.models.phases import CredentialState
from grid.models.service_account import ServiceAccountSettings
from grid.operator.kube import KubeApi
from grid.operator.tokens import service_account_mint
from grid.runtime.tokens import MintingPlan, TokenMinter
from k8s.cluster import Cluster
from k8s.emulator import INFERENCE_PROVIDERS
from k8s.grid_install import ACCOUNT as OPERATOR_ACCOUNT
from k8s.operator_support import (
    GATEWAY_NAMESPACE,
    NAMESPACE,
    OperatorUnderTest,
    captured_logs,
    configmap_exists,
    operator_with_site,
    provider_body,
    read_configmap,
    wait_condition,
    wait_phase,
)
from k8s.real_cluster import RealServers
from k8s.waiting import eventually
from support.canary import Canaries
from support.servers import ProviderEndpoint
from support.token_server import Mode, TokenServer
from support.token_store import MemoryTokens
from test_operator_oauth2 import NETWORK, SETTLE, SITE, prepare_network

pytestmark = [pytest.mark.timeout(120)]

CALLER = "vertex-caller"
AUDIENCE = "https://vertex.example.com"
TOKEN_SECRET = "grid-token-vertex"


@pytest.fixture
def cluster(real_servers: RealServers) -> Cluster:
    return real_servers.cluster(0, "cluster-a")


@dataclass
class Mesh:
    cluster: Cluster
    operator: OperatorUnderTest


@asynccontextmanager
async def running_mesh(cluster: Cluster, tmp_path: Path) -> AsyncIterator[Mesh]:
    """The network, this site and its operator, logged in as its ServiceAccount."""
    pki, tls = await prepare_network(cluster, tmp_path)
    await ensure_account(cluster)
    gateway = {"name": "edge", "namespace": GATEWAY_NAMESPACE}
    async with operator_with_site(
        cluster, NETWORK, SITE, pki, tls=tls, gateways=[gateway], token_settle=SETTLE
    ) as running:
        yield Mesh(cluster, running)


def sa_provider(endpoint: ProviderEndpoint, name: str = "vertex", **account: Any) -> Any:
    body = provider_body(
        name, NETWORK, site=SITE, endpoint=endpoint.base_url, backend="api_provider"
    )
    settings = {"name": CALLER, "namespace": GATEWAY_NAMESPACE, "audience": AUDIENCE, **account}
    body["spec"]["auth"] = {"strategy": "ServiceAccount", "serviceAccount": settings}
    return body


async def ensure_account(cluster: Cluster, name: str = CALLER) -> None:
    account = k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=name))
    try:
        await cluster.call(
            cluster.core.create_namespaced_service_account, GATEWAY_NAMESPACE, account
        )
    except k8s.ApiException as error:
        if error.status != 409:  # left by an earlier test on this server
            raise


async def token_in_secret(cluster: Cluster) -> str | None:
    try:
        found = await cluster.call(
            cluster.core.read_namespaced_secret, TOKEN_SECRET, GATEWAY_NAMESPACE
        )
    except k8s.ApiException:
        return None
    data = found.data or {}
    return base64.b64decode(data[max(data)]).decode() if data else None  # the newest


async def reviewed(cluster: Cluster, token: str, audience: str) -> Any:
    """The API server's own verdict on ``token`` for ``audience`` (TokenReview)."""
    review = k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token, audiences=[audience]))
    answer = await cluster.call(k8s.AuthenticationV1Api(cluster.api).create_token_review, review)
    return answer.status


async def assert_issued_by_the_api_server(cluster: Cluster, token: str) -> None:
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["aud"] == [AUDIENCE]
    assert claims["sub"] == f"system:serviceaccount:{GATEWAY_NAMESPACE}:{CALLER}"
    status = await reviewed(cluster, token, AUDIENCE)
    assert status.authenticated and status.audiences == [AUDIENCE]
    assert not (await reviewed(cluster, token, "https://other.example")).authenticated


async def candidate_of(cluster: Cluster) -> dict[str, Any] | None:
    overlay = json.loads(
        (await read_configmap(cluster, "edge-grid-config")).data["grid-config.json"]
    )
    candidates = overlay["overlay"]["candidates"]
    return candidates[0] if candidates else None


async def exposed_metrics(mesh: Mesh) -> str:
    async with aiohttp.ClientSession() as session:
        address = f"http://{mesh.operator.operator.metrics_address}/metrics"
        async with session.get(address) as answer:
            return await answer.text()


async def everything_written(mesh: Mesh, providers: list[str]) -> dict[str, list[str]]:
    """What the operator wrote that anyone may read, by where."""
    cluster = mesh.cluster
    statuses = [
        json.dumps((await cluster.get(INFERENCE_PROVIDERS, name)).get("status"))
        for name in providers
    ]
    configmap = cluster.api.sanitize_for_serialization(
        await read_configmap(cluster, "edge-grid-config")
    )
    every_event = await cluster.call(cluster.core.list_event_for_all_namespaces)
    events = [json.dumps(cluster.api.sanitize_for_serialization(e)) for e in every_event.items]
    return {
        "the overlay": [json.dumps(configmap)],
        "statuses": statuses,
        "events": events,
        "metrics": [await exposed_metrics(mesh)],
    }


async def test_the_operators_token_requests_are_the_api_servers_tokens(
    cluster: Cluster, tmp_path: Path
) -> None:
    """As the operator's ServiceAccount, through the shipped RBAC; the figure is the time
    one TokenRequest takes."""
    await prepare_network(cluster, tmp_path)
    await ensure_account(cluster)
    login = await cluster.service_account_token(NAMESPACE, OPERATOR_ACCOUNT)
    kube = KubeApi(cluster.configuration(login))
    await kube.start()
    took = []
    try:
        for _ in range(20):
            started = time.perf_counter()
            answer = await kube.request_token(GATEWAY_NAMESPACE, CALLER, AUDIENCE, 600)
            took.append(time.perf_counter() - started)
            assert answer is not None
        missing = await kube.request_token(GATEWAY_NAMESPACE, "no-such-account", AUDIENCE, 600)
        assert missing is None
    finally:
        await kube.close()
    await assert_issued_by_the_api_server(cluster, answer["status"]["token"])
    print(
        f"TokenRequest on the real API server: median {statistics.median(took) * 1000:.1f} ms, "
        f"max {max(took) * 1000:.1f} ms over {len(took)}"
    )


async def test_a_minter_refreshes_the_accounts_token_at_80_percent_of_its_life(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Real tokens, the clock driven by the test: the first lives as the API server says,
    the refresh is due at 80 % of that (the middle of the spread), and brings a new token."""
    await prepare_network(cluster, tmp_path)
    await ensure_account(cluster)
    settings = ServiceAccountSettings.model_validate(
        {"name": CALLER, "namespace": GATEWAY_NAMESPACE, "audience": AUDIENCE}
    )
    plan = MintingPlan(settings, None, (GATEWAY_NAMESPACE, TOKEN_SECRET, "token"))
    login = await cluster.service_account_token(NAMESPACE, OPERATOR_ACCOUNT)
    kube = KubeApi(cluster.configuration(login))
    await kube.start()
    sink = MemoryTokens()
    written = sink.tokens
    made = TokenMinter("vertex", plan, service_account_mint(kube, settings), sink, draw=lambda: 0.5)
    now = datetime.now(UTC)
    try:
        await made.attempt(now)
        first = made.health.token
        assert first is not None and len(written) == 1
        expires = jwt.decode(written[0], options={"verify_signature": False})["exp"]
        assert first.expires_at.timestamp() == expires
        assert abs(first.lifetime_s - 3600) < 5
        refresh = now + timedelta(seconds=first.lifetime_s * 0.8)
        assert first.refresh_at == refresh
        assert not made.health.due(refresh - timedelta(seconds=1))
        assert made.health.due(refresh)
        await made.attempt(refresh)
    finally:
        await kube.close()
    assert len(written) == 2 and written[0] != written[1]
    assert made.health.verdict(refresh)[0] is CredentialState.MINTED
    for token in written:
        await assert_issued_by_the_api_server(cluster, token)


async def test_the_operator_mints_the_accounts_token_for_the_audience(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    with captured_logs() as logs:
        async with running_mesh(cluster, tmp_path) as mesh:
            await cluster.create(INFERENCE_PROVIDERS, sa_provider(endpoint, expirationSeconds=600))
            minted = await wait_condition(
                cluster, INFERENCE_PROVIDERS, "vertex", "CredentialsValid", "True", "Minted"
            )
            assert "valid until" in minted["message"]
            await wait_phase(cluster, INFERENCE_PROVIDERS, "vertex", "Available")
            token = await token_in_secret(cluster)
            assert token is not None
            await assert_issued_by_the_api_server(cluster, token)
            expires = jwt.decode(token, options={"verify_signature": False})["exp"]
            assert abs(expires - time.time() - 600) < 30
            written = await cluster.call(
                cluster.core.read_namespaced_secret, TOKEN_SECRET, GATEWAY_NAMESPACE
            )
            assert written.metadata.labels["app.kubernetes.io/managed-by"] == "grid"
            candidate = await eventually(
                lambda: candidate_of(cluster), what="the provider's candidate"
            )
            (key,) = written.data
            assert key.startswith("token-")
            assert candidate["credential"] == {
                "strategy": "bearer_token",
                "secretRef": {"name": TOKEN_SECRET, "namespace": GATEWAY_NAMESPACE, "key": key},
            }
            seen = await everything_written(mesh, ["vertex"])
    assert (
        f'grid_provider_credential_expiry_timestamp_seconds{{network="{NETWORK}",'
        'provider="vertex"}' in seen["metrics"][0]
    )
    canaries = Canaries([token.encode()])
    for where, texts in {**seen, "logs": logs.lines}.items():
        for text in texts:
            canaries.assert_absent(text, where)
    assert any("token minted" in line for line in logs.lines)


async def test_the_token_is_exchanged_at_the_sts(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    sts = TokenServer(expires_in=900, mode=Mode.REFUSE)  # echoes the subject token back
    await sts.start()
    exchange = {"tokenUrl": sts.url, "audience": "//iam.example/pools/grid", "scopes": ["cloud"]}
    with captured_logs() as logs:
        async with running_mesh(cluster, tmp_path) as mesh:
            await cluster.create(INFERENCE_PROVIDERS, sa_provider(endpoint, exchange=exchange))
            refused = await wait_condition(
                cluster, INFERENCE_PROVIDERS, "vertex", "CredentialsValid", "False", "TokenRefused"
            )
            assert "HTTP 401 (invalid_client)" in refused["message"]
            sts.mode = Mode.GARBAGE
            await eventually(
                lambda: _refused_with(cluster, "not JSON"), what="the garbage answer's reason"
            )
            sts.mode = Mode.SERVE
            await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "vertex",
                "CredentialsValid",
                "True",
                "Minted",
                timeout=30,
            )
            await wait_phase(cluster, INFERENCE_PROVIDERS, "vertex", "Available")
            assert await token_in_secret(cluster) == sts.tokens[-1]
            issued = sts.issued[-1]
            assert (issued.audience, issued.scope) == ("//iam.example/pools/grid", "cloud")
            assert issued.client == f"system:serviceaccount:{GATEWAY_NAMESPACE}:{CALLER}"
            # Every subject the STS saw was a token the API server issued for the audience.
            assert len(sts.subjects) >= 2  # the refused attempts and the served one
            for subject in sts.subjects:
                await assert_issued_by_the_api_server(cluster, subject)
            # Offered once its first token has settled where the gateway reads it.
            await eventually(lambda: candidate_of(cluster), what="the token named")
            seen = await everything_written(mesh, ["vertex"])
    await sts.stop()
    canaries = Canaries([t.encode() for t in (*sts.subjects, *sts.tokens)])
    for where, texts in {**seen, "logs": logs.lines}.items():
        for text in texts:
            canaries.assert_absent(text, where)


async def _refused_with(cluster: Cluster, words: str) -> bool:
    status = (await cluster.get(INFERENCE_PROVIDERS, "vertex")).get("status") or {}
    return any(
        item.get("type") == "CredentialsValid" and words in item.get("message", "")
        for item in status.get("conditions") or []
    )


async def test_a_missing_or_forbidden_account_withdraws_the_provider_saying_why(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    late = f"late-caller-{time.time_ns()}"
    with captured_logs() as logs:
        async with running_mesh(cluster, tmp_path) as mesh:
            missing = sa_provider(endpoint, name="missing")
            missing["spec"]["auth"]["serviceAccount"]["name"] = late
            await cluster.create(INFERENCE_PROVIDERS, missing)
            # The operator's own namespace: it may not ask tokens there (no binding).
            forbidden = sa_provider(endpoint, name="forbidden")
            forbidden["spec"]["auth"]["serviceAccount"].update(
                {"name": OPERATOR_ACCOUNT, "namespace": NAMESPACE}
            )
            await cluster.create(INFERENCE_PROVIDERS, forbidden)
            gone = await wait_condition(
                cluster, INFERENCE_PROVIDERS, "missing", "CredentialsValid", "False", "TokenRefused"
            )
            assert (
                f"the ServiceAccount {GATEWAY_NAMESPACE}/{late} does not exist" in (gone["message"])
            )
            denied = await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "forbidden",
                "CredentialsValid",
                "False",
                "TokenRefused",
            )
            assert "403 Forbidden" in denied["message"]
            assert "bind grid-operator-token-requester" in denied["message"]
            for name in ("missing", "forbidden"):
                await wait_phase(cluster, INFERENCE_PROVIDERS, name, "Unavailable")
            # No candidate: the operator writes no overlay for a gateway without one.
            assert not await configmap_exists(cluster, "edge-grid-config")

            # The account created: the next attempt (backing off) mints for it.
            await ensure_account(cluster, late)
            await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "missing",
                "CredentialsValid",
                "True",
                "Minted",
                timeout=40,
            )
            candidate = await eventually(
                lambda: candidate_of(cluster), what="the provider's candidate"
            )
            assert candidate["credential"]["secretRef"]["name"] == "grid-token-missing"
            seen = await everything_written(mesh, ["missing", "forbidden"])
            found = await cluster.call(
                cluster.core.read_namespaced_secret, "grid-token-missing", GATEWAY_NAMESPACE
            )
    (token,) = (base64.b64decode(value).decode() for value in found.data.values())
    assert jwt.decode(token, options={"verify_signature": False})["sub"].endswith(f":{late}")
    canaries = Canaries([token.encode()])
    for where, texts in {**seen, "logs": logs.lines}.items():
        for text in texts:
            canaries.assert_absent(text, where)
