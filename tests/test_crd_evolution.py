"""CRD changes stay additive within v1alpha1 (issue 31).

Each rule of :mod:`grid.models.evolution` on a small pair of CRDs, and the additive changes
it lets through; ``grid crds --compare-with``; the generated CRDs against those of the
previous release (``compat/previous.txt``, read from git history); and resources written
for either release read by the other: the previous release's examples by the current
models, the current examples by the previous release's own ``grid render``.
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from grid.cli import main
from grid.models.crd import all_crds
from grid.models.evolution import (
    NonAdditiveChange,
    non_additive_changes,
    non_additive_changes_of_all,
)
from grid.models.resources import load_resources_from_dir
from grid.models.schema import validate_custom_resource
from support.previous import PreviousRelease, named_release

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
# The example directory README.md renders from, in both releases.
MESH = Path("examples") / "mesh"
NOW = "2026-07-29T12:00:00Z"
NAME = "widgets.example.io"

# --- a small CRD to change --------------------------------------------------------------


def crd(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A CRD of one served version whose object's ``spec`` has the schema ``spec``."""
    spec_schema = spec if spec is not None else {"type": "object"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME},
        "spec": {
            "group": "example.io",
            "names": {
                "kind": "Widget",
                "listKind": "WidgetList",
                "plural": "widgets",
                "singular": "widget",
                "shortNames": ["wd"],
                "categories": ["all"],
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec_schema},
                            "required": ["spec"],
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        },
                    },
                }
            ],
        },
    }


def obj(**properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


STRING = {"type": "string"}
INTEGER = {"type": "integer"}


def changes_of(old_spec: dict[str, Any], new_spec: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c.path, c.rule) for c in non_additive_changes(crd(old_spec), crd(new_spec))]


# (id, old spec schema, new spec schema, the one change expected: path, rule)
SCHEMA_BREAKS = [
    ("type changed", obj(a=STRING), obj(a=INTEGER), ".spec.a", "type changed"),
    (
        "int-or-string narrowed to string",
        obj(a={"x-kubernetes-int-or-string": True}),
        obj(a=STRING),
        ".spec.a",
        "type changed",
    ),
    (
        "enum value removed",
        obj(a={"type": "string", "enum": ["x", "y"]}),
        obj(a={"type": "string", "enum": ["x"]}),
        ".spec.a",
        "enum narrowed",
    ),
    (
        "enum added",
        obj(a=STRING),
        obj(a={"type": "string", "enum": ["x"]}),
        ".spec.a",
        "enum added",
    ),
    (
        "maxLength added",
        obj(a=STRING),
        obj(a={"type": "string", "maxLength": 10}),
        ".spec.a",
        "maxLength narrowed",
    ),
    (
        "maxLength lowered",
        obj(a={"type": "string", "maxLength": 10}),
        obj(a={"type": "string", "maxLength": 9}),
        ".spec.a",
        "maxLength narrowed",
    ),
    (
        "maxItems lowered",
        obj(a={"type": "array", "items": STRING, "maxItems": 4}),
        obj(a={"type": "array", "items": STRING, "maxItems": 3}),
        ".spec.a",
        "maxItems narrowed",
    ),
    (
        "maxProperties added",
        obj(a={"type": "object", "additionalProperties": STRING}),
        obj(a={"type": "object", "additionalProperties": STRING, "maxProperties": 3}),
        ".spec.a",
        "maxProperties narrowed",
    ),
    (
        "maximum added",
        obj(a=INTEGER),
        obj(a={"type": "integer", "maximum": 5}),
        ".spec.a",
        "maximum narrowed",
    ),
    (
        "maximum lowered",
        obj(a={"type": "integer", "maximum": 5}),
        obj(a={"type": "integer", "maximum": 4}),
        ".spec.a",
        "maximum narrowed",
    ),
    (
        "maximum made exclusive",
        obj(a={"type": "number", "maximum": 5}),
        obj(a={"type": "number", "maximum": 5, "exclusiveMaximum": True}),
        ".spec.a",
        "maximum narrowed",
    ),
    (
        "minLength raised",
        obj(a={"type": "string", "minLength": 1}),
        obj(a={"type": "string", "minLength": 2}),
        ".spec.a",
        "minLength narrowed",
    ),
    (
        "minItems added",
        obj(a={"type": "array", "items": STRING}),
        obj(a={"type": "array", "items": STRING, "minItems": 1}),
        ".spec.a",
        "minItems narrowed",
    ),
    (
        "minimum added",
        obj(a=INTEGER),
        obj(a={"type": "integer", "minimum": 0}),
        ".spec.a",
        "minimum narrowed",
    ),
    (
        "minimum raised",
        obj(a={"type": "integer", "minimum": 0}),
        obj(a={"type": "integer", "minimum": 1}),
        ".spec.a",
        "minimum narrowed",
    ),
    (
        "minimum made exclusive",
        obj(a={"type": "number", "minimum": 0}),
        obj(a={"type": "number", "minimum": 0, "exclusiveMinimum": True}),
        ".spec.a",
        "minimum narrowed",
    ),
    (
        "multipleOf added",
        obj(a=INTEGER),
        obj(a={"type": "integer", "multipleOf": 2}),
        ".spec.a",
        "multipleOf changed",
    ),
    (
        "pattern added",
        obj(a=STRING),
        obj(a={"type": "string", "pattern": "^[a-z]+$"}),
        ".spec.a",
        "pattern changed",
    ),
    (
        "pattern changed",
        obj(a={"type": "string", "pattern": "^[a-z]+$"}),
        obj(a={"type": "string", "pattern": "^[a-y]+$"}),
        ".spec.a",
        "pattern changed",
    ),
    (
        "format added",
        obj(a=STRING),
        obj(a={"type": "string", "format": "date-time"}),
        ".spec.a",
        "format changed",
    ),
    (
        "nullable removed",
        obj(a={"type": "string", "nullable": True}),
        obj(a=STRING),
        ".spec.a",
        "nullable removed",
    ),
    (
        "preserve-unknown-fields removed",
        obj(a={"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
        obj(a={"type": "object"}),
        ".spec.a",
        "unknown fields pruned",
    ),
    ("property removed", obj(a=STRING, b=STRING), obj(a=STRING), ".spec.b", "property removed"),
    (
        "nested property removed",
        obj(a=obj(b=STRING, c=STRING)),
        obj(a=obj(b=STRING)),
        ".spec.a.c",
        "property removed",
    ),
    (
        "existing field newly required",
        obj(a=STRING),
        {**obj(a=STRING), "required": ["a"]},
        ".spec.a",
        "newly required",
    ),
    (
        "new required field",
        obj(a=STRING),
        {**obj(a=STRING, b=STRING), "required": ["b"]},
        ".spec.b",
        "newly required",
    ),
    (
        "newly required inside an existing object",
        obj(a=obj(b=STRING)),
        obj(a={**obj(b=STRING), "required": ["b"]}),
        ".spec.a.b",
        "newly required",
    ),
    (
        "newly required in list items",
        obj(a={"type": "array", "items": obj(b=STRING)}),
        obj(a={"type": "array", "items": {**obj(b=STRING), "required": ["b"]}}),
        ".spec.a[*].b",
        "newly required",
    ),
    (
        "narrowed map values",
        obj(a={"type": "object", "additionalProperties": STRING}),
        obj(a={"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}}),
        ".spec.a.*",
        "maxLength narrowed",
    ),
    (
        "map values removed",
        obj(a={"type": "object", "additionalProperties": STRING}),
        obj(a={"type": "object"}),
        ".spec.a.*",
        "map values removed",
    ),
    (
        "list made a set",
        obj(a={"type": "array", "items": STRING}),
        obj(a={"type": "array", "items": STRING, "x-kubernetes-list-type": "set"}),
        ".spec.a",
        "x-kubernetes-list-type changed",
    ),
    (
        "list map keys changed",
        obj(
            a={
                "type": "array",
                "items": {**obj(k=STRING, j=STRING), "required": ["k", "j"]},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["k"],
            }
        ),
        obj(
            a={
                "type": "array",
                "items": {**obj(k=STRING, j=STRING), "required": ["k", "j"]},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["k", "j"],
            }
        ),
        ".spec.a",
        "x-kubernetes-list-map-keys changed",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "path", "rule"),
    [case[1:] for case in SCHEMA_BREAKS],
    ids=[case[0] for case in SCHEMA_BREAKS],
)
def test_each_narrowing_of_a_schema_is_found(
    old: dict[str, Any], new: dict[str, Any], path: str, rule: str
) -> None:
    assert changes_of(old, new) == [(path, rule)]


def test_a_new_validation_rule_needs_review() -> None:
    rule = {"rule": "self.a != 'x'", "message": "not x"}
    old = obj(a=STRING)
    new = {**obj(a=STRING), "x-kubernetes-validations": [rule]}
    (change,) = non_additive_changes(crd(old), crd(new))
    assert (change.path, change.rule, change.needs_review) == (
        ".spec",
        "validation rule added",
        True,
    )
    assert "self.a != 'x'" in str(change) and str(change).endswith("(needs review)")
    # A rule kept, or dropped, refuses nothing new.
    assert non_additive_changes(crd(new), crd(new)) == []
    assert non_additive_changes(crd(new), crd(old)) == []


def test_a_changed_combinator_needs_review() -> None:
    old = obj(a={"type": "string", "anyOf": [{"format": "date"}]})
    new = obj(a={"type": "string", "anyOf": [{"format": "date-time"}]})
    (change,) = non_additive_changes(crd(old), crd(new))
    assert (change.path, change.rule, change.needs_review) == (".spec.a", "anyOf changed", True)


ADDITIVE = [
    ("unchanged", obj(a=STRING), obj(a=STRING)),
    ("new optional field", obj(a=STRING), obj(a=STRING, b=STRING)),
    (
        "new optional object with required fields",
        obj(a=STRING),
        obj(a=STRING, b={**obj(c=STRING), "required": ["c"]}),
    ),
    (
        "widened enum",
        obj(a={"type": "string", "enum": ["x"]}),
        obj(a={"type": "string", "enum": ["x", "y"]}),
    ),
    ("enum dropped", obj(a={"type": "string", "enum": ["x"]}), obj(a=STRING)),
    (
        "maxLength raised",
        obj(a={"type": "string", "maxLength": 3}),
        obj(a={"type": "string", "maxLength": 4}),
    ),
    (
        "minimum lowered and made inclusive",
        obj(a={"type": "number", "minimum": 1, "exclusiveMinimum": True}),
        obj(a={"type": "number", "minimum": 1}),
    ),
    ("zero minLength added", obj(a=STRING), obj(a={"type": "string", "minLength": 0})),
    ("nullable added", obj(a=STRING), obj(a={"type": "string", "nullable": True})),
    ("pattern dropped", obj(a={"type": "string", "pattern": "^a$"}), obj(a=STRING)),
    ("field no longer required", {**obj(a=STRING), "required": ["a"]}, obj(a=STRING)),
    (
        "multipleOf divided",
        obj(a={"type": "integer", "multipleOf": 4}),
        obj(a={"type": "integer", "multipleOf": 2}),
    ),
    (
        "explicit atomic list",
        obj(a={"type": "array", "items": STRING}),
        obj(a={"type": "array", "items": STRING, "x-kubernetes-list-type": "atomic"}),
    ),
    (
        "description changed",
        obj(a={"type": "string", "description": "old"}),
        obj(a={"type": "string", "description": "new", "default": "d"}),
    ),
]


@pytest.mark.parametrize(
    ("old", "new"), [case[1:] for case in ADDITIVE], ids=[case[0] for case in ADDITIVE]
)
def test_additive_changes_pass(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert changes_of(old, new) == []


def crd_change(edit: Callable[[dict[str, Any]], None]) -> list[NonAdditiveChange]:
    """The changes from the small CRD to a copy whose ``spec`` went through ``edit``."""
    new = crd(obj(a=STRING))
    edit(new["spec"])
    return non_additive_changes(crd(obj(a=STRING)), new)


def setting(*keys: str | int, to: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets the CRD spec's entry at ``keys`` to ``to``."""

    def edit(spec: dict[str, Any]) -> None:
        *parents, last = keys
        node: Any = spec
        for key in parents:
            node = node[key]
        node[last] = to

    return edit


def removing(*keys: str | int) -> Callable[[dict[str, Any]], None]:
    """An edit that removes the CRD spec's entry at ``keys``."""

    def edit(spec: dict[str, Any]) -> None:
        *parents, last = keys
        node: Any = spec
        for key in parents:
            node = node[key]
        del node[last]

    return edit


SUBRESOURCES = ("versions", 0, "subresources")
# (id, edit of the CRD's spec, the one change expected: version, path, rule)
CRD_WIDE_BREAKS = [
    ("scope", setting("scope", to="Namespaced"), None, "spec.scope", "scope changed"),
    ("group", setting("group", to="other.io"), None, "spec.group", "group changed"),
    ("kind", setting("names", "kind", to="Gadget"), None, "spec.names.kind", "name changed"),
    ("plural", setting("names", "plural", to="widgetz"), None, "spec.names.plural", "name changed"),
    (
        "singular",
        setting("names", "singular", to="widgett"),
        None,
        "spec.names.singular",
        "name changed",
    ),
    (
        "listKind",
        setting("names", "listKind", to="Widgets"),
        None,
        "spec.names.listKind",
        "name changed",
    ),
    (
        "shortName removed",
        setting("names", "shortNames", to=[]),
        None,
        "spec.names.shortNames",
        "name removed",
    ),
    (
        "version removed",
        setting("versions", to=[]),
        "v1alpha1",
        "spec.versions[v1alpha1]",
        "version removed",
    ),
    (
        "version no longer served",
        setting("versions", 0, "served", to=False),
        "v1alpha1",
        "spec.versions[v1alpha1].served",
        "version removed",
    ),
    (
        "status subresource removed",
        removing(*SUBRESOURCES, "status"),
        "v1alpha1",
        "spec.versions[v1alpha1].subresources.status",
        "subresource removed",
    ),
    (
        "scale subresource removed",
        removing(*SUBRESOURCES, "scale"),
        "v1alpha1",
        "spec.versions[v1alpha1].subresources.scale",
        "subresource removed",
    ),
    (
        "scale subresource moved",
        setting(*SUBRESOURCES, "scale", "specReplicasPath", to=".spec.size"),
        "v1alpha1",
        "spec.versions[v1alpha1].subresources.scale",
        "subresource changed",
    ),
]


@pytest.mark.parametrize(
    ("edit", "version", "path", "rule"),
    [case[1:] for case in CRD_WIDE_BREAKS],
    ids=[case[0] for case in CRD_WIDE_BREAKS],
)
def test_each_crd_wide_change_is_found(
    edit: Callable[[dict[str, Any]], None], version: str | None, path: str, rule: str
) -> None:
    (change,) = crd_change(edit)
    assert (change.crd, change.version, change.path, change.rule) == (NAME, version, path, rule)


def test_new_versions_names_and_crds_are_additive() -> None:
    def widen(spec: dict[str, Any]) -> None:
        spec["names"]["shortNames"].append("wdg")
        spec["names"]["categories"].append("example")
        newer = copy.deepcopy(spec["versions"][0])
        spec["versions"][0]["storage"] = False
        spec["versions"].append({**newer, "name": "v1beta1"})

    assert crd_change(widen) == []
    other = copy.deepcopy(crd())
    other["metadata"]["name"] = "gadgets.example.io"
    assert non_additive_changes_of_all([crd()], [crd(), other]) == []


def test_a_removed_crd_is_a_change_and_unserved_versions_may_go() -> None:
    (change,) = non_additive_changes_of_all([crd()], [])
    assert (change.crd, change.version, change.rule) == (NAME, None, "crd removed")
    old = crd()
    old["spec"]["versions"].append(
        {"name": "v0", "served": False, "storage": False, "schema": {"openAPIV3Schema": {}}}
    )
    assert non_additive_changes(old, crd()) == []


def test_messages_name_the_crd_the_version_and_the_path() -> None:
    changes = non_additive_changes(
        crd(obj(a={"type": "string", "maxLength": 9})),
        crd(obj(a={"type": "string", "maxLength": 8})),
    )
    assert [str(c) for c in changes] == [
        "widgets.example.io v1alpha1 .spec.a: maxLength lowered from 9 to 8"
    ]
    (scope,) = crd_change(setting("scope", to="Namespaced"))
    assert str(scope) == "widgets.example.io spec.scope: changed from 'Cluster' to 'Namespaced'"


def test_every_generated_crd_is_additive_over_itself() -> None:
    assert non_additive_changes_of_all(all_crds(), all_crds()) == []


# --- grid crds --compare-with -------------------------------------------------------------


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def previous_with_an_extra_field(directory: Path) -> Path:
    """The current CRDs with a GridSite field the current models lack: as if it was
    removed since."""
    assert main(["crds", "--write", str(directory)]) == 0
    path = directory / "gridsites.grid.praxis-proxy.io.yaml"
    document = yaml.safe_load(path.read_text())
    schema = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["retired"] = {"type": "string"}
    path.write_text(yaml.safe_dump(document))
    return directory


def test_compare_with_passes_the_committed_crds() -> None:
    assert run(["crds", "--compare-with", str(REPO / "crds")]) == (0, "", "")


def test_compare_with_lists_the_changes_and_exits_1(tmp_path: Path) -> None:
    code, out, err = run(["crds", "--compare-with", str(previous_with_an_extra_field(tmp_path))])
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == "gridsites.grid.praxis-proxy.io v1alpha1 .spec.retired: property removed"
    assert lines[1].startswith("grid crds: 1 change(s) since") and len(lines) == 2


def test_compare_with_as_json(tmp_path: Path) -> None:
    code, out, _ = run(
        ["crds", "--compare-with", str(previous_with_an_extra_field(tmp_path)), "--json"]
    )
    assert code == 1
    assert json.loads(out) == {
        "ok": False,
        "directory": str(tmp_path),
        "changes": [
            {
                "crd": "gridsites.grid.praxis-proxy.io",
                "version": "v1alpha1",
                "path": ".spec.retired",
                "rule": "property removed",
                "needs_review": False,
                "message": "gridsites.grid.praxis-proxy.io v1alpha1 .spec.retired: "
                "property removed",
            }
        ],
    }
    code, out, _ = run(["crds", "--compare-with", str(REPO / "crds"), "--json"])
    assert code == 0 and json.loads(out)["ok"] is True


def test_compare_with_a_removed_crd_file(tmp_path: Path) -> None:
    assert main(["crds", "--write", str(tmp_path)]) == 0
    extra = crd()
    (tmp_path / "widgets.example.io.yaml").write_text(yaml.safe_dump(extra))
    code, _, err = run(["crds", "--compare-with", str(tmp_path)])
    assert code == 1
    assert "widgets.example.io: the CRD was removed" in err


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({}, "holds no CustomResourceDefinition"),
        ({"kustomization.yaml": "resources: []\n"}, "holds no CustomResourceDefinition"),
        ({"a.yaml": "kind: [unclosed\n"}, "a.yaml is not valid YAML at line 2"),
        ({"a.yaml": b"\xff\xfe"}, "not UTF-8 text"),
    ],
    ids=["empty", "no crd", "bad yaml", "not utf-8"],
)
def test_compare_with_unusable_directories_exit_2(
    tmp_path: Path, files: dict[str, str | bytes], reason: str
) -> None:
    for name, content in files.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for extra in ([], ["--json"]):
        code, out, err = run(["crds", "--compare-with", str(tmp_path), *extra])
        assert (code, out) == (2, "")
        assert reason in err and len(err.splitlines()) == 1
    code, out, err = run(["crds", "--compare-with", str(tmp_path / "absent")])
    assert (code, out) == (2, "") and "cannot read" in err


# --- the previous release -----------------------------------------------------------------


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, check=False)


def release_commit() -> str:
    """The previous release's commit, which this clone's history must hold: skipped where
    it does not (a shallow clone), but a failure under CI=true."""
    commit, _ = named_release()
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        reason = f"the history of this clone lacks the previous release {commit}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return commit


def test_the_generated_crds_are_additive_over_the_previous_release() -> None:
    commit = release_commit()
    listed = git("ls-tree", "--name-only", f"{commit}:crds")
    assert listed.returncode == 0, listed.stderr.decode()
    previous: list[dict[str, Any]] = []
    for name in listed.stdout.decode().split():
        if not name.endswith(".yaml"):
            continue
        shown = git("show", f"{commit}:crds/{name}")
        assert shown.returncode == 0, shown.stderr.decode()
        previous.extend(
            document
            for document in yaml.safe_load_all(shown.stdout)
            if document and document.get("kind") == "CustomResourceDefinition"
        )
    assert previous, f"{commit} has no CRDs in crds/"
    changes = non_additive_changes_of_all(previous, all_crds())
    assert changes == [], "\n".join(str(change) for change in changes)


def render_targets(directory: Path) -> list[tuple[str, str, str]]:
    """(site, gateway, namespace) for every site and gateway the resources in ``directory``
    define, read with the current models."""
    loaded = load_resources_from_dir(directory)
    assert loaded.errors == (), [str(error) for error in loaded.errors]
    return [
        (site.metadata.name, ref.name, ref.namespace)
        for network in loaded.networks
        for site in loaded.sites
        if site.spec.grid_network_ref == network.metadata.name
        for ref in network.spec.gateway_refs
    ]


def render_args(directory: Path, site: str, gateway: str, namespace: str) -> list[str]:
    return [
        "render",
        "--resources",
        str(directory),
        "--site",
        site,
        "--gateway",
        gateway,
        "--namespace",
        namespace,
        "--now",
        NOW,
    ]


def test_the_previous_releases_examples_load_and_render_with_the_current_code(
    tmp_path: Path,
) -> None:
    commit = release_commit()
    # The release's files as committed, written out one by one (git show): nothing of the
    # work tree, and no change to the repository's index.
    listed = git("ls-tree", "-r", "--name-only", commit, "examples")
    assert listed.returncode == 0, listed.stderr.decode()
    for name in listed.stdout.decode().splitlines():
        shown = git("show", f"{commit}:{name}")
        assert shown.returncode == 0, shown.stderr.decode()
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(shown.stdout)
    mesh = tmp_path / MESH
    current_crds = {crd["spec"]["names"]["kind"]: crd for crd in all_crds()}
    grid_documents = [
        document
        for path in sorted(mesh.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document and str(document.get("apiVersion", "")).startswith("grid.praxis-proxy.io/")
    ]
    assert grid_documents, f"no Grid resources in {MESH} of {commit}"
    for document in grid_documents:
        # What the API server holding the current CRDs would say of the stored object.
        violations = validate_custom_resource(document, current_crds[document["kind"]])
        assert violations == [], (document["metadata"]["name"], [str(v) for v in violations])
    targets = render_targets(mesh)
    assert targets
    for target in targets:
        code, out, err = run(render_args(mesh, *target))
        assert code == 0, (target, err)
        assert json.loads(out)["scope"]["local_site"] == target[0]


def test_the_current_examples_render_with_the_previous_release(
    previous_release: PreviousRelease,
) -> None:
    mesh = REPO / MESH
    targets = render_targets(mesh)
    assert targets
    for target in targets:
        done = subprocess.run(
            [str(previous_release.grid), *render_args(mesh, *target)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (previous_release.version, target, done.stderr)
        assert json.loads(done.stdout)["scope"]["local_site"] == target[0]
