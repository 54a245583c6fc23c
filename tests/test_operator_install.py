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
tests/k8s/operator_process.py.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
from kubernetes import client as k8s

from grid.models.network import GridNetwork
from grid.operator.validation import check_manifest
from grid.render.validate import ExpectedScope, validate_overlay
from k8s.control_plane import ControlPlane
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
    SITE,
    VERSION,
    JsonObject,
    OperatorProcess,
    assert_clean_log,
    gone,
    grid_events,
    grid_object,
    reconciled,
    run_install,
    site_certificate_fingerprint,
    start_installed_operator,
    status_managers,
)
from test_operator_support import condition

pytestmark = pytest.mark.timeout(600)

FINALIZER = "grid.praxis-proxy.io/finalizer"
CA_NAMESPACE = "grid-ca"
UNBOUND_NAMESPACE = "elsewhere"  # no RoleBinding for the operator
SITES = ("east-edge", "east-core", "west-edge")
PROVIDERS = ("llama-east-edge", "qwen-east-core", "llama-west-edge", "bedrock-claude", "openai")
NEXT_OVERLAY, NEXT_CONSUMER = "praxis-next-grid-config", "praxis-next-praxis"


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


def check_installed(admin: k8s.ApiClient) -> None:
    """The CRDs are Established, the Deployment's pod would be admitted, and the site's pin,
    read with openssl from the Secret as README does, is the certificate's."""
    extensions = k8s.ApiextensionsV1Api(admin)
    for plural in PLURALS:
        crd = extensions.read_custom_resource_definition(f"{plural}.{GROUP}").to_dict()
        assert condition(crd["status"], "Established")["status"] == "True", plural
    check_pod_admitted(admin)
    site = grid_object(admin, "gridsites", SITE)
    # openssl's colon form, stored as given: the schema accepts it, the operator reads it.
    pin = site["spec"]["trust"]["certFingerprint"]
    assert pin.replace(":", "").lower() == site_certificate_fingerprint(admin)
    assert site["metadata"]["generation"] == 2, "the pin is the spec's second generation"


def check_pod_admitted(admin: k8s.ApiClient) -> None:
    """The Deployment's pod, as the ReplicaSet controller would create it (none runs here),
    passes admission: its ServiceAccount exists and the namespace enforces the `restricted`
    Pod Security level, which only checks pods (a Deployment's template is not warned
    about unless the namespace also sets a `warn` level)."""
    template = k8s.AppsV1Api(admin).read_namespaced_deployment(ACCOUNT, OPERATOR_NAMESPACE)
    assert template.spec is not None
    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(generate_name=f"{ACCOUNT}-"), spec=template.spec.template.spec
    )
    core = k8s.CoreV1Api(admin)
    core.create_namespaced_pod(OPERATOR_NAMESPACE, pod, dry_run="All")
    # The level is enforced: the same pod allowed to escalate privileges is refused.
    assert pod.spec is not None and pod.spec.containers[0].security_context is not None
    pod.spec.containers[0].security_context.allow_privilege_escalation = True
    with pytest.raises(k8s.ApiException) as refused:
        core.create_namespaced_pod(OPERATOR_NAMESPACE, pod, dry_run="All")
    assert refused.value.status == 403 and "PodSecurity" in str(refused.value.body)


def check_statuses(operator: OperatorProcess, admin: k8s.ApiClient) -> JsonObject:
    """Every resource's status, written through the status subresource by the operator for
    the generation the resource is at; the network as it then is."""
    network = operator.until(
        "glb-demo reconciled",
        functools.partial(
            reconciled, admin, "gridnetworks", NETWORK, "ConfigValid", "MembershipReady"
        ),
    )
    valid = condition(network["status"], "ConfigValid")
    assert valid["status"] == "True", valid
    membership = condition(network["status"], "MembershipReady")
    assert membership["status"] == "True" and str(operator.swim_port) in membership["message"], (
        membership
    )
    assert FINALIZER in network["metadata"]["finalizers"]
    for name in SITES:
        site = operator.until(
            f"{name} reconciled", functools.partial(reconciled, admin, "gridsites", name)
        )
        assert status_managers(site) == {"grid-operator"}, name
    for name in PROVIDERS:
        provider = operator.until(
            f"{name} reconciled",
            functools.partial(reconciled, admin, "inferenceproviders", name, "SpecValid"),
        )
        assert condition(provider["status"], "SpecValid")["status"] == "True", name
        assert status_managers(provider) == {"grid-operator"}, name
    # openai's key Secret (examples/secrets) was not created: the operator read it and
    # found it missing, which RBAC allows in grid-system (a 404, not a 403).
    openai = grid_object(admin, "inferenceproviders", "openai")["status"]
    credentials = condition(openai, "CredentialsValid")
    assert credentials["status"] == "False" and "does not exist" in credentials["message"]
    assert status_managers(grid_object(admin, "gridnetworks", NETWORK)) == {"grid-operator"}
    return network


def check_configmaps(operator: OperatorProcess, admin: k8s.ApiClient, network_uid: str) -> None:
    """Both gateways' overlays and praxis-next's gateway configuration, owned by the network."""
    core = k8s.CoreV1Api(admin)
    edge = operator.until(
        "the edge gateway's overlay",
        functools.partial(core.read_namespaced_config_map, EDGE_OVERLAY, MESH_NAMESPACE),
    ).to_dict()
    verdict = validate_overlay(
        edge["data"]["grid-config.json"], ExpectedScope(network=NETWORK, local_site=SITE)
    )
    assert verdict.accepted, verdict.detail
    (owner,) = edge["metadata"]["owner_references"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("GridNetwork", NETWORK, network_uid)
    assert edge["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "grid"
    for name, key in ((NEXT_OVERLAY, "routing-overlay.json"), (NEXT_CONSUMER, "praxis.yaml")):
        written = operator.until(
            f"ConfigMap {name}",
            functools.partial(core.read_namespaced_config_map, name, MESH_NAMESPACE),
        ).to_dict()
        assert key in written["data"], name


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


def assert_refused(api: k8s.ApiClient, unbound_namespace: str) -> None:
    """Each call is answered 403 Forbidden (an answer is never shown: it could be a Secret)."""
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    planted = k8s.V1ObjectMeta(name="planted")
    calls: dict[str, Callable[[], object]] = {
        "read a Secret where it is not bound": lambda: core.read_namespaced_secret(
            "bait", unbound_namespace
        ),
        "read the CA key": lambda: core.read_namespaced_secret("glb-demo-ca-signing", CA_NAMESPACE),
        "list Secrets cluster-wide": core.list_secret_for_all_namespaces,
        "write a Secret where it reads them": lambda: core.create_namespaced_secret(
            MESH_NAMESPACE, k8s.V1Secret(metadata=planted)
        ),
        "write a ConfigMap where it is not bound": lambda: core.create_namespaced_config_map(
            unbound_namespace, k8s.V1ConfigMap(metadata=planted)
        ),
        "delete a GridSite": lambda: custom.delete_cluster_custom_object(
            GROUP, VERSION, "gridsites", SITE
        ),
        "read the CRDs": lambda: k8s.ApiextensionsV1Api(api).list_custom_resource_definition(),
    }
    answers = {}
    for what, call in calls.items():
        try:
            call()
        except k8s.ApiException as error:
            answers[what] = error.status
        else:
            answers[what] = 200
    assert answers == dict.fromkeys(calls, 403)


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
