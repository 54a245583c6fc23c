"""Grid installed in a real kube-apiserver as README.md's "Install in a cluster" says, and
``grid operator`` run with nothing but the permissions ``deploy/`` gives its ServiceAccount.

README's install block runs as written (the kubectl built with the server, ``grid secrets``,
openssl for the pin), less building the image and waiting for the rollout: there is no
kubelet, so no pod ever runs. The operator runs as a process instead, with the environment
the Deployment gives it and a kubeconfig holding only a token of its ServiceAccount (from
the TokenRequest API): every call it makes is checked by the API server's RBAC.

What kmock (tests/k8s/emulator.py) cannot show and this does: the CRDs' schemas, pruning and
defaulting applied to what the operator writes and reads, statuses through the real status
subresource, Events validated by the server, finalizers with no garbage collector behind
them (a ConfigMap is gone only if the operator deleted it), and RBAC enforced. With the
session's API server: what the CRD stores for a network whose SWIM block sets no port.

The two-cluster mesh is in tests/test_operator_install_mesh.py, the helpers both use in
tests/k8s/operator_process.py, the checks of what the operator did (the Helm install's too)
in tests/k8s/install_checks.py.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import cast

import pytest
from kubernetes import client as k8s

from grid.models.network import GridNetwork
from grid.operator.validation import check_manifest
from k8s.control_plane import ControlPlane
from k8s.fixtures import ControlPlaneFactory
from k8s.install_checks import (
    NEXT_CONSUMER,
    NEXT_OVERLAY,
    assert_refused,
    check_configmaps,
    check_installed,
    check_statuses,
)
from k8s.operator_process import (
    EDGE_OVERLAY,
    GROUP,
    LOG_TAIL_CHARACTERS,
    MESH_NAMESPACE,
    NETWORK,
    OPERATOR_NAMESPACE,
    PLURALS,
    SITE,
    VERSION,
    JsonObject,
    OperatorProcess,
    assert_clean_log,
    gone,
    grid_events,
    grid_object,
    run_install,
    start_installed_operator,
)

pytestmark = pytest.mark.timeout(600)

UNBOUND_NAMESPACE = "elsewhere"  # no RoleBinding for the operator


# -- the tests ---------------------------------------------------------------------------------


def test_the_readme_install_runs_the_operator_with_only_the_shipped_rbac(
    control_plane_factory: ControlPlaneFactory, tmp_path: Path
) -> None:
    # A cluster of its own: README installs into a cluster without Grid, and the session's
    # API server is other tests' too.
    control_plane = control_plane_factory("install")
    output = run_install(control_plane)
    # kubectl passes on the server's warnings: a deprecated API, a field it does not know.
    warnings = [line for line in output.splitlines() if line.startswith("Warning:")]
    assert warnings == [], "\n".join(warnings)
    admin = control_plane.admin
    check_installed(admin)

    operator, token = start_installed_operator(control_plane, tmp_path)
    with operator:
        operator.until("the operator answers /healthz", operator.healthy)
        network = check_statuses(operator, admin)
        check_configmaps(operator, admin, network["metadata"]["uid"])
        check_listings(control_plane, operator, admin)

        # The token is the operator's: it reads what it reconciles, and nothing RBAC does
        # not grant (kmock would have served every one of these calls).
        control_plane.create_namespace(UNBOUND_NAMESPACE)
        bait = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="bait"), string_data={"key": "bait"})
        k8s.CoreV1Api(admin).create_namespaced_secret(UNBOUND_NAMESPACE, bait)
        with control_plane.api_client(token) as as_operator:
            assert grid_object(as_operator, "gridsites", SITE)["metadata"]["name"] == SITE
            assert_refused(as_operator, UNBOUND_NAMESPACE)

        check_deletion(operator, admin)
        assert operator.stop() == 0, operator.log_text()[-LOG_TAIL_CHARACTERS:]
    assert_clean_log(operator)


def check_listings(
    control_plane: ControlPlane, operator: OperatorProcess, admin: k8s.ApiClient
) -> None:
    """What docs/install.md and docs/operator.md tell a user to run shows the statuses and
    Events: `kubectl get grid` (the CRDs' category and printer columns), and the Events of
    a resource listed in the operator's namespace, where the server accepted them."""
    listing = control_plane.kubectl("get", "grid").stdout
    custom = k8s.CustomObjectsApi(admin)
    for plural in PLURALS:
        found = cast(JsonObject, custom.list_cluster_custom_object(GROUP, VERSION, plural))
        for item in found["items"]:
            name, phase = item["metadata"]["name"], item["status"]["phase"]
            (row,) = [line for line in listing.splitlines() if f"/{name} " in line]
            assert f" {phase} " in row, row
    events = operator.until("Events about Grid's resources", functools.partial(grid_events, admin))
    assert {event.reporting_component for event in events} == {"grid-operator"}
    about_site = control_plane.kubectl(
        "-n", OPERATOR_NAMESPACE, "get", "events", f"--field-selector=involvedObject.name={SITE}"
    ).stdout
    assert "gridsite/east-edge" in about_site, about_site
    # kopf posts them with the operator's namespace in involvedObject, so `kubectl describe`
    # (which looks for a cluster-scoped object's Events with no namespace) lists none.
    described = control_plane.kubectl("describe", "gridsite", SITE).stdout
    assert re.search(r"^Events:\s+<none>$", described, re.MULTILINE), described[-300:]


def check_deletion(operator: OperatorProcess, admin: k8s.ApiClient) -> None:
    """A provider (no finalizer) goes at once; the network's finalizer holds it until the
    operator deleted its ConfigMaps, which nothing else would: no garbage collector runs."""
    custom, core = k8s.CustomObjectsApi(admin), k8s.CoreV1Api(admin)
    custom.delete_cluster_custom_object(GROUP, VERSION, "inferenceproviders", "bedrock-claude")
    operator.until(
        "bedrock-claude deleted",
        functools.partial(
            gone, functools.partial(grid_object, admin, "inferenceproviders", "bedrock-claude")
        ),
    )
    custom.delete_cluster_custom_object(GROUP, VERSION, "gridnetworks", NETWORK)
    operator.until(
        "glb-demo deleted",
        functools.partial(gone, functools.partial(grid_object, admin, "gridnetworks", NETWORK)),
    )
    for name in (EDGE_OVERLAY, NEXT_OVERLAY, NEXT_CONSUMER):
        assert gone(functools.partial(core.read_namespaced_config_map, name, MESH_NAMESPACE)), name


def test_a_network_without_a_swim_port_is_stored_without_one(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    # Server-side, as other tests of the session's API server apply the CRDs.
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-k", "crds")
    control_plane.kubectl("wait", "--for=condition=established", f"crd/gridnetworks.{GROUP}")
    name = f"{kube_namespace}-network"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GridNetwork",
        "metadata": {"name": name},
        "spec": {"swim": {"probeInterval": "1s"}},
    }
    custom = k8s.CustomObjectsApi(control_plane.admin)
    created = custom.create_cluster_custom_object(GROUP, VERSION, "gridnetworks", body)
    stored = cast(JsonObject, created)
    custom.delete_cluster_custom_object(GROUP, VERSION, "gridnetworks", name)
    # What the operator reads (grid.operator.ports takes a port that is set as asked for).
    network = check_manifest(stored).resource
    assert isinstance(network, GridNetwork)
    assert "port" not in network.spec.swim.model_fields_set, stored["spec"]["swim"]
