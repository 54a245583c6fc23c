"""The shipped RBAC, checked against real API calls: the auditor refuses exactly what a
real API server would, and a kopf operator doing what Grid's operator does (finalizers,
status, Events, overlay ConfigMaps, Secret reads, GridSite creation) needs nothing that
``deploy/`` does not grant."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import kopf
import pytest
from kubernetes import client as k8s

from k8s.cluster import Cluster
from k8s.emulator import (
    GRID_API_VERSION,
    GRID_GROUP,
    GRID_NETWORKS,
    GRID_SITES,
    GRID_VERSION,
    NAMESPACES,
)
from k8s.kopf_runner import fast_settings, run_operator
from k8s.kustomize import Manifest, build, installable_copy
from k8s.rbac import Permissions, served_requests
from k8s.waiting import eventually

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "grid-system"
ACCOUNT = "grid-operator"
HANDLER_CLIENT = "grid-operator-under-test"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    return build(installable_copy(REPO, tmp_path_factory.mktemp("rbac")) / "deploy" / "base")


@pytest.fixture
def permissions(base: list[Manifest]) -> Permissions:
    return Permissions.of(base, NAMESPACE, ACCOUNT)


async def test_the_audit_refuses_exactly_what_the_rules_do_not_grant(
    cluster: Cluster, permissions: Permissions
) -> None:
    cluster.emulator.create_object(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    core, custom = cluster.core, cluster.custom
    allowed = [
        (core.create_namespaced_config_map, NAMESPACE, {"metadata": {"name": "overlay"}}),
        (core.read_namespaced_config_map, "overlay", NAMESPACE),
        (core.list_namespaced_secret, NAMESPACE),
        (custom.list_cluster_custom_object, GRID_GROUP, GRID_VERSION, "gridnetworks"),
    ]
    denied = [
        (core.create_namespaced_config_map, "default", {"metadata": {"name": "elsewhere"}}),
        (core.list_secret_for_all_namespaces,),
        (core.create_namespaced_secret, NAMESPACE, {"metadata": {"name": "s"}}),
        (custom.delete_cluster_custom_object, GRID_GROUP, GRID_VERSION, "gridnetworks", "x"),
    ]
    before = len(served_requests(cluster.emulator))
    for call, *args in allowed:
        await cluster.call(call, *args)
    assert permissions.denied(served_requests(cluster.emulator)[before:]) == []
    for call, *args in denied:
        # The emulator does not enforce RBAC; only the audit matters here.
        with contextlib.suppress(k8s.ApiException):
            await cluster.call(call, *args)
    refused = permissions.denied(served_requests(cluster.emulator)[before:])
    assert refused == sorted(
        [
            "create core/configmaps in default",
            "create core/secrets in grid-system",
            "delete grid.praxis-proxy.io/gridnetworks x cluster-wide",
            "list core/secrets cluster-wide",
        ]
    )


def grid_like_operator(cluster: Cluster) -> kopf.OperatorRegistry:
    """Handlers that make the calls Grid's operator makes, without Grid's logic."""
    registry = kopf.OperatorRegistry()
    api = k8s.ApiClient(k8s.Configuration(host=cluster.url))
    api.user_agent = HANDLER_CLIENT
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)

    @kopf.on.create(GRID_GROUP, GRID_VERSION, "gridnetworks", registry=registry)
    def reconcile(body: kopf.Body, name: str, patch: kopf.Patch, **_: Any) -> None:
        core.read_namespaced_secret("swim-key", NAMESPACE)
        overlay: dict[str, Any] = {"metadata": {"name": f"{name}-overlay"}, "data": {"k": "v"}}
        # blockOwnerDeletion would need delete permission on the owner, which the shipped
        # RBAC does not grant: a real API server refuses such a reference with 422.
        kopf.append_owner_reference(overlay, owner=body, block_owner_deletion=False)
        core.create_namespaced_config_map(NAMESPACE, overlay)
        site = {
            "apiVersion": GRID_API_VERSION,
            "kind": "GridSite",
            "metadata": {"name": f"{name}-peer"},
            "spec": {"gridNetworkRef": name},
        }
        custom.create_cluster_custom_object(GRID_GROUP, GRID_VERSION, "gridsites", site)
        kopf.info(body, reason="Active", message="joined")
        patch.status["phase"] = "Active"

    @kopf.on.delete(GRID_GROUP, GRID_VERSION, "gridnetworks", registry=registry)
    def leave(name: str, **_: Any) -> None:
        core.delete_namespaced_config_map(f"{name}-overlay", NAMESPACE)

    return registry


async def test_a_grid_like_operator_needs_nothing_beyond_the_shipped_rbac(
    cluster: Cluster, permissions: Permissions
) -> None:
    cluster.emulator.create_object(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    await cluster.call(
        cluster.core.create_namespaced_secret,
        NAMESPACE,
        {"metadata": {"name": "swim-key"}, "data": {"swim.key": "AAAA"}},
    )
    settings = fast_settings()
    settings.scanning.disabled = True  # as deploy/base/rbac.yaml says the operator runs
    async with run_operator(
        grid_like_operator(cluster),
        cluster,
        watching=[GRID_NETWORKS],
        settings=settings,
        namespace=NAMESPACE,
    ):
        await cluster.create(
            GRID_NETWORKS,
            {"apiVersion": GRID_API_VERSION, "kind": "GridNetwork", "metadata": {"name": "mesh"}},
        )

        async def active() -> bool:
            network = await cluster.get(GRID_NETWORKS, "mesh")
            return bool(network.get("status", {}).get("phase") == "Active")

        await eventually(active, what="the network reconciled")
        await eventually(lambda: cluster.events_about("mesh", NAMESPACE), what="an Event")
        await cluster.delete(GRID_NETWORKS, "mesh")

        async def gone() -> bool:
            return not await cluster.exists(GRID_NETWORKS, "mesh")

        await eventually(gone, what="the network deleted through kopf's finalizer")
        assert await cluster.exists(GRID_SITES, "mesh-peer")

    operator_calls = [
        request
        for request in served_requests(cluster.emulator)
        if request.headers.get("User-Agent", "").startswith(("kopf/", HANDLER_CLIENT))
    ]
    assert len(operator_calls) > 10, "the audit saw the operator's calls"
    assert permissions.denied(operator_calls) == []
