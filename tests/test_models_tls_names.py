"""TLS to an IP address needs a DNS server name: gateways send only DNS names as SNI, and a
certificate names a host, so Grid refuses the input rather than render a configuration
the gateway would refuse."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from grid.models.provider import InferenceProviderSpec
from grid.models.site import Egress, EgressTlsMode


@pytest.mark.parametrize("mode", [EgressTlsMode.MUTUAL_TLS, EgressTlsMode.TLS])
@pytest.mark.parametrize("address", ["192.0.2.7:8443", "[2001:db8::7]:8443"])
def test_egress_tls_to_an_ip_address_needs_a_server_name(address: str, mode: EgressTlsMode) -> None:
    with pytest.raises(ValidationError, match="is an IP address: TLS needs serverName"):
        Egress(address=address, tls_mode=mode)
    named = Egress(address=address, tls_mode=mode, server_name="gw.example")
    assert named.server_name == "gw.example"


def test_egress_by_name_or_in_plaintext_needs_no_server_name() -> None:
    assert Egress(address="gw.example:8443").server_name is None
    Egress(address="192.0.2.7:8080", tls_mode=EgressTlsMode.PLAINTEXT)


def _spec(endpoint: str, **extra: Any) -> InferenceProviderSpec:
    return InferenceProviderSpec.model_validate(
        {
            "gridNetworkRef": "mesh",
            "backendKind": "local",
            "providerKind": "self_hosted",
            "models": [{"name": "llama"}],
            "endpoint": endpoint,
            **extra,
        }
    )


@pytest.mark.parametrize("endpoint", ["https://10.0.0.5:8443/v1", "https://[fd00::5]/v1"])
def test_an_https_endpoint_at_an_ip_address_needs_a_server_name(endpoint: str) -> None:
    with pytest.raises(ValidationError, match="set serverName"):
        _spec(endpoint)
    assert _spec(endpoint, serverName="vllm.example").server_name == "vllm.example"


def test_plain_http_at_an_ip_address_needs_no_server_name() -> None:
    assert _spec("http://10.0.0.5:8000").server_name is None
