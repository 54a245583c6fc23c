"""Grid as the operator tests find it installed: the CRDs, the operator's namespace, its
ServiceAccount and the RBAC ``deploy/base`` ships, with one gateway namespace bound as
docs/install.md says. kmock's tests audit the operator's requests against these rules
(:func:`shipped_permissions`); a real API server has them installed (:func:`install_grid`)
and enforces them.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .control_plane import REPO, ControlPlane
from .emulator import GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS
from .kustomize import Manifest, build, installable_copy
from .rbac import Permissions

NAMESPACE = "grid-system"
"""deploy/base's namespace: the operator's own, where its trust Secrets are."""
GATEWAY_NAMESPACE = "gateways"
ACCOUNT = "grid-operator"
GRID_RESOURCES = (GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS)
# What the tests need of deploy/base: the operator runs in the test, not as a Deployment.
INSTALLED_KINDS = frozenset(
    {
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "RoleBinding",
    }
)


def shipped_manifests(scratch: Path) -> list[Manifest]:
    """``deploy/base`` as kustomize builds it, plus the RoleBindings docs/install.md has a
    user create in each gateway namespace (and that namespace): the namespaced role's, the
    token writer's (the gateways' namespace holds the tests' Oauth2 Secrets) and the token
    requester's (and the ServiceAccounts of the tests' ServiceAccount providers)."""
    base = build(installable_copy(REPO, scratch) / "deploy" / "base")
    gateways: Manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": GATEWAY_NAMESPACE},
    }
    binding: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "grid-operator", "namespace": GATEWAY_NAMESPACE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "grid-operator-namespaced",
        },
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
    }
    writer: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "grid-operator-token-writer", "namespace": GATEWAY_NAMESPACE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "grid-operator-token-writer",
        },
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
    }
    requester: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "grid-operator-token-requester", "namespace": GATEWAY_NAMESPACE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "grid-operator-token-requester",
        },
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
    }
    return [*base, gateways, binding, writer, requester]


def shipped_permissions(scratch: Path) -> Permissions:
    """What the shipped RBAC lets the operator's ServiceAccount do."""
    return Permissions.of(shipped_manifests(scratch), NAMESPACE, ACCOUNT)


def install_grid(control_plane: ControlPlane, scratch: Path) -> None:
    """Install :func:`shipped_manifests` (less the Deployment and its Service) and wait
    until the CRDs are served."""
    scratch.mkdir(parents=True, exist_ok=True)
    manifests = [m for m in shipped_manifests(scratch / "repo") if m["kind"] in INSTALLED_KINDS]
    file = scratch / "grid.yaml"
    file.write_text(yaml.safe_dump_all(manifests), encoding="utf-8")
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(file))
    crds = [f"crd/{resource.plural}.{resource.group}" for resource in GRID_RESOURCES]
    control_plane.kubectl("wait", "--for=condition=established", *crds)
