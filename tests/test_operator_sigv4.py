"""The operator signs a Sigv4 provider's Bedrock API key: it reads the AWS credentials from
the provider's Secret through the API, withdraws the provider while they are too close to
lapsing to sign a key (``CredentialsValid`` False, SecretUnusable, no key written), and,
once the Secret holds usable ones, writes a key that botocore verifies to the Secret
``grid-token-<provider>`` beside it (with Grid's labels, through the shipped RBAC's token
writer), names that Secret in the overlay and reports when the key lapses. The secret
access key, the session token and the key appear in no ConfigMap, status, Event, log line
(debug included) or metric. On kmock and on a real API server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from k8s.cluster import Cluster
from k8s.emulator import INFERENCE_PROVIDERS
from k8s.operator_support import (
    GATEWAY_NAMESPACE,
    captured_logs,
    operator_with_site,
    provider_body,
    put_secret,
    read_configmap,
    wait_condition,
    wait_phase,
)
from k8s.waiting import eventually
from support.bedrock_keys import AwsKeys, decode, new_keys, signature_holds
from support.canary import Canaries
from support.servers import ProviderEndpoint
from test_operator_oauth2 import (
    NETWORK,
    SETTLE,
    SITE,
    TOKEN_SECRET,
    prepare_network,
    token_in_secret,
    tokens_in_secret,
)

pytestmark = [pytest.mark.timeout(90), pytest.mark.real_server]

AWS_SECRET = "bedrock-aws"


def sigv4_provider(endpoint: ProviderEndpoint) -> dict[str, Any]:
    body = provider_body(
        "llama-a", NETWORK, site=SITE, endpoint=endpoint.base_url, backend="cloud_managed"
    )
    body["spec"]["auth"] = {
        "strategy": "Sigv4",
        "secretRef": {
            "name": AWS_SECRET,
            "namespace": GATEWAY_NAMESPACE,
            "key": "AWS_SECRET_ACCESS_KEY",
        },
    }
    return body


async def put_aws_secret(cluster: Cluster, keys: AwsKeys, expiration: datetime | None) -> None:
    entries = keys.entries("us-west-2")
    if expiration is not None:
        entries["AWS_CREDENTIAL_EXPIRATION"] = expiration.isoformat().encode()
    await put_secret(cluster, AWS_SECRET, entries, namespace=GATEWAY_NAMESPACE)


async def test_the_operator_signs_a_key_once_the_credentials_can(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    lapsing, usable = new_keys(), new_keys()
    pki, tls = await prepare_network(cluster, tmp_path)
    await put_aws_secret(cluster, lapsing, datetime.now(UTC) + timedelta(seconds=60))
    gateway = {"name": "edge", "namespace": GATEWAY_NAMESPACE}
    with captured_logs() as logs:
        async with operator_with_site(
            cluster, NETWORK, SITE, pki, tls=tls, gateways=[gateway], token_settle=SETTLE
        ) as running:
            await cluster.create(INFERENCE_PROVIDERS, sigv4_provider(endpoint))
            refused = await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "llama-a",
                "CredentialsValid",
                "False",
                "SecretUnusable",
            )
            assert "too soon to sign a key" in refused["message"]
            await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Unavailable")
            assert await token_in_secret(cluster) is None
            statuses = [
                json.dumps((await cluster.get(INFERENCE_PROVIDERS, "llama-a")).get("status"))
            ]

            # Renewed credentials: the next retry signs with them.
            await put_aws_secret(cluster, usable, datetime.now(UTC) + timedelta(hours=1))
            minted = await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "llama-a",
                "CredentialsValid",
                "True",
                "Minted",
                timeout=30,
            )
            assert "valid until" in minted["message"]
            await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Available")
            token = await token_in_secret(cluster)
            assert token is not None
            assert signature_holds(token, usable) and not signature_holds(token, lapsing)
            key = decode(token)
            # The session credentials lapse within the hour: so does the key.
            assert key.scope[2] == "us-west-2" and 3500 < key.lifetime_s <= 3600
            written = await cluster.call(
                cluster.core.read_namespaced_secret, TOKEN_SECRET, GATEWAY_NAMESPACE
            )
            assert written.metadata.labels["app.kubernetes.io/managed-by"] == "grid"

            async def referenced() -> dict[str, Any] | None:
                overlay = json.loads(
                    (await read_configmap(cluster, "edge-grid-config")).data["grid-config.json"]
                )
                candidates = overlay["overlay"]["candidates"]
                return candidates[0] if candidates else None

            candidate = await eventually(referenced, what="the provider's candidate")
            (key,) = await tokens_in_secret(cluster)
            assert key.startswith("token-")
            assert candidate["credential"] == {
                "strategy": "bearer_token",
                "secretRef": {"name": TOKEN_SECRET, "namespace": GATEWAY_NAMESPACE, "key": key},
            }
            async with aiohttp.ClientSession() as session:
                address = f"http://{running.operator.metrics_address}/metrics"
                async with session.get(address) as answer:
                    exposition = await answer.text()
            assert (
                f'grid_provider_credential_expiry_timestamp_seconds{{network="{NETWORK}",'
                'provider="llama-a"}' in exposition
            )
            statuses.append(
                json.dumps((await cluster.get(INFERENCE_PROVIDERS, "llama-a")).get("status"))
            )
            configmap = json.dumps(
                cluster.api.sanitize_for_serialization(
                    await read_configmap(cluster, "edge-grid-config")
                )
            )
    every_event = await cluster.call(cluster.core.list_event_for_all_namespaces)
    events = [json.dumps(cluster.api.sanitize_for_serialization(e)) for e in every_event.items]
    canaries = Canaries(
        [
            *(k.secret_access_key.encode() for k in (lapsing, usable)),
            *((k.session_token or "").encode() for k in (lapsing, usable)),
            token.encode(),
        ],
        public=["bedrock-api-key-"],
    )
    for where, texts in {
        "the overlay": [configmap],
        "statuses": statuses,
        "events": events,
        "logs": logs.lines,
        "metrics": [exposition],
    }.items():
        for text in texts:
            canaries.assert_absent(text, where)
    assert any("token minted" in line for line in logs.lines)
