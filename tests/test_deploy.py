"""Offline validation of ``deploy/`` and the ``Containerfile``: the kustomizations build (and
match ``kubectl kustomize`` where kubectl is installed), every object is a valid Kubernetes
object, RBAC is least privilege, the Deployment is locked down and agrees with its Service,
and the image runs ``grid operator`` as a non-root user."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import models
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from k8s.control_plane import ControlPlaneUnavailable, programs_folder
from k8s.kustomize import (
    KustomizeError,
    Manifest,
    build,
    installable_copy,
    load_documents,
    object_key,
)

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
CRDS = REPO / "crds"
BASE_NAMESPACE = "grid-system"
EXAMPLE_NAMESPACE = "grid-example"
GRID_GROUP = "grid.praxis-proxy.io"
GRID_RESOURCES = ("gridnetworks", "gridsites", "inferenceproviders")
OPERATOR_SERVICE_ACCOUNT = "grid-operator"

MODELS: dict[str, type[Any]] = {
    "Namespace": models.V1Namespace,
    "ServiceAccount": models.V1ServiceAccount,
    "ClusterRole": models.V1ClusterRole,
    "ClusterRoleBinding": models.V1ClusterRoleBinding,
    "Role": models.V1Role,
    "RoleBinding": models.V1RoleBinding,
    "Deployment": models.V1Deployment,
    "Service": models.V1Service,
    "CustomResourceDefinition": models.V1CustomResourceDefinition,
}
READ_VERBS = frozenset({"get", "list", "watch"})


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``deploy/`` and ``crds/``, copied so that the CRDs can be included (see
    :func:`installable_copy`)."""
    return installable_copy(REPO, tmp_path_factory.mktemp("install"))


@pytest.fixture(scope="module")
def base(tree: Path) -> list[Manifest]:
    return build(tree / "deploy" / "base")


@pytest.fixture(scope="module")
def example(tree: Path) -> list[Manifest]:
    return build(tree / "deploy" / "overlays" / "example")


def by_kind(objects: list[Manifest], kind: str) -> list[Manifest]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[Manifest], kind: str) -> Manifest:
    (found,) = by_kind(objects, kind)
    return found


# -- parsing and building -----------------------------------------------------------------


def yaml_files() -> Iterator[Path]:
    # The Helm chart holds templates and Helm's own files (Chart.yaml, values.yaml), not
    # manifests: tests/test_helm_chart.py lints and renders it.
    chart = DEPLOY / "helm"
    yield from sorted(path for path in DEPLOY.rglob("*.yaml") if not path.is_relative_to(chart))


@pytest.mark.parametrize("path", list(yaml_files()), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path: Path) -> None:
    documents = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    assert documents, f"{path} is empty"
    for doc in documents:
        assert isinstance(doc, dict) and doc.get("kind"), f"{path}: a document without kind"


def test_the_base_includes_the_generated_crds() -> None:
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    assert "../../crds" in kustomization["resources"]
    crd_files = sorted(CRDS.glob("*.yaml"))
    plurals = set()
    for path in crd_files:
        for doc in load_documents(path):
            if doc["kind"] == "CustomResourceDefinition":
                assert doc["spec"]["group"] == GRID_GROUP
                assert doc["spec"]["scope"] == "Cluster"
                plurals.add(doc["spec"]["names"]["plural"])
    assert plurals == set(GRID_RESOURCES)


def test_the_repository_tree_builds_as_it_is() -> None:
    names = {object_key(obj) for obj in build(DEPLOY / "overlays" / "example")}
    assert ("apps/v1", "Deployment", EXAMPLE_NAMESPACE, "grid-operator") in names
    listed = yaml.safe_load((CRDS / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        path.name for path in CRDS.glob("*.yaml") if path.stem != "kustomization"
    ), "crds/kustomization.yaml must list every CRD file"


@pytest.mark.parametrize("overlay", ["base", "overlays/example"])
def test_the_offline_build_matches_kubectl_kustomize(tree: Path, overlay: str) -> None:
    # The kubectl scripts/control-plane builds, of the API server's release (under CI=true
    # it is built if missing, so the only check of the offline build never vanishes).
    try:
        kubectl = programs_folder() / "kubectl"
    except ControlPlaneUnavailable as missing:
        pytest.skip(str(missing))
    result = subprocess.run(
        [str(kubectl), "kustomize", str(tree / "deploy" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    expected = {object_key(doc): doc for doc in yaml.safe_load_all(result.stdout) if doc}
    actual = {object_key(obj): obj for obj in build(tree / "deploy" / overlay)}
    assert sorted(actual) == sorted(expected)
    for key, obj in actual.items():
        assert obj == expected[key], f"{key} differs from kustomize's output"


def test_every_object_is_a_valid_kubernetes_object(
    base: list[Manifest], example: list[Manifest]
) -> None:
    for obj in base + example:
        model = MODELS.get(obj["kind"])
        assert model is not None, f"no validation model for kind {obj['kind']}"
        # The client's models forbid unknown fields: a typo fails here.
        parsed = model.from_dict(obj)
        assert parsed.metadata.name == obj["metadata"]["name"]


def test_the_example_overlay_moves_everything_to_its_namespace(example: list[Manifest]) -> None:
    assert one(example, "Namespace")["metadata"]["name"] == EXAMPLE_NAMESPACE
    for obj in example:
        if obj["kind"] in (
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
        ):
            assert "namespace" not in obj["metadata"], object_key(obj)
        else:
            assert obj["metadata"]["namespace"] == EXAMPLE_NAMESPACE, object_key(obj)
    container = one(example, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/platform/grid:0.2.0"


@pytest.mark.parametrize("variant", ["base", "example"])
def test_every_binding_names_a_service_account_and_a_role_that_exist(
    variant: str, base: list[Manifest], example: list[Manifest]
) -> None:
    """Catches the classic overlay bug: kustomize does not move ClusterRoleBinding
    subjects to the overlay's namespace."""
    objects = base if variant == "base" else example
    accounts = {
        (obj["metadata"]["namespace"], obj["metadata"]["name"])
        for obj in by_kind(objects, "ServiceAccount")
    }
    cluster_roles = {obj["metadata"]["name"] for obj in by_kind(objects, "ClusterRole")}
    bindings = by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding")
    assert bindings
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "ClusterRole"
        assert binding["roleRef"]["name"] in cluster_roles
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert (subject["namespace"], subject["name"]) in accounts, binding["metadata"]["name"]
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert (deployment["metadata"]["namespace"], pod["serviceAccountName"]) in accounts


# -- RBAC: least privilege ----------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    scope: str  # "cluster" or a namespace
    group: str
    resource: str
    verb: str


def grants(objects: list[Manifest]) -> set[Grant]:
    """Every (scope, group, resource, verb) the bindings give the operator."""
    roles = {obj["metadata"]["name"]: obj for obj in by_kind(objects, "ClusterRole")}
    result: set[Grant] = set()
    for binding in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding"):
        scope = binding["metadata"].get("namespace", "cluster")
        for rule in roles[binding["roleRef"]["name"]]["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        result.add(Grant(scope, group, resource, verb))
    return result


def test_no_rule_uses_wildcards(base: list[Manifest]) -> None:
    for role in by_kind(base, "ClusterRole") + by_kind(base, "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: * in {field}"
            assert "resourceNames" not in rule or rule["resourceNames"]
            assert "nonResourceURLs" not in rule


def test_cluster_wide_the_operator_touches_only_grid_resources(base: list[Manifest]) -> None:
    cluster = {grant for grant in grants(base) if grant.scope == "cluster"}
    expected = (
        {
            Grant("cluster", GRID_GROUP, plural, verb)
            for plural in GRID_RESOURCES
            for verb in ("get", "list", "watch", "patch", "update")
        }
        | {
            Grant("cluster", GRID_GROUP, f"{plural}/status", verb)
            for plural in GRID_RESOURCES
            for verb in ("get", "patch", "update")
        }
        | {Grant("cluster", GRID_GROUP, "gridsites", "create")}
    )
    assert cluster == expected


def test_configmaps_secrets_events_and_egress_objects_only_in_the_operator_namespace(
    base: list[Manifest],
) -> None:
    namespaced = {grant for grant in grants(base) if grant.scope != "cluster"}
    assert {grant.scope for grant in namespaced} == {BASE_NAMESPACE}
    by_resource: dict[tuple[str, str], set[str]] = {}
    for grant in namespaced:
        by_resource.setdefault((grant.group, grant.resource), set()).add(grant.verb)
    assert by_resource == {
        ("", "configmaps"): {"get", "list", "watch", "create", "patch", "update", "delete"},
        ("", "secrets"): set(READ_VERBS),
        ("", "events"): {"create", "patch"},
        # The one Service or Gateway a GridSite's egress.from names: read by name only.
        ("", "services"): {"get"},
        ("gateway.networking.k8s.io", "gateways"): {"get"},
    }


def test_secrets_are_never_writable_and_configmaps_never_cluster_wide(
    base: list[Manifest], example: list[Manifest]
) -> None:
    for grant in grants(base) | grants(example):
        if grant.resource == "secrets":
            assert grant.verb in READ_VERBS, grant
        if grant.resource in ("configmaps", "secrets", "events"):
            assert grant.scope != "cluster", grant
    for role in by_kind(base, "ClusterRole"):
        for rule in role["rules"]:
            assert "delete" not in rule["verbs"] or rule["resources"] == ["configmaps"]


def test_every_rule_says_why_it_exists() -> None:
    text = (DEPLOY / "base" / "rbac.yaml").read_text()
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith("- apiGroups:"):
            assert lines[index - 1].strip().startswith("#"), (
                f"rule at line {index + 1} lacks a comment"
            )


# -- the Deployment and its Service --------------------------------------------------------


def operator_container(objects: list[Manifest]) -> Manifest:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def test_the_operator_runs_alone_and_locked_down(base: list[Manifest]) -> None:
    deployment = one(base, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(forbidden)
    container = operator_container(base)
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert not security.get("privileged")
    resources = container["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert "memory" in resources["limits"]
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert "/tmp" in mounts, "a read-only root needs a writable /tmp"
    labels = one(base, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_operator_command_ports_probes_and_environment(base: list[Manifest]) -> None:
    container = operator_container(base)
    assert container["args"] == ["operator"]
    ports = {port["name"]: (port["containerPort"], port["protocol"]) for port in container["ports"]}
    assert ports == {"swim": (7946, "UDP"), "metrics": (9090, "TCP"), "health": (8080, "TCP")}
    for probe in ("livenessProbe", "readinessProbe"):
        action = container[probe]["httpGet"]
        assert action["path"] == "/healthz"
        assert ports[action["port"]] == (8080, "TCP")
    env = {entry["name"]: entry for entry in container["env"]}
    assert (
        env["GRID_SWIM_ADVERTISE_ADDRESS"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    )
    assert env["GRID_SWIM_PORT"]["value"] == "7946"
    assert env["GRID_METRICS_PORT"]["value"] == "9090"
    assert env["GRID_HEALTH_PORT"]["value"] == "8080"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_service_selects_the_operator_and_matches_its_ports(base: list[Manifest]) -> None:
    service = one(base, "Service")
    pod_labels = one(base, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert one(base, "Deployment")["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    container_ports = {port["name"]: port for port in operator_container(base)["ports"]}
    exposed = {}
    for port in service["spec"]["ports"]:
        target = container_ports[port["targetPort"]]
        assert port["protocol"] == target["protocol"]
        assert port["port"] == target["containerPort"]
        exposed[port["name"]] = (port["port"], port["protocol"])
    assert exposed == {"swim": (7946, "UDP"), "metrics": (9090, "TCP")}


# -- the Containerfile ---------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    stage: str
    command: str
    arguments: str


def containerfile_instructions() -> list[Instruction]:
    """The instructions with line continuations joined, each tagged with its stage."""
    logical: list[str] = []
    pending = ""
    for raw in (REPO / "Containerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Containerfile ends inside a continued line"
    result: list[Instruction] = []
    stage = ""
    for line in logical:
        command, _, arguments = line.partition(" ")
        command = command.upper()
        if command == "FROM":
            match = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", arguments, flags=re.IGNORECASE)
            assert match, f"every stage is named: {line!r}"
            stage = match.group(2)
        result.append(Instruction(stage, command, arguments.strip()))
    return result


def test_the_containerfile_installs_the_release_wheel_into_a_slim_python() -> None:
    """Nothing is compiled in the image: one stage, from the slim Python the abi3 wheel
    targets, installing the wheel scripts/build-wheels made for the image's architecture
    with the operator extra, every dependency pinned and a binary wheel."""
    instructions = containerfile_instructions()
    args = {
        name: value
        for i in instructions
        if i.command == "ARG" and "=" in i.arguments
        for name, value in [i.arguments.split("=", 1)]
    }
    stages = [i for i in instructions if i.command == "FROM"]
    assert [i.stage for i in stages] == ["runtime"]
    image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], stages[0].arguments.split()[0])
    assert image.startswith("docker.io/library/python:3.11-slim")

    runs = " ".join(i.arguments for i in instructions if i.command == "RUN")
    for tool in ("cargo", "rustc", "rustup", "maturin", "gcc", "apt-get"):
        assert tool not in runs, f"the image runs {tool}"
    copies = [shlex.split(i.arguments) for i in instructions if i.command == "COPY"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wheel_prefix = project["name"].replace("-", "_")
    assert copies == [
        ["constraints/image.txt", "/tmp/constraints.txt"],
        [f"dist/{wheel_prefix}-*.whl", "/tmp/wheels/"],
    ]
    assert f'/tmp/wheels/{wheel_prefix}-*_"$(uname -m)".whl' in runs
    assert "pip install --only-binary :all: --constraint /tmp/constraints.txt" in runs
    assert '"$1[operator]"' in runs and "operator" in project["optional-dependencies"]
    # The names scripts/build-wheels gives its wheels end in the architecture `uname -m`
    # prints; where they are built, the pattern picks exactly one of each.
    build_wheels = (REPO / "scripts" / "build-wheels").read_text()
    assert "--compatibility manylinux2014" in build_wheels
    built = sorted((REPO / "dist").glob(f"{wheel_prefix}-*.whl"))
    for arch in ("x86_64", "aarch64"):
        picked = [path.name for path in built if fnmatch.fnmatch(path.name, f"*_{arch}.whl")]
        assert len(picked) <= 1, picked


def test_the_image_pins_every_dependency_within_pyproject_ranges() -> None:
    """constraints/image.txt (scripts/lock-image) pins each package to one version, and
    the pins satisfy pyproject.toml's ranges for the dependencies and the operator extra."""
    pins: dict[str, Version] = {}
    for line in (REPO / "constraints" / "image.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", line
        assert requirement.url is None and requirement.marker is None and not requirement.extras
        pins[canonicalize_name(requirement.name)] = Version(specifier.version)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert canonicalize_name(project["name"]) not in pins, "Grid itself comes from dist/"
    direct = project["dependencies"] + project["optional-dependencies"]["operator"]
    for requirement in map(Requirement, direct):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned: run scripts/lock-image"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} is outside {requirement.specifier}: run scripts/lock-image"
        )


def test_the_image_runs_grid_operator_as_the_deployments_non_root_user(
    base: list[Manifest],
) -> None:
    runtime = [i for i in containerfile_instructions() if i.stage == "runtime"]
    last = {i.command: i.arguments for i in runtime}
    assert json.loads(last["ENTRYPOINT"]) == ["grid"]
    assert json.loads(last["CMD"]) == ["operator"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "grid" in project["scripts"], "the entrypoint is the package's console script"
    user, _, group = last["USER"].partition(":")
    pod_security = one(base, "Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert int(user) == pod_security["runAsUser"] != 0
    assert int(group) == pod_security["runAsGroup"]
    exposed = set(last["EXPOSE"].split())
    container_ports = {
        f"{port['containerPort']}/{port['protocol'].lower()}"
        for port in operator_container(base)["ports"]
    }
    assert exposed == container_ports


def test_the_build_context_holds_only_what_the_image_copies() -> None:
    """.containerignore excludes everything, then lets in exactly what COPY names: the
    wheels and the constraints (no sources, venvs, build trees or secrets)."""
    patterns = [
        line.strip()
        for line in (REPO / ".containerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "everything is excluded first"
    assert all(pattern.startswith("!") for pattern in patterns[1:])
    let_in = {pattern[1:] for pattern in patterns[1:]}
    sources = {
        source
        for instruction in containerfile_instructions()
        if instruction.command == "COPY" and not instruction.arguments.startswith("--from")
        for source in shlex.split(instruction.arguments)[:-1]
    }
    assert sources == let_in
    for source in sources:
        if not any(char in source for char in "*?["):
            assert (REPO / source).is_file(), f"COPY {source}: not in the repository"


# -- the offline builder refuses what it cannot build ----------------------------------------


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"app/kustomization.yaml": "resources:\n  - ../crds\n", "crds/a.yaml": CONFIGMAP},
            "no kustomization file",
        ),
        (
            {
                "app/kustomization.yaml": "resources:\n  - ../crds/a.yaml\n",
                "crds/a.yaml": CONFIGMAP,
            },
            "is not in or below",
        ),
        ({"app/kustomization.yaml": "resources:\n  - missing.yaml\n"}, "does not exist"),
        ({"app/kustomization.yaml": "commonLabels:\n  a: b\n"}, "not supported"),
        (
            {"app/kustomization.yaml": "resources: [a.yaml, a.yaml]\n", "app/a.yaml": CONFIGMAP},
            "duplicate object",
        ),
        (
            {"app/kustomization.yaml": "resources: [a.yaml]\n", "app/a.yaml": "kind: ConfigMap\n"},
            "apiVersion and kind",
        ),
        (
            {"app/kustomization.yaml": "resources: [a.yaml]\n", "app/a.yaml": "a: [\n"},
            "invalid YAML",
        ),
        (
            {
                "app/kustomization.yaml": "resources: [a.yaml]\npatches:\n  - target: {kind: Secret}\n    patch: '[]'\n",
                "app/a.yaml": CONFIGMAP,
            },
            "matches nothing",
        ),
        (
            {
                "app/kustomization.yaml": "resources: [a.yaml]\npatches:\n  - target: {kind: ConfigMap}\n    patch: '[{op: remove, path: /nope}]'\n",
                "app/a.yaml": CONFIGMAP,
            },
            "patch failed",
        ),
        ({"app/kustomization.yaml": "images:\n  - newTag: x\n"}, "needs a name"),
    ],
)
def test_the_offline_builder_refuses_what_kustomize_would_not_build(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    write_tree(tmp_path, files)
    with pytest.raises(KustomizeError, match=message):
        build(tmp_path / "app")


def test_image_overrides_keep_registry_ports_and_honour_digests(tmp_path: Path) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "a", "image": "localhost:5000/grid"},
                        {"name": "b", "image": "grid:dev"},
                        {"name": "c", "image": "other:1"},
                    ]
                }
            }
        },
    }
    write_tree(
        tmp_path,
        {
            "app/d.yaml": yaml.safe_dump(deployment),
            "app/kustomization.yaml": (
                "resources: [d.yaml]\nimages:\n"
                "  - {name: 'localhost:5000/grid', newTag: '2'}\n"
                "  - {name: grid, newName: r.example/grid, digest: 'sha256:ab'}\n"
            ),
        },
    )
    (built,) = build(tmp_path / "app")
    images = [c["image"] for c in built["spec"]["template"]["spec"]["containers"]]
    assert images == ["localhost:5000/grid:2", "r.example/grid@sha256:ab", "other:1"]


# -- the install guide agrees with the manifests ---------------------------------------------


def test_the_install_guide_matches_the_manifests(example: list[Manifest]) -> None:
    guide = (REPO / "docs" / "install.md").read_text()
    assert "kubectl apply -k deploy/overlays/example" in guide
    assert "-f Containerfile ." in guide
    account = one(example, "ServiceAccount")["metadata"]
    assert f"--serviceaccount={account['namespace']}:{account['name']}" in guide
    namespaced_role = {binding["roleRef"]["name"] for binding in by_kind(example, "RoleBinding")}
    assert namespaced_role == {"grid-operator-namespaced"}
    assert "--clusterrole=grid-operator-namespaced" in guide
    for crd in by_kind(example, "CustomResourceDefinition"):
        assert f"crd/{crd['metadata']['name']}" in guide
    deployment = one(example, "Deployment")
    assert (
        f"-n {EXAMPLE_NAMESPACE} rollout status deployment/{deployment['metadata']['name']}"
        in guide
    )
    for entry in operator_container(example)["env"]:
        assert f"`{entry['name']}`" in guide, f"{entry['name']} is not documented"
    # The Secrets come from grid secrets (tests/test_secrets_command.py checks that they are
    # the ones examples/mesh refers to), the CA key in a namespace the operator is not bound in.
    assert (
        "grid secrets --network glb-demo --namespace grid-system --site east-edge "
        "| kubectl apply -f -"
    ) in guide
    assert "kubectl -n grid-system create rolebinding grid-operator" in guide
    assert "kubectl -n grid-ca create rolebinding" not in guide
