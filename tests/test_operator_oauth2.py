"""The operator mints an Oauth2 provider's tokens: it reads the client secret from the
provider's Secret, asks a real token endpoint, writes the token to the Secret
``grid-token-<provider>`` beside it (with Grid's labels, through the shipped RBAC's token
writer), names that Secret in the overlay, refreshes it, and withdraws the provider once
refreshing has failed until no valid token is left. A Secret of that name that is not
Grid's is never overwritten. The client secret and the tokens appear in no ConfigMap,
status, Event, log line or metric. On kmock and on a real API server."""

from __future__ import annotations

import base64
import json
import secrets
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.oauth.rotation import Settle
from k8s.cluster import Cluster
from k8s.emulator import INFERENCE_PROVIDERS
from k8s.operator_support import (
    CA_SECRET,
    GATEWAY_NAMESPACE,
    KEY_ENTRY,
    KEY_SECRET,
    NAMESPACE,
    SITE_TLS_SECRET,
    captured_logs,
    keyring_text,
    new_key,
    operator_with_site,
    prepare_namespaces,
    provider_body,
    put_secret,
    put_site_tls,
    read_configmap,
    wait_condition,
    wait_phase,
)
from k8s.waiting import eventually
from support.canary import Canaries
from support.pki import make_pki
from support.servers import ProviderEndpoint
from support.token_server import Mode, TokenServer

pytestmark = [pytest.mark.timeout(90), pytest.mark.real_server]

NETWORK = "mesh"
SITE = "site-a"
CLIENT = "grid-operator-test"
LIFETIME_S = 12
TOKEN_SECRET = "grid-token-llama-a"
SETTLE_S = 0.4
SETTLE = Settle(timedelta(seconds=SETTLE_S), timedelta(seconds=SETTLE_S))
"""Short enough for 12 s tokens. A refresh comes with at least 15 % of the life left (1.8 s);
the new token is named once both settle times have passed (0.8 s), and only while the one
in place lasts a settle time past that (0.4 s). With less left, the overlay names the new
token before it settled rather than one about to lapse, which this test does not expect."""


def reference(key: str) -> dict[str, Any]:
    return {
        "strategy": "bearer_token",
        "secretRef": {"name": TOKEN_SECRET, "namespace": GATEWAY_NAMESPACE, "key": key},
    }


def oauth2_provider(endpoint: ProviderEndpoint, token_url: str) -> dict[str, Any]:
    body = provider_body(
        "llama-a", NETWORK, site=SITE, endpoint=endpoint.base_url, backend="api_provider"
    )
    body["spec"]["auth"] = {
        "strategy": "Oauth2",
        "secretRef": {"name": "idp-client", "namespace": GATEWAY_NAMESPACE, "key": "secret"},
        "oauth2": {"grant": "ClientCredentials", "tokenUrl": token_url, "clientId": CLIENT},
    }
    return body


async def tokens_in_secret(cluster: Cluster) -> dict[str, str]:
    """The Secret ``grid-token-llama-a``'s keys and the tokens under them (none before it
    exists)."""
    try:
        found = await cluster.call(
            cluster.core.read_namespaced_secret, TOKEN_SECRET, GATEWAY_NAMESPACE
        )
    except Exception:
        return {}
    return {key: base64.b64decode(value).decode() for key, value in (found.data or {}).items()}


async def token_in_secret(cluster: Cluster) -> str | None:
    """The newest token in the Secret (keys sort by the time their token was issued)."""
    held = await tokens_in_secret(cluster)
    return held[max(held)] if held else None


async def prepare_network(cluster: Cluster, tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    pki = make_pki(tmp_path, (SITE,))
    await prepare_namespaces(cluster)
    await put_secret(cluster, KEY_SECRET, {KEY_ENTRY: keyring_text(new_key())})
    await put_secret(cluster, CA_SECRET, {"ca.crt": pki.ca_pem.encode()})
    await put_site_tls(cluster, pki[SITE].issued)
    tls = {
        "swimKeyRef": {"name": KEY_SECRET, "namespace": NAMESPACE, "key": KEY_ENTRY},
        "caSecretRef": {"name": CA_SECRET, "namespace": NAMESPACE, "key": "ca.crt"},
        "siteCertSecretRef": {"name": SITE_TLS_SECRET, "namespace": NAMESPACE},
    }
    return pki, tls


async def test_the_operator_mints_refreshes_and_withdraws(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    client_secret = f"grid-canary-{secrets.token_hex(16)}"
    server = TokenServer(client_secrets={CLIENT: client_secret}, expires_in=LIFETIME_S)
    await server.start()
    pki, tls = await prepare_network(cluster, tmp_path)
    await put_secret(
        cluster, "idp-client", {"secret": client_secret.encode()}, namespace=GATEWAY_NAMESPACE
    )
    gateway = {"name": "edge", "namespace": GATEWAY_NAMESPACE}
    with captured_logs() as logs:
        async with operator_with_site(
            cluster, NETWORK, SITE, pki, tls=tls, gateways=[gateway], token_settle=SETTLE
        ) as running:
            await cluster.create(INFERENCE_PROVIDERS, oauth2_provider(endpoint, server.url))
            minted = await wait_condition(
                cluster, INFERENCE_PROVIDERS, "llama-a", "CredentialsValid", "True", "Minted"
            )
            assert "valid until" in minted["message"]
            await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Available")
            held = await tokens_in_secret(cluster)
            assert list(held.values()) == [server.tokens[0]]
            (first_key,) = held
            assert first_key.startswith("token-")
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
            # The first token is offered only once both settle times have passed: before,
            # the gateway could not have read its file.
            first_named_after = time.time() - server.issued[0].at
            assert first_named_after >= SETTLE_S * 2 - 0.2, first_named_after
            print(f"the first token named {first_named_after:.2f} s after it was minted")
            assert candidate["credential"] == reference(first_key)

            # Refreshed before it lapses: the new token under a key of its own beside the
            # first, which the overlay names until the settle times have passed, then the
            # new one (both still in the Secret: the first goes at the next refresh).
            await eventually(lambda: _at_least(server, 2), timeout=LIFETIME_S * 2, what="a refresh")
            second = server.issued[1]

            async def named_key() -> str | None:
                found = await referenced()
                return found["credential"]["secretRef"]["key"] if found else None

            async def moved() -> str | None:
                key = await named_key()
                return key if key not in (None, first_key) else None

            second_key = await eventually(moved, what="the new key named")
            named_at = time.time()
            assert named_at - second.at >= SETTLE_S * 2 - 0.2, named_at - second.at
            assert named_at < server.issued[0].at + LIFETIME_S  # before the first lapsed
            print(f"the new key named {named_at - second.at:.2f} s after it was minted")
            held = await tokens_in_secret(cluster)
            assert held[second_key] == second.token
            assert server.tokens[2:] or held[first_key] == server.tokens[0]
            async with aiohttp.ClientSession() as session:
                address = f"http://{running.operator.metrics_address}/metrics"
                async with session.get(address) as answer:
                    exposition = await answer.text()
            assert (
                f'grid_provider_credential_expiry_timestamp_seconds{{network="{NETWORK}",'
                'provider="llama-a"}' in exposition
            )

            # Refused from now on: withdrawn once the token in place lapses, saying why.
            server.mode = Mode.REFUSE
            lapses_at = server.issued[-1].at + LIFETIME_S
            refused = await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "llama-a",
                "CredentialsValid",
                "False",
                "TokenRefused",
                timeout=LIFETIME_S * 3,
            )
            assert "HTTP 401 (invalid_client)" in refused["message"]
            await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Unavailable")
            withdrawn_after = time.time() - lapses_at
            assert withdrawn_after < 5, withdrawn_after
            print(
                f"provider Unavailable in its status {withdrawn_after:.2f} s after its token lapsed"
            )
            statuses = [
                json.dumps((await cluster.get(INFERENCE_PROVIDERS, "llama-a")).get("status"))
            ]
            configmap = json.dumps(
                cluster.api.sanitize_for_serialization(
                    await read_configmap(cluster, "edge-grid-config")
                )
            )
    await server.stop()
    every_event = await cluster.call(cluster.core.list_event_for_all_namespaces)
    events = [json.dumps(cluster.api.sanitize_for_serialization(e)) for e in every_event.items]
    canaries = Canaries([client_secret.encode(), *(t.encode() for t in server.tokens)])
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


async def _at_least(server: TokenServer, count: int) -> bool:
    return len(server.tokens) >= count


async def test_a_secret_of_that_name_that_is_not_grids_is_left_alone(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    server = TokenServer(client_secrets={CLIENT: "s3cret"}, expires_in=3600)
    await server.start()
    pki, tls = await prepare_network(cluster, tmp_path)
    await put_secret(cluster, "idp-client", {"secret": b"s3cret"}, namespace=GATEWAY_NAMESPACE)
    await put_secret(
        cluster, TOKEN_SECRET, {"token": b"somebody-else"}, namespace=GATEWAY_NAMESPACE
    )
    gateway = {"name": "edge", "namespace": GATEWAY_NAMESPACE}
    async with operator_with_site(cluster, NETWORK, SITE, pki, tls=tls, gateways=[gateway]):
        await cluster.create(INFERENCE_PROVIDERS, oauth2_provider(endpoint, server.url))
        refused = await wait_condition(
            cluster, INFERENCE_PROVIDERS, "llama-a", "CredentialsValid", "False", "TokenNotWritten"
        )
        assert "is not Grid's" in refused["message"]
        assert await tokens_in_secret(cluster) == {"token": "somebody-else"}
    await server.stop()
