"""A provider of each auth strategy, rendered by Grid and routed by the real Praxis AI
gateway to a real upstream that checks the credential it receives.

Selected only with ``-m praxis`` and ``GRID_PRAXIS_AI`` naming a ``praxis-ai`` binary (see
tests/test_praxis_gateway.py). Each upstream answers 401 unless the request carries exactly
the credential its provider must get: the Secret's bearer token (BearerToken; ApiKey of a
kind that takes keys as bearer tokens), a token Grid minted from a real token endpoint
(Oauth2), a ServiceAccount token from a real API server that TokenReview accepts for the
audience (ServiceAccount), a Bedrock key whose SigV4 signature botocore recomputes (Sigv4);
the MtlsOnly upstream takes no connection without the client certificate of its Secret.
The strategies the gateway cannot inject (a key in a header of its own: ApiKey for
anthropic, Custom) are not offered, with the reason, and the rest route regardless.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from grid.demo.mesh import free_port
from grid.models.common import AuthStrategy
from grid.models.oauth2 import OAuth2Settings, minted_token_secret
from grid.models.resources import load_resources_from_dir
from grid.models.service_account import ServiceAccountSettings
from grid.oauth.bedrock import BedrockTokenSettings
from grid.oauth.rotation import TokenKeys, token_key
from grid.operator.kube import KubeApi
from grid.operator.tokens import service_account_mint
from grid.render.consumer import consumer_config_yaml
from grid.render.overlay import render_overlay
from grid.render.whatif import build_what_if, header_refusal, with_token_keys
from grid.runtime.tokens import Mint, oauth2_mint, sigv4_mint
from grid.scoring.ranking import rank_candidates
from grid.trust import CertificateAuthority
from k8s.cluster import Cluster
from k8s.grid_install import ACCOUNT as OPERATOR_ACCOUNT
from k8s.grid_install import GATEWAY_NAMESPACE
from k8s.grid_install import NAMESPACE as OPERATOR_NAMESPACE
from k8s.real_cluster import RealServers
from support.bedrock_keys import new_keys, signature_holds
from support.servers import tls_server_context
from support.token_server import TokenServer
from test_operator_oauth2 import prepare_network
from test_operator_service_account import (
    AUDIENCE,
    CALLER,
    assert_issued_by_the_api_server,
    ensure_account,
)
from test_praxis_gateway import (
    NOBODY,
    OVERLAY_KEY,
    EchoBackend,
    _start_gateway,
    _stop,
    pod_dir,
    praxis_binary,
    wait_for,
)

pytestmark = pytest.mark.praxis
__all__ = ["pod_dir", "praxis_binary"]  # fixtures, used by name

NAMESPACE = GATEWAY_NAMESPACE
"""The gateway's namespace: its mounted Secrets, the ServiceAccount's and the minted ones."""
CLIENT_ID = "grid-lab"
STATIC_TOKEN = "sk-lab-bearer-0123456789"
OPENAI_KEY = "sk-lab-openai-key-0123456789"
HEADER_KEY = "sk-ant-lab-0123456789"
CLIENT_CN = "grid-gateway.lab.test"
NOT_OFFERED = {"claude": ("ApiKey", "x-api-key"), "legacy": ("Custom", "X-Auth-Token")}


class CheckingBackend(EchoBackend):
    """An upstream that answers 200 only to requests carrying the credential ``check``
    accepts (401 otherwise), and records every request's headers."""

    def __init__(
        self,
        name: str,
        check: Callable[[web.Request], bool],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(name, tls)
        self.check = check
        self.refused = 0

    async def _echo(self, request: web.Request) -> web.Response:
        if not self.check(request):
            self.refused += 1
            return web.json_response({"error": "credential refused"}, status=401)
        return await super()._echo(request)


def _bearer(expected: Callable[[], str | None]) -> Callable[[web.Request], bool]:
    def check(request: web.Request) -> bool:
        token = expected()
        values = request.headers.getall("Authorization", [])
        return token is not None and values == [f"Bearer {token}"]

    return check


def _provider(name: str, endpoint: str, auth: dict[str, Any], **extra: Any) -> dict[str, Any]:
    spec = {
        "gridNetworkRef": "lab",
        "backendKind": "api_provider",
        "providerKind": extra.pop("kind", "open_ai"),
        "models": [{"name": f"m-{name}"}],
        "endpoint": endpoint,
        "auth": auth,
        **extra,
    }
    return {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "InferenceProvider",
        "metadata": {"name": name},
        "spec": spec,
    }


def _ref(name: str, key: str) -> dict[str, str]:
    return {"name": name, "namespace": NAMESPACE, "key": key}


class Lab:
    """The resources, the gateway pod's files and the upstreams."""

    def __init__(self, root: Path, token_url: str) -> None:
        self.root = root
        self.listener = free_port(socket.SOCK_STREAM)
        now = datetime.now(UTC)
        # The CA the MtlsOnly upstream trusts for clients, and the one its server
        # certificate comes from (the gateway trusts it through SSL_CERT_FILE).
        self.client_ca = CertificateAuthority.generate("Lab client CA", now=now)
        self.server_ca = CertificateAuthority.generate("Lab server CA", now=now)
        self.server_ca_file = root / "server-ca.pem"
        self.server_ca_file.write_text(self.server_ca.certificate_pem)
        client_ca_file = root / "client-ca.pem"
        client_ca_file.write_text(self.client_ca.certificate_pem)
        for volume in ("overlay", "tls", "credentials"):
            (root / volume).mkdir()
        self.minted: dict[str, str] = {}
        """The token each minting provider's upstream must get."""
        self.sigv4_keys = new_keys(marker="grid-lab")

        def minted(name: str) -> Callable[[], str | None]:
            return lambda: self.minted.get(name)

        issued = self.server_ca.issue(
            "mtls.lab.test", now=now, dns_names=("mtls.lab.test",), ip_addresses=()
        )
        files = issued.write(root, "mtls-server")
        mtls_context = tls_server_context(
            files, client_ca_file=client_ca_file, require_client_cert=True
        )
        self.backends = {
            "bearer": CheckingBackend("bearer", _bearer(lambda: STATIC_TOKEN)),
            "openai": CheckingBackend("openai", _bearer(lambda: OPENAI_KEY)),
            "mtls": CheckingBackend("mtls", self._client_certificate_is_ours, mtls_context),
            "oauth": CheckingBackend("oauth", _bearer(minted("oauth"))),
            "vertex": CheckingBackend("vertex", _bearer(minted("vertex"))),
            "bedrock": CheckingBackend("bedrock", self._bedrock_key_holds),
            "claude": CheckingBackend("claude", lambda request: True),
            "legacy": CheckingBackend("legacy", lambda request: True),
        }
        self.documents = self._documents(token_url)

    def _client_certificate_is_ours(self, request: web.Request) -> bool:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(part[0] for part in (peer or {}).get("subject", ()))
        return subject.get("commonName") == CLIENT_CN

    def _bedrock_key_holds(self, request: web.Request) -> bool:
        expected = self.minted.get("bedrock")
        values = request.headers.getall("Authorization", [])
        return (
            expected is not None
            and values == [f"Bearer {expected}"]
            and signature_holds(expected, self.sigv4_keys)
        )

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.backends[name].port}/v1"

    def _documents(self, token_url: str) -> list[dict[str, Any]]:
        gateway = {
            "name": "edge",
            "namespace": NAMESPACE,
            "configMapKey": OVERLAY_KEY,
            "routeFilterName": "intelligent_route",
            "credentialFilterName": "credential_inject",
            "consumerConfig": {
                "enabled": True,
                "listenerPort": self.listener,
                "adminAddress": f"127.0.0.1:{free_port(socket.SOCK_STREAM)}",
                "overlayMountPath": str(self.root / "overlay"),
                "credentialMountBase": str(self.root / "credentials"),
                "tlsMountPath": str(self.root / "tls"),
                "reloadDebounceMs": 100,
                "allowPrivateEndpoints": True,
            },
        }
        mtls_endpoint = f"https://127.0.0.1:{self.backends['mtls'].port}/v1"
        return [
            {
                "apiVersion": "grid.praxis-proxy.io/v1alpha1",
                "kind": "GridNetwork",
                "metadata": {"name": "lab", "uid": "lab-uid", "generation": 1},
                "spec": {"gatewayRefs": [gateway]},
            },
            {
                "apiVersion": "grid.praxis-proxy.io/v1alpha1",
                "kind": "GridSite",
                "metadata": {"name": "east", "labels": {"site": "east"}},
                "spec": {"gridNetworkRef": "lab", "region": "us-east", "zone": "us-east-1a"},
            },
            _provider(
                "bearer",
                self.url("bearer"),
                {"strategy": "BearerToken", "secretRef": _ref("bearer-key", "token")},
            ),
            _provider(
                "openai",
                self.url("openai"),
                {"strategy": "ApiKey", "secretRef": _ref("openai-key", "api-key")},
            ),
            _provider(
                "mtls",
                mtls_endpoint,
                {"strategy": "MtlsOnly", "secretRef": _ref("mtls-client", "tls.crt")},
                serverName="mtls.lab.test",
            ),
            _provider(
                "oauth",
                self.url("oauth"),
                {
                    "strategy": "Oauth2",
                    "secretRef": _ref("idp-client", "secret"),
                    "oauth2": {
                        "grant": "ClientCredentials",
                        "tokenUrl": token_url,
                        "clientId": CLIENT_ID,
                    },
                },
            ),
            _provider(
                "vertex",
                self.url("vertex"),
                {
                    "strategy": "ServiceAccount",
                    "serviceAccount": {
                        "name": CALLER,
                        "namespace": NAMESPACE,
                        "audience": AUDIENCE,
                    },
                },
                kind="vertex",
            ),
            _provider(
                "bedrock",
                self.url("bedrock"),
                {"strategy": "Sigv4", "secretRef": _ref("bedrock-aws", "AWS_SECRET_ACCESS_KEY")},
                kind="bedrock",
            ),
            _provider(
                "claude",
                self.url("claude"),
                {"strategy": "ApiKey", "secretRef": _ref("anthropic-key", "api-key")},
                kind="anthropic",
            ),
            _provider(
                "legacy",
                self.url("legacy"),
                {
                    "strategy": "Custom",
                    "secretRef": _ref("legacy-key", "value"),
                    "header": "X-Auth-Token",
                },
                kind="self_hosted",
            ),
        ]

    def mount_secrets(self) -> None:
        """The provider Secrets, as the gateway's Secret volumes hold them."""
        issued = self.client_ca.issue(
            CLIENT_CN, now=datetime.now(UTC), dns_names=(CLIENT_CN,), ip_addresses=()
        )
        contents = {
            "bearer-key": {"token": STATIC_TOKEN},
            "openai-key": {"api-key": OPENAI_KEY},
            "anthropic-key": {"api-key": HEADER_KEY},
            "legacy-key": {"value": f"Token {HEADER_KEY}"},
            "mtls-client": {
                "tls.crt": issued.certificate_pem,
                "tls.key": issued.private_key_pem().decode(),
            },
        }
        for secret, entries in contents.items():
            for key, value in entries.items():
                self.put(secret, key, value)

    def put(self, secret: str, key: str, value: str) -> None:
        """Write one mounted Secret entry, readable by the gateway's user."""
        directory = self.root / "credentials" / secret
        directory.mkdir(exist_ok=True)
        (directory / key).write_text(value + "\n")

    def render(self, keys: dict[str, TokenKeys]) -> tuple[str, str, dict[str, str]]:
        """The gateway configuration, the overlay and the providers not offered."""
        mesh = self.root / "mesh"
        mesh.mkdir(exist_ok=True)
        (mesh / "lab.yaml").write_text(yaml.safe_dump_all(self.documents))
        resources = load_resources_from_dir(mesh)
        assert resources.errors == ()
        what_if = build_what_if(resources, site="east", gateway="edge", namespace=NAMESPACE)
        what_if = with_token_keys(what_if, keys)
        now = datetime.now(UTC)
        ranking = rank_candidates(
            what_if.candidates, what_if.consumer, what_if.network.spec.scoring, now
        )
        overlay = render_overlay(ranking, what_if.scope, what_if.source, now)
        settings = what_if.gateway.consumer_config
        assert settings is not None
        config = consumer_config_yaml(
            what_if.plan,
            settings,
            overlay_key=OVERLAY_KEY,
            overlay=overlay,
            route_filter=what_if.gateway.route_filter_name,
            credential_filter=what_if.gateway.credential_filter_name,
        )
        return config, overlay.text, dict(what_if.not_offered)

    def provider_spec(self, name: str) -> Any:
        resources = load_resources_from_dir(self.root / "mesh")
        (found,) = [entry for entry in resources.providers if entry.metadata.name == name]
        return found.spec


async def _mint(lab: Lab, name: str, mint: Mint) -> TokenKeys:
    """Mint ``name``'s token now and write it as the site does (a key of its own in
    ``grid-token-<provider>``); the keys to render."""
    now = datetime.now(UTC)
    token = await mint(now, None)
    key = token_key(now)
    lab.put(minted_token_secret(name), key, token.value)
    lab.minted[name] = token.value
    return TokenKeys(reference=key, declared=(key,))


def _ask(listener: int, model: str) -> tuple[int, dict[str, Any]]:
    import json
    import urllib.error
    import urllib.request

    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        f"http://127.0.0.1:{listener}/v1/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer client-canary"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, {}
    except OSError:
        return 0, {}


async def test_a_provider_of_each_strategy_is_routed_with_its_credential_or_not_offered(
    pod_dir: Path, praxis_binary: str, real_servers: RealServers, tmp_path: Path
) -> None:
    client_secret = "cs-lab-" + "s" * 24
    server = TokenServer(client_secrets={CLIENT_ID: client_secret}, expires_in=3600)
    token_url = await server.start()
    lab = Lab(pod_dir, token_url)
    runners = [await backend.start() for backend in lab.backends.values()]
    cluster: Cluster = real_servers.cluster(0, "cluster-a")
    await prepare_network(cluster, tmp_path)
    await ensure_account(cluster)
    login = await cluster.service_account_token(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)
    kube = KubeApi(cluster.configuration(login))
    await kube.start()
    log = pod_dir / "gateway.log"
    gateway: subprocess.Popen[bytes] | None = None
    try:
        lab.mount_secrets()
        lab.render({})  # the resources, to read the providers' settings from
        aws = lab.sigv4_keys.entries(region="us-east-1")

        async def client_secret_entry() -> bytes:
            return client_secret.encode()

        async def aws_entries(names: tuple[str, ...]) -> dict[str, bytes]:
            return {name: aws[name] for name in names if name in aws}

        oauth = lab.provider_spec("oauth").auth.oauth2
        account = lab.provider_spec("vertex").auth.service_account
        assert isinstance(oauth, OAuth2Settings)
        assert isinstance(account, ServiceAccountSettings)
        keys = {
            "oauth": await _mint(lab, "oauth", oauth2_mint(oauth, client_secret_entry)),
            "vertex": await _mint(lab, "vertex", service_account_mint(kube, account)),
            "bedrock": await _mint(
                lab,
                "bedrock",
                sigv4_mint(BedrockTokenSettings(None), "AWS_SECRET_ACCESS_KEY", aws_entries),
            ),
        }
        config, overlay, not_offered = lab.render(keys)
        assert not_offered == {
            name: header_refusal(AuthStrategy(strategy), header)
            for name, (strategy, header) in NOT_OFFERED.items()
        }
        config_file = pod_dir / "praxis.yaml"
        config_file.write_text(config)
        (pod_dir / "overlay" / OVERLAY_KEY).write_text(overlay)
        if os.geteuid() == 0:
            for path in [pod_dir, *pod_dir.rglob("*")]:
                os.chown(path, NOBODY, NOBODY)
        os.environ["SSL_CERT_FILE"] = str(lab.server_ca_file)
        try:
            gateway = _start_gateway(praxis_binary, config_file, log)
        finally:
            del os.environ["SSL_CERT_FILE"]
        await asyncio.to_thread(
            wait_for, lambda: _ask(lab.listener, "m-bearer")[0] == 200, 60, "the gateway serves"
        )
        routed = {}
        for name, backend in lab.backends.items():
            status, echoed = await asyncio.to_thread(_ask, lab.listener, f"m-{name}")
            routed[name] = (status, echoed.get("backend"))
            if name not in NOT_OFFERED:
                assert backend.refused == 0, name
        assert routed == {
            **{name: (200, name) for name in lab.backends if name not in NOT_OFFERED},
            # No candidate for the model: the gateway routes nowhere.
            **{name: routed[name] for name in NOT_OFFERED},
        }
        for name in NOT_OFFERED:
            assert routed[name][0] != 200 and not lab.backends[name].received, name
        await assert_issued_by_the_api_server(cluster, lab.minted["vertex"])
        assert server.issued[-1].token == lab.minted["oauth"]
        print(
            "routed with the credential each upstream checks: "
            + ", ".join(f"{name} {status}" for name, (status, _) in routed.items())
        )
    except BaseException:
        print(log.read_text()[-6000:] if log.exists() else "(no gateway log)")
        raise
    finally:
        if gateway is not None:
            _stop(gateway)
        await kube.close()
        for runner in runners:
            await runner.cleanup()
        await server.stop()
    text = log.read_text()
    for secret in (client_secret, STATIC_TOKEN, OPENAI_KEY, *lab.minted.values()):
        assert secret not in text


async def test_the_gateway_sends_plaintext_when_a_client_certificate_cannot_be_read(
    pod_dir: Path, praxis_binary: str
) -> None:
    """What the gateway does with a cluster whose TLS files it cannot read, found here and
    documented (docs/resources.md, MtlsOnly; docs/security.md): it logs "TLS disabled for
    this cluster" and sends the request in plaintext to the https endpoint's port. Its
    ``-t`` check passes. A change of the gateway that fails closed makes this test fail."""
    lab = Lab(pod_dir, "http://127.0.0.1:1/token")
    plain = EchoBackend("plain")  # plaintext where the https endpoint points
    runners = [await plain.start(), await lab.backends["bearer"].start()]
    for document in lab.documents:
        if document["metadata"]["name"] == "mtls":
            document["spec"]["endpoint"] = f"https://127.0.0.1:{plain.port}/v1"
    lab.documents = [
        document
        for document in lab.documents
        if document["kind"] != "InferenceProvider"
        or document["metadata"]["name"] in ("mtls", "bearer")
    ]
    lab.put("bearer-key", "token", STATIC_TOKEN)
    (pod_dir / "credentials" / "mtls-client").mkdir()  # mounted, without the certificate
    config, overlay, _ = lab.render({})
    config_file = pod_dir / "praxis.yaml"
    config_file.write_text(config)
    (pod_dir / "overlay" / OVERLAY_KEY).write_text(overlay)
    if os.geteuid() == 0:
        for path in [pod_dir, *pod_dir.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
    log = pod_dir / "gateway.log"
    gateway = _start_gateway(praxis_binary, config_file, log)
    try:
        await asyncio.to_thread(
            wait_for, lambda: _ask(lab.listener, "m-bearer")[0] == 200, 60, "the gateway serves"
        )
        status, echoed = await asyncio.to_thread(_ask, lab.listener, "m-mtls")
    finally:
        _stop(gateway)
        for runner in runners:
            await runner.cleanup()
    assert (status, echoed["backend"]) == (200, "plain")
    assert plain.paths == ["/v1/chat/completions"]
    assert "TLS disabled for this cluster" in log.read_text()
