"""Two clusters, each with its own API server (kmock's, and real ones: each test runs on both)
and its own ``grid operator``, forming one mesh over encrypted SWIM on loopback: each site's
egress is a real TLS endpoint presenting the site's certificate (mutual TLS, a CA the test
generates), the trust material comes from Secrets, and everything is read back through each
cluster's API."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from grid.models.site import AUTO_DISCOVER_LABEL
from k8s.cluster import Cluster
from k8s.emulator import GRID_GROUP, GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS
from k8s.fixtures import ClusterFactory
from k8s.grid_install import shipped_permissions
from k8s.operator_support import (
    CA_SECRET,
    KEY_ENTRY,
    KEY_SECRET,
    NAMESPACE,
    SITE_TLS_SECRET,
    JsonObject,
    OperatorUnderTest,
    condition,
    event_reasons,
    free_udp_port,
    keyring_text,
    network_body,
    new_key,
    operator_for,
    operator_requests,
    prepare_namespaces,
    provider_body,
    put_secret,
    put_site_tls,
    read_configmap,
    refused_operator_requests,
    site_body,
    status_of,
    wait_phase,
)
from k8s.waiting import eventually
from support.pki import Pki, make_pki
from support.servers import ProviderEndpoint, TlsServer

pytestmark = [pytest.mark.timeout(90), pytest.mark.real_server]

NETWORK = "mesh"
SITES = ("site-a", "site-b")
TLS = {
    "swimKeyRef": {"name": KEY_SECRET, "namespace": NAMESPACE, "key": KEY_ENTRY},
    "caSecretRef": {"name": CA_SECRET, "namespace": NAMESPACE, "key": "ca.crt"},
    "siteCertSecretRef": {"name": SITE_TLS_SECRET, "namespace": NAMESPACE},
}


@dataclass
class Side:
    """One cluster of the mesh: its API, its site's egress endpoint and SWIM port."""

    site: str
    cluster: Cluster
    egress: TlsServer
    swim_port: int

    @property
    def swim_address(self) -> str:
        return f"127.0.0.1:{self.swim_port}"


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path, SITES)


@contextlib.asynccontextmanager
async def egress_of(pki: Pki, site: str) -> AsyncIterator[TlsServer]:
    """The site's egress: mutual TLS with the site's certificate, clients signed by the CA."""
    server = TlsServer(pki[site].files, client_ca_file=pki.ca_file, require_client_cert=True)
    async with server:
        yield server


async def prepare_side(side: Side, pki: Pki, key: bytes) -> None:
    await prepare_namespaces(side.cluster)
    await put_secret(side.cluster, KEY_SECRET, {KEY_ENTRY: key})
    await put_secret(side.cluster, CA_SECRET, {"ca.crt": pki.ca_pem.encode()})
    await put_site_tls(side.cluster, pki[side.site].issued)


async def declare_mesh(
    side: Side,
    other: Side,
    pki: Pki,
    *,
    declare_peer: bool = True,
    labels: dict[str, str] | None = None,
) -> None:
    """The side's GridNetwork (seeded with the other side), its own GridSite and, unless
    left to discovery, the peer's GridSite pinned to the peer's certificate."""
    await side.cluster.create(
        GRID_NETWORKS,
        network_body(
            NETWORK, port=side.swim_port, seeds=[other.swim_address], tls=TLS, labels=labels
        ),
    )
    await side.cluster.create(
        GRID_SITES,
        site_body(
            side.site, NETWORK, egress=side.egress.address, fingerprint=pki[side.site].fingerprint
        ),
    )
    if declare_peer:
        await side.cluster.create(
            GRID_SITES,
            site_body(
                other.site,
                NETWORK,
                egress=other.egress.address,
                fingerprint=pki[other.site].fingerprint,
            ),
        )


async def candidates(cluster: Cluster) -> set[tuple[str, str]]:
    """(model, site) of every candidate in the gateway's overlay ConfigMap."""
    configmap = await read_configmap(cluster, "edge-grid-config")
    document = json.loads(configmap.data["grid-config.json"])
    return {(c["name"], c["site"]) for c in document["overlay"]["candidates"]}


async def has_candidates(cluster: Cluster, expected: set[tuple[str, str]]) -> bool:
    return await candidates(cluster) == expected


@contextlib.asynccontextmanager
async def two_sides(
    cluster: Cluster, cluster_factory: ClusterFactory, pki: Pki
) -> AsyncIterator[tuple[Side, Side]]:
    other = await cluster_factory("cluster-b")
    async with egress_of(pki, "site-a") as egress_a, egress_of(pki, "site-b") as egress_b:
        yield (
            Side("site-a", cluster, egress_a, free_udp_port()),
            Side("site-b", other, egress_b, free_udp_port()),
        )


async def test_two_operators_form_a_mesh_share_providers_and_survive_a_key_rotation(
    cluster: Cluster, cluster_factory: ClusterFactory, pki: Pki
) -> None:
    key = new_key()
    async with (
        two_sides(cluster, cluster_factory, pki) as (a, b),
        ProviderEndpoint() as endpoint_a,
        ProviderEndpoint() as endpoint_b,
    ):
        for side in (a, b):
            await prepare_side(side, pki, key)
        # Site A is named on the command line; site B finds itself by its certificate pin.
        async with (
            operator_for(a.cluster, "site-a", swim_port=a.swim_port) as op_a,
            operator_for(b.cluster, None, swim_port=b.swim_port) as op_b,
        ):
            await declare_mesh(a, b, pki)
            await declare_mesh(b, a, pki)
            await a.cluster.create(
                INFERENCE_PROVIDERS,
                provider_body("llama-a", NETWORK, site="site-a", endpoint=endpoint_a.base_url),
            )
            await b.cluster.create(
                INFERENCE_PROVIDERS,
                provider_body(
                    "qwen-b", NETWORK, site="site-b", endpoint=endpoint_b.base_url, model="qwen"
                ),
            )

            both = {("llama", "site-a"), ("qwen", "site-b")}
            await eventually(
                lambda: has_candidates(a.cluster, both), timeout=15, what="A's overlay"
            )
            await eventually(
                lambda: has_candidates(b.cluster, both), timeout=15, what="B's overlay"
            )
            peer = await wait_phase(a.cluster, GRID_SITES, "site-b", "Active")
            assert peer["matchedPin"] == "current"
            assert peer["observedFingerprint"] == pki["site-b"].fingerprint
            assert condition(peer, "Trusted")["status"] == "True"
            reasons = await event_reasons(a.cluster, "site-b")
            assert {"EgressConfigured", "TrustVerified"} <= set(reasons)
            assert op_b.runtime(NETWORK).site == "site-b"

            # Statuses follow the mesh a pass later: the peer's and the network's are written
            # one after the other, and each site adopts the smallest grid id it hears of.
            async def connected() -> JsonObject | None:
                status = await status_of(a.cluster, GRID_NETWORKS, NETWORK)
                theirs = await status_of(b.cluster, GRID_NETWORKS, NETWORK)
                ready = status.get("phase") == "Active" and status.get("connectedSites") == 1
                # One mesh, one grid id, whichever site generated it.
                same_grid = status.get("gridId") is not None and (
                    status.get("gridId") == theirs.get("gridId")
                )
                return status if ready and same_grid else None

            network = await eventually(connected, what="the network Active with its peer")
            assert condition(network, "SeedsReachable")["status"] == "True"
            # The peer's provider is reported in this cluster too, at its site.
            assert len(network["gateways"]) == 1 and network["providerCount"] == 2

            # Deleting a provider on one side removes it from the other side's overlay.
            await b.cluster.delete(INFERENCE_PROVIDERS, "qwen-b")
            only_a = {("llama", "site-a")}
            await eventually(
                lambda: has_candidates(a.cluster, only_a), timeout=10, what="qwen gone from A"
            )

            # Rotate the SWIM key by editing the Secret on both sides, one step at a time.
            new = new_key()
            for step in (keyring_text(key, new), keyring_text(new, key), keyring_text(new)):
                for side in (a, b):
                    await put_secret(side.cluster, KEY_SECRET, {KEY_ENTRY: step})
                expected = len(step.splitlines())
                for running in (op_a, op_b):
                    await eventually(
                        lambda running=running, expected=expected: (
                            _keys_in_use(running) == expected
                        ),
                        what=f"{expected} key(s) in use",
                    )
            assert op_a.runtime(NETWORK).node.key_ids() == op_b.runtime(NETWORK).node.key_ids()

            # The mesh is still up: news still travels both ways.
            await b.cluster.create(
                INFERENCE_PROVIDERS,
                provider_body(
                    "mistral-b",
                    NETWORK,
                    site="site-b",
                    endpoint=endpoint_b.base_url,
                    model="mistral",
                ),
            )
            after = {("llama", "site-a"), ("mistral", "site-b")}
            await eventually(
                lambda: has_candidates(a.cluster, after), timeout=10, what="news after the rotation"
            )
            # Alive, once any suspicion raised while both sides changed keys has cleared.
            await eventually(
                lambda: (
                    [(m.site, m.state) for m in op_a.runtime(NETWORK).node.members()]
                    == [("site-b", "alive")]
                ),
                what="site-b alive in A's view",
            )


def _keys_in_use(running: OperatorUnderTest) -> int:
    node = running.runtime(NETWORK).node
    return 0 if node is None else len(node.key_ids())


async def test_a_peer_seen_alive_gets_a_gridsite_that_is_trusted_once_pinned_and_left_when_it_goes(
    cluster: Cluster, cluster_factory: ClusterFactory, pki: Pki, tmp_path: Path
) -> None:
    key = new_key()
    async with (
        two_sides(cluster, cluster_factory, pki) as (a, b),
        ProviderEndpoint() as endpoint_b,
    ):
        for side in (a, b):
            await prepare_side(side, pki, key)
        async with operator_for(a.cluster, "site-a", swim_port=a.swim_port):
            # A only knows itself, and lets SWIM tell it about peers.
            await declare_mesh(a, b, pki, declare_peer=False, labels={AUTO_DISCOVER_LABEL: "true"})
            async with operator_for(b.cluster, "site-b", swim_port=b.swim_port):
                await declare_mesh(b, a, pki)
                await b.cluster.create(
                    INFERENCE_PROVIDERS,
                    provider_body(
                        "qwen-b", NETWORK, site="site-b", endpoint=endpoint_b.base_url, model="qwen"
                    ),
                )

                discovered = await eventually(
                    lambda: a.cluster.get(GRID_SITES, "site-b"), timeout=10, what="a GridSite for B"
                )
                assert discovered["metadata"]["labels"][AUTO_DISCOVER_LABEL] == "true"
                assert discovered["spec"] == {"gridNetworkRef": NETWORK}
                # Its egress is learned over the mesh and probed, but nothing pins it yet.
                status = await wait_phase(a.cluster, GRID_SITES, "site-b", "Connecting")
                await eventually(
                    lambda: _trusted_reason(a.cluster, "TrustNotConfigured"),
                    what="the unpinned site reported",
                )
                assert status["egressAddress"] == b.egress.address

                await a.cluster.patch(
                    GRID_SITES,
                    "site-b",
                    {"spec": {"trust": {"certFingerprint": pki["site-b"].fingerprint}}},
                )
                await wait_phase(a.cluster, GRID_SITES, "site-b", "Active")
            # B's operator stopped and left the mesh: A records the site as Left.
            await wait_phase(a.cluster, GRID_SITES, "site-b", "Left")
    # Creating the site and reading the trust Secrets needed nothing beyond the shipped RBAC.
    created = [
        request.access
        for request in operator_requests(a.cluster)
        if request.access is not None
        and (request.access.verb, request.access.group) == ("create", GRID_GROUP)
    ]
    assert [access.resource for access in created] == ["gridsites"]
    permissions = shipped_permissions(tmp_path / "rbac")
    assert refused_operator_requests(a.cluster, permissions) == []


async def _trusted_reason(cluster: Cluster, reason: str) -> bool:
    status = await status_of(cluster, GRID_SITES, "site-b")
    return condition(status, "Trusted").get("reason") == reason
