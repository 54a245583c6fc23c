"""Validation at admission: the CRDs carry a CEL rule for every check of the models that a
CRD can express and its keywords do not (:mod:`grid.models.validation_rules`).

Here, offline: the rules the generated CRDs carry are those of the inventory below, each
with a message and pointing at a field of its node; each has a case it lets through and a
case it refuses (``test_crd_validation_rules_edges.py``); and the review of the narrowings
since the previous release (:mod:`grid.models.crd_review`) is exactly what the comparison
with that release finds. ``CASES`` (the model tests' cases and those of the rules) is what
``test_crd_validation_rules_server.py`` puts to the real API server.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.models.budgets import ONE_WINDOW, STEPS_FIT_THE_LENGTH
from grid.models.crd import all_crds
from grid.models.crd_review import REVIEWED, Review
from grid.models.egress_source import SERVICE_OR_GATEWAY, SERVICE_PORT_OR_NAME
from grid.models.evolution import non_additive_changes_of_all
from grid.models.fields import (
    HOST_PORT_IPV6,
    HOST_PORT_NAME_LENGTH,
    NO_WHITESPACE,
    PRICE_RANGE,
    TIMEOUT_WITHIN_INTERVAL,
    within,
)
from grid.models.meta import LABEL_KEY_NAME, LABEL_KEY_PREFIX, LABEL_MAP_KEYS
from grid.models.network import AFFINITY_NEEDS_A_KEY, SUSPICION_OUTLASTS_PROBE
from grid.models.oauth2 import (
    CLIENT_CREDENTIALS_NEEDS_CLIENT,
    JWT_BEARER_TAKES_NO_CLIENT,
    TOKEN_URL_HTTPS,
)
from grid.models.offers import MODEL_NAME_BYTES
from grid.models.provider import (
    A_SIGNAL_MAPPED,
    CUSTOM_WITH_CUSTOM_ONLY,
    ENDPOINT_IP_NEEDS_SERVER_NAME,
    HEADER_NOT_AUTHORIZATION,
    HEADER_NOT_THE_GATEWAYS,
    HEADER_WITH_HEADER_STRATEGIES,
    HISTOGRAMS_SUM,
    OAUTH2_WITH_OAUTH2_ONLY,
    ONE_HEADER_SOURCE,
    PATH_WITH_PORT,
    PROMETHEUS_LABEL_NAMES,
    SECRET_REF_NEEDED,
    SERVICE_ACCOUNT_WITH_SERVICE_ACCOUNT_ONLY,
    URL_OR_PORT,
)
from grid.models.selectors import VALUES_FORBIDDEN, VALUES_NEEDED
from grid.models.site import (
    ADDRESS_OR_FROM,
    EGRESS_IP_NEEDS_SERVER_NAME,
    PREVIOUS_PIN_DIFFERS,
    PREVIOUS_PIN_NEEDS_CURRENT,
)
from grid.models.spend import TENANT_LABEL_OR_TENANT
from grid.models.urls import URL_HOST_AND_PORT, URL_IPV6_HOST
from grid.models.validation_rules import VALIDATIONS, Reason, ValidationRule
from support.previous import named_release
from test_crd_validation_rules_cases import MODEL_TEST_CASES, Case
from test_crd_validation_rules_edges import RULE_CASES

REPO = Path(__file__).resolve().parent.parent
HOST_PORT = (HOST_PORT_IPV6, HOST_PORT_NAME_LENGTH)
URL = (NO_WHITESPACE, URL_HOST_AND_PORT, URL_IPV6_HOST)
CONSUMER = ".spec.gatewayRefs[*].consumerConfig"
LABEL_KEY = (LABEL_KEY_PREFIX, LABEL_KEY_NAME)
SELECTOR = {
    ".matchLabels": LABEL_MAP_KEYS,
    ".matchExpressions[*]": (VALUES_NEEDED, VALUES_FORBIDDEN),
    ".matchExpressions[*].key": LABEL_KEY,
}
SIGNAL_NAMES = ("queueDepth", "kvCacheUtilization", "prefixCacheHitRatio", "p99LatencyMs", "health")
METRICS = ".spec.metricsConfig"
SPEND = ".spec.spendSources[*]"

# Every rule of the CRDs, by kind and the path of the node it sits on ([*]: a list's items).
INVENTORY: dict[tuple[str, str], tuple[ValidationRule, ...]] = {
    ("GridNetwork", ".spec.seeds[*]"): HOST_PORT,
    ("GridNetwork", ".spec.gatewayRefs[*].consumerConfig.sessionAffinity"): (AFFINITY_NEEDS_A_KEY,),
    ("GridNetwork", f"{CONSUMER}.adminAddress"): HOST_PORT,
    **{
        ("GridNetwork", f"{CONSUMER}.{path}"): (NO_WHITESPACE,)
        for path in ("overlayMountPath", "credentialMountBase", "tlsMountPath")
    },
    ("GridNetwork", ".spec.swim"): (SUSPICION_OUTLASTS_PROBE,),
    ("GridNetwork", ".spec.swim.probeInterval"): (within(0.1, 300).rule,),
    ("GridNetwork", ".spec.swim.suspicionTimeout"): (within(0.1, 3600).rule,),
    ("GridNetwork", ".spec.renderInterval"): (within(0, 10).rule,),
    ("GridNetwork", ".spec.signalPublishing.maxInterval"): (within(1, 3600).rule,),
    ("GridNetwork", ".spec.budgets[*]"): (ONE_WINDOW,),
    ("GridNetwork", ".spec.budgets[*].window"): (within(60, 366 * 86400).rule,),
    ("GridNetwork", ".spec.budgets[*].rolling"): (STEPS_FIT_THE_LENGTH,),
    ("GridNetwork", ".spec.budgets[*].rolling.length"): (within(60, 366 * 86400).rule,),
    ("GridNetwork", ".spec.budgets[*].rolling.step"): (within(60, 31 * 86400).rule,),
    ("GridNetwork", SPEND): (TENANT_LABEL_OR_TENANT, TIMEOUT_WITHIN_INTERVAL),
    ("GridNetwork", f"{SPEND}.url"): URL,
    ("GridNetwork", f"{SPEND}.interval"): (within(1, 3600).rule,),
    ("GridNetwork", f"{SPEND}.timeout"): (within(0.1, 300).rule,),
    ("GridNetwork", f"{SPEND}.labels"): (PROMETHEUS_LABEL_NAMES,),
    **{("GridNetwork", f"{SPEND}.siteSelector{part}"): rules for part, rules in SELECTOR.items()},
    ("GridSite", ".spec.egress"): (ADDRESS_OR_FROM, EGRESS_IP_NEEDS_SERVER_NAME),
    ("GridSite", ".spec.egress.from"): (SERVICE_OR_GATEWAY,),
    ("GridSite", ".spec.egress.from.service"): (SERVICE_PORT_OR_NAME,),
    ("GridSite", ".spec.egress.address"): HOST_PORT,
    ("GridSite", ".spec.trust"): (PREVIOUS_PIN_NEEDS_CURRENT, PREVIOUS_PIN_DIFFERS),
    ("GridSite", ".status.egressAddress"): HOST_PORT,
    ("InferenceProvider", ".spec"): (ENDPOINT_IP_NEEDS_SERVER_NAME,),
    ("InferenceProvider", ".spec.models[*].name"): (NO_WHITESPACE, MODEL_NAME_BYTES),
    ("InferenceProvider", ".spec.endpoint"): URL,
    **{
        ("InferenceProvider", f"{selector}{part}"): rules
        for selector in (".spec.siteSelector", ".spec.accessPolicy.siteSelector")
        for part, rules in SELECTOR.items()
    },
    ("InferenceProvider", ".spec.cost.inputPerMillion"): (PRICE_RANGE,),
    ("InferenceProvider", ".spec.cost.outputPerMillion"): (PRICE_RANGE,),
    ("InferenceProvider", ".spec.healthCheck"): (TIMEOUT_WITHIN_INTERVAL,),
    ("InferenceProvider", ".spec.healthCheck.path"): (NO_WHITESPACE,),
    ("InferenceProvider", ".spec.healthCheck.interval"): (within(1, 3600).rule,),
    ("InferenceProvider", ".spec.healthCheck.timeout"): (within(0.1, 300).rule,),
    ("InferenceProvider", ".spec.auth"): (
        SECRET_REF_NEEDED,
        HEADER_WITH_HEADER_STRATEGIES,
        OAUTH2_WITH_OAUTH2_ONLY,
        SERVICE_ACCOUNT_WITH_SERVICE_ACCOUNT_ONLY,
        CUSTOM_WITH_CUSTOM_ONLY,
        ONE_HEADER_SOURCE,
    ),
    ("InferenceProvider", ".spec.auth.serviceAccount.exchange.tokenUrl"): (*URL, TOKEN_URL_HTTPS),
    ("InferenceProvider", ".spec.auth.oauth2"): (
        CLIENT_CREDENTIALS_NEEDS_CLIENT,
        JWT_BEARER_TAKES_NO_CLIENT,
    ),
    ("InferenceProvider", ".spec.auth.oauth2.tokenUrl"): (*URL, TOKEN_URL_HTTPS),
    ("InferenceProvider", ".spec.auth.header"): (HEADER_NOT_AUTHORIZATION, HEADER_NOT_THE_GATEWAYS),
    ("InferenceProvider", METRICS): (URL_OR_PORT, PATH_WITH_PORT, TIMEOUT_WITHIN_INTERVAL),
    ("InferenceProvider", f"{METRICS}.url"): URL,
    ("InferenceProvider", f"{METRICS}.path"): (NO_WHITESPACE,),
    ("InferenceProvider", f"{METRICS}.interval"): (within(1, 3600).rule,),
    ("InferenceProvider", f"{METRICS}.timeout"): (within(0.1, 300).rule,),
    ("InferenceProvider", f"{METRICS}.signals"): (A_SIGNAL_MAPPED,),
    **{
        ("InferenceProvider", f"{METRICS}.signals.{signal}{part}"): rules
        for signal in SIGNAL_NAMES
        for part, rules in (("", (HISTOGRAMS_SUM,)), (".labels", (PROMETHEUS_LABEL_NAMES,)))
    },
}


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[*]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}.*")


def nodes_with_rules() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(kind, path, node) of every schema node that carries rules."""
    for crd in all_crds():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in walk(schema):
            if VALIDATIONS in node:
                yield crd["spec"]["names"]["kind"], path, node


def test_the_crds_carry_the_rules_of_the_inventory() -> None:
    carried = {(kind, path): node[VALIDATIONS] for kind, path, node in nodes_with_rules()}
    expected = {where: [rule.manifest() for rule in rules] for where, rules in INVENTORY.items()}
    assert sorted(carried) == sorted(expected)
    for where, rules in expected.items():
        assert carried[where] == rules, where


def test_every_rule_has_a_message_and_points_at_a_field_of_its_node() -> None:
    for kind, path, node in nodes_with_rules():
        for rule in node[VALIDATIONS]:
            assert set(rule) <= {"rule", "message", "messageExpression", "fieldPath", "reason"}
            assert rule["message"].strip() and "\n" not in rule["message"], (kind, path)
            assert rule.get("reason", Reason.INVALID) in set(Reason), (kind, path)
            if "fieldPath" in rule:
                assert rule["fieldPath"].removeprefix(".") in node["properties"], (kind, path)


CASES: list[Case] = [*MODEL_TEST_CASES, *RULE_CASES]
"""What the API server is asked about: the model tests' cases and both sides of each rule."""


def test_case_names_are_unique() -> None:
    names = [case.id for case in CASES]
    assert len(set(names)) == len(names), sorted({name for name in names if names.count(name) > 1})


def test_every_rule_has_a_case_on_each_side() -> None:
    sides = {(case.rule.rule, case.valid) for case in RULE_CASES if case.rule is not None}
    for rules in INVENTORY.values():
        for rule in rules:
            assert (rule.rule, True) in sides and (rule.rule, False) in sides, rule.message


# --- the review of what the CRDs narrow since the previous release -----------------------


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)


def previous_release_crds() -> list[dict[str, Any]]:
    """The CRDs of the previous release, read from git history (skipped where this clone's
    history lacks it)."""
    commit, _ = named_release()
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        pytest.skip(f"the history of this clone lacks the previous release {commit}")
    return [
        document
        for name in git("ls-tree", "--name-only", f"{commit}:crds").stdout.split()
        if name.endswith(".yaml")
        for document in yaml.safe_load_all(git("show", f"{commit}:crds/{name}").stdout)
        if document and document.get("kind") == "CustomResourceDefinition"
    ]


def test_the_review_records_exactly_what_narrowed_since_the_previous_release() -> None:
    previous = previous_release_crds()
    _, version = named_release()
    assert REVIEWED.release == version
    unreviewed = non_additive_changes_of_all(
        previous, all_crds(), Review(version, frozenset(), frozenset())
    )
    assert {c.validation_rule for c in unreviewed if c.validation_rule} == REVIEWED.rules
    narrowings = {(c.crd, c.path, c.detail) for c in unreviewed if not c.validation_rule}
    assert narrowings == REVIEWED.narrowings
