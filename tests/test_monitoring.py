"""Offline validation of ``deploy/monitoring/`` (issue 15): the PrometheusRule's groups pass
``promtool check rules`` and fire as intended on made-up series (``promtool test rules``),
every metric and label the alerts and the Grafana dashboard query is one Grid exposes, the
dashboard is ready for provisioning, the ServiceMonitor scrapes a port the Service has, and
monitoring stays an optional kustomization outside ``deploy/base``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from grid.agent.http import AGENT_FAMILIES
from grid.operator.metrics import OperatorMetrics
from grid.runtime.metrics import FAMILIES, Family, Kind

REPO = Path(__file__).resolve().parent.parent
MONITORING = REPO / "deploy" / "monitoring"
BASE = REPO / "deploy" / "base"
# Labels Prometheus adds to every scraped series, and the histogram bucket label.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}


def load(name: str) -> Any:
    text = (MONITORING / name).read_text(encoding="utf-8")
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


RULE = load("prometheusrule.yaml")
DASHBOARD = load("dashboard.json")
SERVICE_MONITOR = load("servicemonitor.yaml")


def operator_families() -> dict[str, Family]:
    """The operator's own counters, as exposed."""
    metrics = OperatorMetrics()
    found = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            if kind == "counter":
                found[name + "_total"] = Family(name + "_total", Kind.COUNTER, "", ())
    return found


CATALOG: dict[str, Family] = {
    **FAMILIES,
    **{f.name: f for f in AGENT_FAMILIES},
    **operator_families(),
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is required under CI=true (Debian's prometheus package)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def rule_groups(*, annotations: bool = True) -> dict[str, Any]:
    """The PrometheusRule's ``spec``: a Prometheus rules file."""
    spec = json.loads(json.dumps(RULE["spec"]))
    if not annotations:
        for group in spec["groups"]:
            for rule in group["rules"]:
                rule.pop("annotations", None)
    return dict(spec)


def alerts() -> Iterator[dict[str, Any]]:
    for group in RULE["spec"]["groups"]:
        yield from group["rules"]


def dashboard_exprs() -> Iterator[str]:
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in DASHBOARD["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            yield query["query"]


def rule_exprs() -> Iterator[str]:
    for rule in alerts():
        yield rule["expr"]


# -- promtool -----------------------------------------------------------------------------


def test_promtool_checks_the_rule_groups(tmp_path: Path) -> None:
    rules = tmp_path / "grid-rules.yaml"
    rules.write_text(yaml.safe_dump(rule_groups()))
    result = subprocess.run(
        [promtool(), "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(1 for _ in alerts())
    assert f"SUCCESS: {count} rules found" in result.stdout, result.stdout


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    selector = ",".join(f'{k}="{v}"' for k, v in {"job": "grid", **labels}.items())
    return {"series": f"{name}{{{selector}}}", "values": values}


def _certificate(site: str, severity: str) -> dict[str, str]:
    return {"severity": severity, "job": "grid", "instance": "a", "network": "mesh", "site": site}


EXPIRY = "grid_site_certificate_expiry_timestamp_seconds"
DAY_S = 86_400


def _alert(alertname: str, at: str, *expected: dict[str, str]) -> dict[str, Any]:
    return {
        "eval_time": at,
        "alertname": alertname,
        "exp_alerts": [{"exp_labels": labels} for labels in expected],
    }


UNIT_TESTS: list[dict[str, Any]] = [
    {
        "interval": "1m",
        "input_series": [
            _series("grid_swim_running", "1 1 0x10", instance="a", network="mesh"),
            _series("grid_swim_running", "1x12", instance="b", network="mesh"),
        ],
        "alert_rule_test": [
            _alert("GridSwimNotRunning", "4m"),
            _alert(
                "GridSwimNotRunning",
                "8m",
                {"severity": "critical", "job": "grid", "instance": "a", "network": "mesh"},
            ),
        ],
    },
    {
        # site-c: trusted at a, not at b (excluded at some peers only); site-d nowhere.
        "interval": "1m",
        "input_series": [
            _series("grid_site_trusted", "1x30", instance="a", network="mesh", site="site-c"),
            _series("grid_site_trusted", "1x5 0x25", instance="b", network="mesh", site="site-c"),
            _series("grid_site_trusted", "0x30", instance="a", network="mesh", site="site-d"),
            _series("grid_site_trusted", "0x30", instance="b", network="mesh", site="site-d"),
        ],
        "alert_rule_test": [
            _alert("GridSiteExcludedAtSomePeers", "15m"),
            _alert(
                "GridSiteExcludedAtSomePeers",
                "25m",
                {"severity": "warning", "network": "mesh", "site": "site-c"},
            ),
            _alert(
                "GridSiteTrustLost",
                "12m",
                {
                    "severity": "critical",
                    "job": "grid",
                    "instance": "b",
                    "network": "mesh",
                    "site": "site-c",
                },
            ),
        ],
    },
    {
        # One gateway never rendered; one refused for 40 minutes with an old overlay.
        "interval": "1m",
        "input_series": [
            _series(
                "grid_overlay_candidates",
                "0x60",
                instance="a",
                network="mesh",
                gateway_namespace="gw",
                gateway="never",
            ),
            _series(
                "grid_overlay_render_refused",
                "1x60",
                instance="a",
                network="mesh",
                gateway_namespace="gw",
                gateway="held",
            ),
            _series(
                "grid_overlay_last_rendered_timestamp_seconds",
                "0x60",
                instance="a",
                network="mesh",
                gateway_namespace="gw",
                gateway="held",
            ),
            _series(
                "grid_overlay_candidates",
                "3x60",
                instance="a",
                network="mesh",
                gateway_namespace="gw",
                gateway="held",
            ),
        ],
        "alert_rule_test": [
            _alert(
                "GridOverlayMissing",
                "15m",
                {
                    "severity": "critical",
                    "job": "grid",
                    "instance": "a",
                    "network": "mesh",
                    "gateway_namespace": "gw",
                    "gateway": "never",
                },
            ),
            _alert("GridOverlayNotRendered", "30m"),
            _alert(
                "GridOverlayNotRendered",
                "40m",
                {
                    "severity": "critical",
                    "job": "grid",
                    "instance": "a",
                    "network": "mesh",
                    "gateway_namespace": "gw",
                    "gateway": "held",
                },
            ),
        ],
    },
    {
        "interval": "1m",
        "input_series": [
            _series(
                "grid_swim_refused_messages_total",
                "0+10x40",
                instance="a",
                network="mesh",
                reason="stale",
            ),
            _series(
                "grid_swim_refused_messages_total",
                "0+10x40",
                instance="a",
                network="mesh",
                reason="replayed",
            ),
            _series("grid_swim_keys", "2x1500", instance="a", network="mesh"),
            _series("grid_swim_problem", "1x20", instance="a", network="mesh", problem="rotation"),
        ],
        "alert_rule_test": [
            _alert(
                "GridStaleMessagesRefused",
                "30m",
                {"severity": "warning", "job": "grid", "instance": "a", "network": "mesh"},
            ),
            _alert(
                "GridMessagesRefusedAsForged",
                "30m",
                {"severity": "warning", "job": "grid", "instance": "a", "network": "mesh"},
            ),
            _alert(
                "GridSwimKeyRotationFailed",
                "10m",
                {
                    "severity": "warning",
                    "job": "grid",
                    "instance": "a",
                    "network": "mesh",
                    "problem": "rotation",
                },
            ),
            _alert("GridSwimProblem", "15m"),
            _alert("GridSwimKeyRotationUnfinished", "23h"),
            _alert(
                "GridSwimKeyRotationUnfinished",
                "25h",
                {"severity": "info", "job": "grid", "instance": "a", "network": "mesh"},
            ),
        ],
    },
    {
        # Unix time 0 is the test's start, so each value is the time left then: site-a's
        # certificate has 15 days (14 a day later), site-b's 10, site-c's 1, site-d's had
        # expired, site-e's has a year.
        "interval": "1m",
        "input_series": [
            _series(EXPIRY, f"{days * DAY_S}x2200", instance="a", network="mesh", site=site)
            for site, days in (
                ("site-a", 15),
                ("site-b", 10),
                ("site-c", 1),
                ("site-d", 0),
                ("site-e", 365),
            )
        ],
        "alert_rule_test": [
            _alert("GridSiteCertificateExpiresSoon", "10m"),
            _alert("GridSiteCertificateExpiresSoon", "12h", _certificate("site-b", "warning")),
            _alert(
                "GridSiteCertificateExpiresSoon",
                "36h",
                _certificate("site-a", "warning"),
                _certificate("site-b", "warning"),
            ),
            _alert(
                "GridSiteCertificateExpiryImminent",
                "12h",
                _certificate("site-c", "critical"),
                _certificate("site-d", "critical"),
            ),
        ],
    },
]


TOKEN_EXPIRY = "grid_provider_credential_expiry_timestamp_seconds"
UNIT_TESTS.append(
    {
        # llama's token lapses at Unix time 900 and is never refreshed; qwen's is refreshed
        # at 5 minutes with 5 minutes left (it then lapses at 4200).
        "interval": "1m",
        "input_series": [
            _series(TOKEN_EXPIRY, "900x30", instance="a", network="mesh", provider="llama"),
            _series(TOKEN_EXPIRY, "600x5 4200x25", instance="a", network="mesh", provider="qwen"),
        ],
        "alert_rule_test": [
            _alert("GridProviderCredentialExpiring", "10m"),
            _alert(
                "GridProviderCredentialExpiring",
                "12m",
                {
                    "severity": "warning",
                    "job": "grid",
                    "instance": "a",
                    "network": "mesh",
                    "provider": "llama",
                },
            ),
        ],
    }
)


STATE = "grid_budget_state"
_budget = {"network": "mesh", "window": "month in Europe/Paris"}
UNIT_TESTS.append(
    {
        # acme is at its warn level at site a from 2m and exhausted at a from 7m (site b,
        # which has not heard everything, still says warn); globex stays ok. Site b has
        # not heard from every site from the start, for 40 minutes. Site a sees a peer configure a
        # budget differently from 3m to 15m.
        "interval": "1m",
        "input_series": [
            _series(STATE, "_x2 1x4", instance="a", tenant="acme", state="warn", **_budget),
            _series(STATE, "_x7 1x8", instance="a", tenant="acme", state="exhausted", **_budget),
            _series(STATE, "_x2 1x20", instance="b", tenant="acme", state="warn", **_budget),
            _series(STATE, "1x20", instance="a", tenant="globex", state="ok", **_budget),
            _series("grid_budget_complete", "0x40 1x5", instance="b", network="mesh"),
            _series("grid_budget_config_agreed", "1x3 0x12 1x5", instance="a", network="mesh"),
        ],
        "alert_rule_test": [
            _alert("GridBudgetWarning", "2m"),
            _alert("GridBudgetWarning", "3m", {"severity": "warning", "tenant": "acme", **_budget}),
            _alert("GridBudgetExhausted", "7m"),
            _alert(
                "GridBudgetExhausted", "8m", {"severity": "critical", "tenant": "acme", **_budget}
            ),
            _alert("GridBudgetSpendIncomplete", "29m"),
            _alert(
                "GridBudgetSpendIncomplete",
                "31m",
                {"severity": "warning", "job": "grid", "instance": "b", "network": "mesh"},
            ),
            _alert("GridBudgetSpendIncomplete", "42m"),
            _alert("GridBudgetConfigDiffers", "12m"),
            _alert(
                "GridBudgetConfigDiffers",
                "14m",
                {"severity": "warning", "job": "grid", "instance": "a", "network": "mesh"},
            ),
            _alert("GridBudgetConfigDiffers", "17m"),
        ],
    }
)


def test_the_alerts_fire_when_they_should_and_not_before(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(annotations=False)))
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": UNIT_TESTS}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- every name exists ----------------------------------------------------------------------

_METRIC = re.compile(r"\bgrid_[a-z0-9_]+")
_SELECTOR = re.compile(r"\b(grid_[a-z0-9_]+)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def family_of(sample: str) -> Family | None:
    """The family a sample name belongs to (histogram series included)."""
    if sample in CATALOG:
        return CATALOG[sample]
    for suffix in ("_bucket", "_count", "_sum"):
        family = CATALOG.get(sample.removesuffix(suffix))
        if sample.endswith(suffix) and family is not None and family.kind is Kind.HISTOGRAM:
            return family
    return None


def labels_of(sample: str) -> set[str]:
    family = family_of(sample)
    assert family is not None
    extra = {"le"} if sample.endswith("_bucket") else set()
    return set(family.labels) | extra | TARGET_LABELS


ALL_LABELS = {label for f in CATALOG.values() for label in f.labels} | TARGET_LABELS | {"le"}


@pytest.mark.parametrize(
    "expr",
    [*rule_exprs(), *dashboard_exprs()],
    ids=lambda e: " ".join(e.split())[:60],
)
def test_every_metric_and_label_queried_is_exposed(expr: str) -> None:
    names = _METRIC.findall(expr)
    assert names, f"no Grid metric in {expr!r}"
    for name in names:
        assert family_of(name) is not None, f"{name} is not a metric Grid exposes"
    for name, matchers in _SELECTOR.findall(expr):
        for label in _MATCHER.findall(matchers):
            assert label in labels_of(name), f"{name} has no label {label!r}"
    for grouping in _GROUPING.findall(expr):
        for label in filter(None, (part.strip() for part in grouping.split(","))):
            assert label in ALL_LABELS, f"no Grid metric has the label {label!r}: {expr!r}"


def test_every_alert_has_a_severity_and_runbook_annotations() -> None:
    names = set()
    for rule in alerts():
        assert rule["alert"].startswith("Grid") and rule["alert"] not in names
        names.add(rule["alert"])
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}, rule["alert"]
        for label in re.findall(r"\$labels\.(\w+)", json.dumps(rule["annotations"])):
            assert label in ALL_LABELS, f"{rule['alert']} quotes the unknown label {label}"
    assert {
        "GridSwimNotRunning",
        "GridOverlayNotRendered",
        "GridOverlayRenderRefused",
        "GridSiteExcludedAtSomePeers",
        "GridSiteTrustLost",
        "GridSiteCertificateExpiresSoon",
        "GridSiteCertificateExpiryImminent",
        "GridStaleMessagesRefused",
        "GridSwimKeyRotationFailed",
        "GridItemsRefused",
    } <= names


# -- the dashboard ------------------------------------------------------------------------


def test_the_dashboard_is_ready_for_provisioning() -> None:
    assert DASHBOARD["uid"] == "grid-mesh" and DASHBOARD["title"]
    assert "id" not in DASHBOARD, "a provisioned dashboard must not carry a database id"
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    network = variables["network"]
    assert network["type"] == "query" and network["datasource"]["uid"] == "${datasource}"
    assert network["includeAll"] and network["multi"]
    ids = [panel["id"] for panel in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for panel in DASHBOARD["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            if "grid_build_info" not in target["expr"]:
                assert 'network=~"$network"' in target["expr"], (panel["title"], target["expr"])


def test_the_dashboard_shows_membership_trust_overlays_and_latencies() -> None:
    families = (family_of(name) for expr in dashboard_exprs() for name in _METRIC.findall(expr))
    queried = {family.name for family in families if family is not None}
    assert {
        "grid_swim_members",
        "grid_site_trusted",
        "grid_overlay_last_rendered_timestamp_seconds",
        "grid_overlay_render_refused",
        "grid_provider_health_check_duration_seconds",
        "grid_provider_scrape_duration_seconds",
        "grid_site_probe_duration_seconds",
        "grid_swim_suspicion_to_down_seconds",
        "grid_items_refused_total",
        "grid_swim_refused_messages_total",
    } <= queried


# -- the ServiceMonitor and the kustomization ------------------------------------------------


def test_the_service_monitor_scrapes_the_services_metrics_port() -> None:
    service = yaml.safe_load((BASE / "service.yaml").read_text())
    ports = {port["name"]: port for port in service["spec"]["ports"]}
    spec = SERVICE_MONITOR["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    for endpoint in spec["endpoints"]:
        assert endpoint["port"] in ports, f"the Service has no port named {endpoint['port']}"
        assert ports[endpoint["port"]]["protocol"] == "TCP"
        assert endpoint["path"] == "/metrics"
    deployment = yaml.safe_load((BASE / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    names = {port["name"] for port in container["ports"]}
    assert all(ports[e["port"]]["targetPort"] in names for e in spec["endpoints"])


def test_monitoring_is_an_optional_kustomization_outside_the_base() -> None:
    base = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert not any("monitoring" in resource for resource in base["resources"])
    example = yaml.safe_load((REPO / "deploy/overlays/example/kustomization.yaml").read_text())
    assert not any("monitoring" in resource for resource in example["resources"])
    kustomization = load("kustomization.yaml")
    assert kustomization["resources"] == ["servicemonitor.yaml", "prometheusrule.yaml"]
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == ["grid-mesh.json=dashboard.json"]


def test_kubectl_builds_the_monitoring_kustomization() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is required under CI=true to build deploy/monitoring")
        pytest.skip("kubectl is not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(MONITORING)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    objects = {doc["kind"]: doc for doc in yaml.safe_load_all(result.stdout) if doc}
    assert set(objects) == {"ConfigMap", "ServiceMonitor", "PrometheusRule"}
    assert all(o["metadata"]["namespace"] == "grid-system" for o in objects.values())
    configmap = objects["ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["grid-mesh.json"]) == DASHBOARD
