"""Each rule of the CRDs from both sides: a case it lets through at its edge and a case it
refuses, which the models judge the same way, with the rule's message (or, for a rule
whose twin is a CRD pattern, the pattern's). ``test_crd_validation_rules_server.py`` puts
the same cases to the real API server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from grid.models.budgets import ONE_WINDOW, STEPS_FIT_THE_LENGTH
from grid.models.egress_source import SERVICE_OR_GATEWAY, SERVICE_PORT_OR_NAME
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
from grid.models.validation_rules import ValidationRule
from test_crd_validation_rules_cases import (
    FINGERPRINT,
    Case,
    network,
    provider,
    site,
    spec_problems,
)

LABEL_KEY = (LABEL_KEY_PREFIX, LABEL_KEY_NAME)


def metrics(**config: Any) -> dict[str, Any]:
    return provider(metricsConfig={"signals": {"health": {"metric": "up"}}, **config})


def selected_by(selector: dict[str, Any]) -> dict[str, Any]:
    return provider(siteSelector=selector)


def spend_source(**source: Any) -> dict[str, Any]:
    spec = {
        "name": "litellm",
        "siteSelector": {},
        "url": "http://litellm.example:4000/metrics",
        "metric": "litellm_total_tokens_metric_total",
        **source,
    }
    return network(spendSources=[{key: value for key, value in spec.items() if value is not None}])


def budget(**window: Any) -> dict[str, Any]:
    return network(budgets=[{"tenant": "acme", "cap": 1000, **window}])


def rolling(**window: Any) -> dict[str, Any]:
    return budget(rolling=window)


def rolling_length(text: str) -> dict[str, Any]:
    """A rolling window of length ``text`` (seconds) in steps its rules take: one step, or
    20 for a length past the longest step."""
    seconds = float(text.removesuffix("s"))
    if seconds <= 31 * 86400:
        return rolling(length=text, step=text)
    return rolling(length=text, step=f"{round(seconds * 1000) // 20}ms")


def rule_cases() -> Iterator[Case]:
    """Each rule from both sides: what it lets through at its edge, and what it refuses."""

    def passes(name: str, rule: ValidationRule, document: dict[str, Any]) -> Case:
        return Case(name, document, valid=True, rule=rule)

    def refused(
        name: str, rule: ValidationRule, document: dict[str, Any], message: str = ""
    ) -> Case:
        return Case(name, document, valid=False, rule=rule, message=message)

    durations = (
        ((0, 10), lambda text: network(renderInterval=text)),
        ((0.1, 300), lambda text: network(swim={"probeInterval": text, "suspicionTimeout": "1h"})),
        (
            (0.1, 3600),
            lambda text: network(swim={"probeInterval": "100ms", "suspicionTimeout": text}),
        ),
        ((1, 3600), lambda text: network(signalPublishing={"maxInterval": text})),
        (
            (60, 366 * 86400),
            lambda text: network(budgets=[{"tenant": "a", "cap": 1, "window": text}]),
        ),
    )
    rolling_durations = (
        ("rolling length ", (60, 366 * 86400), rolling_length),
        ("rolling step ", (60, 31 * 86400), lambda text: rolling(length=text, step=text)),
    )
    for prefix, (low, high), make in [*(("", b, m) for b, m in durations), *rolling_durations]:
        rule = within(low, high).rule
        for seconds in (low, high):
            name = f"{prefix}{seconds}s within [{low}s, {high}s]"
            yield passes(name, rule, make(f"{seconds}s"))
        name = f"{prefix}{high + 0.5}s beyond [{low}s, {high}s]"
        yield refused(name, rule, make(f"{high + 0.5}s"))
    calendar = {"period": "month", "timeZone": "Europe/Paris"}
    yield passes("a fixed window", ONE_WINDOW, budget(window="24h"))
    yield passes("a calendar window", ONE_WINDOW, budget(calendar=calendar))
    yield passes("a rolling window", ONE_WINDOW, budget(rolling={"length": "24h", "step": "1h"}))
    yield refused("no window", ONE_WINDOW, budget())
    yield refused("a window and a calendar", ONE_WINDOW, budget(window="24h", calendar=calendar))
    yield passes("32 steps", STEPS_FIT_THE_LENGTH, rolling(length="32h", step="1h"))
    yield passes("one step", STEPS_FIT_THE_LENGTH, rolling(length="90m", step="1.5h"))
    yield refused("33 steps", STEPS_FIT_THE_LENGTH, rolling(length="33h", step="1h"))
    yield refused("part of a step", STEPS_FIT_THE_LENGTH, rolling(length="24h", step="7h"))
    swim = {"probeInterval": "10s"}
    yield passes(
        "suspicion = probe",
        SUSPICION_OUTLASTS_PROBE,
        network(swim={**swim, "suspicionTimeout": "10s"}),
    )
    yield refused(
        "suspicion < probe",
        SUSPICION_OUTLASTS_PROBE,
        network(swim={**swim, "suspicionTimeout": "9999ms"}),
    )

    def affinity(**settings: Any) -> dict[str, Any]:
        consumer = {"sessionAffinity": settings}
        return network(gatewayRefs=[{"name": "g", "namespace": "n", "consumerConfig": consumer}])

    yield refused("affinity without a key", AFFINITY_NEEDS_A_KEY, affinity(header=None))
    yield passes(
        "affinity by cookie", AFFINITY_NEEDS_A_KEY, affinity(header=None, cookie="session")
    )
    yield passes("affinity off, no key", AFFINITY_NEEDS_A_KEY, affinity(enabled=False, header=None))

    def consumer(**config: Any) -> dict[str, Any]:
        return network(gatewayRefs=[{"name": "g", "namespace": "n", "consumerConfig": config}])

    # Whitespace that RE2's \s does not take and Python's does: \v, \x1c, \x85, U+00A0, U+3000.
    for number, space in enumerate("\v\x1c\x85\u00a0\u3000"):
        yield refused(
            f"a model name with space {number}",
            NO_WHITESPACE,
            provider(models=[{"name": f"a{space}b"}]),
        )
    yield refused(
        "an endpoint with a no-break space",
        NO_WHITESPACE,
        provider(endpoint="http://x.example/a\u00a0b"),
    )
    yield refused("a mount path with \\v", NO_WHITESPACE, consumer(tlsMountPath="/etc/a\vb"))
    yield refused(
        "a health path with U+2028", NO_WHITESPACE, provider(healthCheck={"path": "/a\u2028b"})
    )
    yield passes(
        "a model name of letters and marks",
        NO_WHITESPACE,
        provider(models=[{"name": "é-\u200b_x"}]),
    )

    name_253 = ".".join(["a" * 63] * 4)[:253]
    yield refused("the seed [1:2:3]", HOST_PORT_IPV6, network(seeds=["[1:2:3]:7946"]))
    yield refused("the seed [10.0.0.5]", HOST_PORT_IPV6, network(seeds=["[10.0.0.5]:7946"]))
    # The API server's isIP refuses IPv4-mapped addresses; the rule leaves them to the models.
    for mapped in ("[::ffff:10.0.0.5]:7946", "[::FFFF:a00:5]:7946"):
        yield passes(f"the seed {mapped}", HOST_PORT_IPV6, network(seeds=[mapped]))
    yield passes("a seed host of 253", HOST_PORT_NAME_LENGTH, network(seeds=[f"{name_253}:7946"]))
    yield refused("a seed host of 254", HOST_PORT_NAME_LENGTH, network(seeds=[f"{name_253}a:7946"]))
    admin = {"adminAddress": "[fd00::1]:9901"}
    yield passes(
        "an IPv6 admin address",
        HOST_PORT_IPV6,
        network(gatewayRefs=[{"name": "g", "namespace": "n", "consumerConfig": admin}]),
    )

    ipv6_egress = {"address": "[fd00::5]:8443"}
    yield refused(
        "IPv6 egress, serverName null",
        EGRESS_IP_NEEDS_SERVER_NAME,
        site(egress={**ipv6_egress, "serverName": None}),
    )
    yield passes(
        "IPv6 egress in plaintext",
        EGRESS_IP_NEEDS_SERVER_NAME,
        site(egress={**ipv6_egress, "tlsMode": "plaintext"}),
    )
    yield passes(
        "egress at 010.0.0.5 (a name)",
        EGRESS_IP_NEEDS_SERVER_NAME,
        site(egress={"address": "010.0.0.5:8443"}),
    )
    service = {"namespace": "edge", "name": "gateway"}
    yield passes(
        "egress from a Service", ADDRESS_OR_FROM, site(egress={"from": {"service": service}})
    )
    yield refused(
        "egress with an address and from",
        ADDRESS_OR_FROM,
        site(egress={"address": "gw.example:443", "from": {"service": service}}),
    )
    yield refused("egress with neither address nor from", ADDRESS_OR_FROM, site(egress={}))
    yield passes(
        "egress from a Service, no serverName",
        EGRESS_IP_NEEDS_SERVER_NAME,
        site(egress={"from": {"service": service}, "serverName": None}),
    )
    yield passes(
        "egress from a Service port by name",
        SERVICE_PORT_OR_NAME,
        site(egress={"from": {"service": {**service, "portName": "tls"}}}),
    )
    yield refused(
        "egress from a Service port by name and number",
        SERVICE_PORT_OR_NAME,
        site(egress={"from": {"service": {**service, "port": 443, "portName": "tls"}}}),
    )
    gateway = {"namespace": "edge", "name": "gateway", "listener": "grid"}
    yield passes(
        "egress from a Gateway", SERVICE_OR_GATEWAY, site(egress={"from": {"gateway": gateway}})
    )
    yield refused(
        "egress from a Service and a Gateway",
        SERVICE_OR_GATEWAY,
        site(egress={"from": {"service": service, "gateway": gateway}}),
    )
    yield refused("egress from nothing", SERVICE_OR_GATEWAY, site(egress={"from": {}}))
    pins = {"certFingerprint": FINGERPRINT}
    yield passes("a current pin only", PREVIOUS_PIN_NEEDS_CURRENT, site(trust=pins))
    yield refused(
        "a previous pin only",
        PREVIOUS_PIN_NEEDS_CURRENT,
        site(trust={"previousCertFingerprint": FINGERPRINT}),
    )
    colon = ":".join(FINGERPRINT[i : i + 2] for i in range(0, 64, 2)).upper()
    yield refused(
        "the same pin twice, two forms",
        PREVIOUS_PIN_DIFFERS,
        site(trust={**pins, "previousCertFingerprint": colon}),
    )
    yield passes(
        "two pins", PREVIOUS_PIN_DIFFERS, site(trust={**pins, "previousCertFingerprint": "ab" * 32})
    )

    https_ip = "https://10.0.0.5:8443/v1"
    yield refused(
        "https at an IP address", ENDPOINT_IP_NEEDS_SERVER_NAME, provider(endpoint=https_ip)
    )
    yield passes(
        "https at an IP address, serverName",
        ENDPOINT_IP_NEEDS_SERVER_NAME,
        provider(endpoint=https_ip, serverName="vllm.example"),
    )
    yield passes(
        "https at a name",
        ENDPOINT_IP_NEEDS_SERVER_NAME,
        provider(endpoint="https://10.0.0.5.nip.io/v1"),
    )
    for endpoint in ("https://x.example:0", "https://x.example:/v1", "https://[::1]x/v1"):
        yield refused(f"the endpoint {endpoint}", URL_HOST_AND_PORT, provider(endpoint=endpoint))
    yield passes(
        "the port 00080", URL_HOST_AND_PORT, provider(endpoint="http://x.example:00080/v1")
    )
    for endpoint in ("https://[1:2:3]/v1", "http://[10.0.0.5]:80"):
        yield refused(f"the endpoint {endpoint}", URL_IPV6_HOST, provider(endpoint=endpoint))
    for endpoint in ("http://[fd00::5]", "http://[::ffff:10.0.0.5]:80/v1"):
        yield passes(f"the endpoint {endpoint}", URL_IPV6_HOST, provider(endpoint=endpoint))
    long_host = provider(endpoint=f"http://{name_253}/v1")
    yield passes("an endpoint host of 253", URL_HOST_AND_PORT, long_host)
    too_long = provider(endpoint=f"http://{name_253}a/v1")
    yield refused("an endpoint host of 254", URL_HOST_AND_PORT, too_long)
    yield refused("metrics from :70000", URL_HOST_AND_PORT, metrics(url="http://m.example:70000"))

    yield passes(
        "a model name of 256 bytes", MODEL_NAME_BYTES, provider(models=[{"name": "é" * 128}])
    )
    yield refused(
        "a model name of 258 bytes", MODEL_NAME_BYTES, provider(models=[{"name": "é" * 129}])
    )
    for price in ("1000000", "999999.99", "0001000000"):
        cost = {"inputPerMillion": price, "outputPerMillion": 1}
        yield passes(f"the price {price}", PRICE_RANGE, provider(cost=cost))
    cost = {"inputPerMillion": 1, "outputPerMillion": "1000000.01"}
    yield refused("the price 1000000.01", PRICE_RANGE, provider(cost=cost))
    yield passes(
        "a timeout under its interval",
        TIMEOUT_WITHIN_INTERVAL,
        provider(healthCheck={"interval": "2s", "timeout": "1999ms"}),
    )
    yield refused(
        "a timeout of its interval",
        TIMEOUT_WITHIN_INTERVAL,
        metrics(port=9000, interval="5s", timeout="5s"),
    )
    yield passes(
        "spend by a tenant label", TENANT_LABEL_OR_TENANT, spend_source(tenantLabel="team")
    )
    yield passes("spend of one tenant", TENANT_LABEL_OR_TENANT, spend_source(tenant="llama-pool"))
    yield refused("spend of no tenant", TENANT_LABEL_OR_TENANT, spend_source())
    yield refused(
        "spend of a tenant label and a tenant",
        TENANT_LABEL_OR_TENANT,
        spend_source(tenantLabel="team", tenant="acme"),
    )

    key = {"name": "k", "namespace": "grid-system", "key": "api-key"}
    yield refused(
        "Sigv4 without a secretRef",
        SECRET_REF_NEEDED,
        provider(auth={"strategy": "Sigv4"}),
        "strategy Sigv4 needs secretRef (name, namespace, key of the Secret holding the credential)",
    )
    yield passes(
        "MtlsOnly without a secretRef",
        SECRET_REF_NEEDED,
        provider(auth={"strategy": "MtlsOnly", "secretRef": None}),
    )
    yield refused(
        "a header with Oauth2",
        HEADER_WITH_HEADER_STRATEGIES,
        provider(auth={"strategy": "Oauth2", "secretRef": key, "header": "x-key"}),
        "header goes with strategy ApiKey or Custom only, not Oauth2: remove header, or use "
        "strategy ApiKey (or Custom) to send the Secret's value in that header",
    )
    yield passes(
        "a null header with Oauth2",
        HEADER_WITH_HEADER_STRATEGIES,
        provider(auth={"strategy": "Oauth2", "secretRef": key, "header": None}),
    )
    client = {"grant": "ClientCredentials", "tokenUrl": "https://idp.example/token"}
    oauth2 = {"strategy": "Oauth2", "secretRef": key}
    yield refused(
        "oauth2 settings with BearerToken",
        OAUTH2_WITH_OAUTH2_ONLY,
        provider(
            auth={
                "strategy": "BearerToken",
                "secretRef": key,
                "oauth2": {**client, "clientId": "g"},
            }
        ),
        "oauth2 goes with strategy Oauth2 only",
    )
    yield passes(
        "oauth2 settings with Oauth2",
        OAUTH2_WITH_OAUTH2_ONLY,
        provider(auth={**oauth2, "oauth2": {**client, "clientId": "grid"}}),
    )
    yield refused(
        "client credentials without a client id",
        CLIENT_CREDENTIALS_NEEDS_CLIENT,
        provider(auth={**oauth2, "oauth2": client}),
        "grant ClientCredentials needs tokenUrl and clientId",
    )
    yield passes(
        "the JWT-bearer grant without a token URL",
        CLIENT_CREDENTIALS_NEEDS_CLIENT,
        provider(auth={**oauth2, "oauth2": {"grant": "JwtBearer"}}),
    )
    yield refused(
        "the JWT-bearer grant with a client id",
        JWT_BEARER_TAKES_NO_CLIENT,
        provider(auth={**oauth2, "oauth2": {"grant": "JwtBearer", "clientId": "grid"}}),
    )
    yield passes(
        "the JWT-bearer grant with scopes",
        JWT_BEARER_TAKES_NO_CLIENT,
        provider(auth={**oauth2, "oauth2": {"grant": "JwtBearer", "scopes": ["a", "b"]}}),
    )
    for url in ("http://idp.example/token", "http://10.0.0.1/token"):
        yield refused(
            f"the token URL {url}",
            TOKEN_URL_HTTPS,
            provider(auth={**oauth2, "oauth2": {**client, "clientId": "g", "tokenUrl": url}}),
        )
    for url in ("http://127.0.0.1:8080/token", "http://localhost/token", "http://[::1]:9/t"):
        yield passes(
            f"the token URL {url}",
            TOKEN_URL_HTTPS,
            provider(auth={**oauth2, "oauth2": {**client, "clientId": "g", "tokenUrl": url}}),
        )
    yield refused(
        "custom settings with ApiKey",
        CUSTOM_WITH_CUSTOM_ONLY,
        provider(auth={"strategy": "ApiKey", "secretRef": key, "custom": {}}),
    )
    yield passes(
        "custom settings with Custom",
        CUSTOM_WITH_CUSTOM_ONLY,
        provider(auth={"strategy": "Custom", "secretRef": key, "custom": {}}),
    )
    yield refused(
        "a header named in the spec and in the Secret",
        ONE_HEADER_SOURCE,
        provider(
            auth={
                "strategy": "Custom",
                "secretRef": key,
                "header": "X-Auth",
                "custom": {"headerKey": "header"},
            }
        ),
    )
    yield passes(
        "a header named in the spec for a template",
        ONE_HEADER_SOURCE,
        provider(auth={"strategy": "Custom", "secretRef": key, "header": "X-Auth", "custom": {}}),
    )
    account = {"name": "vertex-caller", "namespace": "gateways", "audience": "//iam.example/p"}
    yield refused(
        "serviceAccount settings with MtlsOnly",
        SERVICE_ACCOUNT_WITH_SERVICE_ACCOUNT_ONLY,
        provider(auth={"strategy": "MtlsOnly", "serviceAccount": account}),
        "serviceAccount goes with strategy ServiceAccount only",
    )
    yield passes(
        "serviceAccount settings with ServiceAccount",
        SERVICE_ACCOUNT_WITH_SERVICE_ACCOUNT_ONLY,
        provider(auth={"strategy": "ServiceAccount", "serviceAccount": account}),
    )
    for url in ("http://sts.example/v1/token", "http://10.0.0.1/token"):
        yield refused(
            f"the STS URL {url}",
            TOKEN_URL_HTTPS,
            provider(
                auth={
                    "strategy": "ServiceAccount",
                    "serviceAccount": {**account, "exchange": {"tokenUrl": url}},
                }
            ),
        )
    yield passes(
        "the STS URL on loopback",
        TOKEN_URL_HTTPS,
        provider(
            auth={
                "strategy": "ServiceAccount",
                "serviceAccount": {**account, "exchange": {"tokenUrl": "http://127.0.0.1:9/t"}},
            }
        ),
    )
    yield passes(
        "a header with Custom",
        HEADER_WITH_HEADER_STRATEGIES,
        provider(auth={"strategy": "Custom", "secretRef": key, "header": "X-Auth-Token"}),
    )
    yield refused(
        "the header Authorization with Custom",
        HEADER_NOT_AUTHORIZATION,
        provider(auth={"strategy": "Custom", "secretRef": key, "header": "Authorization"}),
    )
    api_key = {"strategy": "ApiKey", "secretRef": key}
    yield refused(
        "the header AUTHORIZATION",
        HEADER_NOT_AUTHORIZATION,
        provider(auth={**api_key, "header": "AUTHORIZATION"}),
    )
    yield passes(
        "the header Authorization-Key",
        HEADER_NOT_AUTHORIZATION,
        provider(auth={**api_key, "header": "Authorization-Key"}),
    )
    yield refused(
        "the header keep-alive",
        HEADER_NOT_THE_GATEWAYS,
        provider(auth={**api_key, "header": "keep-alive"}),
        "must not be Keep-Alive: the gateway sets it itself (Host, Content-Length, "
        "Transfer-Encoding and the hop-by-hop headers such as Connection are the gateway's)",
    )
    yield passes(
        "the header X-Host", HEADER_NOT_THE_GATEWAYS, provider(auth={**api_key, "header": "X-Host"})
    )

    yield refused(
        "metrics from url and port", URL_OR_PORT, metrics(url="http://m.example", port=9000)
    )
    yield passes(
        "metrics from url, port null", URL_OR_PORT, metrics(url="http://m.example", port=None)
    )
    yield refused(
        "metrics from url with path", PATH_WITH_PORT, metrics(url="http://m.example", path="/m")
    )
    yield passes("metrics from port and path", PATH_WITH_PORT, metrics(port=9000, path="/m"))
    yield refused(
        "no signal but nulls", A_SIGNAL_MAPPED, metrics(port=9000, signals={"health": None})
    )
    yield passes(
        "one signal", A_SIGNAL_MAPPED, metrics(port=9000, signals={"queueDepth": {"metric": "q"}})
    )
    histogram = {"metric": "latency", "quantile": 0.99}
    yield passes(
        "a histogram", HISTOGRAMS_SUM, metrics(port=9000, signals={"p99LatencyMs": histogram})
    )
    yield refused(
        "a histogram with aggregation",
        HISTOGRAMS_SUM,
        metrics(port=9000, signals={"p99LatencyMs": {**histogram, "aggregation": "max"}}),
    )
    for labels, valid in (({"_job": "x", "pod_2": "y"}, True), ({"2pod": "x"}, False)):
        signals = {"health": {"metric": "up", "labels": labels}}
        yield Case(
            f"the metric labels {labels}",
            metrics(port=9000, signals=signals),
            valid,
            PROMETHEUS_LABEL_NAMES,
        )

    yield refused(
        "operator In without values",
        VALUES_NEEDED,
        selected_by({"matchExpressions": [{"key": "tier", "operator": "In"}]}),
        "operator In needs at least one value",
    )
    yield passes(
        "operator NotIn with a value",
        VALUES_NEEDED,
        selected_by({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["x"]}]}),
    )
    yield refused(
        "operator DoesNotExist with values",
        VALUES_FORBIDDEN,
        selected_by(
            {"matchExpressions": [{"key": "t", "operator": "DoesNotExist", "values": ["x"]}]}
        ),
        "operator DoesNotExist takes no values",
    )
    yield passes(
        "operator Exists, values []",
        VALUES_FORBIDDEN,
        selected_by({"matchExpressions": [{"key": "t", "operator": "Exists", "values": []}]}),
    )
    for label_key, index in (
        ("Example.com/tier", 0),
        (f"{'a' * 254}/tier", 0),
        ("a/b/tier", 0),
        ("example.com/" + "t" * 64, 1),
        ("tier-", 1),
    ):
        expression = {"key": label_key, "operator": "Exists"}
        yield refused(
            f"the key {label_key[:24]}",
            LABEL_KEY[index],
            selected_by({"matchExpressions": [expression]}),
        )
        yield refused(
            f"the label {label_key[:24]}",
            LABEL_MAP_KEYS[index],
            selected_by({"matchLabels": {label_key: "x"}}),
        )
    for label_key in (f"{'a' * 253}/{'t' * 63}", "example.com/tier", "Tier_1.x"):
        expression = {"key": label_key, "operator": "Exists"}
        for index in (0, 1):
            yield passes(
                f"the key {label_key[:24]} ({index})",
                LABEL_KEY[index],
                selected_by({"matchExpressions": [expression]}),
            )
            yield passes(
                f"the label {label_key[:24]} ({index})",
                LABEL_MAP_KEYS[index],
                selected_by({"matchLabels": {label_key: "x"}}),
            )
    for value, valid in (("v" * 63, True), ("v" * 64, False), ("", True)):
        expression = {"key": "tier", "operator": "In", "values": [value]}
        yield Case(
            f"a selector value of {len(value)}",
            selected_by({"matchExpressions": [expression]}),
            valid,
        )


RULE_CASES = list(rule_cases())


# Rules whose twin is a pattern of the CRD, which the models read with Python's re: the
# models refuse with the pattern's message, the API server with the rule's.
PATTERN_TWINS = (NO_WHITESPACE,)


@pytest.mark.parametrize("case", RULE_CASES, ids=[case.id for case in RULE_CASES])
def test_the_models_judge_each_rule_case_as_its_rule(case: Case) -> None:
    problems = spec_problems(case.document)
    assert (problems == []) is case.valid, problems
    if case.refusal and case.rule not in PATTERN_TWINS:
        assert case.refusal in [reason for _, reason in problems]
