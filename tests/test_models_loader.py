"""Loading a directory of manifests: every problem located by file, document and field,
and every valid resource kept."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from grid.errors import ConfigError
from grid.models import GridNetwork, GridSite, InferenceProvider, load_resources_from_dir

NETWORK = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridNetwork
metadata:
  name: glb-demo
spec:
  seeds: ["east-edge.example:7946"]
"""

SITE = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata:
  name: {name}
spec:
  gridNetworkRef: glb-demo
  egress:
    address: {address}
"""

PROVIDER = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata:
  name: llama
spec:
  gridNetworkRef: glb-demo
  backendKind: local
  providerKind: self_hosted
  models: [{name: llama}]
  endpoint: http://llama:8000
"""

SECRET = """\
apiVersion: v1
kind: Secret
metadata:
  name: swim
  namespace: grid-system
data:
  swim.key: c2VjcmV0LWJ5dGVz
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_resources_are_kept_next_to_errors(tmp_path: Path) -> None:
    write(tmp_path, "00-network.yaml", NETWORK)
    sites = "---\n".join(
        [
            SITE.format(name="east-edge", address="east-edge.example:8443"),
            SITE.format(name="east-core", address="not-an-address"),
            SITE.format(name="west-edge", address="west-edge.example:8443"),
        ]
    )
    write(tmp_path, "10-sites.yml", sites)
    write(tmp_path, "20-provider.yaml", PROVIDER)
    write(tmp_path, "notes.txt", "not yaml: [")

    loaded = load_resources_from_dir(tmp_path)

    assert [r.metadata.name for r in loaded.resources] == [
        "glb-demo",
        "east-edge",
        "west-edge",
        "llama",
    ]
    assert [type(r) for r in loaded.resources] == [
        GridNetwork,
        GridSite,
        GridSite,
        InferenceProvider,
    ]
    assert [s.metadata.name for s in loaded.sites] == ["east-edge", "west-edge"]
    assert [n.metadata.name for n in loaded.networks] == ["glb-demo"]
    assert [p.metadata.name for p in loaded.providers] == ["llama"]
    (error,) = loaded.errors
    assert error.file == str(tmp_path / "10-sites.yml")
    assert error.document == 1
    assert error.path == "spec.egress.address"
    assert error.kind == "GridSite" and error.name == "east-core"
    assert "host:port" in error.reason
    assert str(error).startswith(f"{tmp_path / '10-sites.yml'}, document 1, GridSite east-core: ")


def test_a_broken_document_does_not_hide_the_ones_after_it(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "# sites",
            "---",
            SITE.format(name="a", address="a.example:1"),
            "---",
            "kind: GridSite\nmetadata: {name: b\nspec: [",
            "---",
            SITE.format(name="c", address="c.example:1"),
        ]
    )
    write(tmp_path, "sites.yaml", text)
    loaded = load_resources_from_dir(tmp_path)
    assert [r.metadata.name for r in loaded.resources] == ["a", "c"]
    (error,) = loaded.errors
    assert error.document == 1
    assert error.path == ""
    assert error.reason.startswith("YAML error at line 15, column 5")


def test_duplicate_keys_are_an_error_not_a_silent_overwrite(tmp_path: Path) -> None:
    write(tmp_path, "site.yaml", SITE.format(name="a", address="a.example:1") + "spec: {}\n")
    loaded = load_resources_from_dir(tmp_path)
    assert loaded.resources == ()
    (error,) = loaded.errors
    assert "duplicate key 'spec'" in error.reason
    assert "line 9" in error.reason


def test_duplicate_resources_keep_the_first(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", SITE.format(name="east", address="first.example:1"))
    write(tmp_path, "b.yaml", SITE.format(name="east", address="second.example:1"))
    loaded = load_resources_from_dir(tmp_path)
    (kept,) = loaded.sites
    assert kept.spec.egress is not None and kept.spec.egress.address == "first.example:1"
    (error,) = loaded.errors
    assert error.file == str(tmp_path / "b.yaml")
    assert error.path == "metadata.name"
    assert f"already defined in {tmp_path / 'a.yaml'} document 0" in error.reason


def test_other_kinds_are_skipped_and_their_data_never_read_out(tmp_path: Path) -> None:
    write(tmp_path, "secret.yaml", SECRET + "---\n" + NETWORK)
    loaded = load_resources_from_dir(tmp_path)
    assert [r.metadata.name for r in loaded.resources] == ["glb-demo"]
    assert loaded.errors == ()
    (skipped,) = loaded.skipped
    assert (skipped.document, skipped.api_version, skipped.kind) == (0, "v1", "Secret")
    assert "c2VjcmV0" not in repr(loaded)


def test_grid_documents_with_other_problems(tmp_path: Path) -> None:
    write(
        tmp_path,
        "mixed.yaml",
        "\n---\n".join(
            [
                "just a string",
                "apiVersion: grid.praxis-proxy.io/v2\nkind: GridSite\nmetadata: {name: x}",
                "apiVersion: grid.praxis-proxy.io/v1alpha1\nkind: Gateway\nmetadata: {name: x}",
                "lastSeen: 2026-01-01T00:00:00Z\nkind: GridSite\napiVersion: grid.praxis-proxy.io/v1alpha1",
                "",
            ]
        ),
    )
    loaded = load_resources_from_dir(tmp_path)
    reasons = [(e.document, e.path, e.reason) for e in loaded.errors]
    assert reasons[0] == (0, "", "expected a mapping with apiVersion, kind, metadata and spec")
    assert reasons[1][:2] == (1, "apiVersion")
    assert reasons[2][:2] == (2, "kind")
    # Timestamps stay strings (as in the Kubernetes API), so the error is about the field.
    assert {r[1] for r in reasons[3:]} == {"lastSeen", "metadata", "spec"}


def test_unreadable_files_are_reported_and_the_rest_loaded(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", NETWORK)
    (tmp_path / "b.yaml").write_bytes(b"\xff\xfe not utf-8")
    loaded = load_resources_from_dir(tmp_path)
    assert [r.metadata.name for r in loaded.resources] == ["glb-demo"]
    (error,) = loaded.errors
    assert error.file == str(tmp_path / "b.yaml") and error.document is None
    assert "not UTF-8" in error.reason


NOBODY = 65534


def load_as_nobody(directory: Path) -> list[list[object]]:
    """The errors of loading ``directory`` as the unprivileged user ``nobody``: root reads
    any file, so the load runs in a forked child that gives up root first (a child that
    does not exec: the interpreter and the loader are already in memory)."""
    load_resources_from_dir(directory)  # everything the load needs is imported now
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(reading)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            loaded = load_resources_from_dir(directory)
            payload = [[e.file, e.document, e.reason] for e in loaded.errors]
            os.write(writing, json.dumps(payload).encode())
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading, "rb") as report:
        data = report.read()
    os.waitpid(pid, 0)
    assert data, "the unprivileged child did not report"
    return list(json.loads(data))


def test_permission_problems_are_reported(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # nobody must be able to reach the directory: give it one under /tmp it may list.
        shared = Path(tempfile.mkdtemp(prefix="grid-permissions-"))
        try:
            shared.chmod(0o755)
            locked = write(shared, "a.yaml", NETWORK)
            locked.chmod(0o600)
            (error,) = load_as_nobody(shared)
        finally:
            shutil.rmtree(shared)
        assert error == [str(locked), None, "cannot read: Permission denied"]
        return
    locked = write(tmp_path, "a.yaml", NETWORK)
    locked.chmod(0)
    try:
        loaded = load_resources_from_dir(tmp_path)
    finally:
        locked.chmod(0o644)
    (problem,) = loaded.errors
    assert problem.reason == "cannot read: Permission denied"


def test_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read resource directory"):
        load_resources_from_dir(tmp_path / "absent")


def test_subdirectories_and_other_suffixes_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "nested").mkdir()
    write(tmp_path / "nested", "n.yaml", NETWORK)
    write(tmp_path, "n.yaml.bak", NETWORK)
    loaded = load_resources_from_dir(tmp_path)
    assert loaded.resources == () and loaded.errors == ()


def test_unhashable_yaml_keys_are_reported(tmp_path: Path) -> None:
    write(tmp_path, "odd.yaml", "? {a: 1}\n: value\n---\n" + NETWORK)
    loaded = load_resources_from_dir(tmp_path)
    assert [r.metadata.name for r in loaded.resources] == ["glb-demo"]
    (error,) = loaded.errors
    assert error.document == 0 and "unhashable" in error.reason
