"""Egress discovery on a real API server: README's install, then the site's GridSite reads
its egress address from a LoadBalancer Service and from a Gateway API Gateway
(``spec.egress.from``), with ``grid operator`` running as its ServiceAccount.

The test writes what a cloud controller would (a Service's ``status.loadBalancer``, a
Gateway's ``status.addresses``) and follows the GridSite's ``EgressResolved`` condition
through each state the docs list: the read refused by RBAC until the namespace is bound,
no address yet, an IP address without serverName, resolved; then a Gateway before and
after the Gateway API is installed. The propagation of the address to another site's
overlay is in tests/test_operator_install_mesh.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k8s.control_plane import ControlPlane, gateway_api_crds
from k8s.fixtures import ControlPlaneFactory
from k8s.operator_process import (
    ACCOUNT,
    OPERATOR_NAMESPACE,
    SITE,
    JsonObject,
    OperatorProcess,
    grid_object,
    run_install,
    start_installed_operator,
)
from k8s.operator_support import condition

pytestmark = pytest.mark.timeout(300)

EDGE = "edge"
SERVICE = "praxis-egress"
GATEWAY = "praxis"


def apply(plane: ControlPlane, document: JsonObject) -> None:
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(document))


def patch(plane: ControlPlane, *target: str, body: JsonObject, status: bool = False) -> None:
    subresource = ("--subresource=status",) if status else ()
    plane.kubectl("patch", *target, *subresource, "--type", "merge", "-p", json.dumps(body))


def read_from(plane: ControlPlane, source: JsonObject, server_name: str | None) -> None:
    """The site's GridSite reads its egress from ``source`` (its typed address dropped)."""
    # A merge patch: the kind of object not named is removed explicitly.
    named = {"service": None, "gateway": None, **source}
    egress = {"address": None, "from": named, "serverName": server_name}
    patch(plane, "gridsite", SITE, body={"spec": {"egress": egress}})


def egress_condition(plane: ControlPlane, reason: str, text: str = "") -> JsonObject | None:
    """The site's EgressResolved condition once it has ``reason`` and ``text`` in its
    message, for the GridSite's current generation."""
    found = grid_object(plane.admin, "gridsites", SITE)
    status = found.get("status") or {}
    try:
        resolved = condition(status, "EgressResolved")
    except AssertionError:
        return None
    current = resolved.get("observedGeneration") == found["metadata"]["generation"]
    if current and resolved["reason"] == reason and text in resolved["message"]:
        return {**resolved, "egressAddress": status.get("egressAddress")}
    return None


def until_reason(
    operator: OperatorProcess, plane: ControlPlane, reason: str, text: str = ""
) -> JsonObject:
    return operator.until(
        f"EgressResolved {reason} {text}".rstrip(),
        lambda: egress_condition(plane, reason, text),
    )


def can_i(plane: ControlPlane, kubeconfig: Path, verb: str, resource: str) -> bool:
    answer = plane.kubectl(
        "auth", "can-i", verb, resource, "-n", EDGE, kubeconfig=kubeconfig, check=False
    )
    return answer.stdout.strip() == "yes"


def test_the_site_reads_its_egress_from_a_load_balancer_and_a_gateway(
    control_plane_factory: ControlPlaneFactory, tmp_path: Path
) -> None:
    plane = control_plane_factory("egress")
    run_install(plane)
    plane.create_namespace(EDGE)
    # A LoadBalancer Service the cloud has not given an address yet.
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": EDGE},
        "spec": {
            "type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": False,
            "selector": {"app": "praxis"},
            "ports": [{"name": "https", "port": 443}, {"name": "grid", "port": 8443}],
        },
    }
    apply(plane, service)
    read_from(plane, {"service": {"namespace": EDGE, "name": SERVICE, "portName": "grid"}}, None)
    operator, _ = start_installed_operator(plane, tmp_path)
    with operator:
        # The namespace is not bound yet: the read is refused, and the condition says what
        # to bind where.
        refused = until_reason(operator, plane, "ReadFailed", "403")
        assert f"namespace {EDGE}" in refused["message"]
        assert refused["egressAddress"] is None
        plane.kubectl(
            "-n", EDGE, "create", "rolebinding", "grid-operator",
            "--clusterrole=grid-operator-namespaced",
            f"--serviceaccount={OPERATOR_NAMESPACE}:{ACCOUNT}",
        )  # fmt: skip
        until_reason(operator, plane, "NoAddress", "status.loadBalancer.ingress")
        # What RBAC grants there is reading one object by name, nothing more.
        as_operator = tmp_path / "operator.kubeconfig"
        assert can_i(plane, as_operator, "get", "services")
        for verb in ("list", "watch", "update", "delete"):
            assert not can_i(plane, as_operator, verb, "services"), verb

        # The cloud controller gives the load balancer an IP: TLS needs a server name.
        ingress = {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}
        patch(plane, "service", SERVICE, "-n", EDGE, body=ingress, status=True)
        until_reason(operator, plane, "ServerNameRequired", "203.0.113.7:8443")
        patch(plane, "gridsite", SITE, body={"spec": {"egress": {"serverName": SITE}}})
        resolved = until_reason(operator, plane, "Resolved", f"from Service {EDGE}/{SERVICE}")
        assert resolved["status"] == "True"
        assert resolved["egressAddress"] == "203.0.113.7:8443"

        # A Gateway, before the cluster serves the Gateway API.
        gateway_source = {"gateway": {"namespace": EDGE, "name": GATEWAY, "listener": "grid"}}
        read_from(plane, gateway_source, SITE)
        until_reason(operator, plane, "GatewayApiMissing", "gateway.networking.k8s.io/v1")
        for crd in gateway_api_crds():
            plane.kubectl("apply", "--server-side", "-f", str(crd))
        plane.kubectl(
            "wait", "--for", "condition=established", "--timeout=60s",
            "crd/gateways.gateway.networking.k8s.io",
        )  # fmt: skip
        until_reason(operator, plane, "NotFound", f"Gateway {EDGE}/{GATEWAY}")
        gateways = "gateways.gateway.networking.k8s.io"
        assert can_i(plane, as_operator, "get", gateways)
        for verb in ("list", "watch", "update", "delete"):
            assert not can_i(plane, as_operator, verb, gateways), verb
        gateway = {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": GATEWAY, "namespace": EDGE},
            "spec": {
                "gatewayClassName": "cloud",
                "listeners": [
                    {"name": "http", "port": 80, "protocol": "HTTP"},
                    {
                        "name": "grid",
                        "port": 9443,
                        "protocol": "TLS",
                        "tls": {"mode": "Passthrough"},
                    },
                ],
            },
        }
        apply(plane, gateway)
        until_reason(operator, plane, "NoAddress", "status.addresses")
        addresses = {"status": {"addresses": [{"type": "Hostname", "value": "gw.east.example"}]}}
        patch(plane, "gateway", GATEWAY, "-n", EDGE, body=addresses, status=True)
        resolved = until_reason(operator, plane, "Resolved", f"from Gateway {EDGE}/{GATEWAY}")
        assert resolved["egressAddress"] == "gw.east.example:9443"
        assert operator.stop() == 0
