"""``grid operator`` in one cluster, end to end: an API server on loopback (kmock's, and a
real one: each test runs on both unless marked), the operator running in its own kopf thread
with a real SWIM node, a real provider endpoint, and every result read back through the API
as a ``kubectl`` user would."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from grid.render.validate import ExpectedScope, validate_overlay
from k8s.cluster import Cluster
from k8s.control_plane import free_tcp_port
from k8s.emulator import GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS
from k8s.grid_install import ACCOUNT, shipped_permissions
from k8s.operator_support import (
    GATEWAY_NAMESPACE,
    NAMESPACE,
    OperatorUnderTest,
    condition,
    configmap_exists,
    event_reasons,
    free_udp_port,
    network_body,
    operator_for,
    overlay_names,
    prepare_namespaces,
    provider_body,
    put_trust,
    read_configmap,
    refused_operator_requests,
    site_body,
    status_of,
    wait_condition,
    wait_phase,
)
from k8s.rbac import Permissions
from k8s.waiting import eventually
from support.servers import ProviderEndpoint

pytestmark = [pytest.mark.timeout(60), pytest.mark.real_server]

NETWORK = "mesh"
SITE = "site-a"


async def _equal(found: Awaitable[list[str]], expected: list[str], *, ordered: bool = True) -> bool:
    names = await found
    return (names if ordered else sorted(names)) == expected


async def _gone(cluster: Cluster, configmap: str) -> bool:
    return not await configmap_exists(cluster, configmap)


async def _network_gone(cluster: Cluster) -> bool:
    return not await cluster.exists(GRID_NETWORKS, NETWORK)


def _site_gone(running: OperatorUnderTest) -> bool:
    engine = running.runtime(NETWORK).engine
    return engine is not None and ("GridSite", SITE) not in engine.statuses()


@pytest.fixture(scope="module")
def permissions(tmp_path_factory: pytest.TempPathFactory) -> Permissions:
    return shipped_permissions(tmp_path_factory.mktemp("rbac"))


async def test_a_network_with_a_provider_writes_its_overlay_status_and_events(
    cluster: Cluster, endpoint: ProviderEndpoint
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    async with operator_for(cluster, SITE) as running:
        await cluster.create(GRID_NETWORKS, network_body(NETWORK, port=running.swim_port))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        await cluster.create(
            INFERENCE_PROVIDERS,
            provider_body("llama-a", NETWORK, site=SITE, endpoint=endpoint.base_url),
        )

        status = await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Active")
        assert status["gridId"]
        assert condition(status, "ConfigValid")["status"] == "True"
        assert condition(status, "MembershipReady")["status"] == "True"
        await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Available")
        await eventually(
            lambda: overlay_names(cluster), what="the overlay ConfigMap with a candidate"
        )
        configmap = await read_configmap(cluster, "edge-grid-config")
        verdict = validate_overlay(
            configmap.data["grid-config.json"], ExpectedScope(network=NETWORK, local_site=SITE)
        )
        assert verdict.accepted, verdict.detail
        network = await cluster.get(GRID_NETWORKS, NETWORK)
        (owner,) = configmap.metadata.owner_references
        assert (owner.kind, owner.name, owner.uid) == (
            "GridNetwork",
            NETWORK,
            network["metadata"]["uid"],
        )
        assert owner.block_owner_deletion is None

        async def gateway_revision() -> Any:
            status = await status_of(cluster, GRID_NETWORKS, NETWORK)
            gateways = status.get("gateways") or []
            return gateways and gateways[0].get("revision")

        revision = await eventually(gateway_revision, what="the overlay revision in status")
        assert configmap.metadata.annotations["grid.praxis-proxy.io/revision"] == revision
        reasons = await eventually(
            lambda: event_reasons(cluster, NETWORK), what="Events about the network"
        )
        assert reasons[0] == "ConfigAccepted"
        assert reasons[-1] in ("MeshJoined", "Recovered")
        assert "ProviderReady" in await event_reasons(cluster, "llama-a")


async def configmap_writes(cluster: Cluster) -> list[str]:
    """Every ConfigMap create, patch, update or delete the API served, in order."""
    return [
        str(request.access)
        for request in cluster.requests()
        if request.access is not None
        and request.access.resource == "configmaps"
        and request.access.verb in ("create", "patch", "update", "delete")
    ]


async def test_updates_and_deletions_reach_configmaps_statuses_and_the_mesh(
    cluster: Cluster, endpoint: ProviderEndpoint, permissions: Permissions
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    async with operator_for(cluster, SITE) as running:
        await cluster.create(GRID_NETWORKS, network_body(NETWORK, port=running.swim_port))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        await cluster.create(
            INFERENCE_PROVIDERS,
            provider_body("llama-a", NETWORK, site=SITE, endpoint=endpoint.base_url),
        )
        await eventually(
            lambda: _equal(overlay_names(cluster), ["llama"]), what="llama in the overlay"
        )

        # Nothing changes: nothing is written, however many passes run.
        await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Available")
        settled = await configmap_writes(cluster)
        passes = running.runtime(NETWORK).passes
        await eventually(
            lambda: running.runtime(NETWORK).passes >= passes + 10, what="ten more passes"
        )
        assert await configmap_writes(cluster) == settled

        # A second provider joins the overlay.
        await cluster.create(
            INFERENCE_PROVIDERS,
            provider_body("qwen-a", NETWORK, site=SITE, endpoint=endpoint.base_url, model="qwen"),
        )
        await eventually(
            lambda: _equal(overlay_names(cluster), ["llama", "qwen"], ordered=False),
            what="qwen joining the overlay",
        )

        # The gateway asks for the whole gateway configuration; a second gateway, after the
        # filter rename, gets the overlay under its own key.
        gateways = [
            {
                "name": "edge",
                "namespace": GATEWAY_NAMESPACE,
                "consumerConfig": {"enabled": True},
            },
            {
                "name": "next",
                "namespace": GATEWAY_NAMESPACE,
                "configMapKey": "routing-overlay.json",
                "routeFilterName": "intelligent_route",
                "credentialFilterName": "credential_inject",
            },
        ]
        await cluster.patch(GRID_NETWORKS, NETWORK, {"spec": {"gatewayRefs": gateways}})

        # The providers listen on 127.0.0.1, which the gateway refuses unless told: Grid
        # says so in status rather than write a configuration the gateway would refuse.
        async def edge_refusal() -> str:
            status = await status_of(cluster, GRID_NETWORKS, NETWORK)
            edge = [g for g in status.get("gateways") or [] if g["name"] == "edge"]
            return edge[0]["message"] if edge else ""

        refusal = await eventually(edge_refusal, what="the refused gateway configuration")
        assert "allowPrivateEndpoints" in refusal
        assert not await configmap_exists(cluster, "edge-praxis")
        gateways[0]["consumerConfig"]["allowPrivateEndpoints"] = True
        await cluster.patch(GRID_NETWORKS, NETWORK, {"spec": {"gatewayRefs": gateways}})
        praxis = await eventually(
            lambda: read_configmap(cluster, "edge-praxis"), what="the gateway configuration"
        )
        config = yaml.safe_load(praxis.data["praxis.yaml"])
        assert config["admin"] == {"address": "127.0.0.1:9901"}
        assert config["listeners"][0]["address"] == "0.0.0.0:8080"
        assert config["insecure_options"] == {"allow_private_endpoints": True}
        nxt = await eventually(
            lambda: read_configmap(cluster, "next-grid-config"), what="the second gateway"
        )
        assert set(nxt.data) == {"routing-overlay.json"}

        async def gateways_in_status() -> list[str]:
            status = await status_of(cluster, GRID_NETWORKS, NETWORK)
            return sorted(g["name"] for g in status.get("gateways") or [] if g.get("revision"))

        await eventually(
            lambda: _equal(gateways_in_status(), ["edge", "next"]), what="both gateways in status"
        )

        # Removing a gatewayRef removes what Grid wrote for it.
        await cluster.patch(GRID_NETWORKS, NETWORK, {"spec": {"gatewayRefs": gateways[:1]}})
        await eventually(
            lambda: _gone(cluster, "next-grid-config"), what="the removed gateway's ConfigMap"
        )
        assert await configmap_exists(cluster, "edge-grid-config")

        # An edited provider serves another model; a deleted one leaves the overlay.
        await cluster.patch(
            INFERENCE_PROVIDERS, "qwen-a", {"spec": {"models": [{"name": "qwen-2"}]}}
        )
        await eventually(
            lambda: _equal(overlay_names(cluster), ["llama", "qwen-2"], ordered=False),
            what="the edited provider's model in the overlay",
        )
        await cluster.delete(INFERENCE_PROVIDERS, "qwen-a")
        await eventually(
            lambda: _equal(overlay_names(cluster), ["llama"]), what="qwen leaving the overlay"
        )

        # Without any provider there is nothing to route to: the last good overlay stays
        # and the status says why.
        await cluster.delete(INFERENCE_PROVIDERS, "llama-a")
        status = await wait_condition(cluster, GRID_NETWORKS, NETWORK, "OverlaysWritten", "False")
        assert "gateways/edge" in status["message"]
        network = await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Degraded")
        (edge,) = network["gateways"]
        assert edge["message"] and edge["revision"]
        assert await overlay_names(cluster) == ["llama"]

        # A deleted site is no longer reported.
        await cluster.delete(GRID_SITES, SITE)
        await eventually(lambda: _site_gone(running), what="the site leaving the engine")

        # Deleting the network leaves its mesh and removes everything Grid wrote for it.
        runtime = running.runtime(NETWORK)
        await cluster.delete(GRID_NETWORKS, NETWORK)
        await eventually(
            lambda: _network_gone(cluster), what="the network deleted through Grid's finalizer"
        )
        for name in ("edge-grid-config", "edge-praxis"):
            assert not await configmap_exists(cluster, name)
        assert runtime.node is None
        assert NETWORK not in running.operator.runtimes

    # Everything the operator did was allowed by the shipped RBAC (with the gateway
    # namespace bound as docs/install.md says).
    assert refused_operator_requests(cluster, permissions) == []


async def test_a_configmap_grid_did_not_write_is_left_alone(
    cluster: Cluster, endpoint: ProviderEndpoint
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    foreign = {"metadata": {"name": "edge-grid-config"}, "data": {"mine": "keep me"}}
    await cluster.call(cluster.core.create_namespaced_config_map, GATEWAY_NAMESPACE, foreign)
    async with operator_for(cluster, SITE) as running:
        await cluster.create(GRID_NETWORKS, network_body(NETWORK, port=running.swim_port))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        await cluster.create(
            INFERENCE_PROVIDERS,
            provider_body("llama-a", NETWORK, site=SITE, endpoint=endpoint.base_url),
        )
        written = await wait_condition(cluster, GRID_NETWORKS, NETWORK, "OverlaysWritten", "False")
        await eventually(
            lambda: _overlay_message_has(cluster, "was not written by Grid"),
            what="the conflict named in status",
        )
        assert "gateways/edge" in written["message"]
        configmap = await read_configmap(cluster, "edge-grid-config")
        assert configmap.data == {"mine": "keep me"}

        # Once the gateway points at its own ConfigMap, the overlay is written there.
        await cluster.patch(
            GRID_NETWORKS,
            NETWORK,
            {
                "spec": {
                    "gatewayRefs": [
                        {
                            "name": "edge",
                            "namespace": GATEWAY_NAMESPACE,
                            "configMapName": "edge-overlay",
                        }
                    ]
                }
            },
        )
        await eventually(
            lambda: overlay_names(cluster, "edge-overlay"), what="the overlay in its own ConfigMap"
        )
        await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Active")
    assert (await read_configmap(cluster, "edge-grid-config")).data == {"mine": "keep me"}


async def _overlay_message_has(cluster: Cluster, text: str) -> bool:
    status = await status_of(cluster, GRID_NETWORKS, NETWORK)
    return any(text in (gateway.get("message") or "") for gateway in status.get("gateways") or [])


async def test_the_grid_id_is_generated_once_and_kept_across_restarts(cluster: Cluster) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    port = free_udp_port()
    async with operator_for(cluster, SITE, swim_port=port):
        await cluster.create(GRID_NETWORKS, network_body(NETWORK, port=port, gateways=[]))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        first = await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Active")
    assert first["gridId"]
    async with operator_for(cluster, SITE, swim_port=port) as running:
        await eventually(
            lambda: running.runtime(NETWORK).engine is not None, what="the network running again"
        )
        assert running.runtime(NETWORK).engine.grid_id == first["gridId"]
        status = await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Active")
        assert status["gridId"] == first["gridId"]


async def test_a_gateway_removed_while_the_operator_was_down_is_cleaned_up_on_restart(
    cluster: Cluster, endpoint: ProviderEndpoint
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    port = free_udp_port()
    gateways = [
        {"name": "edge", "namespace": GATEWAY_NAMESPACE},
        {"name": "next", "namespace": GATEWAY_NAMESPACE},
    ]
    async with operator_for(cluster, SITE, swim_port=port):
        await cluster.create(GRID_NETWORKS, network_body(NETWORK, port=port, gateways=gateways))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        await cluster.create(
            INFERENCE_PROVIDERS,
            provider_body("llama-a", NETWORK, site=SITE, endpoint=endpoint.base_url),
        )
        await eventually(lambda: overlay_names(cluster, "next-grid-config"), what="next's overlay")
    await cluster.patch(GRID_NETWORKS, NETWORK, {"spec": {"gatewayRefs": gateways[:1]}})
    assert await configmap_exists(cluster, "next-grid-config")
    async with operator_for(cluster, SITE, swim_port=port):
        await eventually(
            lambda: _gone(cluster, "next-grid-config"), what="next's ConfigMap removed on restart"
        )
        assert await overlay_names(cluster) == ["llama"]


async def test_grid_operator_runs_from_the_deployment_s_environment_and_stops_on_sigterm(
    cluster: Cluster, endpoint: ProviderEndpoint, tmp_path: Path
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    # The operator's ServiceAccount token, in the kubeconfig it finds through KUBECONFIG.
    token = await cluster.service_account_token(NAMESPACE, ACCOUNT)
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", token)
    swim_port, health_port = free_udp_port(), free_tcp_port()
    environment = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "GRID_SWIM_ADVERTISE_ADDRESS": "127.0.0.1",
        "GRID_SWIM_PORT": str(swim_port),
        "GRID_METRICS_PORT": str(free_tcp_port()),
        "GRID_HEALTH_PORT": str(health_port),
        "POD_NAMESPACE": NAMESPACE,
        "POD_NAME": "grid-operator-7d9f",
        "GRID_SITE_NAME": SITE,
    }
    environment.pop("KUBERNETES_SERVICE_HOST", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "grid.cli",
        "operator",
        "--log-level",
        "WARNING",
        env=environment,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await eventually(
            lambda: cluster.watch_count(GRID_NETWORKS) > 0,
            timeout=20,
            what="the operator watching GridNetworks",
        )
        network = network_body(NETWORK, port=swim_port)
        del network["spec"]["swim"]["port"]  # GRID_SWIM_PORT applies
        await cluster.create(GRID_NETWORKS, network)
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        await cluster.create(
            INFERENCE_PROVIDERS,
            provider_body("llama-a", NETWORK, site=SITE, endpoint=endpoint.base_url),
        )
        await eventually(lambda: overlay_names(cluster), timeout=15, what="the overlay")
        await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Active")
        events = await cluster.events_about(NETWORK, NAMESPACE)
        assert events and events[0].reporting_instance == "grid-operator-7d9f"

        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{health_port}/healthz") as answer,
        ):
            assert answer.status == 200
            assert f"{NETWORK}: SWIM running" in await answer.text()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 15)
        except TimeoutError:
            process.kill()
            raise
    errors = (await process.stderr.read()).decode() if process.stderr else ""
    assert process.returncode == 0, errors
