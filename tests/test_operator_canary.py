"""Secret canaries: a provider token, the SWIM keys and the site's private key are planted in
Secrets, and none of them may appear in anything the operator wrote (ConfigMaps, statuses,
Events), logged, or serves (``/metrics``, ``/healthz``); a Secret it cannot use is reported
without quoting it. The same for a Sigv4 provider's AWS secret access key and session token
and the Bedrock API key the operator signs from them, and the keys of an ApiKey and a Custom provider sent in headers of their own (apiKeyCredentials), and a
Custom value the operator renders from a template (its inputs and the rendered value). The operator's own endpoints are checked on the way. On kmock and on a
real API server, everything read back through the API."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from k8s.cluster import Cluster
from k8s.emulator import GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS
from k8s.operator_support import (
    CA_SECRET,
    GATEWAY_NAMESPACE,
    KEY_ENTRY,
    KEY_SECRET,
    NAMESPACE,
    SITE_TLS_SECRET,
    JsonObject,
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
from support.bedrock_keys import AwsKeys, new_keys, signature_holds
from support.canary import Canaries, pem_body
from support.pki import make_pki
from support.servers import ProviderEndpoint
from test_operator_oauth2 import SETTLE, prepare_network, token_in_secret
from test_operator_sigv4 import put_aws_secret, sigv4_provider

pytestmark = [pytest.mark.timeout(60), pytest.mark.real_server]

NETWORK = "mesh"
SITE = "site-a"


async def fetch(address: str, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://{address}{path}") as answer:
        return answer.status, await answer.text()


async def test_no_secret_reaches_configmaps_statuses_events_logs_or_metrics(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    token = b"grid-canary-token-" + secrets.token_hex(16).encode()
    swim_key, next_key = new_key(), new_key()
    pki = make_pki(tmp_path, (SITE,))
    private_key = pki[SITE].issued.private_key_pem()
    broken_keyring = b"grid-canary-keyring-" + secrets.token_hex(16).encode()
    canaries = Canaries(
        [token, swim_key, next_key, broken_keyring, pem_body(private_key)],
        public=[pki.ca_pem, pki[SITE].certificate_pem],
    )

    await prepare_namespaces(cluster)
    await put_secret(cluster, KEY_SECRET, {KEY_ENTRY: keyring_text(swim_key, next_key)})
    await put_secret(cluster, CA_SECRET, {"ca.crt": pki.ca_pem.encode()})
    await put_site_tls(cluster, pki[SITE].issued)
    await put_secret(cluster, "provider-token", {"token": token})
    tls = {
        "swimKeyRef": {"name": KEY_SECRET, "namespace": NAMESPACE, "key": KEY_ENTRY},
        "caSecretRef": {"name": CA_SECRET, "namespace": NAMESPACE, "key": "ca.crt"},
        "siteCertSecretRef": {"name": SITE_TLS_SECRET, "namespace": NAMESPACE},
    }
    gateway = {
        "name": "edge",
        "namespace": GATEWAY_NAMESPACE,
        "consumerConfig": {"enabled": True, "allowPrivateEndpoints": True},
    }
    with captured_logs() as logs:
        async with operator_with_site(
            cluster, NETWORK, SITE, pki, tls=tls, gateways=[gateway], token_settle=SETTLE
        ) as running:
            await cluster.create(
                INFERENCE_PROVIDERS,
                provider_body(
                    "openai-a",
                    NETWORK,
                    site=SITE,
                    endpoint=endpoint.base_url,
                    secret=(NAMESPACE, "provider-token", "token"),
                    backend="api_provider",
                ),
            )
            praxis = await eventually(
                lambda: read_configmap(cluster, "edge-praxis"), what="the gateway configuration"
            )
            await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Active")
            await wait_phase(cluster, INFERENCE_PROVIDERS, "openai-a", "Available")
            # This cluster's site was found by its certificate pin, and its own egress
            # passed the mutual TLS probe with the certificate from the Secret.
            assert running.runtime(NETWORK).site == SITE
            await wait_phase(cluster, GRID_SITES, SITE, "Active")

            # The gateway configuration points at the mounted Secret file, nothing more.
            text = praxis.data["praxis.yaml"]
            assert "/etc/grid/credentials/provider-token/token" in text
            config = yaml.safe_load(text)
            assert config["admin"] == {"address": "127.0.0.1:9901"}

            # A keyring edit that cannot be used is reported without quoting it.
            await put_secret(cluster, KEY_SECRET, {KEY_ENTRY: broken_keyring})
            refused = await wait_condition(cluster, GRID_NETWORKS, NETWORK, "ConfigValid", "False")
            assert "line 1: not base64" in refused["message"]

            health = await fetch(running.operator.health_address, "/healthz")
            metrics = await fetch(running.operator.metrics_address, "/metrics")

    assert health[0] == 200 and health[1].startswith("ok\n")
    assert f"{NETWORK}: SWIM running" in health[1]
    status, exposition = metrics
    assert status == 200
    assert 'grid_operator_configmap_writes_total{operation="create",outcome="ok"} 2.0' in exposition
    assert f'grid_swim_members{{network="{NETWORK}",state="alive"}} 0.0' in exposition
    assert f'grid_swim_running{{network="{NETWORK}"}} 1.0' in exposition
    assert 'shell="operator"' in exposition
    assert (
        f'grid_overlay_candidates{{gateway="edge",gateway_namespace="{GATEWAY_NAMESPACE}",network="{NETWORK}"}} 1.0'
        in exposition
    )
    assert 'grid_operator_secret_reads_total{outcome="Valid",purpose="credential"}' in exposition

    written = [
        json.dumps(cluster.api.sanitize_for_serialization(await read_configmap(cluster, name)))
        for name in ("edge-grid-config", "edge-praxis")
    ]
    statuses = [
        json.dumps((await cluster.get(resource, name)).get("status"))
        for resource, name in (
            (GRID_NETWORKS, NETWORK),
            (GRID_SITES, SITE),
            (INFERENCE_PROVIDERS, "openai-a"),
        )
    ]
    every_event = await cluster.call(cluster.core.list_event_for_all_namespaces)
    events = [json.dumps(cluster.api.sanitize_for_serialization(e)) for e in every_event.items]
    assert events, "the operator posted Events"
    assert len(logs.lines) > 20, "the operator logged"
    everything = {
        "configmaps": written,
        "statuses": statuses,
        "events": events,
        "logs": logs.lines,
        "metrics": [exposition],
        "health": [health[1]],
    }
    for where, texts in everything.items():
        for text in texts:
            canaries.assert_absent(text, where)


async def test_no_aws_secret_or_bedrock_key_reaches_anything_the_operator_writes(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    """A Sigv4 provider's secret access key and session token, and the Bedrock API key the
    operator signs from them: first a secret access key it cannot use (it holds a space),
    reported without quoting it, then a usable one."""
    keys = new_keys(marker=f"grid-canary-{secrets.token_hex(4)}")
    unusable = AwsKeys(keys.access_key_id, keys.secret_access_key + " x", keys.session_token)
    pki, tls = await prepare_network(cluster, tmp_path)
    await put_aws_secret(cluster, unusable, None)
    gateway = {
        "name": "edge",
        "namespace": GATEWAY_NAMESPACE,
        "consumerConfig": {"enabled": True, "allowPrivateEndpoints": True},
    }
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
            assert "AWS_SECRET_ACCESS_KEY is not a secret access key" in refused["message"]
            statuses = [
                json.dumps((await cluster.get(INFERENCE_PROVIDERS, "llama-a")).get("status"))
            ]
            await put_aws_secret(cluster, keys, None)
            await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "llama-a",
                "CredentialsValid",
                "True",
                "Minted",
                timeout=30,
            )
            await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Available")
            token = await token_in_secret(cluster)
            assert token is not None and signature_holds(token, keys)
            praxis = await eventually(
                lambda: read_configmap(cluster, "edge-praxis"), what="the gateway configuration"
            )
            assert "/etc/grid/credentials/grid-token-llama-a/token-" in praxis.data["praxis.yaml"]
            health = await fetch(running.operator.health_address, "/healthz")
            metrics = await fetch(running.operator.metrics_address, "/metrics")
            written = [
                json.dumps(
                    cluster.api.sanitize_for_serialization(await read_configmap(cluster, name))
                )
                for name in ("edge-grid-config", "edge-praxis")
            ]
            statuses += [
                json.dumps((await cluster.get(resource, name)).get("status"))
                for resource, name in (
                    (GRID_NETWORKS, NETWORK),
                    (GRID_SITES, SITE),
                    (INFERENCE_PROVIDERS, "llama-a"),
                )
            ]
    assert "grid_provider_credential_expiry_timestamp_seconds" in metrics[1]
    every_event = await cluster.call(cluster.core.list_event_for_all_namespaces)
    events = [json.dumps(cluster.api.sanitize_for_serialization(e)) for e in every_event.items]
    canaries = Canaries(
        [keys.secret_access_key.encode(), (keys.session_token or "").encode(), token.encode()],
        public=["bedrock-api-key-"],
    )
    everything = {
        "configmaps": written,
        "statuses": statuses,
        "events": events,
        "logs": logs.lines,
        "metrics": [metrics[1]],
        "health": [health[1]],
    }
    for where, texts in everything.items():
        for text in texts:
            canaries.assert_absent(text, where)


def header_key_provider(name: str, endpoint: ProviderEndpoint, auth: JsonObject) -> JsonObject:
    body = provider_body(name, NETWORK, site=SITE, endpoint=endpoint.base_url)
    body["spec"]["auth"] = auth
    return body


async def test_no_header_key_reaches_anything_the_operator_writes(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    """An ApiKey provider whose key goes in x-api-key, a Custom provider and a Custom
    provider whose value the operator renders from a template in its Secret (the header's
    name there too), offered to a gateway with apiKeyCredentials: the overlay and the
    gateway configuration name their Secrets and headers, never the values, the template's
    inputs or the rendered value."""
    api_key = b"grid-canary-apikey-" + secrets.token_hex(16).encode()
    custom = b"Token grid-canary-custom-" + secrets.token_hex(16).encode()
    literal = b"grid-canary-literal-" + secrets.token_hex(8).encode()
    user = b"grid-canary-user-" + secrets.token_hex(8).encode()
    password_text = secrets.token_hex(24).encode()
    pki, tls = await prepare_network(cluster, tmp_path)
    await put_secret(cluster, "vllm-key", {"api-key": api_key})
    await put_secret(cluster, "legacy-key", {"value": custom})
    template = literal + b" {{user}}:{{password}}"
    await put_secret(
        cluster,
        "partner-auth",
        {"template": template, "header": b"X-Partner", "user": user, "password": password_text},
        namespace=GATEWAY_NAMESPACE,
    )
    gateway = {
        "name": "edge",
        "namespace": GATEWAY_NAMESPACE,
        "apiKeyCredentials": True,
        "consumerConfig": {"enabled": True, "allowPrivateEndpoints": True},
    }

    async def candidates() -> dict[str, Any]:
        overlay = await read_configmap(cluster, "edge-grid-config")
        found = json.loads(overlay.data["grid-config.json"])["overlay"]["candidates"]
        by_cluster = {c["cluster"]: c.get("credential") for c in found}
        assert {"vllm-a", "legacy-a", "partner-a"} <= set(by_cluster)
        return by_cluster

    with captured_logs() as logs:
        async with operator_with_site(
            cluster, NETWORK, SITE, pki, tls=tls, gateways=[gateway], token_settle=SETTLE
        ) as running:
            vllm = {
                "strategy": "ApiKey",
                "secretRef": {"name": "vllm-key", "namespace": NAMESPACE, "key": "api-key"},
            }
            legacy = {
                "strategy": "Custom",
                "secretRef": {"name": "legacy-key", "namespace": NAMESPACE, "key": "value"},
                "header": "X-Auth",
            }
            await cluster.create(INFERENCE_PROVIDERS, header_key_provider("vllm-a", endpoint, vllm))
            await cluster.create(
                INFERENCE_PROVIDERS, header_key_provider("legacy-a", endpoint, legacy)
            )
            partner = {
                "strategy": "Custom",
                "secretRef": {
                    "name": "partner-auth",
                    "namespace": GATEWAY_NAMESPACE,
                    "key": "template",
                },
                "custom": {},
            }
            await cluster.create(
                INFERENCE_PROVIDERS, header_key_provider("partner-a", endpoint, partner)
            )
            offered = await eventually(candidates, what="the three providers in the overlay")
            held = await cluster.call(
                cluster.core.read_namespaced_secret, "grid-token-partner-a", GATEWAY_NAMESPACE
            )
            rendered = base64.b64decode(held.data[max(held.data)]).decode()
            assert rendered == f"{literal.decode()} {user.decode()}:{password_text.decode()}"
            assert offered["partner-a"] == {
                "strategy": "apikey",
                "secretRef": {
                    "name": "grid-token-partner-a",
                    "namespace": GATEWAY_NAMESPACE,
                    "key": offered["partner-a"]["secretRef"]["key"],
                },
                "header": "X-Partner",
            }
            assert offered["vllm-a"] == {
                "strategy": "apikey",
                "secretRef": vllm["secretRef"],
                "header": "x-api-key",
            }
            assert offered["legacy-a"] == {
                "strategy": "apikey",
                "secretRef": legacy["secretRef"],
                "header": "X-Auth",
            }
            praxis = await eventually(
                lambda: read_configmap(cluster, "edge-praxis"), what="the gateway configuration"
            )
            assert "/etc/grid/credentials/legacy-key/value" in praxis.data["praxis.yaml"]
            key = offered["partner-a"]["secretRef"]["key"]
            assert (
                f"/etc/grid/credentials/grid-token-partner-a/{key}" in (praxis.data["praxis.yaml"])
            )
            written = [
                json.dumps(
                    cluster.api.sanitize_for_serialization(await read_configmap(cluster, name))
                )
                for name in ("edge-grid-config", "edge-praxis")
            ]
            statuses = [
                json.dumps((await cluster.get(resource, name)).get("status"))
                for resource, name in (
                    (GRID_NETWORKS, NETWORK),
                    (GRID_SITES, SITE),
                    (INFERENCE_PROVIDERS, "vllm-a"),
                    (INFERENCE_PROVIDERS, "legacy-a"),
                    (INFERENCE_PROVIDERS, "partner-a"),
                )
            ]
            metrics = await fetch(running.operator.metrics_address, "/metrics")
    every_event = await cluster.call(cluster.core.list_event_for_all_namespaces)
    events = [json.dumps(cluster.api.sanitize_for_serialization(e)) for e in every_event.items]
    canaries = Canaries([api_key, custom, literal, user, password_text, rendered.encode()])
    everything = {
        "configmaps": written,
        "statuses": statuses,
        "events": events,
        "logs": logs.lines,
        "metrics": [metrics[1]],
    }
    for where, texts in everything.items():
        for text in texts:
            canaries.assert_absent(text, where)
