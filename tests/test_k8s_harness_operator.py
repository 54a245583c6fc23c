"""The Kubernetes harness carries a real kopf operator: handlers run on create, update and
delete (through kopf's finalizer), status patches land, Events and owned ConfigMaps are
visible through the official client, and two clusters stay independent."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import kopf
import pytest
from kubernetes import client as k8s

from k8s.cluster import Cluster
from k8s.emulator import CONFIGMAPS, GRID_API_VERSION, GRID_GROUP, GRID_NETWORKS, GRID_VERSION
from k8s.fixtures import ClusterFactory
from k8s.kopf_runner import run_operator
from k8s.waiting import eventually

pytestmark = pytest.mark.timeout(60)

OVERLAY_NAMESPACE = "default"
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


@dataclass
class Calls:
    """What the test operator's handlers saw, written from kopf's handler threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    created: list[str] = field(default_factory=list)
    updated: list[tuple[str, int]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def add(self, seen: list[Any], item: Any) -> None:
        with self.lock:
            seen.append(item)


def network_body(name: str, region: str = "eu-west") -> dict[str, Any]:
    return {
        "apiVersion": GRID_API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": name},
        "spec": {"region": region, "seeds": ["127.0.0.1:7946"]},
    }


def make_registry(cluster: Cluster, calls: Calls) -> kopf.OperatorRegistry:
    """A small operator for GridNetworks: status phase, an Event and an owned ConfigMap on
    create; observedGeneration on update; a recorded cleanup on delete."""
    registry = kopf.OperatorRegistry()
    core = k8s.CoreV1Api(cluster.api)

    @kopf.on.create(GRID_GROUP, GRID_VERSION, "gridnetworks", registry=registry)
    def on_create(body: kopf.Body, name: str, patch: kopf.Patch, meta: kopf.Meta, **_: Any) -> None:
        calls.add(calls.created, name)
        overlay: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-overlay", "namespace": OVERLAY_NAMESPACE},
            "data": {"grid-config.json": json.dumps({"network": name})},
        }
        kopf.append_owner_reference(overlay, owner=body)
        core.create_namespaced_config_map(OVERLAY_NAMESPACE, overlay)
        kopf.info(body, reason="Initializing", message=f"network {name} accepted")
        patch.status["phase"] = "Initializing"
        patch.status["observedGeneration"] = meta["generation"]

    @kopf.on.update(GRID_GROUP, GRID_VERSION, "gridnetworks", registry=registry)
    def on_update(name: str, patch: kopf.Patch, meta: kopf.Meta, **_: Any) -> None:
        calls.add(calls.updated, (name, meta["generation"]))
        patch.status["observedGeneration"] = meta["generation"]

    @kopf.on.delete(GRID_GROUP, GRID_VERSION, "gridnetworks", registry=registry)
    def on_delete(name: str, **_: Any) -> None:
        calls.add(calls.deleted, name)

    return registry


async def read_overlay(cluster: Cluster, network: str) -> k8s.V1ConfigMap:
    return await cluster.call(
        cluster.core.read_namespaced_config_map, f"{network}-overlay", OVERLAY_NAMESPACE
    )


async def test_create_handler_patches_status_posts_event_and_owns_a_configmap(
    cluster: Cluster,
) -> None:
    calls = Calls()
    async with run_operator(make_registry(cluster, calls), cluster, watching=[GRID_NETWORKS]):
        created = await cluster.create(GRID_NETWORKS, network_body("alpha"))

        async def initializing() -> dict[str, Any]:
            obj = await cluster.get(GRID_NETWORKS, "alpha")
            assert obj.get("status", {}).get("phase") == "Initializing", obj.get("status")
            return obj

        network = await eventually(initializing, what="status.phase=Initializing on alpha")
        assert network["status"]["observedGeneration"] == 1
        assert network["metadata"]["generation"] == 1, "a status patch never bumps generation"
        assert FINALIZER in network["metadata"]["finalizers"]
        assert calls.created == ["alpha"]

        overlay = await read_overlay(cluster, "alpha")
        assert json.loads(overlay.data["grid-config.json"]) == {"network": "alpha"}
        (owner,) = overlay.metadata.owner_references
        assert (owner.kind, owner.name, owner.uid) == (
            "GridNetwork",
            "alpha",
            created["metadata"]["uid"],
        )
        assert owner.api_version == GRID_API_VERSION

        events = await eventually(
            lambda: cluster.events_about("alpha"), what="an Event about alpha"
        )
        (event,) = [e for e in events if e.reason == "Initializing"]
        assert event.message == "network alpha accepted"
        assert event.type == "Normal"
        assert event.involved_object.kind == "GridNetwork"
        assert event.involved_object.uid == created["metadata"]["uid"]


async def test_update_handler_sees_the_generation_change(cluster: Cluster) -> None:
    calls = Calls()
    async with run_operator(make_registry(cluster, calls), cluster, watching=[GRID_NETWORKS]):
        await cluster.create(GRID_NETWORKS, network_body("beta"))
        await eventually(lambda: calls.created == ["beta"], what="the create handler")
        await eventually(
            lambda: cluster.get(GRID_NETWORKS, "beta"),
            what="kopf's bookkeeping after create",
        )

        await cluster.patch(GRID_NETWORKS, "beta", {"spec": {"region": "us-east"}})

        await eventually(lambda: ("beta", 2) in calls.updated, what="an update at generation 2")

        async def observed_generation_2() -> bool:
            obj = await cluster.get(GRID_NETWORKS, "beta")
            return bool(obj.get("status", {}).get("observedGeneration") == 2)

        await eventually(observed_generation_2, what="status.observedGeneration=2")
        network = await cluster.get(GRID_NETWORKS, "beta")
        assert network["metadata"]["generation"] == 2
        assert network["spec"]["region"] == "us-east"


async def test_delete_handler_runs_through_the_finalizer_and_owned_objects_go(
    cluster: Cluster,
) -> None:
    calls = Calls()
    async with run_operator(make_registry(cluster, calls), cluster, watching=[GRID_NETWORKS]):
        await cluster.create(GRID_NETWORKS, network_body("gamma"))
        await eventually(lambda: read_overlay(cluster, "gamma"), what="gamma's ConfigMap")

        async def finalizer_added() -> bool:
            obj = await cluster.get(GRID_NETWORKS, "gamma")
            return FINALIZER in obj["metadata"].get("finalizers", [])

        await eventually(finalizer_added, what="kopf's finalizer on gamma")

        deleting = await cluster.delete(GRID_NETWORKS, "gamma")
        assert deleting["metadata"]["deletionTimestamp"], "deletion waits for the finalizer"

        async def gone() -> bool:
            return not await cluster.exists(GRID_NETWORKS, "gamma")

        await eventually(gone, what="gamma removed once the finalizer is released")
        assert calls.deleted == ["gamma"]

        async def overlay_collected() -> bool:
            cms = await cluster.call(cluster.core.list_namespaced_config_map, OVERLAY_NAMESPACE)
            return all(cm.metadata.name != "gamma-overlay" for cm in cms.items)

        await eventually(overlay_collected, what="gamma's ConfigMap garbage-collected")


async def test_two_clusters_each_with_an_operator_stay_independent(
    cluster: Cluster, cluster_factory: ClusterFactory
) -> None:
    other = await cluster_factory("cluster-b")
    assert other.url != cluster.url
    calls_a, calls_b = Calls(), Calls()
    async with (
        run_operator(make_registry(cluster, calls_a), cluster, watching=[GRID_NETWORKS]),
        run_operator(make_registry(other, calls_b), other, watching=[GRID_NETWORKS]),
    ):
        await cluster.create(GRID_NETWORKS, network_body("only-in-a"))
        await other.create(GRID_NETWORKS, network_body("only-in-b", region="us-east"))

        await eventually(lambda: read_overlay(cluster, "only-in-a"), what="A's ConfigMap")
        await eventually(lambda: read_overlay(other, "only-in-b"), what="B's ConfigMap")

        assert calls_a.created == ["only-in-a"]
        assert calls_b.created == ["only-in-b"]
        assert not await cluster.exists(GRID_NETWORKS, "only-in-b")
        assert not await other.exists(GRID_NETWORKS, "only-in-a")
        assert (
            CONFIGMAPS.group,
            CONFIGMAPS.version,
            CONFIGMAPS.plural,
        ) == ("", "v1", "configmaps")
        assert other.emulator.get_object(CONFIGMAPS, "only-in-a-overlay", "default") is None


def test_a_registry_cannot_be_bound_to_two_clusters() -> None:
    """kopf would log in to whichever cluster answered first: the harness refuses."""
    from k8s.kopf_runner import _bind_login

    registry = kopf.OperatorRegistry()
    _bind_login(registry, kopf.ConnectionInfo(server="http://127.0.0.1:1"))
    _bind_login(registry, kopf.ConnectionInfo(server="http://127.0.0.1:1"))  # the same again
    with pytest.raises(ValueError, match="one registry per operator"):
        _bind_login(registry, kopf.ConnectionInfo(server="http://127.0.0.1:2"))
