"""Fields only a newer release knows: the operator drops them, as the API server prunes fields
its schema does not name, reconciles the rest and says which it ignored (docs/upgrading.md:
an operator of release N-1 reconciles resources written for release N). The pruning itself,
the check of a received manifest, the Events owed, and one operator end to end (on kmock,
which keeps any field, and on a real API server given a newer release's CRDs). The
standalone agent's loader, reading what a person typed, still refuses such a field."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from grid import __version__
from grid.errors import InvalidResourceError
from grid.models.crd import crd_for_kind
from grid.models.pruning import prune_custom_resource, prune_unknown_fields
from grid.models.resources import load_resource
from grid.operator.cache import ResourceCache
from grid.operator.operator import _targets
from grid.operator.spec_events import FIELDS_IGNORED, SPEC_REJECTED, SpecEvents
from grid.operator.validation import check_manifest
from k8s.cluster import Cluster
from k8s.emulator import (
    GRID_GROUP,
    GRID_NETWORKS,
    GRID_SITES,
    GRID_VERSION,
    INFERENCE_PROVIDERS,
)
from k8s.operator_support import (
    NAMESPACE,
    condition,
    network_body,
    operator_for,
    overlay_names,
    prepare_namespaces,
    provider_body,
    put_trust,
    site_body,
    status_of,
    wait_condition,
    wait_phase,
)
from k8s.real_cluster import RealCluster
from k8s.waiting import eventually
from support.servers import ProviderEndpoint

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "egress": {
            "type": "object",
            "properties": {"address": {"type": "string"}},
            "required": ["address"],
        },
        "models": {
            "type": "array",
            "items": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "selectors": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {"match": {"type": "string"}},
            },
        },
        "opaque": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}},
        },
        "anything": {"type": "object", "additionalProperties": True},
        "cost": {"x-kubernetes-int-or-string": True},
    },
}


# --- the pruning -----------------------------------------------------------------------------


def test_fields_the_schema_does_not_name_are_dropped_at_any_depth_and_listed() -> None:
    value = {
        "name": "a",
        "newTop": {"deep": [1, 2]},
        "egress": {"address": "x:1", "fooBar": True},
        "models": [{"name": "m"}, {"name": "n", "newThing": "secret-value"}],
        "selectors": {"east": {"match": "x", "weight": 3}},
    }
    original = copy.deepcopy(value)
    pruned, paths = prune_unknown_fields(value, SCHEMA)
    assert pruned == {
        "name": "a",
        "egress": {"address": "x:1"},
        "models": [{"name": "m"}, {"name": "n"}],
        "selectors": {"east": {"match": "x"}},
    }
    # Document order; fields are named, values never quoted.
    assert paths == (
        "newTop",
        "egress.fooBar",
        "models[1].newThing",
        "selectors.east.weight",
    )
    assert "secret-value" not in repr(paths)
    assert value == original, "the input is not changed"


def test_maps_and_preserved_objects_keep_their_fields() -> None:
    value = {
        "labels": {"team": "a", "any-key": "b"},
        "opaque": {"free": {"x": 1}, "known": {"a": "kept", "extra": 1}},
        "anything": {"whatever": [1]},
        "cost": "0.25",
    }
    pruned, paths = prune_unknown_fields(value, SCHEMA)
    assert pruned == {
        "labels": {"team": "a", "any-key": "b"},
        # Unknown fields are kept where the schema preserves them, and pruned again below
        # a property it names.
        "opaque": {"free": {"x": 1}, "known": {"a": "kept"}},
        "anything": {"whatever": [1]},
        "cost": "0.25",
    }
    assert paths == ("opaque.known.extra",)


def test_a_value_of_the_wrong_type_is_left_for_the_schema_check() -> None:
    value = {"egress": "not-an-object", "models": {"name": "m"}, "name": {"nested": 1}}
    pruned, paths = prune_unknown_fields(value, SCHEMA)
    assert pruned == value and paths == ()


def test_a_custom_resource_keeps_its_metadata_and_loses_unknown_top_level_fields() -> None:
    crd = crd_for_kind("GridSite")
    body = site_body("site-a", "mesh")
    body["metadata"]["anything"] = {"kept": True}
    body["newTopLevel"] = 1
    body["spec"]["placement"] = "rack-1"
    pruned, paths = prune_custom_resource(body, crd)
    assert paths == ("spec.placement", "newTopLevel")
    assert pruned["metadata"] == body["metadata"]
    assert "placement" not in pruned["spec"] and "newTopLevel" not in pruned
    # A version the CRD does not serve is not pruned: the schema check refuses it.
    other = {**body, "apiVersion": "grid.praxis-proxy.io/v9"}
    assert prune_custom_resource(other, crd) == (other, ())


# --- the check of a received manifest ------------------------------------------------------


def newer_site() -> dict[str, Any]:
    body = site_body("site-a", "mesh", egress="site-a.example:8443")
    body["spec"]["placement"] = {"rack": "r1"}
    body["spec"]["egress"]["fooBar"] = "x"
    return body


def test_the_operator_reconciles_a_newer_release_s_resource_with_the_fields_it_knows() -> None:
    checked = check_manifest(newer_site())
    assert checked.resource is not None and checked.problems == ()
    assert checked.ignored == ("spec.egress.fooBar", "spec.placement")
    provider = provider_body("llama-a", "mesh", site="site-a", endpoint="http://llama:8000")
    provider["spec"]["models"][0]["newThing"] = 1
    assert check_manifest(provider).ignored == ("spec.models[0].newThing",)
    # The agent's loader reads files a person types: there a typo stays an error.
    with pytest.raises(InvalidResourceError, match="unknown field"):
        load_resource(newer_site())


def test_everything_but_unknown_fields_stays_strict() -> None:
    wrong_type = newer_site()
    wrong_type["spec"]["region"] = 3
    checked = check_manifest(wrong_type)
    assert checked.resource is None
    assert checked.problems == ("spec.region: must be of type string (CRD schema)",)
    assert checked.ignored == ("spec.egress.fooBar", "spec.placement")
    bad_enum = newer_site()
    bad_enum["spec"]["egress"]["tlsMode"] = "quantum"
    assert check_manifest(bad_enum).problems[0].startswith("spec.egress.tlsMode: must be one of")
    missing = newer_site()
    del missing["spec"]["gridNetworkRef"]
    assert check_manifest(missing).problems == (
        "spec.gridNetworkRef: required field is missing (CRD schema)",
    )
    neither = newer_site()
    del neither["spec"]["egress"]["address"]
    assert check_manifest(neither).problems == (
        "spec.egress: egress needs exactly one of address, or from (to read the address from "
        "a Service or a Gateway)",
    )
    # The status is Grid's own output, not checked (nor pruned) as before.
    with_status = {**newer_site(), "status": {"phase": "Whatever", "newStatus": 1}}
    assert check_manifest(with_status).ignored == ("spec.egress.fooBar", "spec.placement")


def test_a_gateway_ref_with_a_newer_field_still_names_its_configmaps() -> None:
    spec = network_body("mesh", port=7946)["spec"]
    plain = _targets(spec)
    assert plain
    for ref in spec["gatewayRefs"]:
        ref["newThing"] = True
    assert _targets(spec) == plain


# --- the Events owed -------------------------------------------------------------------------


def test_ignored_fields_are_told_once_per_distinct_set() -> None:
    cache = ResourceCache()
    told = SpecEvents(release="9.8.7")
    body = newer_site()
    entry = cache.apply(body)
    assert entry is not None
    (event,) = told.untold(entry)
    assert (event.type.value, event.reason) == ("Warning", FIELDS_IGNORED)
    assert event.message == (
        "fields unknown to release 9.8.7 ignored (a newer release's?): "
        "spec.egress.fooBar, spec.placement"
    )
    assert told.untold(entry) == []
    # The same fields in another order are the same set.
    entry.ignored = tuple(reversed(entry.ignored))
    assert told.untold(entry) == []
    # A refusal is told besides, and a new set of fields again.
    body["spec"]["region"] = 3
    body["spec"]["egress"]["another"] = 1
    entry = cache.apply(body)
    assert entry is not None
    assert [event.reason for event in told.untold(entry)] == [SPEC_REJECTED, FIELDS_IGNORED]
    # Gone, then back: told again.
    entry.ignored = ()
    assert told.untold(entry) == []
    entry.ignored = ("spec.placement",)
    assert [event.reason for event in told.untold(entry)] == [FIELDS_IGNORED]


def test_a_long_list_of_ignored_fields_is_cut_short() -> None:
    entry = ResourceCache().apply(newer_site())
    assert entry is not None
    entry.ignored = tuple(f"spec.field{i}" for i in range(25))
    (event,) = SpecEvents(release="1.0.0").untold(entry)
    assert event.message.endswith("spec.field19 (and 5 more)")


# --- the operator, end to end --------------------------------------------------------------


# Fields a newer release adds to this release's schemas (by path; "[]" is a list's items).
NEWER_FIELDS: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {
    "GridSite": {
        ("spec", "placement"): {"type": "string"},
        ("spec", "trust", "rotationPolicy"): {
            "type": "object",
            "properties": {"days": {"type": "integer"}},
        },
    },
    "InferenceProvider": {
        ("spec", "priorityClass"): {"type": "string"},
        ("spec", "models", "[]", "quantization"): {"type": "string"},
    },
}


def newer_release_crd(kind: str) -> dict[str, Any]:
    """This release's CRD for ``kind`` with :data:`NEWER_FIELDS` in its schema."""
    crd = copy.deepcopy(crd_for_kind(kind))
    for version in crd["spec"]["versions"]:
        for path, schema in NEWER_FIELDS[kind].items():
            node = version["schema"]["openAPIV3Schema"]
            for step in path[:-1]:
                node = node["items"] if step == "[]" else node["properties"][step]
            node["properties"][path[-1]] = schema
    return crd


async def keeps_placement(cluster: RealCluster) -> bool:
    """Whether the server stores a GridSite's spec.placement (a dry run)."""
    body = site_body("schema-probe", "mesh")
    body["spec"]["placement"] = "rack-1"
    stored = await cluster.call(
        cluster.custom.create_cluster_custom_object,
        GRID_GROUP,
        GRID_VERSION,
        "gridsites",
        body,
        dry_run="All",
    )
    return "placement" in stored["spec"]


@contextlib.asynccontextmanager
async def newer_release_schemas(cluster: Cluster) -> AsyncIterator[None]:
    """A cluster that keeps the fields of :data:`NEWER_FIELDS`: kmock keeps any field (it
    has no schemas); a real API server is given a newer release's CRDs until the block ends,
    then this release's again (it would prune the fields otherwise)."""
    if not isinstance(cluster, RealCluster):
        yield
        return
    extensions = k8s.ApiextensionsV1Api(cluster.api)
    installed = []
    for kind in NEWER_FIELDS:
        name = crd_for_kind(kind)["metadata"]["name"]
        found = await cluster.call(extensions.read_custom_resource_definition, name)
        spec = cluster.api.sanitize_for_serialization(found.spec)
        installed.append({**crd_for_kind(kind), "metadata": {"name": name}, "spec": spec})
    await apply(cluster, [newer_release_crd(kind) for kind in NEWER_FIELDS])
    await eventually(lambda: keeps_placement(cluster), what="the newer schemas served")
    try:
        yield
    finally:
        await apply(cluster, installed)
        await eventually(
            lambda: _not(keeps_placement(cluster)), what="this release's schemas served again"
        )


async def apply(cluster: RealCluster, manifests: list[dict[str, Any]]) -> None:
    """``kubectl apply`` as the admin (server-side, taking over whatever fields it sets)."""
    await asyncio.to_thread(
        cluster.control_plane.kubectl,
        *("apply", "--server-side", "--force-conflicts", "-f", "-"),
        stdin=yaml.safe_dump_all(manifests),
    )


async def _not(check: Awaitable[bool]) -> bool:
    return not await check


async def _ignored_messages(cluster: Cluster, name: str) -> list[str]:
    events = await cluster.events_about(name, NAMESPACE)
    return [event.message for event in events if event.reason == FIELDS_IGNORED]


@pytest.mark.both_backends
@pytest.mark.timeout(60)
async def test_an_operator_reconciles_resources_with_a_newer_release_s_fields(
    cluster: Cluster, endpoint: ProviderEndpoint
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, "site-a")
    async with newer_release_schemas(cluster), operator_for(cluster, "site-a") as running:
        await cluster.create(GRID_NETWORKS, network_body("mesh", port=running.swim_port))
        # Stored as a cluster with a newer release's CRDs keeps them.
        site = site_body("site-a", "mesh")
        site["spec"]["placement"] = "rack-1"
        site["spec"]["trust"] = {"rotationPolicy": {"days": 30}}
        await cluster.create(GRID_SITES, site)
        provider = provider_body("llama-a", "mesh", site="site-a", endpoint=endpoint.base_url)
        provider["spec"]["priorityClass"] = "gold"
        provider["spec"]["models"][0]["quantization"] = "fp8"
        await cluster.create(INFERENCE_PROVIDERS, provider)

        status = await wait_phase(cluster, INFERENCE_PROVIDERS, "llama-a", "Available")
        assert condition(status, "SpecValid")["status"] == "True"
        await wait_condition(cluster, GRID_SITES, "site-a", "SpecValid", "True")
        await wait_phase(cluster, GRID_NETWORKS, "mesh", "Active")

        release = f"fields unknown to release {__version__} ignored (a newer release's?): "
        (message,) = await eventually(
            lambda: _ignored_messages(cluster, "llama-a"), what="a FieldsIgnored Event"
        )
        assert message == release + "spec.models[0].quantization, spec.priorityClass"
        (message,) = await eventually(
            lambda: _ignored_messages(cluster, "site-a"), what="a FieldsIgnored Event"
        )
        assert message == release + "spec.placement, spec.trust.rotationPolicy"
        # The site is the engine's (its status is the engine's view, not a refusal's), and
        # the provider it selects is routed.
        site_status = await status_of(cluster, GRID_SITES, "site-a")
        assert condition(site_status, "Ready")["reason"] != "SpecRejected"
        engine = running.runtime("mesh").engine
        assert engine is not None and ("GridSite", "site-a") in engine.statuses()
        assert await eventually(lambda: overlay_names(cluster), what="the overlay") == ["llama"]
        # Told once, not on every pass.
        passes = running.runtime("mesh").passes
        await eventually(
            lambda: running.runtime("mesh").passes >= passes + 3, what="three more passes"
        )
        assert len(await _ignored_messages(cluster, "llama-a")) == 1
        assert len(await _ignored_messages(cluster, "site-a")) == 1
