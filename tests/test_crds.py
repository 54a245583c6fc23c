"""The generated CRDs: current in `crds/`, valid apiextensions.k8s.io/v1 objects with
structural schemas, and checked by Grid's own validator exactly as an independent JSON
Schema implementation checks them."""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes.client import ApiClient

from grid.cli import main
from grid.models.crd import GENERATED_HEADER, all_crds, crd_directory_files, crd_for_kind
from grid.models.schema import validate_against_schema, validate_custom_resource

REPO = Path(__file__).resolve().parent.parent
CRD_DIR = REPO / "crds"
KINDS = ("GridNetwork", "GridSite", "InferenceProvider")

# Keywords a structural schema may use (apiextensions.k8s.io/v1 JSONSchemaProps minus the
# ones structural schemas forbid: $ref, definitions, uniqueItems, additionalItems, ...).
ALLOWED_KEYWORDS = {
    "type",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "maxProperties",
    "format",
    "default",
    "nullable",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-preserve-unknown-fields",
    # Cross-field rules (CEL), refused at apply: tests/test_crd_validation_rules*.py.
    "x-kubernetes-validations",
}


# --- an independent oracle: the schema as draft 2020-12 JSON Schema for `jsonschema` -------


def draft_schema(node: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI v3 structural schema as plain JSON Schema, with the API server's strict
    field validation made explicit (unknown fields rejected)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: draft_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = draft_schema(value)
        elif key == "anyOf":
            out[key] = [draft_schema(member) for member in value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            if value:
                out[key] = node[key.replace("exclusiveM", "m")]
        elif key == "x-kubernetes-list-type" and value == "set":
            out["uniqueItems"] = True
        elif key in ("nullable", "description") or key.startswith("x-kubernetes"):
            continue
        else:
            out[key] = value
    for bound in ("minimum", "maximum"):
        exclusive = "exclusiveM" + bound[1:]
        if node.get(exclusive) and bound in out:
            del out[bound]
    if node.get("nullable"):
        out["type"] = [node["type"], "null"]
    if "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def oracle_errors(manifest: dict[str, Any], kind: str) -> list[str]:
    schema = crd_for_kind(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    validator = jsonschema.Draft202012Validator(
        draft_schema(schema), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(manifest)
    ]


def test_the_oracle_checks_date_times() -> None:
    # jsonschema checks formats only when their helper package is installed.
    assert "date-time" in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers


def grid_errors(manifest: dict[str, Any], kind: str) -> list[str]:
    return [str(violation) for violation in validate_custom_resource(manifest, crd_for_kind(kind))]


# --- the files -----------------------------------------------------------------------------


def test_crds_directory_is_current() -> None:
    expected = crd_directory_files()
    on_disk = {path.name: path.read_text(encoding="utf-8") for path in CRD_DIR.glob("*.yaml")}
    assert sorted(on_disk) == sorted(expected), "regenerate with: grid crds --write crds"
    for name, text in expected.items():
        assert on_disk[name] == text, (
            f"crds/{name} is stale: regenerate with grid crds --write crds"
        )


def test_grid_crds_prints_every_crd() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["crds"]) == 0
    documents = list(yaml.safe_load_all(out.getvalue()))
    assert documents == all_crds()
    assert out.getvalue().startswith(GENERATED_HEADER)


def test_grid_crds_check_and_write(tmp_path: Path) -> None:
    assert main(["crds", "--check", str(CRD_DIR)]) == 0
    assert main(["crds", "--write", str(tmp_path)]) == 0
    assert main(["crds", "--check", str(tmp_path)]) == 0
    stale = tmp_path / "gridsites.grid.praxis-proxy.io.yaml"
    stale.write_text(stale.read_text().replace("shortNames", "shortNamez"))
    (tmp_path / "gridnetworks.grid.praxis-proxy.io.yaml").unlink()
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["crds", "--check", str(tmp_path)]) == 1
    assert "gridsites.grid.praxis-proxy.io.yaml: differs from the models" in err.getvalue()
    assert "gridnetworks.grid.praxis-proxy.io.yaml: missing" in err.getvalue()
    assert "grid crds --write" in err.getvalue()


def test_grid_crds_check_as_json(tmp_path: Path) -> None:
    assert main(["crds", "--write", str(tmp_path)]) == 0
    (tmp_path / "gridnetworks.grid.praxis-proxy.io.yaml").unlink()
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["crds", "--check", str(tmp_path), "--json"]) == 1
    verdict = json.loads(out.getvalue())
    assert verdict["ok"] is False and verdict["directory"] == str(tmp_path)
    states = {entry["name"]: entry["state"] for entry in verdict["files"]}
    assert states["gridnetworks.grid.praxis-proxy.io.yaml"] == "missing"
    assert states["gridsites.grid.praxis-proxy.io.yaml"] == "current"
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["crds", "--check", str(CRD_DIR), "--json"]) == 0
    assert json.loads(out.getvalue())["ok"] is True
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["crds", "--json"]) == 2
    assert "--json goes with --check" in err.getvalue()


def test_write_reports_an_unwritable_target(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["crds", "--write", str(blocker / "sub")]) == 1
    assert "cannot write CRDs" in err.getvalue()


def test_the_installed_command_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "grid.cli", "crds", "--check", str(CRD_DIR)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# --- apiextensions.k8s.io/v1 ---------------------------------------------------------------


class _Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body)


@pytest.mark.parametrize("crd", all_crds(), ids=lambda crd: crd["spec"]["names"]["kind"])
def test_crds_are_apiextensions_v1_objects_with_only_known_fields(crd: dict[str, Any]) -> None:
    client = ApiClient()
    parsed = client.deserialize(json.dumps(crd), "V1CustomResourceDefinition", "application/json")
    assert parsed.spec.scope == "Cluster"
    assert parsed.spec.group == "grid.praxis-proxy.io"
    # Serializing back gives the same object: no key was unknown to the API's types.
    assert client.sanitize_for_serialization(parsed) == crd
    version = parsed.spec.versions[0]
    assert version.served and version.storage
    assert version.subresources.status == {}


def test_names() -> None:
    names = {crd["spec"]["names"]["kind"]: crd["spec"]["names"] for crd in all_crds()}
    assert names["GridNetwork"]["shortNames"] == ["gn"]
    assert names["GridSite"]["shortNames"] == ["gs"]
    assert names["InferenceProvider"]["shortNames"] == ["ip", "iprov"]
    assert all(n["categories"] == ["grid"] for n in names.values())
    assert {crd["metadata"]["name"] for crd in all_crds()} == {
        "gridnetworks.grid.praxis-proxy.io",
        "gridsites.grid.praxis-proxy.io",
        "inferenceproviders.grid.praxis-proxy.io",
    }


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = crd_for_kind(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("kind", KINDS)
def test_schemas_are_structural(kind: str) -> None:
    root = schema_of(kind)
    assert root["type"] == "object"
    assert root["properties"]["metadata"] == {"type": "object"}
    assert root["required"] == ["spec"]
    for path, node in walk(root):
        assert set(node) <= ALLOWED_KEYWORDS, f"{path}: {set(node) - ALLOWED_KEYWORDS}"
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert node.get("type") in {
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            }, path
            assert "anyOf" not in node, path
        assert not node.get("x-kubernetes-preserve-unknown-fields"), f"{path}: not needed anywhere"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("additionalProperties", {}) is not False, path
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), path
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item["required"] or "default" in item["properties"][key], path
                assert item["properties"][key]["type"] in {"string", "integer"}, path
        if node.get("x-kubernetes-list-type") == "set":
            assert node["items"]["type"] in {"string", "integer", "number", "boolean"}, path
        if "default" in node:
            assert validate_against_schema(node["default"], node) == [], path
            assert not oracle_default_errors(node), path


def oracle_default_errors(node: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(draft_schema(node))
    return [error.message for error in validator.iter_errors(node["default"])]


@pytest.mark.parametrize("crd", all_crds(), ids=lambda crd: crd["spec"]["names"]["kind"])
def test_printer_columns_point_at_fields_of_their_type(crd: dict[str, Any]) -> None:
    version = crd["spec"]["versions"][0]
    nodes = dict(walk(version["schema"]["openAPIV3Schema"]))
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns if c["name"] in ("Phase", "Age")] == ["Phase", "Age"]
    for column in columns:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            assert column["type"] == "date"
            continue
        node = nodes[column["jsonPath"]]
        assert node["type"] == column["type"], column


def test_network_printer_columns_show_grid_id_and_phase() -> None:
    columns = crd_for_kind("GridNetwork")["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["jsonPath"] for c in columns][:2] == [".status.gridId", ".status.phase"]


def test_conditions_are_a_map_keyed_by_type() -> None:
    for kind in KINDS:
        conditions = schema_of(kind)["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        item = conditions["items"]
        assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
        assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


def test_cost_is_int_or_string_and_secret_refs_hold_no_value() -> None:
    spec = schema_of("InferenceProvider")["properties"]["spec"]["properties"]
    price = spec["cost"]["properties"]["inputPerMillion"]
    assert price["x-kubernetes-int-or-string"] is True
    secret_ref = spec["auth"]["properties"]["secretRef"]["properties"]
    assert set(secret_ref) == {"name", "namespace", "key"}


# --- Grid's validator agrees with the oracle -----------------------------------------------


SITE = {
    "apiVersion": "grid.praxis-proxy.io/v1alpha1",
    "kind": "GridSite",
    "metadata": {"name": "east-edge", "labels": {"a": "b"}},
    "spec": {
        "gridNetworkRef": "glb-demo",
        "egress": {"address": "east-edge.example:8443", "tlsMode": "tls"},
        "trust": {"certFingerprint": "ab" * 32},
    },
    "status": {
        "phase": "Active",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Active",
                "message": "",
                "lastTransitionTime": "2026-07-01T12:00:00Z",
            }
        ],
        "lastProbe": {"at": "2026-07-01T12:00:00Z", "reachable": True, "latencyMs": 1.5},
    },
}


def mutate(path: str, value: Any) -> dict[str, Any]:
    document = copy.deepcopy(SITE)
    *parents, last = path.split(".")
    node: Any = document
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is DELETE:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return document


DELETE = object()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.egress.tlsMode", "mtls"),
        ("spec.egress.address", "no-port"),
        ("spec.egress.address", 8443),
        ("spec.egress.extra", "x"),
        ("spec.trust.certFingerprint", "xyz"),
        ("spec.gridNetworkRef", DELETE),
        ("spec.region", ""),
        ("spec.gridNetworkRef", None),
        ("spec.zone", "x" * 64),
        ("spec", DELETE),
        ("status.phase", "Up"),
        ("status.conditions.0.status", "Yes"),
        ("status.conditions.0.lastTransitionTime", "yesterday"),
        ("status.conditions.0.reason", "not camel"),
        ("status.conditions.0.type", DELETE),
        ("status.lastProbe.latencyMs", -1),
        ("status.lastProbe.reachable", "true"),
        ("status.observedFingerprint", "AB" * 32),
    ],
)
def test_both_validators_reject_the_same_mistakes(path: str, value: Any) -> None:
    document = mutate(path, value)
    assert oracle_errors(document, "GridSite"), "the oracle accepted it"
    assert grid_errors(document, "GridSite"), "Grid's validator accepted it"


def test_both_validators_accept_a_good_site() -> None:
    assert oracle_errors(SITE, "GridSite") == []
    assert grid_errors(SITE, "GridSite") == []


def test_grid_validator_checks_the_envelope_and_list_keys() -> None:
    document = copy.deepcopy(SITE)
    document["kind"] = "GridNetwork"
    document["metadata"]["name"] = "Bad_Name"
    document["status"]["conditions"].append(copy.deepcopy(document["status"]["conditions"][0]))
    found = {v.split(":")[0] for v in grid_errors(document, "GridSite")}
    assert found == {"kind", "metadata.name", "status.conditions[1]"}
    other = copy.deepcopy(SITE)
    other["apiVersion"] = "grid.praxis-proxy.io/v2"
    assert grid_errors(other, "GridSite") == [
        "apiVersion: must be one of grid.praxis-proxy.io/v1alpha1"
    ]


def test_grid_validator_anchors_patterns_at_the_very_end() -> None:
    document = mutate("spec.gridNetworkRef", "glb-demo\n")
    assert grid_errors(document, "GridSite") != []


def test_violations_never_quote_the_value() -> None:
    token = "sk-live-" + "z" * 30
    document = mutate("spec.egress.address", token)
    document["spec"]["trust"]["token"] = token
    for line in grid_errors(document, "GridSite"):
        assert token not in line
