"""The cases the models are tested with, as documents both sides judge: the models
(``SpecValid``: the CRD's schema, then the models) and the real API server
(``test_crd_validation_rules_server.py``). ``test_crd_validation_rules_edges.py`` adds a
case on each side of every rule the CRDs carry.

The cases come from the model tests themselves (the arguments pytest runs them with, their
builders and documents), so the table grows with them. Status is left out: Grid writes it
through the status subresource, and a create ignores it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import test_crds as crd_tests
import test_models_fields as field_tests
import test_models_resources as resource_tests
import test_models_selectors as selector_tests
import test_models_tls_names as tls_tests
import test_provider_apikey as api_key_tests
import test_provider_custom as custom_tests
from grid.errors import InvalidResourceError
from grid.models.crd import crd_for_kind
from grid.models.resources import load_resource
from grid.models.schema import validate_custom_resource
from grid.models.validation_rules import ValidationRule

network, site, provider = resource_tests.network, resource_tests.site, resource_tests.provider
FINGERPRINT = resource_tests.FINGERPRINT


@dataclass(frozen=True)
class Case:
    """One document and the verdict the models give it. A case there for one rule names it:
    an invalid case is refused with ``message`` by the models and the API server alike (the
    rule's message, or what its message expression makes of this document)."""

    id: str
    document: dict[str, Any]
    valid: bool
    rule: ValidationRule | None = None
    message: str = ""

    @property
    def refusal(self) -> str:
        """The message an invalid case for a rule is refused with ("" for any other)."""
        if self.valid or self.rule is None:
            return ""
        return self.message or self.rule.message


def spec_problems(document: dict[str, Any]) -> list[tuple[str, str]]:
    """``(path, reason)`` of each problem ``SpecValid`` would report for ``document`` as
    written (unknown fields refused, as ``kubectl apply`` refuses them): the CRD's schema
    first, the models when the schema holds."""
    violations = validate_custom_resource(document, crd_for_kind(document["kind"]))
    if violations:
        return [(violation.path, violation.reason) for violation in violations]
    try:
        load_resource(document)
    except InvalidResourceError as error:
        return [(problem.path, problem.reason) for problem in error.errors]
    return []


def parametrized(test: Callable[..., object]) -> list[dict[str, Any]]:
    """The arguments pytest runs ``test`` with: its ``parametrize`` marks, stacked ones
    combined."""
    runs: list[dict[str, Any]] = [{}]
    for mark in getattr(test, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names, rows = mark.args[0], mark.args[1]
        keys = [name.strip() for name in names.split(",")] if isinstance(names, str) else names
        values = [row if len(keys) > 1 else (row,) for row in rows]
        runs = [{**run, **dict(zip(keys, row, strict=True))} for run in runs for row in values]
    return runs


def cases_of(
    test: Callable[..., object], document: Callable[..., dict[str, Any]], *, valid: bool
) -> Iterator[Case]:
    """A case for each run of ``test``, its document built from the run's arguments."""
    for number, arguments in enumerate(parametrized(test)):
        yield Case(f"{test.__name__}[{number}]", document(**arguments), valid)


def with_metadata(document: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["metadata"].update(metadata)
    return changed


def without_network(document: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    del changed["spec"]["gridNetworkRef"]
    return changed


# The durations the models read, each in the field of the narrowest range that takes it.
DURATION_FIELDS = (
    ((0, 10), lambda text: network(renderInterval=text)),
    ((0.1, 300), lambda text: network(swim={"probeInterval": text, "suspicionTimeout": "1h"})),
    ((60, 366 * 86400), lambda text: network(budgets=[{"tenant": "a", "cap": 1, "window": text}])),
)


def duration_case(text: str, seconds: float) -> dict[str, Any]:
    return next(make(text) for (low, high), make in DURATION_FIELDS if low <= seconds <= high)


def selector_provider(selector: dict[str, Any]) -> dict[str, Any]:
    return provider(siteSelector=selector)


def imported_cases() -> Iterator[Case]:
    """The cases of the model tests, through their own builders."""
    yield from cases_of(
        resource_tests.test_network_problems_name_the_field_and_the_fix,
        lambda spec, path, complaint: network(**spec),
        valid=False,
    )
    yield from cases_of(
        resource_tests.test_validation_is_as_strict_as_the_api_server,
        lambda spec, path: network(**spec),
        valid=False,
    )
    yield from cases_of(
        resource_tests.test_site_problems, lambda spec, path, complaint: site(**spec), valid=False
    )
    yield from cases_of(
        resource_tests.test_provider_problems,
        lambda spec, path, complaint: provider(**spec),
        valid=False,
    )
    yield from cases_of(
        resource_tests.test_strategies_without_a_secret,
        lambda strategy: provider(auth={"strategy": strategy}),
        valid=True,
    )
    yield from cases_of(
        tls_tests.test_egress_tls_to_an_ip_address_needs_a_server_name,
        lambda address, mode: site(egress={"address": address, "tlsMode": mode.value}),
        valid=False,
    )
    yield from cases_of(
        tls_tests.test_an_https_endpoint_at_an_ip_address_needs_a_server_name,
        lambda endpoint: provider(endpoint=endpoint),
        valid=False,
    )
    yield from cases_of(
        api_key_tests.test_a_header_goes_with_api_key_or_custom_only,
        lambda auth: api_key_tests.provider(auth=auth),
        valid=False,
    )
    yield from cases_of(
        custom_tests.test_custom_follows_the_api_key_header_rules,
        lambda header, complaint: api_key_tests.provider(
            auth=custom_tests.custom_auth(header=header)
        ),
        valid=False,
    )
    yield from cases_of(
        api_key_tests.test_a_header_the_key_cannot_go_in_is_refused,
        lambda header, complaint: api_key_tests.provider(
            auth=api_key_tests.api_key_auth(header=header)
        ),
        valid=False,
    )
    yield from cases_of(
        api_key_tests.test_header_names_a_key_can_go_in,
        lambda header: api_key_tests.provider(auth=api_key_tests.api_key_auth(header=header)),
        valid=True,
    )
    yield from cases_of(
        selector_tests.test_selector_semantics,
        lambda fields, expected: selector_provider(fields),
        valid=True,
    )
    yield from cases_of(
        selector_tests.test_malformed_requirements,
        lambda requirement, complaint: selector_provider({"matchExpressions": [requirement]}),
        valid=False,
    )
    yield from cases_of(field_tests.test_durations_parse_to_seconds, duration_case, valid=True)
    yield from cases_of(
        field_tests.test_bad_durations_are_rejected_with_the_accepted_form,
        lambda text: network(swim={"probeInterval": text}),
        valid=False,
    )
    yield from cases_of(
        field_tests.test_host_port_addresses_split,
        lambda address, host, port: network(seeds=[address]),
        valid=True,
    )
    yield from cases_of(
        field_tests.test_bad_addresses_say_what_is_wrong,
        lambda address, complaint: network(seeds=[address]),
        valid=False,
    )
    yield from cases_of(
        field_tests.test_the_crd_address_pattern_rejects_what_the_model_rejects,
        lambda address: site(egress={"address": address}),
        valid=False,
    )
    yield from cases_of(
        field_tests.test_bad_fingerprints_are_rejected,
        lambda value: site(trust={"certFingerprint": value}),
        valid=False,
    )
    yield from cases_of(
        field_tests.test_prices_accept_whole_numbers_and_decimal_strings,
        lambda value, amount, wire: provider(
            cost={"inputPerMillion": value, "outputPerMillion": 1}
        ),
        valid=True,
    )
    yield from cases_of(
        field_tests.test_bad_prices_are_rejected,
        lambda value, complaint: provider(cost={"inputPerMillion": value, "outputPerMillion": 1}),
        valid=False,
    )
    # The site of test_crds.py with each of its mistakes in the spec or the envelope.
    spec_site = {key: value for key, value in crd_tests.SITE.items() if key != "status"}
    yield Case("test_crds.SITE", copy.deepcopy(spec_site), valid=True)
    for number, arguments in enumerate(
        parametrized(crd_tests.test_both_validators_reject_the_same_mistakes)
    ):
        if not arguments["path"].startswith("status"):
            mistake = crd_tests.mutate(**arguments)
            mistake.pop("status", None)
            name = f"test_both_validators_reject_the_same_mistakes[{number}]"
            yield Case(name, mistake, valid=False)
    for number, document in enumerate(api_key_tests.MESH_PROVIDERS):
        yield Case(f"test_provider_apikey.MESH_PROVIDERS[{number}]", document, valid=True)


def documents_of_the_model_tests() -> Iterator[Case]:
    """The documents the model tests build in their bodies, valid and not."""
    colon = ":".join(FINGERPRINT[i : i + 2] for i in range(0, 64, 2)).upper()
    yield Case("a minimal network", network(), valid=True)
    yield Case(
        "a network with every field",
        network(
            gridId="2f1e4c1a-0d4e-4b7a-9d52-6c1f2b3a4d5e",
            seeds=["east-edge.glb-demo.example:7946", "[fd00::7]:7946"],
            region="us-east",
            zone="us-east-1a",
            swim={"gossipNodes": 4, "probeInterval": "500ms", "suspicionTimeout": "2s"},
            tls={
                "caSecretRef": {"name": "ca", "namespace": "grid-system", "key": "ca.crt"},
                "siteCertSecretRef": {"name": "site-tls", "namespace": "grid-system"},
                "swimKeyRef": {"name": "swim", "namespace": "grid-system", "key": "swim.key"},
            },
            staleCandidateTtlSeconds=60,
            scoring={"weights": {"locality": 5}, "admission": {"queueDepth": 0.7}},
            budgets=[{"tenant": "acme", "cap": 1000, "window": "24h", "unit": "tokens"}],
            gatewayRefs=[
                {"name": "edge", "namespace": "grid-system"},
                {
                    "name": "next",
                    "namespace": "grid-system",
                    "configMapKey": "routing-overlay.json",
                    "routeFilterName": "intelligent_route",
                    "credentialFilterName": "credential_inject",
                    "consumerConfig": {"enabled": True},
                },
            ],
        ),
        valid=True,
    )
    yield Case(
        "a site with egress and two pins",
        site(
            egress={"address": "east-edge.example:8443"},
            region="us-east",
            zone="us-east-1a",
            sovereigntyZone="us",
            trust={
                "certFingerprint": colon,
                "previousCertFingerprint": resource_tests.OLD_FINGERPRINT,
            },
        ),
        valid=True,
    )
    labelled = {"grid.praxis-proxy.io/auto-discover": "true", "topology.kubernetes.io/region": "x"}
    yield Case("a labelled site", with_metadata(site(), labels=labelled), valid=True)
    yield Case("a site named East_Edge", with_metadata(site(), name="East_Edge"), valid=False)
    yield Case("a label key 'bad key!'", with_metadata(site(), labels={"bad key!": "x"}), False)
    yield Case("a label value '-bad'", with_metadata(site(), labels={"ok": "-bad"}), False)
    yield Case("a site without its network", without_network(site()), valid=False)
    yield Case("egress by name", site(egress={"address": "gw.example:8443"}), valid=True)
    yield Case(
        "plaintext egress to an IP address",
        site(egress={"address": "192.0.2.7:8080", "tlsMode": "plaintext"}),
        valid=True,
    )
    yield Case("plain http at an IP address", provider(endpoint="http://10.0.0.5:8000"), True)
    yield Case("the default provider", provider(), valid=True)
    yield Case(
        "a full provider",
        provider(
            backendKind="api_provider",
            providerKind="open_ai",
            models=[{"name": "gpt-4o", "capabilities": ["chat", "tools"], "contextWindow": 128000}],
            endpoint="https://api.openai.com/v1",
            cluster="openai-upstream",
            cost={"inputPerMillion": "2.50", "outputPerMillion": 10},
            healthCheck={"path": "/health", "interval": "30s", "timeout": "5s"},
            auth={
                "strategy": "BearerToken",
                "secretRef": {"name": "openai", "namespace": "grid-system", "key": "token"},
            },
            accessPolicy={"siteSelector": {"matchLabels": {"tier": "edge"}}},
            metricsConfig={
                "url": "https://metrics.example/metrics",
                "signals": {"queueDepth": {"metric": "queue_depth"}},
                "onError": "pessimistic",
            },
        ),
        valid=True,
    )
    yield Case(
        "a header that is not a string",
        api_key_tests.provider(auth=api_key_tests.api_key_auth(header=7)),
        valid=False,
    )


MODEL_TEST_CASES: list[Case] = [*imported_cases(), *documents_of_the_model_tests()]


@pytest.mark.parametrize("case", MODEL_TEST_CASES, ids=[case.id for case in MODEL_TEST_CASES])
def test_the_models_judge_each_case_as_their_tests_do(case: Case) -> None:
    problems = spec_problems(case.document)
    assert (problems == []) is case.valid, problems
