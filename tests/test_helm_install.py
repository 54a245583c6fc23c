"""Grid installed with Helm into a real kube-apiserver as README.md's "Or install with Helm"
block says (docs/install.md's "Install with Helm" block is its first commands), ``grid
operator`` run with nothing but the permissions the chart gives its ServiceAccount, then
docs/install.md's ``helm upgrade`` binding one more namespace, and ``helm uninstall``.

The block runs as written (the helm and kubectl built with the server, ``grid secrets``,
openssl for the pin), less waiting for the rollout: there is no kubelet, so no pod ever
runs. The operator runs as a process instead (tests/k8s/operator_process.py), with a
kubeconfig holding only a TokenRequest token of the chart's ServiceAccount: every call it
makes is checked by the API server's RBAC, as the chart's templates made it. The checks of
what the operator wrote are those of the kustomize install (tests/k8s/install_checks.py).

A cluster of its own: the chart makes cluster-scoped objects with fixed names (the
ClusterRoles, the ClusterRoleBinding) and installs the CRDs, which the session's API server
shares with other tests.
"""

from __future__ import annotations

import functools
import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import pytest
from kubernetes import client as k8s

from k8s.control_plane import REPO, ControlPlane
from k8s.fixtures import ControlPlaneFactory
from k8s.install_checks import (
    CA_NAMESPACE,
    PROVIDERS,
    SITES,
    assert_refused,
    check_configmaps,
    check_installed,
    check_statuses,
)
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
    WAIT_S,
    JsonObject,
    assert_clean_log,
    doc_block,
    gone,
    grid_object,
    run_shell,
    start_installed_operator,
)
from k8s.operator_support import condition
from support.helm import Helm, helm_binary

pytestmark = pytest.mark.timeout(600)

T = TypeVar("T")

RELEASE = "grid"
IMAGE = "registry.example.com/platform/grid:0.2.0"  # the block's image.repository, the tag
GATEWAYS = "gateways"  # docs/install.md's example of a namespace bound by `helm upgrade`
UPGRADE_SET = f"--set 'watchedNamespaces={{{MESH_NAMESPACE},{GATEWAYS}}}'"
ROLLOUT = "kubectl -n grid-example rollout status"  # needs a kubelet
NAMESPACED_ROLE = "grid-operator-namespaced"
ACCOUNT_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{ACCOUNT}"


# -- the documented commands -------------------------------------------------------------------


def commands(block: str) -> list[str]:
    """A shell block's commands, each on one line (continuations joined)."""
    joined = block.replace("\\\n", " ").splitlines()
    return [" ".join(line.split()) for line in joined if line.strip()]


def readme_helm_block() -> str:
    """README's "Or install with Helm" shell block."""
    section = (REPO / "README.md").read_text(encoding="utf-8").split("\nOr install with Helm", 1)
    assert len(section) == 2, "README.md has no 'Or install with Helm' paragraph"
    return section[1].split("```sh\n", 1)[1].split("\n```", 1)[0]


def helm_exports(helm: Helm) -> str:
    """Shell lines keeping helm's cache, configuration and data in the test's folder."""
    return "".join(
        f"export {name}={shlex.quote(value)}\n" for name, value in helm.environment().items()
    )


def install_script(helm: Helm) -> str:
    """README's block less the rollout; docs/install.md's Helm block says the same."""
    block = readme_helm_block()
    lines = block.splitlines()
    kept = [line for line in lines if not line.startswith(ROLLOUT)]
    assert len(lines) - len(kept) == 1, f"unexpected install block:\n{block}"
    # docs/install.md's block (then its steps 4 and 6) is README's, command for command.
    guide = commands(doc_block(REPO / "docs" / "install.md", "## Install with Helm"))
    remaining = iter(commands(block))
    assert all(command in remaining for command in guide), "README and docs/install.md differ"
    return helm_exports(helm) + "\n".join(kept) + "\n"


def upgrade_script(helm: Helm) -> str:
    """docs/install.md's "Upgrading" block (the chart's CRDs, then `helm upgrade`), binding
    one more namespace with the `--set` its text gives."""
    guide = REPO / "docs" / "install.md"
    assert f"`{UPGRADE_SET}`" in guide.read_text(encoding="utf-8"), "the guide's --set changed"
    block = doc_block(guide, "### Upgrading")
    lines = [
        f"{line} {UPGRADE_SET}" if line.startswith("helm upgrade ") else line
        for line in block.splitlines()
    ]
    assert sum(line.endswith(UPGRADE_SET) for line in lines) == 1, f"unexpected block:\n{block}"
    return helm_exports(helm) + "\n".join(lines) + "\n"


def notes_namespaces(output: str) -> list[str]:
    """The namespaces the chart's NOTES say the operator may use."""
    listed = output.split("It may use ConfigMaps, Secrets and Events in:\n", 1)[1]
    return [line.strip() for line in listed.split("\nBind more namespaces", 1)[0].splitlines()]


# -- the test ----------------------------------------------------------------------------------


def test_the_helm_install_runs_the_operator_with_only_the_charts_rbac(
    control_plane_factory: ControlPlaneFactory, tmp_path: Path
) -> None:
    control_plane = control_plane_factory("helm")
    helm = Helm(helm_binary(), tmp_path / "helm-home")
    admin = control_plane.admin
    output = run_shell(install_script(helm), control_plane.admin_kubeconfig, control_plane)
    # kubectl and helm pass on the server's warnings: a deprecated API, an unknown field.
    warnings = [line for line in output.splitlines() if line.lower().startswith("warning")]
    assert warnings == [], "\n".join(warnings)
    assert notes_namespaces(output) == [OPERATOR_NAMESPACE, MESH_NAMESPACE]
    check_installed(admin)  # the CRDs from the chart's crds/, the pod admitted, the pin
    check_release(helm, control_plane, revision=1, watched=[MESH_NAMESPACE])

    # The namespace the upgrade binds exists first (a RoleBinding needs it), and until then
    # the operator may not touch it.
    control_plane.kubectl("create", "namespace", GATEWAYS)
    bait = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="bait"), string_data={"key": "bait"})
    k8s.CoreV1Api(admin).create_namespaced_secret(GATEWAYS, bait)
    operator, token = start_installed_operator(control_plane, tmp_path)
    with operator:
        operator.until("the operator answers /healthz", operator.healthy)
        network = check_statuses(operator, admin)
        check_configmaps(operator, admin, network["metadata"]["uid"])
        with control_plane.api_client(token) as as_operator:
            assert grid_object(as_operator, "gridsites", SITE)["metadata"]["name"] == SITE
            assert_refused(as_operator, GATEWAYS)

        # The operator keeps running through the upgrade: its RBAC is patched, never gone.
        output = run_shell(upgrade_script(helm), control_plane.admin_kubeconfig, control_plane)
        assert notes_namespaces(output) == [OPERATOR_NAMESPACE, MESH_NAMESPACE, GATEWAYS]
        check_release(helm, control_plane, revision=2, watched=[MESH_NAMESPACE, GATEWAYS])
        with control_plane.api_client(token) as as_operator:
            operator.until(
                f"the token lists ConfigMaps in {GATEWAYS}",
                functools.partial(lists_config_maps, as_operator, GATEWAYS),
            )
        assert access(admin) == {
            ("create", "configmaps", GATEWAYS): True,
            ("get", "secrets", GATEWAYS): True,
            ("create", "secrets", GATEWAYS): False,
            ("get", "secrets", CA_NAMESPACE): False,
            ("list", "secrets", None): False,
            ("list", "gridsites", None): True,
        }
        assert operator.stop() == 0, operator.log_text()[-LOG_TAIL_CHARACTERS:]
    assert_clean_log(operator)

    helm.run(
        "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE,
        kubeconfig=control_plane.admin_kubeconfig,
    )  # fmt: skip
    check_uninstalled(helm, control_plane, token)


# -- the checks --------------------------------------------------------------------------------


def check_release(
    helm: Helm, control_plane: ControlPlane, *, revision: int, watched: list[str]
) -> None:
    """The release is deployed at ``revision`` with the values given (an upgrade with
    ``--reset-then-reuse-values`` keeps the install's image), and made the Deployment with
    that image and one RoleBinding in its own namespace and each watched one."""
    where = ("--namespace", OPERATOR_NAMESPACE, "--output", "json")
    status = json.loads(
        helm.run("status", RELEASE, *where, kubeconfig=control_plane.admin_kubeconfig).stdout
    )
    assert (status["info"]["status"], status["version"]) == ("deployed", revision)
    values = json.loads(
        helm.run("get", "values", RELEASE, *where, kubeconfig=control_plane.admin_kubeconfig).stdout
    )
    repository = IMAGE.rsplit(":", 1)[0]
    assert values == {"image": {"repository": repository}, "watchedNamespaces": watched}
    apps = k8s.AppsV1Api(control_plane.admin)
    deployment = apps.read_namespaced_deployment(ACCOUNT, OPERATOR_NAMESPACE).to_dict()
    assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE
    rbac = k8s.RbacAuthorizationV1Api(control_plane.admin)
    bindings = rbac.list_role_binding_for_all_namespaces(
        label_selector=f"app.kubernetes.io/instance={RELEASE}"
    ).to_dict()
    found = sorted(
        (item["metadata"]["namespace"], item["metadata"]["name"], item["role_ref"]["name"], who)
        for item in bindings["items"]
        for who in (subject["name"] for subject in item["subjects"])
    )
    assert found == sorted(
        (namespace, ACCOUNT, NAMESPACED_ROLE, ACCOUNT)
        for namespace in (OPERATOR_NAMESPACE, *watched)
    )


def lists_config_maps(api: k8s.ApiClient, namespace: str) -> bool:
    """Whether ``api`` may list ConfigMaps in ``namespace`` (a 403 raises: not yet)."""
    return k8s.CoreV1Api(api).list_namespaced_config_map(namespace).items is not None


def access(admin: k8s.ApiClient) -> dict[tuple[str, str, str | None], bool]:
    """What RBAC allows the chart's ServiceAccount, asked with SubjectAccessReviews."""
    asked: list[tuple[str, str, str | None]] = [
        ("create", "configmaps", GATEWAYS),
        ("get", "secrets", GATEWAYS),
        ("create", "secrets", GATEWAYS),
        ("get", "secrets", CA_NAMESPACE),
        ("list", "secrets", None),
        ("list", "gridsites", None),
    ]
    authorization = k8s.AuthorizationV1Api(admin)
    answers = {}
    for verb, resource, namespace in asked:
        review = k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(
                user=ACCOUNT_USER,
                groups=["system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_NAMESPACE}"],
                resource_attributes=k8s.V1ResourceAttributes(
                    verb=verb,
                    resource=resource,
                    namespace=namespace,
                    group=GROUP if resource.startswith("grid") else "",
                ),
            )
        )
        answer = authorization.create_subject_access_review(review)
        answers[verb, resource, namespace] = bool(answer.status and answer.status.allowed)
    return answers


def check_uninstalled(helm: Helm, control_plane: ControlPlane, token: str) -> None:
    """`helm uninstall` removes the operator, its ServiceAccount and RBAC, but leaves the
    CRDs, every Grid resource, what the operator wrote, the Secrets and the namespaces
    (docs/install.md, "Upgrading")."""
    admin = control_plane.admin
    releases = helm.run(
        "list", "--namespace", OPERATOR_NAMESPACE, "--short",
        kubeconfig=control_plane.admin_kubeconfig,
    ).stdout  # fmt: skip
    assert releases.strip() == ""
    core, apps = k8s.CoreV1Api(admin), k8s.AppsV1Api(admin)
    rbac = k8s.RbacAuthorizationV1Api(admin)
    removed: dict[str, Callable[[], object]] = {
        "the Deployment": lambda: apps.read_namespaced_deployment(ACCOUNT, OPERATOR_NAMESPACE),
        "the Service": lambda: core.read_namespaced_service(ACCOUNT, OPERATOR_NAMESPACE),
        "the ServiceAccount": lambda: core.read_namespaced_service_account(
            ACCOUNT, OPERATOR_NAMESPACE
        ),
        "the ClusterRole": lambda: rbac.read_cluster_role(ACCOUNT),
        "the namespaced ClusterRole": lambda: rbac.read_cluster_role(NAMESPACED_ROLE),
        "the ClusterRoleBinding": lambda: rbac.read_cluster_role_binding(ACCOUNT),
        **{
            f"the RoleBinding in {namespace}": functools.partial(
                rbac.read_namespaced_role_binding, ACCOUNT, namespace
            )
            for namespace in (OPERATOR_NAMESPACE, MESH_NAMESPACE, GATEWAYS)
        },
    }
    assert [what for what, read in removed.items() if not gone(read)] == []

    extensions = k8s.ApiextensionsV1Api(admin)
    for plural in PLURALS:
        crd = extensions.read_custom_resource_definition(f"{plural}.{GROUP}").to_dict()
        assert condition(crd["status"], "Established")["status"] == "True", plural
    custom = k8s.CustomObjectsApi(admin)
    names = {
        plural: sorted(
            item["metadata"]["name"]
            for item in cast(JsonObject, custom.list_cluster_custom_object(GROUP, VERSION, plural))[
                "items"
            ]
        )
        for plural in PLURALS
    }
    assert names == {
        "gridnetworks": [NETWORK],
        "gridsites": sorted(SITES),
        "inferenceproviders": sorted(PROVIDERS),
    }
    assert grid_object(admin, "gridnetworks", NETWORK)["status"]["phase"]
    kept: dict[str, Callable[[], object]] = {
        "the edge gateway's overlay": lambda: core.read_namespaced_config_map(
            EDGE_OVERLAY, MESH_NAMESPACE
        ),
        "the site certificate": lambda: core.read_namespaced_secret(
            "glb-demo-site-tls", MESH_NAMESPACE
        ),
        "the CA signing Secret": lambda: core.read_namespaced_secret(
            "glb-demo-ca-signing", CA_NAMESPACE
        ),
        "the release namespace": lambda: core.read_namespace(OPERATOR_NAMESPACE),
    }
    # gone() returns a bool: nothing read (a Secret) reaches a message.
    assert [what for what, read in kept.items() if gone(read)] == []
    # The token's ServiceAccount is gone: the server no longer accepts the token.
    eventually(
        "the operator's token refused", functools.partial(unauthorized, control_plane, token)
    )
    assert not any(access(admin).values())


def unauthorized(control_plane: ControlPlane, token: str) -> bool:
    """Whether the server answers ``token`` 401 Unauthorized."""
    with control_plane.api_client(token) as api:
        try:
            k8s.CoreV1Api(api).list_namespaced_config_map(OPERATOR_NAMESPACE)
        except k8s.ApiException as error:
            return bool(error.status == 401)
    return False


def eventually(what: str, check: Callable[[], T], timeout: float = WAIT_S) -> T:
    """Poll ``check`` until it returns a truthy value, with no operator running."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.25)
    return result
