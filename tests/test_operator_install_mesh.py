"""Two clusters installed as README.md and docs/install.md say, one mesh between them, each
``grid operator`` run as its cluster's ServiceAccount (tests/k8s/operator_process.py).

The first cluster (``east``) runs README's install block; the second (``west``) the guide's
steps for every other cluster, its Secrets made from the first cluster's CA and SWIM key.
The example's sites sit at names under .example: each site's egress is a TLS endpoint on
loopback presenting that site's certificate, each site's Llama a provider endpoint, and
both clusters' resources are patched to reach them (after the server refused, by the CRD's
CEL rules, TLS to an IP address without serverName). West's egress address is typed into
both clusters; east's is read from a LoadBalancer Service of east's cluster
(``spec.egress.from``, its address written by the test as a cloud controller would) and
reaches west through SWIM alone. The operators find each other at their SWIM ports on
loopback: each trusts the other's site, and its edge gateway's overlay routes Llama to
both sites. Then east's load balancer moves to another endpoint: west's gateway
configuration follows, with no restart and no edit in west.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from grid.trust import PemFiles
from k8s.control_plane import REPO, ControlPlane, write_kubeconfig
from k8s.fixtures import ControlPlaneFactory
from k8s.operator_process import (
    ACCOUNT,
    EDGE_OVERLAY,
    GROUP,
    LOG_TAIL_CHARACTERS,
    MESH_NAMESPACE,
    NETWORK,
    OPERATOR_NAMESPACE,
    PLURALS,
    JsonObject,
    OperatorProcess,
    assert_clean_log,
    doc_block,
    grid_object,
    run_install,
    run_shell,
    site_certificate_fingerprint,
)
from k8s.operator_support import free_udp_port
from support.servers import ProviderEndpoint, StreamServer, TlsServer

pytestmark = pytest.mark.timeout(600)

OTHER_CLUSTER_HEADING = "### Every other cluster: the same CA and SWIM key, its own certificate"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
# Each cluster's site, and the provider sitting there (examples/mesh).
MESH = {"east": ("east-edge", "llama-east-edge"), "west": ("west-edge", "llama-west-edge")}


@dataclass
class Side:
    """One cluster of the mesh: its API server, its site, its SWIM port."""

    plane: ControlPlane
    site: str
    swim_port: int = field(default_factory=free_udp_port)

    @property
    def admin(self) -> k8s.ApiClient:
        return self.plane.admin

    def kubectl(self, *arguments: str) -> str:
        return self.plane.kubectl(*arguments).stdout


def other_cluster_script() -> str:
    """docs/install.md in the second cluster (context ``west``): steps 1 to 3, its Secrets
    from the first cluster's signing Secret (the guide's "Every other cluster" block), then
    steps 5 and 6."""
    crds = " ".join(f"crd/{plural}.{GROUP}" for plural in PLURALS)
    commands = (
        "kubectl --context west apply -k deploy/overlays/example",
        f"kubectl --context west wait --for condition=established --timeout=60s {crds}",
        doc_block(REPO / "docs" / "install.md", OTHER_CLUSTER_HEADING),
        "kubectl --context west -n grid-system create rolebinding grid-operator "
        "--clusterrole=grid-operator-namespaced --serviceaccount=grid-example:grid-operator",
        "kubectl --context west apply -f examples/mesh/",
    )
    return "\n".join(commands) + "\n"


def site_tls_files(side: Side, folder: Path) -> tuple[PemFiles, Path]:
    """The site's certificate and key, and the network's CA, from the site's cluster."""
    core = k8s.CoreV1Api(side.admin)
    site = core.read_namespaced_secret("glb-demo-site-tls", MESH_NAMESPACE).data or {}
    ca = core.read_namespaced_secret("glb-demo-ca", MESH_NAMESPACE).data or {}
    folder.mkdir()
    files = PemFiles(folder / "tls.crt", folder / "tls.key")
    for path, entry in ((files.certificate, site["tls.crt"]), (files.private_key, site["tls.key"])):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(base64.b64decode(entry))
    (folder / "ca.crt").write_bytes(base64.b64decode(ca["ca.crt"]))
    return files, folder / "ca.crt"


@contextlib.contextmanager
def served_in_thread(server: StreamServer) -> Iterator[StreamServer]:
    """Serve from a private event loop on a daemon thread: the test blocks on API calls."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="egress", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.listen(), loop).result(timeout=10)
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def patch(side: Side, kind: str, name: str, body: JsonObject) -> None:
    side.kubectl("patch", kind, name, "--type", "merge", "-p", json.dumps(body))


def routes_llama_of(side: Side, sites: set[str]) -> bool:
    """Whether the edge gateway's overlay routes Llama to exactly ``sites``."""
    core = k8s.CoreV1Api(side.admin)
    data = core.read_namespaced_config_map(EDGE_OVERLAY, MESH_NAMESPACE).data or {}
    document = json.loads(data["grid-config.json"])
    return {c["site"] for c in document["overlay"]["candidates"] if c["name"] == LLAMA} == sites


def test_two_clusters_installed_as_documented_route_each_others_providers(
    control_plane_factory: ControlPlaneFactory, tmp_path: Path
) -> None:
    east, west = (Side(control_plane_factory(name), MESH[name][0]) for name in ("east", "west"))
    run_install(east.plane)
    kubeconfig = write_kubeconfig(
        tmp_path / "both.kubeconfig",
        {side.plane.name: (side.plane, side.plane.admin_token) for side in (east, west)},
        current="east",
    )
    run_shell(other_cluster_script(), kubeconfig, east.plane)
    pins = {side.site: site_certificate_fingerprint(side.admin) for side in (east, west)}
    # The example's sites sit at names under .example: each egress is a TLS endpoint here,
    # presenting its site's certificate, and each site's Llama a provider endpoint here.
    with contextlib.ExitStack() as stack:
        egress = {}
        for side in (east, west):
            files, ca_file = site_tls_files(side, tmp_path / side.site)
            server = TlsServer(files, client_ca_file=ca_file, require_client_cert=True)
            egress[side.site] = stack.enter_context(served_in_thread(server)).address
        endpoints = {
            provider: stack.enter_context(ProviderEndpoint().serve_in_thread()).base_url
            for _, provider in MESH.values()
        }
        # A real server enforces the CRD's CEL rules: TLS to an IP address needs serverName.
        refused = east.plane.kubectl(
            "patch", "gridsite", east.site, "--type", "merge",
            "-p", json.dumps({"spec": {"egress": {"address": egress[east.site]}}}),
            check=False,
        )  # fmt: skip
        assert refused.returncode != 0 and "serverName" in refused.stderr, refused.stderr
        # Every cluster pins every site, and finds the other at its SWIM port on loopback.
        for side, other in ((east, west), (west, east)):
            spec = {"swim": {"port": side.swim_port}, "seeds": [f"127.0.0.1:{other.swim_port}"]}
            patch(side, "gridnetwork", NETWORK, {"spec": spec})
            for site, address in egress.items():
                reach: JsonObject | None = {"address": address, "serverName": site}
                if site == east.site:
                    reach = load_balanced(east, address) if side is east else None
                patch(
                    side,
                    "gridsite",
                    site,
                    {"spec": {"egress": reach, "trust": {"certFingerprint": pins[site]}}},
                )
            for provider, url in endpoints.items():
                health = {"endpoint": url, "healthCheck": {"path": "/healthz"}}
                patch(side, "inferenceprovider", provider, {"spec": health})
        operators = [start_operator(side, tmp_path, stack) for side in (east, west)]
        for side, operator, other in ((east, operators[0], west), (west, operators[1], east)):
            operator.until(
                f"{side.plane.name} trusts {other.site}",
                functools.partial(has_phase, side, "gridsites", other.site, "Active"),
            )
            both = {east.site, west.site}
            operator.until(
                f"{side.plane.name}'s overlay routes both sites' Llama",
                functools.partial(routes_llama_of, side, both),
            )
        west_sees = functools.partial(learned_egress, west, east.site)
        assert operators[1].until("west learns east's egress", west_sees) == egress[east.site]
        # East's load balancer moves to another endpoint (as a re-created one would).
        files, ca_file = site_tls_files(east, tmp_path / "east-moved")
        moved = TlsServer(files, client_ca_file=ca_file, require_client_cert=True)
        address = stack.enter_context(served_in_thread(moved)).address
        load_balanced(east, address)
        operators[1].until(
            "west's gateway configuration reaches east at its new address",
            lambda: (
                learned_egress(west, east.site) == address
                and moved_in(praxis_endpoints(west), egress[east.site], address)
            ),
        )
        operators[1].until(
            f"west trusts {east.site} at its new address",
            functools.partial(has_phase, west, "gridsites", east.site, "Active"),
        )
        for operator in operators:
            assert operator.stop() == 0, operator.log_text()[-LOG_TAIL_CHARACTERS:]
            assert_clean_log(operator)


def load_balanced(side: Side, address: str) -> JsonObject:
    """A LoadBalancer Service in the mesh's namespace whose cloud address is ``address``
    (its IP written into the Service's status, its port the Service's), and the GridSite
    egress that reads it."""
    host, _, port = address.rpartition(":")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "praxis-egress", "namespace": MESH_NAMESPACE},
        "spec": {
            "type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": False,
            "selector": {"app": "praxis"},
            "ports": [{"name": "grid", "port": int(port)}],
        },
    }
    side.plane.kubectl("apply", "-f", "-", stdin=json.dumps(service))
    ingress = {"status": {"loadBalancer": {"ingress": [{"ip": host}]}}}
    side.kubectl(
        "-n", MESH_NAMESPACE, "patch", "service", "praxis-egress", "--subresource=status",
        "--type", "merge", "-p", json.dumps(ingress),
    )  # fmt: skip
    source = {"service": {"namespace": MESH_NAMESPACE, "name": "praxis-egress"}}
    return {"address": None, "from": source, "serverName": side.site}


def moved_in(endpoints: set[str], old: str, new: str) -> bool:
    return new in endpoints and old not in endpoints


def learned_egress(side: Side, site: str) -> str | None:
    """The egress address ``side``'s cluster holds for ``site`` (its GridSite's status)."""
    status = grid_object(side.admin, "gridsites", site).get("status") or {}
    address = status.get("egressAddress")
    return address if isinstance(address, str) else None


def praxis_endpoints(side: Side) -> set[str]:
    """Every endpoint of the load balancer in the gateway configuration Grid renders for
    praxis-next."""
    core = k8s.CoreV1Api(side.admin)
    data = core.read_namespaced_config_map("praxis-next-praxis", MESH_NAMESPACE).data or {}
    document = yaml.safe_load(data["praxis.yaml"])
    return {
        endpoint
        for chain in document["filter_chains"]
        for entry in chain["filters"]
        for cluster in entry.get("clusters") or []
        for endpoint in cluster.get("endpoints") or []
    }


def start_operator(side: Side, tmp_path: Path, stack: contextlib.ExitStack) -> OperatorProcess:
    """The side's operator, as its ServiceAccount, once it answers /healthz."""
    token = side.plane.service_account_token(OPERATOR_NAMESPACE, ACCOUNT)
    kubeconfig = side.plane.write_kubeconfig(tmp_path / f"{side.site}.kubeconfig", token, ACCOUNT)
    operator = stack.enter_context(
        OperatorProcess(
            kubeconfig,
            tmp_path / f"{side.site}.log",
            site=side.site,
            namespace=OPERATOR_NAMESPACE,
            swim_port=side.swim_port,
        )
    )
    operator.until(f"{side.site}'s operator answers /healthz", operator.healthy)
    return operator


def has_phase(side: Side, plural: str, name: str, phase: str) -> bool:
    status = grid_object(side.admin, plural, name).get("status") or {}
    return bool(status.get("phase") == phase)
