"""What-if inputs: candidates built from a directory of resources and a metrics file, and
the ``grid render`` / ``grid explain`` commands on top of them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.cli import main
from grid.errors import ConfigError, MetricsFileError
from grid.models.common import LocalityTier
from grid.models.resources import load_resources_from_dir
from grid.models.site import EgressTlsMode
from grid.render.consumer import ClusterEndpoint
from grid.render.validate import ExpectedScope, validate_overlay
from grid.render.whatif import MetricsReport, WhatIf, build_what_if, parse_metrics_report
from grid.scoring.inputs import SecretRef

GOLDEN = Path(__file__).resolve().parent / "golden"
MESH = GOLDEN / "mesh"
METRICS = GOLDEN / "metrics.yaml"
NOW = "2026-07-29T12:00:00Z"


def metrics() -> MetricsReport:
    return parse_metrics_report(yaml.safe_load(METRICS.read_text()))


def what_if(site: str = "alpha", gateway: str = "edge-gateway", **options: Any) -> WhatIf:
    resources = load_resources_from_dir(options.pop("directory", MESH))
    assert resources.errors == ()
    return build_what_if(
        resources, site=site, gateway=gateway, metrics=options.pop("metrics", metrics()), **options
    )


def by_key(plan: WhatIf) -> dict[tuple[str, str, str], Any]:
    return {candidate.key: candidate for candidate in plan.candidates}


def test_providers_sit_where_their_selector_places_them() -> None:
    plan = what_if("alpha")
    assert sorted(by_key(plan)) == [
        ("claude", "claude-sonnet", "alpha"),
        ("openai", "gpt-4o", "alpha"),
        ("openai", "llama-8b", "alpha"),
        ("tgi-gamma", "llama-8b", "gamma"),
        ("tgi-gamma", "mistral-7b", "gamma"),
        ("vllm-alpha", "llama-8b", "alpha"),
        ("vllm-alpha", "llama-8b", "gamma"),
        ("vllm-beta", "llama-8b", "beta"),
        ("vllm-beta", "qwen-72b", "beta"),
    ]
    assert plan.not_offered == (("orphan", "its siteSelector matches no GridSite"),)
    assert plan.scope.network == "golden"
    assert plan.source.uid == "0b5c2a8e-golden"
    assert plan.source.generation == 3


def test_local_candidates_use_their_own_endpoint_and_remote_ones_the_site_egress() -> None:
    plan = what_if("alpha")
    candidates = by_key(plan)
    local = candidates[("vllm-alpha", "llama-8b", "alpha")]
    assert local.cluster == "vllm-alpha"
    remote = candidates[("vllm-beta", "qwen-72b", "beta")]
    assert remote.cluster == "site-beta"
    assert remote.credential is None
    assert plan.endpoints["vllm-alpha"] == ClusterEndpoint(
        "vllm.alpha.svc:8000", EgressTlsMode.PLAINTEXT, "vllm.alpha.svc"
    )
    assert plan.endpoints["site-beta"] == ClusterEndpoint(
        "beta.golden.example:8443", EgressTlsMode.TLS, "gateway.beta.golden.example"
    )
    assert plan.endpoints["site-gamma"].tls_mode is EgressTlsMode.MUTUAL_TLS
    assert plan.endpoints["openai"] == ClusterEndpoint(
        "api.openai.com:443", EgressTlsMode.TLS, "api.openai.com", path="/v1"
    )


def test_providers_tied_to_no_site_are_offered_at_the_consumer_with_unknown_nearness() -> None:
    plan = what_if("beta")
    openai = by_key(plan)[("openai", "gpt-4o", "beta")]
    assert not openai.site_bound
    assert openai.credential == SecretRef("openai-api-key", "grid-system", "token")
    assert openai.access_policy is None
    assert by_key(plan)[("claude", "claude-sonnet", "beta")].access_policy is not None


def test_signals_come_from_the_metrics_file_with_per_site_values() -> None:
    candidates = by_key(what_if("alpha"))
    at_alpha = candidates[("vllm-alpha", "llama-8b", "alpha")]
    at_gamma = candidates[("vllm-alpha", "llama-8b", "gamma")]
    assert at_alpha.metrics.queue_depth == 8
    assert at_gamma.metrics.queue_depth == 50
    assert at_gamma.metrics.kv_cache_utilization == 0.5
    assert at_alpha.healthy is True
    assert at_alpha.updated_at is not None
    assert candidates[("claude", "claude-sonnet", "alpha")].metrics.queue_depth is None


def test_an_unknown_consumer_is_noted_and_sees_nothing_guarded() -> None:
    plan = what_if("delta")
    assert plan.consumer.labels is None
    assert any("unknown" in note for note in plan.notes)


def test_a_gateway_missing_from_the_network_is_rendered_with_defaults() -> None:
    plan = what_if(gateway="adhoc", namespace="tools")
    assert (plan.gateway.name, plan.gateway.namespace) == ("adhoc", "tools")
    assert plan.gateway.route_filter_name == "grid_route"
    assert any("adhoc" in note for note in plan.notes)
    with pytest.raises(ConfigError, match="'Not_A_Name!': must be a DNS subdomain"):
        what_if(gateway="Not_A_Name!")


def test_an_explicit_namespace_picks_the_gateway() -> None:
    plan = what_if(gateway="next-gateway", namespace="grid-system")
    assert plan.gateway.route_filter_name == "intelligent_route"


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ({"providers": {"ghost": {"queueDepth": 1}}}, "'ghost' is not in this network"),
        ({"providers": {"vllm-beta": {"sites": {"alpha": {}}}}}, "does not sit at site 'alpha'"),
    ],
)
def test_metrics_for_what_is_not_there_are_refused(document: Any, match: str) -> None:
    with pytest.raises(MetricsFileError, match=match):
        what_if(metrics=parse_metrics_report(document))


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ({"providers": {"p": {"queueDepth": -1}}}, "queueDepth"),
        ({"providers": {"p": {"kvCacheUtilization": 1.5}}}, "kvCacheUtilization"),
        ({"providers": {"p": {"queueDepth": "12"}}}, "queueDepth"),
        ({"providers": {"p": {"healthy": "yes"}}}, "healthy"),
        ({"providers": {"p": {"updatedAt": "2026-07-29T12:00:00"}}}, "updatedAt"),
        ({"providers": {"p": {"queueDepht": 1}}}, "queueDepht"),
        ({"providers": ["p"]}, "providers"),
        ("just text", "metrics file"),
        ({"providers": {"p": {"p99LatencyMs": float("nan")}}}, "p99LatencyMs"),
    ],
)
def test_a_malformed_metrics_file_names_the_field(document: Any, match: str) -> None:
    with pytest.raises(MetricsFileError, match=match):
        parse_metrics_report(document)


def test_an_empty_metrics_file_means_no_signals() -> None:
    assert parse_metrics_report(None) == MetricsReport()


def copy_mesh(tmp_path: Path) -> Path:
    directory = tmp_path / "mesh"
    shutil.copytree(MESH, directory)
    return directory


def edit_provider(directory: Path, name: str, change: Any) -> None:
    path = directory / "providers.yaml"
    documents = list(yaml.safe_load_all(path.read_text()))
    for document in documents:
        if document["metadata"]["name"] == name:
            change(document)
    path.write_text(yaml.safe_dump_all(documents))


def test_a_sigv4_provider_is_offered_with_the_key_its_site_signs(tmp_path: Path) -> None:
    directory = copy_mesh(tmp_path)
    edit_provider(
        directory, "openai", lambda doc: doc["spec"]["auth"].update({"strategy": "Sigv4"})
    )
    plan = what_if(directory=directory)
    assert not any(name == "openai" for name, _ in plan.not_offered)
    candidate = next(c for c in plan.candidates if c.provider == "openai")
    # The site writes the Bedrock API key it signs beside the AWS credentials' Secret.
    assert candidate.credential is not None
    credential = candidate.credential
    assert (credential.name, credential.namespace, credential.key) == (
        "grid-token-openai",
        "grid-system",
        "token",
    )


def test_a_site_without_egress_cannot_be_reached(tmp_path: Path) -> None:
    directory = copy_mesh(tmp_path)
    sites = list(yaml.safe_load_all((directory / "sites.yaml").read_text()))
    del sites[1]["spec"]["egress"]
    (directory / "sites.yaml").write_text(yaml.safe_dump_all(sites))
    plan = what_if(directory=directory)
    assert ("vllm-beta", "site 'beta' has no egress address") in plan.not_offered
    assert "site-beta" not in plan.endpoints


def test_two_endpoints_for_one_cluster_are_refused(tmp_path: Path) -> None:
    directory = copy_mesh(tmp_path)
    edit_provider(directory, "claude", lambda doc: doc["spec"].update({"cluster": "openai"}))
    with pytest.raises(ConfigError, match="two endpoints"):
        what_if(directory=directory)


def test_the_network_is_the_site_s_or_the_only_one(tmp_path: Path) -> None:
    directory = copy_mesh(tmp_path)
    (directory / "network.yaml").unlink()
    with pytest.raises(ConfigError, match="GridNetwork 'golden', not found"):
        what_if(directory=directory)
    second = copy_mesh(tmp_path / "two")
    network = yaml.safe_load((second / "network.yaml").read_text())
    network["metadata"]["name"] = "another"
    (second / "another.yaml").write_text(yaml.safe_dump(network))
    with pytest.raises(ConfigError, match="2 networks"):
        what_if("delta", directory=second)


# --- the commands ------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def inputs(site: str = "alpha", gateway: str = "edge-gateway") -> list[str]:
    return [
        "--resources",
        str(MESH),
        "--metrics",
        str(METRICS),
        "--site",
        site,
        "--gateway",
        gateway,
        "--now",
        NOW,
    ]


def test_render_prints_an_overlay_the_gateway_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", *inputs("gamma"))
    assert code == 0
    expected = ExpectedScope("golden", "edge-gateway", "grid-system", "gamma")
    assert validate_overlay(out, expected).accepted
    document = json.loads(out)
    assert document["provenance"]["rendered_at"] == NOW
    tiers = [c["selection_tier"] for c in document["overlay"]["candidates"]]
    assert tiers[0] == LocalityTier.SAME_SITE.wire


def test_render_prints_the_gateway_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", *inputs("alpha", "next-gateway"), "--consumer-config")
    assert code == 0
    config = yaml.safe_load(out)
    names = [entry["filter"] for entry in config["filter_chains"][0]["filters"]]
    assert names == [
        "headers",
        "json_body_field",
        "intelligent_route",
        "credential_inject",
        "credential_injection",
        "load_balancer",
    ]
    assert config["listeners"][0]["address"] == "0.0.0.0:8081"
    route = config["filter_chains"][0]["filters"][2]
    assert route["overlay_file"] == "/etc/grid/overlay/routing-overlay.json"
    assert route["expected_overlay_scope"]["local_site"] == "alpha"
    inject = config["filter_chains"][0]["filters"][3]
    assert inject["credentials"][0]["file"] == "/run/secrets/grid-credentials/openai-api-key/token"
    clusters = {c["name"] for c in config["filter_chains"][0]["filters"][-1]["clusters"]}
    assert {"site-beta", "site-gamma"} <= clusters, "every other site's egress is declared"


def test_render_refuses_a_gateway_configuration_that_cannot_reach_an_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mesh = tmp_path / "mesh"
    shutil.copytree(GOLDEN / "mesh", mesh)
    providers = mesh / "providers.yaml"
    providers.write_text(
        providers.read_text().replace(
            "endpoint: http://vllm.alpha.svc:8000", "endpoint: http://vllm.alpha.svc:8000/llm/v1"
        )
    )
    code, out, err = run(
        capsys,
        "render",
        "--resources",
        str(mesh),
        "--site",
        "alpha",
        "--gateway",
        "next-gateway",
        "--now",
        "2026-07-29T12:00:00Z",
        "--consumer-config",
    )
    assert code == 2 and out == ""
    assert "gateway cluster 'vllm-alpha': endpoint path '/llm/v1' cannot be expressed" in err


def test_explain_lists_candidates_and_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", *inputs("gamma"))
    assert code == 0
    assert "access_denied" in out
    assert "not_offered" in out
    assert "LOCALITY" in out


def test_render_without_candidates_keeps_the_previous_overlay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sick = tmp_path / "sick.yaml"
    sick.write_text(
        yaml.safe_dump(
            {
                "providers": {
                    name: {"healthy": False}
                    for name in ("vllm-alpha", "vllm-beta", "tgi-gamma", "claude", "openai")
                }
            }
        )
    )
    code, out, err = run(
        capsys,
        "render",
        "--resources",
        str(MESH),
        "--metrics",
        str(sick),
        "--site",
        "alpha",
        "--gateway",
        "edge-gateway",
        "--now",
        NOW,
    )
    assert code == 1
    assert out == ""
    assert "keeping the previous overlay" in err
    assert "unhealthy" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resources", "/nonexistent/dir"], "cannot read resource directory"),
        (["--metrics", "/nonexistent/metrics.yaml"], "cannot read metrics file"),
        (["--now", "tomorrow"], "not an RFC 3339 timestamp"),
        (["--now", "2026-07-29T12:00:00"], "needs a time zone"),
    ],
)
def test_bad_inputs_exit_2_with_a_clear_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = dict(zip(inputs()[::2], inputs()[1::2], strict=True))
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    flat = [item for pair in base.items() for item in pair]
    code, _, err = run(capsys, "render", *flat)
    assert code == 2
    assert message in err


def test_invalid_yaml_metrics_and_resources_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("providers: [unclosed")
    code, _, err = run(
        capsys,
        "explain",
        "--resources",
        str(MESH),
        "--metrics",
        str(broken),
        "--site",
        "alpha",
        "--gateway",
        "edge-gateway",
    )
    assert code == 2
    assert "not valid YAML or JSON" in err
    directory = copy_mesh(tmp_path)
    edit_provider(directory, "claude", lambda doc: doc["spec"].update({"backendKind": "magic"}))
    code, _, err = run(
        capsys,
        "explain",
        "--resources",
        str(directory),
        "--site",
        "alpha",
        "--gateway",
        "edge-gateway",
    )
    assert code == 2
    assert "invalid resource" in err


def test_a_metrics_file_with_yaml_aliases_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text('a: &a ["x","x"]\nb: &b [*a,*a]\nproviders: {}\n')
    code, out, err = run(capsys, "render", *inputs("alpha"), "--metrics", str(bomb))
    assert code == 2 and out == ""
    assert "aliases are not allowed" in err
