"""The agent's files (``grid.agent.outputs``, ``grid.fsutil``): status files are one line of
sorted JSON, replaced atomically without syncing to disk; everything else is synced before
it replaces the old file; a failed write is counted and leaves nothing behind."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from grid.agent.outputs import OutputWriter
from grid.fsutil import write_atomically
from grid.models.phases import InferenceProviderPhase
from grid.models.provider import InferenceProviderStatus

STATUS_INTERVAL_S = 5.0


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every descriptor ``os.fsync`` is called with (and the real call still made)."""
    calls: list[int] = []
    real = os.fsync

    def counted(descriptor: int) -> None:
        calls.append(descriptor)
        real(descriptor)

    monkeypatch.setattr(os, "fsync", counted)
    yield calls


def status(phase: InferenceProviderPhase, generation: int = 1) -> InferenceProviderStatus:
    return InferenceProviderStatus(phase=phase, observed_generation=generation)


def test_a_durable_write_syncs_the_file_and_its_directory(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    write_atomically(tmp_path / "overlay.json", b"{}")
    assert len(fsyncs) == 2
    assert (tmp_path / "overlay.json").read_bytes() == b"{}"


def test_a_write_that_is_not_durable_replaces_the_file_without_syncing(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    target = tmp_path / "status.json"
    target.write_bytes(b"old")
    write_atomically(target, b"new", durable=False)
    assert fsyncs == []
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_a_status_file_is_one_line_of_sorted_json_and_is_not_synced(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    writer = OutputWriter(tmp_path, status_interval_s=STATUS_INTERVAL_S)
    assert writer.write_status(
        "InferenceProvider", "llama", status(InferenceProviderPhase.AVAILABLE), 0.0
    )
    text = (tmp_path / "status" / "InferenceProvider" / "llama.json").read_text()
    assert text.endswith("}\n") and text.count("\n") == 1
    document = json.loads(text)
    assert document["kind"] == "InferenceProvider"
    assert document["metadata"] == {"name": "llama"}
    assert document["status"]["phase"] == "Available"
    assert text == json.dumps(document, sort_keys=True) + "\n"
    assert fsyncs == []


def test_a_status_is_rewritten_at_once_on_a_phase_change_else_once_per_interval(
    tmp_path: Path,
) -> None:
    writer = OutputWriter(tmp_path, status_interval_s=STATUS_INTERVAL_S)
    path = tmp_path / "status" / "InferenceProvider" / "llama.json"
    available = InferenceProviderPhase.AVAILABLE
    assert writer.write_status("InferenceProvider", "llama", status(available), 0.0)
    # Another generation, same phase, within the interval: held back.
    assert not writer.write_status("InferenceProvider", "llama", status(available, 2), 1.0)
    assert json.loads(path.read_text())["status"]["observedGeneration"] == 1
    # A phase change is written at once.
    unavailable = InferenceProviderPhase.UNAVAILABLE
    assert writer.write_status("InferenceProvider", "llama", status(unavailable, 2), 2.0)
    assert json.loads(path.read_text())["status"]["phase"] == "Unavailable"
    # The same document once the interval passed is not written again.
    assert not writer.write_status("InferenceProvider", "llama", status(unavailable, 2), 9.0)
    assert writer.write_status("InferenceProvider", "llama", status(unavailable, 3), 9.0)


def test_a_failed_status_write_is_counted_and_leaves_no_file(tmp_path: Path) -> None:
    blocked = tmp_path / "state"
    blocked.write_text("a file where the state directory should be")
    writer = OutputWriter(blocked, status_interval_s=STATUS_INTERVAL_S)
    assert not writer.write_status(
        "InferenceProvider", "llama", status(InferenceProviderPhase.AVAILABLE), 0.0
    )
    assert writer.failures == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]
