"""Grid's Helm chart (``deploy/helm/grid``): it passes ``helm lint --strict``; with the default
values ``helm template`` gives the objects of ``deploy/base`` (the kustomize install), field
for field, give or take Helm's own labels; its values (namespace, watched namespaces, image,
ports, resources, the monitoring toggles) land where they should, and the schema refuses
what they cannot be; its CRDs are the generated ones and its alerts those of
``deploy/monitoring``.

helm is the binary ``scripts/control-plane`` builds from its Go module: the tests that run it
are skipped where it is not built, and fail under ``CI=true``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import pytest
import yaml

import grid
from grid.models.crd import crd_directory_files
from grid.oauth.rotation import Settle
from grid.operator.options import OperatorOptions
from k8s.control_plane import ControlPlaneUnavailable
from k8s.kustomize import Manifest, build, object_key
from support.helm import CHART, REPO, Helm, HelmError, helm_binary

MONITORING = REPO / "deploy" / "monitoring"
BASE_NAMESPACE = "grid-system"
OPERATOR = "grid-operator"
TOKEN_WRITER_ROLE = "grid-operator-token-writer"
TOKEN_REQUESTER_ROLE = "grid-operator-token-requester"
NAMESPACED_ROLE = "grid-operator-namespaced"
# The labels the chart adds to every object, after Helm's conventions.
RELEASE_LABELS = frozenset(
    {
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
        "helm.sh/chart",
    }
)
# What `helm uninstall` leaves in place; the chart puts it on the Namespace it creates.
KEEP_ANNOTATION = "helm.sh/resource-policy"
MONITORING_ON = {
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        binary = helm_binary()
    except ControlPlaneUnavailable as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"helm is needed under CI=true: {error}")
        pytest.skip(f"helm is not built here: {error}")
    return Helm(binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def base() -> list[Manifest]:
    return build(REPO / "deploy" / "base")


def of_kind(objects: Iterable[Manifest], kind: str) -> list[Manifest]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: Iterable[Manifest], kind: str) -> Manifest:
    (found,) = of_kind(objects, kind)
    return found


def operator_container(objects: Iterable[Manifest]) -> Manifest:
    pod: Manifest = one(objects, "Deployment")["spec"]["template"]["spec"]
    containers: list[Manifest] = pod["containers"]
    (container,) = containers
    return container


def without_release_metadata(obj: Manifest) -> Manifest:
    """``obj`` without what the chart adds to deploy/base's objects: Helm's labels (on the
    object and on a Deployment's pods) and the keep annotation."""
    result = copy.deepcopy(obj)
    labelled = [result["metadata"]]
    if result["kind"] == "Deployment":
        labelled.append(result["spec"]["template"]["metadata"])
    for metadata in labelled:
        for label in RELEASE_LABELS:
            metadata.get("labels", {}).pop(label, None)
    annotations = result["metadata"].get("annotations", {})
    annotations.pop(KEEP_ANNOTATION, None)
    if not annotations:
        result["metadata"].pop("annotations", None)
    return result


def assert_same_objects(rendered: list[Manifest], expected: list[Manifest]) -> None:
    """The same objects, field for field, once the chart's labels are set aside and both
    run the same image (deploy/base's is a placeholder that overlays replace)."""
    actual = {object_key(obj): without_release_metadata(obj) for obj in rendered}
    wanted = {object_key(obj): copy.deepcopy(obj) for obj in expected}
    assert sorted(actual) == sorted(wanted)
    for objects in (actual, wanted):
        for obj in objects.values():
            if obj["kind"] == "Deployment":
                operator_container([obj])["image"] = "the operator image"
    for key, obj in actual.items():
        assert obj == wanted[key], f"{key} differs from deploy/base's"


# -- the chart's files -------------------------------------------------------------------------


def test_the_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "grid"
    assert chart["version"] == chart["appVersion"] == grid.__version__


def test_the_chart_crds_are_the_generated_ones() -> None:
    """What `grid crds --write deploy/helm/grid/crds` writes (the CRDs and the kustomization
    .helmignore leaves out of the chart), and nothing else: Helm would install a stray file
    too."""
    directory = CHART / "crds"
    generated = crd_directory_files()
    assert sorted(path.name for path in directory.iterdir()) == sorted(generated)
    for name, text in generated.items():
        assert (directory / name).read_text(encoding="utf-8") == text, (
            f"{directory.relative_to(REPO)}/{name} differs from the models: "
            f"grid crds --write {directory.relative_to(REPO)}"
        )


def test_the_alerts_are_those_of_deploy_monitoring() -> None:
    """The chart reads its PrometheusRule's groups from a copy of the kustomize one."""
    copied = CHART / "files" / "prometheusrule.yaml"
    source = MONITORING / "prometheusrule.yaml"
    assert copied.read_bytes() == source.read_bytes(), (
        f"{copied.relative_to(REPO)} differs from {source.relative_to(REPO)}: "
        f"cp {source.relative_to(REPO)} {copied.relative_to(REPO)}"
    )


# -- helm lint and the default render ------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        [],
        [
            "--set",
            "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true",
            "--set",
            "watchedNamespaces={grid-system,gateways},siteName=east-edge,tokenSettleSeconds=300",
        ],
    ],
    ids=["defaults", "everything-on"],
)
def test_helm_lint_strict_passes(helm: Helm, arguments: list[str]) -> None:
    done = helm.run("lint", "--strict", str(CHART), "--namespace", BASE_NAMESPACE, *arguments)
    assert "0 chart(s) failed" in done.stdout, done.stdout


def test_the_default_values_give_the_objects_of_deploy_base(
    helm: Helm, base: list[Manifest]
) -> None:
    """All but the Namespace, which Helm needs before the install (the next test makes it
    with the chart)."""
    rendered = helm.template(namespace=BASE_NAMESPACE, include_crds=True)
    assert_same_objects(rendered, [obj for obj in base if obj["kind"] != "Namespace"])
    assert operator_container(rendered)["image"] == f"grid:{grid.__version__}"
    for obj in rendered:
        if obj["kind"] != "CustomResourceDefinition":
            assert obj["metadata"]["labels"].keys() >= RELEASE_LABELS, object_key(obj)


def test_a_namespace_created_by_the_chart_is_deploy_bases(helm: Helm, base: list[Manifest]) -> None:
    rendered = helm.template(
        {"namespace": {"name": BASE_NAMESPACE, "create": True}},
        namespace="default",
        include_crds=True,
    )
    assert_same_objects(rendered, base)
    annotations = one(rendered, "Namespace")["metadata"]["annotations"]
    assert annotations[KEEP_ANNOTATION] == "keep"


@pytest.mark.parametrize("name", ["", "grid-example"])
def test_the_chart_refuses_to_create_the_release_namespace(helm: Helm, name: str) -> None:
    with pytest.raises(HelmError, match="other than the release namespace"):
        helm.template({"namespace": {"name": name, "create": True}}, namespace="grid-example")


def test_the_crds_render_only_with_include_crds(helm: Helm) -> None:
    """Those of the chart's crds/, and not the kustomization `grid crds --write` leaves
    there."""
    assert not of_kind(helm.template(), "CustomResourceDefinition")
    rendered = helm.template(include_crds=True)
    assert not of_kind(rendered, "Kustomization")
    files = [
        yaml.safe_load(path.read_text())
        for path in sorted((CHART / "crds").glob("*.yaml"))
        if path.name != "kustomization.yaml"
    ]
    crds = of_kind(rendered, "CustomResourceDefinition")
    assert sorted(crds, key=object_key) == sorted(files, key=object_key)


def test_everything_goes_to_the_release_namespace(helm: Helm) -> None:
    rendered = helm.template(namespace="grid-example")
    for obj in rendered:
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            assert "namespace" not in obj["metadata"], object_key(obj)
        else:
            assert obj["metadata"]["namespace"] == "grid-example", object_key(obj)
    for binding in of_kind(rendered, "ClusterRoleBinding") + of_kind(rendered, "RoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": OPERATOR, "namespace": "grid-example"}
        ]


# -- values ----------------------------------------------------------------------------------------


def test_each_watched_namespace_gets_one_rolebinding_to_the_namespaced_role(helm: Helm) -> None:
    rendered = helm.template(
        {"watchedNamespaces": ["grid-system", "gateways", "grid-example", "gateways"]},
        namespace="grid-example",
    )
    bindings = of_kind(rendered, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == [
        "gateways",
        "grid-example",
        "grid-system",
    ]
    for binding in bindings:
        assert binding["metadata"]["name"] == OPERATOR
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": NAMESPACED_ROLE,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": OPERATOR, "namespace": "grid-example"}
        ]
    account = one(rendered, "ServiceAccount")["metadata"]
    assert (account["namespace"], account["name"]) == ("grid-example", OPERATOR)
    assert {role["metadata"]["name"] for role in of_kind(rendered, "ClusterRole")} == {
        OPERATOR,
        NAMESPACED_ROLE,
        TOKEN_WRITER_ROLE,
        TOKEN_REQUESTER_ROLE,
    }


def test_each_token_namespace_gets_one_rolebinding_to_the_token_writer(helm: Helm) -> None:
    rendered = helm.template(
        {"tokenNamespaces": ["gateways", "vertex", "gateways"]}, namespace="grid-example"
    )
    bindings = [
        b for b in of_kind(rendered, "RoleBinding") if b["roleRef"]["name"] == TOKEN_WRITER_ROLE
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["gateways", "vertex"]
    assert {b["metadata"]["name"] for b in bindings} == {TOKEN_WRITER_ROLE}
    writer = next(
        r for r in of_kind(rendered, "ClusterRole") if r["metadata"]["name"] == TOKEN_WRITER_ROLE
    )
    assert writer["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "patch"]}
    ]
    default = helm.template(namespace="grid-example")
    assert all(b["roleRef"]["name"] != TOKEN_WRITER_ROLE for b in of_kind(default, "RoleBinding"))


def test_each_service_account_token_namespace_gets_one_rolebinding_to_the_requester(
    helm: Helm,
) -> None:
    rendered = helm.template(
        {"serviceAccountTokenNamespaces": ["gateways", "vertex", "gateways"]},
        namespace="grid-example",
    )
    bindings = [
        b for b in of_kind(rendered, "RoleBinding") if b["roleRef"]["name"] == TOKEN_REQUESTER_ROLE
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["gateways", "vertex"]
    assert all(
        b["subjects"] == [{"kind": "ServiceAccount", "name": OPERATOR, "namespace": "grid-example"}]
        for b in bindings
    )
    requester = next(
        r for r in of_kind(rendered, "ClusterRole") if r["metadata"]["name"] == TOKEN_REQUESTER_ROLE
    )
    # Least privilege: creating tokens, nothing else (no get of ServiceAccounts or Secrets).
    assert requester["rules"] == [
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]}
    ]
    default = helm.template(namespace="grid-example")
    assert all(
        b["roleRef"]["name"] != TOKEN_REQUESTER_ROLE for b in of_kind(default, "RoleBinding")
    )


def test_the_image_values_land_in_the_deployment(helm: Helm) -> None:
    image = {
        "repository": "registry.example.com/platform/grid",
        "tag": "9.9.9",
        "pullPolicy": "Always",
    }
    container = operator_container(helm.template({"image": image}))
    assert container["image"] == "registry.example.com/platform/grid:9.9.9"
    assert container["imagePullPolicy"] == "Always"


def test_the_port_values_reach_the_container_its_environment_and_the_service(
    helm: Helm,
) -> None:
    ports = {"swim": 17946, "metrics": 19090, "health": 18080}
    rendered = helm.template({"ports": ports})
    container = operator_container(rendered)
    assert {port["name"]: port["containerPort"] for port in container["ports"]} == ports
    values = {entry["name"]: entry.get("value") for entry in container["env"]}
    assert values["GRID_SWIM_PORT"] == "17946"
    assert values["GRID_METRICS_PORT"] == "19090"
    assert values["GRID_HEALTH_PORT"] == "18080"
    service = {port["name"]: port for port in one(rendered, "Service")["spec"]["ports"]}
    assert {name: port["port"] for name, port in service.items()} == {
        "swim": 17946,
        "metrics": 19090,
    }
    assert {port["targetPort"] for port in service.values()} == {"swim", "metrics"}


def test_the_site_name_and_resources_values(helm: Helm) -> None:
    default = operator_container(helm.template())
    assert "GRID_SITE_NAME" not in {entry["name"] for entry in default["env"]}
    resources = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    container = operator_container(helm.template({"siteName": "east-edge", "resources": resources}))
    assert {"name": "GRID_SITE_NAME", "value": "east-edge"} in container["env"]
    assert container["resources"] == resources


def test_the_token_settle_value_reaches_the_operators_environment(helm: Helm) -> None:
    default = operator_container(helm.template())
    assert "GRID_TOKEN_SETTLE_SECONDS" not in {entry["name"] for entry in default["env"]}
    container = operator_container(helm.template({"tokenSettleSeconds": 300}))
    assert {"name": "GRID_TOKEN_SETTLE_SECONDS", "value": "300"} in container["env"]
    environment = {entry["name"]: entry.get("value", "") for entry in container["env"]}
    options = OperatorOptions.from_environment(environment)
    assert options.token_settle == Settle(timedelta(minutes=5), timedelta(minutes=5))


@pytest.mark.parametrize("service_monitor", [False, True])
@pytest.mark.parametrize("prometheus_rule", [False, True])
def test_the_monitoring_toggles(helm: Helm, service_monitor: bool, prometheus_rule: bool) -> None:
    """Each toggle adds the object of deploy/monitoring, in the operator's namespace, with
    the extra labels a Prometheus may select on."""
    selected = {"release": "kube-prometheus-stack"}
    rendered = helm.template(
        {
            "metrics": {
                "serviceMonitor": {"enabled": service_monitor, "labels": selected},
                "prometheusRule": {"enabled": prometheus_rule, "labels": selected},
            }
        },
        namespace="grid-example",
    )
    for kind, enabled in (("ServiceMonitor", service_monitor), ("PrometheusRule", prometheus_rule)):
        found = of_kind(rendered, kind)
        assert len(found) == (1 if enabled else 0), kind
        if not enabled:
            continue
        source = one(yaml.safe_load_all((MONITORING / f"{kind.lower()}.yaml").read_text()), kind)
        (obj,) = found
        assert obj["apiVersion"] == source["apiVersion"]
        assert obj["metadata"]["name"] == source["metadata"]["name"]
        assert obj["metadata"]["namespace"] == "grid-example"
        assert source["metadata"]["labels"].items() <= obj["metadata"]["labels"].items()
        assert selected.items() <= obj["metadata"]["labels"].items()
        assert obj["spec"] == source["spec"], f"{kind} differs from deploy/monitoring's"


def test_the_certificate_expiry_days_set_the_warning_alerts_threshold(helm: Helm) -> None:
    """metrics.prometheusRule.certificateExpiryDays changes GridSiteCertificateExpiresSoon's
    threshold (14 days in deploy/monitoring) and nothing else."""
    values = {"metrics": {"prometheusRule": {"enabled": True, "certificateExpiryDays": 30}}}
    rendered = one(helm.template(values), "PrometheusRule")["spec"]
    source = one(
        yaml.safe_load_all((MONITORING / "prometheusrule.yaml").read_text()), "PrometheusRule"
    )["spec"]
    changed = [
        (rule["alert"], rule["expr"], wanted["expr"])
        for group, wanted_group in zip(rendered["groups"], source["groups"], strict=True)
        for rule, wanted in zip(group["rules"], wanted_group["rules"], strict=True)
        if rule != wanted
    ]
    assert changed == [
        (
            "GridSiteCertificateExpiresSoon",
            "grid_site_certificate_expiry_timestamp_seconds - time() < 30 * 86400 >= 2 * 86400",
            "grid_site_certificate_expiry_timestamp_seconds - time() < 14 * 86400 >= 2 * 86400",
        )
    ]


def test_the_service_monitor_selects_the_service(helm: Helm) -> None:
    rendered = helm.template(MONITORING_ON)
    monitor = one(rendered, "ServiceMonitor")
    service = one(rendered, "Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}


@pytest.mark.parametrize(
    ("values", "refused"),
    [
        ({"watchNamespaces": ["grid-system"]}, "watchNamespaces"),
        ({"watchedNamespaces": "grid-system"}, "watchedNamespaces"),
        ({"watchedNamespaces": ["Grid_System"]}, "watchedNamespaces"),
        ({"ports": {"swim": 70000, "metrics": 9090, "health": 8080}}, "swim"),
        ({"image": {"repository": "", "pullPolicy": "IfNotPresent"}}, "repository"),
        ({"image": {"repository": "grid", "pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"metrics": {"serviceMonitor": {"enabled": "yes"}}}, "enabled"),
        ({"tokenSettleSeconds": 0}, "tokenSettleSeconds"),
        ({"tokenSettleSeconds": 3601}, "tokenSettleSeconds"),
        ({"tokenSettleSeconds": "120"}, "tokenSettleSeconds"),
        # At 2 days or fewer the critical GridSiteCertificateExpiryImminent has taken over.
        ({"metrics": {"prometheusRule": {"enabled": True, "certificateExpiryDays": 2}}}, "Days"),
        ({"metrics": {"prometheusRule": {"enabled": True, "certificateExpiryDays": "14"}}}, "Days"),
    ],
)
def test_the_values_schema_refuses_what_the_chart_cannot_use(
    helm: Helm, values: dict[str, Any], refused: str
) -> None:
    with pytest.raises(HelmError, match=refused):
        helm.template(values)


def test_the_values_file_documents_every_top_level_value() -> None:
    """Each top-level key of values.yaml comes right after its comment."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    for index, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#") or line.startswith(" "):
            continue
        assert lines[index - 1].lstrip().startswith("#"), f"values.yaml: {line} lacks a comment"
