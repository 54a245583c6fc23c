"""A mixed mesh with the previous release (compat/previous.txt): the provider items of a
Custom provider (with its header), of an Oauth2 provider (with its token settings) and of a
ServiceAccount provider (with its ServiceAccount and STS exchange) are decoded by the
previous release's own code, with the same strategy and Secret reference (none for the
ServiceAccount provider, as 0.2.0 published it).
The new settings never travel: a peer reaches such a provider through this site's egress,
which injects the credential, so the item has no field the previous release does not
know."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

from grid.crdt.lww import Stamp
from grid.crdt.records import ProviderMetrics
from grid.crdt.snapshot import ProviderState, encode_provider
from grid.engine.records import provider_record
from grid.models.provider import InferenceProvider, InferenceProviderPhase
from grid.models.resources import load_resource
from support.previous import PreviousRelease

SECRET = {"name": "idp-client", "namespace": "gateways", "key": "secret"}
AUTH = {
    "custom": {"strategy": "Custom", "secretRef": SECRET, "header": "X-Auth-Token"},
    "vertex": {
        "strategy": "Oauth2",
        "secretRef": SECRET,
        "oauth2": {"grant": "JwtBearer", "scopes": ["https://example.com/scope"]},
    },
    "azure": {
        "strategy": "Oauth2",
        "secretRef": SECRET,
        "oauth2": {
            "grant": "ClientCredentials",
            "tokenUrl": "https://login.example.com/tenant/oauth2/v2.0/token",
            "clientId": "app",
            "clientAuthentication": "PrivateKeyJwt",
        },
    },
    "federated": {
        "strategy": "ServiceAccount",
        "serviceAccount": {
            "name": "vertex-caller",
            "namespace": "gateways",
            "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p",
            "expirationSeconds": 900,
            "exchange": {
                "tokenUrl": "https://sts.googleapis.com/v1/token",
                "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            },
        },
    },
}
DECODE = """
import base64, json, sys
from grid.crdt.snapshot import decode_item
for entry in json.load(sys.stdin):
    fragment = decode_item("site-a", "state", entry["key"], entry["version"],
                           base64.b64decode(entry["payload"]))
    credential = fragment.spec.value.credential
    print(json.dumps([fragment.name, None if credential is None else credential.to_wire()]))
"""


def provider(name: str, auth: dict[str, Any]) -> InferenceProvider:
    loaded = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": name},
            "spec": {
                "gridNetworkRef": "mesh",
                "backendKind": "api_provider",
                "providerKind": "open_ai",
                "models": [{"name": f"{name}-model"}],
                "endpoint": "https://api.example.com/v1",
                "auth": auth,
            },
        }
    )
    assert isinstance(loaded, InferenceProvider)
    return loaded


def test_the_previous_release_decodes_custom_oauth2_and_service_account_provider_items(
    previous_release: PreviousRelease,
) -> None:
    items = []
    for name, auth in AUTH.items():
        record = provider_record(
            provider(name, auth), InferenceProviderPhase.AVAILABLE, ProviderMetrics()
        )
        item = encode_provider("site-a", ProviderState.created(record, Stamp(1, "site-a"), 1000))
        items.append(
            {
                "key": item.key,
                "version": item.version,
                "payload": base64.b64encode(item.payload).decode(),
            }
        )
    done = subprocess.run(
        [str(previous_release.python), "-c", DECODE],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    decoded = [json.loads(line) for line in done.stdout.splitlines()]
    assert decoded == [
        ["custom", {"strategy": "Custom", **SECRET}],
        ["vertex", {"strategy": "Oauth2", **SECRET}],
        ["azure", {"strategy": "Oauth2", **SECRET}],
        ["federated", None],
    ]
