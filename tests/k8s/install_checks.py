"""What an installed ``grid operator`` must have done, checked through the admin's client:
shared by README's install (tests/test_operator_install.py) and the Helm install
(tests/test_helm_install.py), which install examples/mesh the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from kubernetes import client as k8s

from grid.render.validate import ExpectedScope, validate_overlay

from .operator_process import (
    ACCOUNT,
    EDGE_OVERLAY,
    GROUP,
    MESH_NAMESPACE,
    NETWORK,
    OPERATOR_NAMESPACE,
    PLURALS,
    SITE,
    VERSION,
    JsonObject,
    OperatorProcess,
    grid_object,
    reconciled,
    site_certificate_fingerprint,
    status_managers,
)
from .operator_support import condition

FINALIZER = "grid.praxis-proxy.io/finalizer"
CA_NAMESPACE = "grid-ca"
SITES = ("east-edge", "east-core", "west-edge")
PROVIDERS = ("llama-east-edge", "qwen-east-core", "llama-west-edge", "bedrock-claude", "openai")
NEXT_OVERLAY, NEXT_CONSUMER = "praxis-next-grid-config", "praxis-next-praxis"


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
