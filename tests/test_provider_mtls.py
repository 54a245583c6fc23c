"""The MtlsOnly strategy: with a ``secretRef``, the gateway presents the client certificate
of that Secret (its key the certificate chain, ``tls.key`` beside it) to the provider's own
https endpoint; the candidate carries no credential. Without one, the provider is offered
with none (mutual TLS left to the platform, as in 0.2.0). What cannot work is not offered,
with the reason. The real gateway's side is tests/test_praxis_strategies.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.errors import OverlayRenderError
from grid.models.resources import load_resources_from_dir
from grid.render.consumer import consumer_config
from grid.render.whatif import WhatIf, build_what_if
from test_provider_apikey import provider, write_mesh

CERT_REF = {"name": "vllm-client", "namespace": "grid-system", "key": "tls.crt"}
HTTPS = "https://vllm.example:8443/v1"


def _what_if(tmp_path: Path, auth: dict[str, Any], endpoint: str = HTTPS) -> WhatIf:
    mesh = write_mesh(tmp_path, [provider("vllm", "self_hosted", auth, endpoint=endpoint)])
    network = yaml.safe_load_all((mesh / "mesh.yaml").read_text())
    documents = list(network)
    documents[0]["spec"]["gatewayRefs"][0]["consumerConfig"] = {"enabled": True}
    (mesh / "mesh.yaml").write_text(yaml.safe_dump_all(documents))
    resources = load_resources_from_dir(mesh)
    assert resources.errors == ()
    return build_what_if(resources, site="east", gateway="edge-gateway")


def _clusters(what_if: WhatIf) -> dict[str, Any]:
    settings = what_if.gateway.consumer_config
    assert settings is not None
    config = consumer_config(what_if.plan, settings, overlay_key="routing-overlay.json")
    balancer = config["filter_chains"][0]["filters"][-1]
    return {cluster["name"]: cluster for cluster in balancer["clusters"]}


def test_the_gateway_presents_the_secrets_client_certificate(tmp_path: Path) -> None:
    what_if = _what_if(tmp_path, {"strategy": "MtlsOnly", "secretRef": dict(CERT_REF)})
    assert what_if.not_offered == ()
    assert [candidate.credential for candidate in what_if.candidates] == [None]
    assert _clusters(what_if)["vllm"] == {
        "name": "vllm",
        "endpoints": ["vllm.example:8443"],
        "tls": {
            "sni": "vllm.example",
            "verify": True,
            "client_cert": {
                "cert_path": "/etc/grid/credentials/vllm-client/tls.crt",
                "key_path": "/etc/grid/credentials/vllm-client/tls.key",
            },
        },
    }


def test_without_a_secret_ref_the_platform_does_the_mutual_tls(tmp_path: Path) -> None:
    what_if = _what_if(tmp_path, {"strategy": "MtlsOnly"})
    assert what_if.not_offered == ()
    assert [candidate.credential for candidate in what_if.candidates] == [None]
    assert _clusters(what_if)["vllm"]["tls"] == {"sni": "vllm.example", "verify": True}


@pytest.mark.parametrize(
    ("key", "endpoint", "reason"),
    [
        (
            "tls.crt",
            "http://vllm.example:8000",
            "auth strategy MtlsOnly with a secretRef needs an https endpoint: the client "
            "certificate is presented in the TLS handshake",
        ),
        (
            "tls.key",
            HTTPS,
            "auth strategy MtlsOnly: secretRef.key names the certificate chain, and the "
            "private key is read from 'tls.key' beside it, so the key cannot be 'tls.key' "
            "(use tls.crt)",
        ),
    ],
)
def test_a_certificate_the_gateway_cannot_present_is_not_offered(
    tmp_path: Path, key: str, endpoint: str, reason: str
) -> None:
    auth = {"strategy": "MtlsOnly", "secretRef": {**CERT_REF, "key": key}}
    what_if = _what_if(tmp_path, auth, endpoint)
    assert what_if.candidates == ()
    assert what_if.not_offered == (("vllm", reason),)


def test_a_secret_key_that_cannot_be_a_file_name_is_refused(tmp_path: Path) -> None:
    what_if = _what_if(tmp_path, {"strategy": "MtlsOnly", "secretRef": {**CERT_REF, "key": ".."}})
    with pytest.raises(OverlayRenderError, match=r"Secret key '\.\.' cannot be a file name"):
        _clusters(what_if)
