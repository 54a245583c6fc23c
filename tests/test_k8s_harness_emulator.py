"""The emulated API server behaves as a real one where an operator depends on it:
server-owned metadata, generation, status isolation, patches and preconditions, deletion
with finalizers, garbage collection, list/watch consistency, selectors, CRDs, and clear
errors for bad requests."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from k8s.cluster import Cluster
from k8s.emulator import (
    CONFIGMAPS,
    CRDS,
    GRID_API_VERSION,
    GRID_NETWORKS,
    GRID_SITES,
    INFERENCE_PROVIDERS,
    GridKubernetesEmulator,
    merge_patch,
    register_builtin_resources,
)
from k8s.kustomize import load_documents
from k8s.waiting import eventually

pytestmark = pytest.mark.timeout(30)

NETWORKS_URL = "/apis/grid.praxis-proxy.io/v1alpha1/gridnetworks"
CONFIGMAPS_URL = "/api/v1/namespaces/default/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


def network(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GRID_API_VERSION,
        "kind": "GridNetwork",
        "metadata": {"name": name},
        "spec": spec or {"region": "eu-west"},
    }


def configmap(name: str, **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **metadata}, "data": {"k": "v"}}


async def request(
    emulator: GridKubernetesEmulator,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """One raw HTTP request: the status code and the decoded JSON body."""
    async with emulator.request(
        method, path, json=body, headers=headers or {}, params=params or {}
    ) as response:
        return response.status, await response.json()


async def watch_events(
    emulator: GridKubernetesEmulator, path: str, params: dict[str, str], count: int
) -> list[dict[str, Any]]:
    """Read ``count`` events from a watch stream, or fail after a few seconds."""
    events: list[dict[str, Any]] = []
    async with emulator.get(path, params={"watch": "true", **params}) as response:
        assert response.status == 200
        async with asyncio.timeout(5):
            async for line in response.content:
                if line.strip():
                    events.append(json.loads(line))
                if len(events) >= count:
                    break
    return events


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(event["type"], event["object"]["metadata"]["name"]) for event in events]


# -- server-owned metadata and generation ------------------------------------------------


async def test_create_stamps_uid_timestamps_generation_and_increasing_versions(
    cluster: Cluster,
) -> None:
    first = await cluster.create(GRID_NETWORKS, network("one"))
    second = await cluster.create(GRID_NETWORKS, network("two"))
    for obj in (first, second):
        meta = obj["metadata"]
        assert meta["generation"] == 1
        assert len(meta["uid"]) == 36
        assert meta["creationTimestamp"].endswith("Z")
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


async def test_generation_moves_on_spec_changes_only(cluster: Cluster) -> None:
    await cluster.create(GRID_NETWORKS, network("net"))
    labelled = await cluster.patch(GRID_NETWORKS, "net", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    with_status = await cluster.patch(
        GRID_NETWORKS, "net", {"status": {"phase": "Active"}}, status=True
    )
    assert with_status["metadata"]["generation"] == 1
    changed = await cluster.patch(GRID_NETWORKS, "net", {"spec": {"region": "us-east"}})
    assert changed["metadata"]["generation"] == 2
    versions = [labelled, with_status, changed]
    revisions = [int(v["metadata"]["resourceVersion"]) for v in versions]
    assert revisions == sorted(set(revisions))


async def test_a_patch_that_changes_nothing_writes_nothing(cluster: Cluster) -> None:
    created = await cluster.create(GRID_NETWORKS, network("still", region="eu-west"))
    same = await cluster.patch(GRID_NETWORKS, "still", {"spec": {"region": "eu-west"}})
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_server_owned_metadata_cannot_be_overwritten(cluster: Cluster) -> None:
    created = await cluster.create(GRID_NETWORKS, network("owned"))
    patched = await cluster.patch(
        GRID_NETWORKS,
        "owned",
        {"metadata": {"generation": 40, "creationTimestamp": "2000-01-01T00:00:00Z"}},
    )
    assert patched["metadata"]["generation"] == 1
    assert patched["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    status, body = await request(
        cluster.emulator, "PATCH", f"{NETWORKS_URL}/owned", {"metadata": {"uid": "x"}}, MERGE
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert "metadata.uid" in body["message"]


# -- status isolation ------------------------------------------------------------------


async def test_status_is_dropped_on_create_and_ignored_on_main_resource_patches(
    cluster: Cluster,
) -> None:
    created = await cluster.create(GRID_NETWORKS, {**network("iso"), "status": {"phase": "Fake"}})
    assert "status" not in created
    await cluster.patch(GRID_NETWORKS, "iso", {"status": {"phase": "Active"}}, status=True)
    patched = await cluster.patch(
        GRID_NETWORKS, "iso", {"spec": {"region": "us"}, "status": {"phase": "Lost"}}
    )
    assert patched["status"] == {"phase": "Active"}
    assert patched["spec"] == {"region": "us"}


async def test_status_patches_change_only_the_status(cluster: Cluster) -> None:
    await cluster.create(GRID_NETWORKS, network("iso2", region="eu"))
    patched = await cluster.patch(
        GRID_NETWORKS,
        "iso2",
        {"spec": {"region": "nowhere"}, "metadata": {"labels": {"x": "y"}}, "status": {"ok": True}},
        status=True,
    )
    assert patched["spec"] == {"region": "eu"}
    assert "labels" not in patched["metadata"]
    assert patched["status"] == {"ok": True}


async def test_a_status_write_to_a_kind_without_status_subresource_is_not_found(
    cluster: Cluster,
) -> None:
    await cluster.call(cluster.core.create_namespaced_config_map, "default", configmap("cm"))
    status, body = await request(
        cluster.emulator, "PATCH", f"{CONFIGMAPS_URL}/cm/status", {"status": {}}, MERGE
    )
    assert (status, body["reason"]) == (404, "NotFound")


# -- patches and preconditions ---------------------------------------------------------


async def test_a_failed_json_patch_test_is_422_and_changes_nothing(cluster: Cluster) -> None:
    created = await cluster.create(GRID_NETWORKS, network("jp"))
    stale = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
        {"op": "add", "path": "/metadata/finalizers", "value": ["grid/cleanup"]},
    ]
    status, body = await request(cluster.emulator, "PATCH", f"{NETWORKS_URL}/jp", stale, JSON_PATCH)
    assert (status, body["reason"]) == (422, "Invalid")
    assert "test failed" in body["message"]
    unchanged = await cluster.get(GRID_NETWORKS, "jp")
    assert "finalizers" not in unchanged["metadata"]

    fresh = [{**stale[0], "value": created["metadata"]["resourceVersion"]}, stale[1]]
    status, body = await request(cluster.emulator, "PATCH", f"{NETWORKS_URL}/jp", fresh, JSON_PATCH)
    assert status == 200
    assert body["metadata"]["finalizers"] == ["grid/cleanup"]


async def test_a_stale_resource_version_in_a_merge_patch_is_a_conflict(cluster: Cluster) -> None:
    await cluster.create(GRID_NETWORKS, network("occ"))
    with pytest.raises(k8s.ApiException) as raised:
        await cluster.patch(
            GRID_NETWORKS, "occ", {"metadata": {"resourceVersion": "1"}, "spec": {"region": "x"}}
        )
    assert raised.value.status == 409
    assert (await cluster.get(GRID_NETWORKS, "occ"))["spec"] == {"region": "eu-west"}


@pytest.mark.parametrize(
    ("content_type", "body", "expected_status"),
    [
        ("application/strategic-merge-patch+json", {"spec": {}}, 415),
        ("application/apply-patch+yaml", {"spec": {}}, 415),
        ("text/plain", {"spec": {}}, 415),
        ("application/json-patch+json", {"spec": {}}, 400),
        ("application/merge-patch+json", [{"op": "remove", "path": "/spec"}], 400),
        ("application/json-patch+json", [{"op": "remove", "path": "/nothing/here"}], 422),
    ],
)
async def test_unusable_patches_are_refused_with_a_clear_status(
    cluster: Cluster, content_type: str, body: Any, expected_status: int
) -> None:
    await cluster.create(GRID_NETWORKS, network("bad-patch"))
    status, answer = await request(
        cluster.emulator, "PATCH", f"{NETWORKS_URL}/bad-patch", body, {"Content-Type": content_type}
    )
    assert status == expected_status
    assert answer["kind"] == "Status" and answer["message"]
    assert (await cluster.get(GRID_NETWORKS, "bad-patch"))["spec"] == {"region": "eu-west"}


async def test_strategic_merge_patches_of_built_ins_apply_as_merge_patches(
    cluster: Cluster,
) -> None:
    await cluster.call(cluster.core.create_namespaced_config_map, "default", configmap("smp"))
    patched = await cluster.call(
        cluster.core.patch_namespaced_config_map,
        "smp",
        "default",
        {"data": {"k": None, "n": "1"}},
        _content_type="application/strategic-merge-patch+json",
    )
    assert patched.data == {"n": "1"}


async def test_replace_needs_the_current_resource_version_for_custom_resources(
    cluster: Cluster,
) -> None:
    created = await cluster.create(GRID_NETWORKS, network("put"))
    replacement = network("put", region="ap-south")
    status, body = await request(cluster.emulator, "PUT", f"{NETWORKS_URL}/put", replacement)
    assert (status, body["reason"]) == (422, "Invalid")
    replacement["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, body = await request(cluster.emulator, "PUT", f"{NETWORKS_URL}/put", replacement)
    assert status == 200
    assert body["spec"] == {"region": "ap-south"}
    assert body["metadata"]["generation"] == 2
    status, body = await request(cluster.emulator, "PUT", f"{NETWORKS_URL}/put", replacement)
    assert (status, body["reason"]) == (409, "Conflict")


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3], "n": {"x": None, "y": 1}}
    assert merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3], "n": {"y": 1}}
    assert merge_patch({"a": {"b": 1}}, {"a": "scalar"}) == {"a": "scalar"}
    assert target["c"] == {"d": "e", "f": "g"}, "the target is not modified"


# -- creation rules ----------------------------------------------------------------------


async def test_generate_name_gives_unique_names(cluster: Cluster) -> None:
    names = set()
    for _ in range(3):
        event = await cluster.call(
            cluster.core.create_namespaced_event,
            "default",
            {"metadata": {"generateName": "grid-"}, "involvedObject": {"name": "x"}},
        )
        assert event.metadata.name.startswith("grid-")
        assert len(event.metadata.name) == len("grid-") + 5
        names.add(event.metadata.name)
    assert len(names) == 3


@pytest.mark.parametrize(
    ("path", "body", "expected_status", "message_part"),
    [
        (CONFIGMAPS_URL, {"metadata": {}}, 422, "name or generateName is required"),
        (CONFIGMAPS_URL, configmap("Not_A_Name"), 422, "RFC 1123"),
        ("/api/v1/namespaces/missing/configmaps", configmap("x"), 404, 'namespaces "missing"'),
        (CONFIGMAPS_URL, configmap("x", namespace="other"), 400, "does not match"),
        (CONFIGMAPS_URL, configmap("x", resourceVersion="5"), 422, "resourceVersion"),
        (CONFIGMAPS_URL, {**configmap("x"), "kind": "Secret"}, 400, "kind"),
        (CONFIGMAPS_URL, ["not", "an", "object"], 400, "JSON object"),
        ("/apis/example.com/v1/widgets", {"metadata": {"name": "w"}}, 404, "could not find"),
    ],
)
async def test_bad_creates_are_refused_and_store_nothing(
    cluster: Cluster, path: str, body: Any, expected_status: int, message_part: str
) -> None:
    before = cluster.emulator.revision
    status, answer = await request(cluster.emulator, "POST", path, body)
    assert status == expected_status
    assert message_part in answer["message"]
    assert cluster.emulator.revision == before


async def test_creating_an_existing_object_is_a_conflict(cluster: Cluster) -> None:
    await cluster.create(GRID_NETWORKS, network("dup"))
    with pytest.raises(k8s.ApiException) as raised:
        await cluster.create(GRID_NETWORKS, network("dup"))
    assert raised.value.status == 409
    assert json.loads(raised.value.body)["reason"] == "AlreadyExists"


async def test_dry_run_validates_without_storing(cluster: Cluster) -> None:
    before = cluster.emulator.revision
    status, body = await request(
        cluster.emulator, "POST", NETWORKS_URL, network("dry"), params={"dryRun": "All"}
    )
    assert status == 201 and body["metadata"]["name"] == "dry"
    assert cluster.emulator.revision == before
    assert not await cluster.exists(GRID_NETWORKS, "dry")


async def test_unsupported_operations_say_so(cluster: Cluster) -> None:
    status, body = await request(cluster.emulator, "DELETE", CONFIGMAPS_URL)
    assert (status, body["reason"]) == (405, "MethodNotAllowed")


# -- deletion, finalizers and garbage collection -----------------------------------------


async def test_deletion_waits_for_finalizers_and_forbids_new_ones(cluster: Cluster) -> None:
    await cluster.create(
        GRID_NETWORKS, {**network("fin"), "metadata": {"name": "fin", "finalizers": ["a/b"]}}
    )
    deleting = await cluster.delete(GRID_NETWORKS, "fin")
    assert deleting["metadata"]["deletionTimestamp"]
    again = await cluster.delete(GRID_NETWORKS, "fin")
    assert again["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]
    assert await cluster.exists(GRID_NETWORKS, "fin")

    with pytest.raises(k8s.ApiException) as raised:
        await cluster.patch(GRID_NETWORKS, "fin", {"metadata": {"finalizers": ["a/b", "c/d"]}})
    assert raised.value.status == 422
    assert "no new finalizers" in json.loads(raised.value.body)["message"]

    await cluster.patch(GRID_NETWORKS, "fin", {"metadata": {"finalizers": []}})
    assert not await cluster.exists(GRID_NETWORKS, "fin")


async def test_deleting_a_built_in_answers_with_a_status(cluster: Cluster) -> None:
    await cluster.call(cluster.core.create_namespaced_config_map, "default", configmap("gone"))
    answer = await cluster.call(cluster.core.delete_namespaced_config_map, "gone", "default")
    assert (answer["kind"], answer["status"]) == ("Status", "Success")
    assert answer["details"]["name"] == "gone"
    with pytest.raises(k8s.ApiException) as raised:
        await cluster.call(cluster.core.read_namespaced_config_map, "gone", "default")
    assert raised.value.status == 404


async def test_delete_preconditions_are_checked(cluster: Cluster) -> None:
    await cluster.create(GRID_NETWORKS, network("pre"))
    status, body = await request(
        cluster.emulator, "DELETE", f"{NETWORKS_URL}/pre", {"preconditions": {"uid": "other"}}
    )
    assert (status, body["reason"]) == (409, "Conflict")
    assert await cluster.exists(GRID_NETWORKS, "pre")


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }


async def test_dependents_are_garbage_collected_when_their_last_owner_goes(
    cluster: Cluster,
) -> None:
    net = await cluster.create(GRID_NETWORKS, network("owner-net"))
    site = await cluster.create(
        GRID_SITES,
        {"metadata": {"name": "owner-site"}, "spec": {"gridNetworkRef": "owner-net"}},
    )
    core = cluster.core
    await cluster.call(
        core.create_namespaced_config_map,
        "default",
        configmap("only-net", ownerReferences=[owner_reference(net)]),
    )
    await cluster.call(
        core.create_namespaced_config_map,
        "default",
        configmap("both", ownerReferences=[owner_reference(net), owner_reference(site)]),
    )
    await cluster.call(core.create_namespaced_config_map, "default", configmap("unowned"))

    await cluster.delete(GRID_NETWORKS, "owner-net")

    remaining = await cluster.call(core.list_namespaced_config_map, "default")
    by_name = {cm.metadata.name: cm for cm in remaining.items}
    assert set(by_name) == {"both", "unowned"}
    assert [ref.name for ref in by_name["both"].metadata.owner_references] == ["owner-site"]

    await cluster.delete(GRID_SITES, "owner-site")
    remaining = await cluster.call(core.list_namespaced_config_map, "default")
    assert [cm.metadata.name for cm in remaining.items] == ["unowned"]


async def test_orphaning_keeps_dependents(cluster: Cluster) -> None:
    net = await cluster.create(GRID_NETWORKS, network("orphaner"))
    await cluster.call(
        cluster.core.create_namespaced_config_map,
        "default",
        configmap("kept", ownerReferences=[owner_reference(net)]),
    )
    await request(
        cluster.emulator, "DELETE", f"{NETWORKS_URL}/orphaner", {"propagationPolicy": "Orphan"}
    )
    kept = await cluster.call(cluster.core.read_namespaced_config_map, "kept", "default")
    assert not kept.metadata.owner_references


# -- lists, watches and selectors --------------------------------------------------------


async def test_a_watch_from_a_list_version_replays_exactly_the_later_changes(
    cluster: Cluster,
) -> None:
    await cluster.create(GRID_NETWORKS, network("before"))
    listed = await cluster.call(
        cluster.custom.list_cluster_custom_object,
        "grid.praxis-proxy.io",
        "v1alpha1",
        "gridnetworks",
    )
    assert [item["metadata"]["name"] for item in listed["items"]] == ["before"]
    await cluster.create(GRID_NETWORKS, network("after"))
    await cluster.patch(GRID_NETWORKS, "before", {"spec": {"region": "x"}})
    await cluster.delete(GRID_NETWORKS, "after")

    since = listed["metadata"]["resourceVersion"]
    events = await watch_events(cluster.emulator, NETWORKS_URL, {"resourceVersion": since}, 3)
    assert summary(events) == [("ADDED", "after"), ("MODIFIED", "before"), ("DELETED", "after")]
    versions = [int(event["object"]["metadata"]["resourceVersion"]) for event in events]
    assert versions == sorted(versions) and versions[0] > int(since)


async def test_a_watch_without_a_version_starts_with_the_current_state(cluster: Cluster) -> None:
    await cluster.create(GRID_NETWORKS, network("existing"))
    stream = asyncio.create_task(watch_events(cluster.emulator, NETWORKS_URL, {}, 2))
    while cluster.emulator.watch_count(GRID_NETWORKS) == 0:
        await asyncio.sleep(0.01)
    await cluster.create(GRID_NETWORKS, network("live"))
    assert summary(await stream) == [("ADDED", "existing"), ("ADDED", "live")]
    await eventually(
        lambda: cluster.emulator.watch_count(GRID_NETWORKS) == 0,
        what="the stream noticing its client hung up",
    )


async def test_initial_events_end_with_an_annotated_bookmark(cluster: Cluster) -> None:
    await cluster.create(GRID_NETWORKS, network("first"))
    params = {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    events = await watch_events(cluster.emulator, NETWORKS_URL, params, 2)
    assert [event["type"] for event in events] == ["ADDED", "BOOKMARK"]
    annotations = events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}


async def test_watches_end_after_timeout_seconds(cluster: Cluster) -> None:
    async with asyncio.timeout(5):
        async with cluster.emulator.get(
            NETWORKS_URL, params={"watch": "true", "timeoutSeconds": "1"}
        ) as response:
            assert await response.read() == b""


async def test_label_selectors_filter_lists_and_watches(cluster: Cluster) -> None:
    core = cluster.core
    await cluster.call(
        core.create_namespaced_config_map,
        "default",
        configmap("grid-a", labels={"app.kubernetes.io/managed-by": "grid", "tier": "a"}),
    )
    await cluster.call(
        core.create_namespaced_config_map, "default", configmap("other", labels={"tier": "b"})
    )
    selected = await cluster.call(
        core.list_namespaced_config_map,
        "default",
        label_selector="app.kubernetes.io/managed-by=grid,tier in (a, c)",
    )
    assert [cm.metadata.name for cm in selected.items] == ["grid-a"]
    unlabelled = await cluster.call(
        core.list_namespaced_config_map, "default", label_selector="!app.kubernetes.io/managed-by"
    )
    assert [cm.metadata.name for cm in unlabelled.items] == ["other"]

    since = selected.metadata.resource_version
    await cluster.call(
        core.patch_namespaced_config_map,
        "other",
        "default",
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": "grid"}}},
        _content_type="application/merge-patch+json",
    )
    await cluster.call(
        core.patch_namespaced_config_map,
        "grid-a",
        "default",
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}},
        _content_type="application/merge-patch+json",
    )
    params = {"resourceVersion": since, "labelSelector": "app.kubernetes.io/managed-by=grid"}
    events = await watch_events(cluster.emulator, CONFIGMAPS_URL, params, 2)
    assert summary(events) == [("ADDED", "other"), ("DELETED", "grid-a")]


@pytest.mark.parametrize(
    "params",
    [
        {"labelSelector": "tier in (a"},
        {"labelSelector": "=value"},
        {"fieldSelector": "spec.region=eu"},
        {"fieldSelector": "metadata.name"},
    ],
)
async def test_malformed_selectors_are_bad_requests(
    cluster: Cluster, params: dict[str, str]
) -> None:
    status, body = await request(cluster.emulator, "GET", CONFIGMAPS_URL, params=params)
    assert (status, body["reason"]) == (400, "BadRequest")
    status, body = await request(
        cluster.emulator, "GET", CONFIGMAPS_URL, params={"watch": "true", **params}
    )
    assert status == 400


async def test_events_can_be_selected_by_involved_object(cluster: Cluster) -> None:
    for name in ("a", "b"):
        await cluster.call(
            cluster.core.create_namespaced_event,
            "default",
            {"metadata": {"generateName": "e-"}, "involvedObject": {"name": name}, "reason": name},
        )
    events = await cluster.events_about("b")
    assert [event.reason for event in events] == ["b"]


# -- custom resource definitions ---------------------------------------------------------


def widget_crd(scope: str = "Namespaced") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }


async def test_creating_a_crd_serves_its_resource_and_deleting_it_removes_the_objects(
    cluster: Cluster,
) -> None:
    status, crd = await request(
        cluster.emulator,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widget_crd(),
    )
    assert status == 201
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}}
    created = await cluster.call(
        cluster.custom.create_namespaced_custom_object,
        "example.com",
        "v1",
        "default",
        "widgets",
        widget,
    )
    assert created["metadata"]["namespace"] == "default"
    status, discovery = await request(cluster.emulator, "GET", "/apis/example.com/v1")
    assert status == 200
    served = {entry["name"]: entry for entry in discovery["resources"]}
    assert set(served) == {"widgets", "widgets/status"}
    assert served["widgets"]["kind"] == "Widget" and served["widgets"]["namespaced"] is True

    status, _ = await request(
        cluster.emulator,
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
    )
    assert status == 200
    status, _ = await request(
        cluster.emulator, "GET", "/apis/example.com/v1/namespaces/default/widgets/w1"
    )
    assert status == 404


async def test_a_malformed_crd_is_refused(cluster: Cluster) -> None:
    crd = widget_crd()
    crd["metadata"]["name"] = "wrong.example.com"
    status, body = await request(
        cluster.emulator, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert cluster.emulator.get_object(CRDS, "wrong.example.com") is None


async def test_objects_created_directly_are_seen_through_the_api(cluster: Cluster) -> None:
    cluster.emulator.create_object(CONFIGMAPS, configmap("seeded"), namespace="default")
    seeded = await cluster.call(cluster.core.read_namespaced_config_map, "seeded", "default")
    assert seeded.data == {"k": "v"}
    with pytest.raises(KeyError, match="not served"):
        cluster.emulator.create_object(
            GRID_NETWORKS.__class__("example.com", "v1", "gadgets"), {"metadata": {"name": "g"}}
        )


async def test_the_grid_resources_are_served_as_the_generated_crds_define_them(
    cluster: Cluster,
) -> None:
    """The harness registers Grid's resources by hand; installing the CRDs from ``crds/``
    must serve them the same way."""
    crd_dir = Path(__file__).resolve().parent.parent / "crds"
    async with GridKubernetesEmulator() as fresh:
        register_builtin_resources(fresh)
        for path in sorted(crd_dir.glob("*.yaml")):
            if path.name == "kustomization.yaml":
                continue
            for crd in load_documents(path):
                fresh.install_crd(crd)
        for resource in (GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS):
            by_hand, from_crd = cluster.emulator.resources[resource], fresh.resources[resource]
            assert (by_hand.kind, by_hand.singular, by_hand.namespaced) == (
                from_crd.kind,
                from_crd.singular,
                from_crd.namespaced,
            )
            assert by_hand.subresources == from_crd.subresources == {"status"}
            assert by_hand.verbs == from_crd.verbs
