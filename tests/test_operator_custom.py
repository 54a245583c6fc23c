"""The operator renders a Custom provider's value from the template in its Secret: it reads
the template, the header's name and the values through the API, withdraws the provider
while the header's entry is unusable (``CredentialsValid`` False, SecretUnusable, nothing
written), then writes the rendered value to the Secret ``grid-token-<provider>`` beside it
(with Grid's labels, through the shipped RBAC's token writer), names it in the overlay as
an ``apikey`` credential with that header, writes it again when the Secret changes, and
keeps it in place (RefreshFailing) when an entry the template names goes missing. The
values and the rendered value appear in no ConfigMap, status, Event, log line or metric.
On kmock and on a real API server."""

from __future__ import annotations

import json
import secrets
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
from support.canary import Canaries
from support.servers import ProviderEndpoint
from test_operator_oauth2 import (
    NETWORK,
    SETTLE,
    SITE,
    TOKEN_SECRET,
    prepare_network,
    tokens_in_secret,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_backends]

PARTNER_SECRET = "partner-auth"


def custom_provider(endpoint: ProviderEndpoint) -> dict[str, Any]:
    body = provider_body(
        "llama-a", NETWORK, site=SITE, endpoint=endpoint.base_url, backend="api_provider"
    )
    body["spec"]["auth"] = {
        "strategy": "Custom",
        "secretRef": {"name": PARTNER_SECRET, "namespace": GATEWAY_NAMESPACE, "key": "template"},
        "custom": {"headerKey": "name"},
    }
    return body


async def put_partner_secret(cluster: Cluster, **entries: str) -> None:
    data = {name: value.encode() for name, value in entries.items()}
    await put_secret(cluster, PARTNER_SECRET, data, namespace=GATEWAY_NAMESPACE)


async def overlay_credential(cluster: Cluster) -> dict[str, Any] | None:
    overlay = json.loads(
        (await read_configmap(cluster, "edge-grid-config")).data["grid-config.json"]
    )
    candidates = overlay["overlay"]["candidates"]
    return candidates[0]["credential"] if candidates else None


async def test_the_operator_renders_the_value_and_renders_it_again_when_the_secret_changes(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    user, password = "grid-partner", f"grid-canary-{secrets.token_hex(16)}"
    rotated = f"grid-canary-{secrets.token_hex(16)}"
    template = "Basic-ish {{user}}:{{ password }}"
    pki, tls = await prepare_network(cluster, tmp_path)
    await put_partner_secret(
        cluster, template=template, name="Content-Length", user=user, password=password
    )
    gateway = {"name": "edge", "namespace": GATEWAY_NAMESPACE, "apiKeyCredentials": True}
    with captured_logs() as logs:
        async with operator_with_site(
            cluster, NETWORK, SITE, pki, tls=tls, gateways=[gateway], token_settle=SETTLE
        ) as running:
            await cluster.create(INFERENCE_PROVIDERS, custom_provider(endpoint))
            refused = await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "llama-a",
                "CredentialsValid",
                "False",
                "SecretUnusable",
            )
            assert (
                "entry name (custom.headerKey) is not a header Grid may send"
                in (refused["message"])
            )
            assert "must not be Content-Length" in refused["message"]
            await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Unavailable")
            assert await tokens_in_secret(cluster) == {}
            statuses = [
                json.dumps((await cluster.get(INFERENCE_PROVIDERS, "llama-a")).get("status"))
            ]

            # A usable header name: rendered at the next attempt, named once settled.
            await put_partner_secret(
                cluster, template=template, name="X-Partner-Auth", user=user, password=password
            )
            rendered = await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "llama-a",
                "CredentialsValid",
                "True",
                "Rendered",
                timeout=30,
            )
            assert "for header X-Partner-Auth is in place" in rendered["message"]
            await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Available")
            (first,) = (await tokens_in_secret(cluster)).items()
            assert first[1] == f"Basic-ish {user}:{password}"
            written = await cluster.call(
                cluster.core.read_namespaced_secret, TOKEN_SECRET, GATEWAY_NAMESPACE
            )
            assert written.metadata.labels["app.kubernetes.io/managed-by"] == "grid"
            credential = await eventually(
                lambda: overlay_credential(cluster), what="the provider's credential"
            )
            assert credential == {
                "strategy": "apikey",
                "secretRef": {
                    "name": TOKEN_SECRET,
                    "namespace": GATEWAY_NAMESPACE,
                    "key": first[0],
                },
                "header": "X-Partner-Auth",
            }

            # A new password: rendered again, under a key of its own, then named.
            await put_partner_secret(
                cluster, template=template, name="X-Partner-Auth", user=user, password=rotated
            )

            async def moved() -> dict[str, Any] | None:
                found = await overlay_credential(cluster)
                return found if found and found["secretRef"]["key"] != first[0] else None

            credential = await eventually(moved, what="the new value named")
            held = await tokens_in_secret(cluster)
            assert held[credential["secretRef"]["key"]] == f"Basic-ish {user}:{rotated}"

            # The password's entry is gone: the value in place stays in use.
            await put_partner_secret(cluster, template=template, name="X-Partner-Auth", user=user)
            failing = await wait_condition(
                cluster,
                INFERENCE_PROVIDERS,
                "llama-a",
                "CredentialsValid",
                "True",
                "RefreshFailing",
                timeout=30,
            )
            assert (
                "the template names entry password, which the Secret does not have"
                in (failing["message"])
            )
            assert await overlay_credential(cluster) == credential
            assert credential["secretRef"]["key"] in await tokens_in_secret(cluster)

            # The Secret itself is gone: still the value in place, and why.
            await cluster.call(
                cluster.core.delete_namespaced_secret, PARTNER_SECRET, GATEWAY_NAMESPACE
            )

            async def gone() -> dict[str, Any] | None:
                status = (await cluster.get(INFERENCE_PROVIDERS, "llama-a")).get("status") or {}
                found = next(
                    (c for c in status.get("conditions", []) if c["type"] == "CredentialsValid"),
                    None,
                )
                return found if found and "does not exist" in found["message"] else None

            missing = await eventually(gone, what="the missing Secret reported")
            assert (missing["status"], missing["reason"]) == ("True", "RefreshFailing")
            assert await overlay_credential(cluster) == credential
            statuses.append(
                json.dumps((await cluster.get(INFERENCE_PROVIDERS, "llama-a")).get("status"))
            )
            async with aiohttp.ClientSession() as session:
                address = f"http://{running.operator.metrics_address}/metrics"
                async with session.get(address) as answer:
                    exposition = await answer.text()
            # A rendered value does not lapse: no expiry to report.
            assert 'grid_provider_credential_expiry_timestamp_seconds{network="mesh",' not in (
                exposition
            )
            configmap = json.dumps(
                cluster.api.sanitize_for_serialization(
                    await read_configmap(cluster, "edge-grid-config")
                )
            )
    every_event = await cluster.call(cluster.core.list_event_for_all_namespaces)
    events = [json.dumps(cluster.api.sanitize_for_serialization(e)) for e in every_event.items]
    canaries = Canaries([password.encode(), rotated.encode()])
    for where, texts in {
        "the overlay": [configmap],
        "statuses": statuses,
        "events": events,
        "logs": logs.lines,
        "metrics": [exposition],
    }.items():
        for text in texts:
            canaries.assert_absent(text, where)
    assert any("value rendered for header X-Partner-Auth" in line for line in logs.lines)
