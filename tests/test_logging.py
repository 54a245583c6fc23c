"""``--log-format json`` of ``grid agent`` and ``grid operator`` (issue 15): one JSON object
per line with time (RFC 3339, UTC), level, logger, message and the record's extras; the
line that says why a command stops is one of them; no secret in any of it."""

from __future__ import annotations

import json
import logging
import secrets
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from grid.demo import MeshSettings
from grid.demo.mesh import free_port
from grid.logs import JSON_KEYS, JsonFormatter, make_formatter, rfc3339_utc
from support.agents import TOKEN_SITES, AgentMeshes, mount_token
from support.canary import Canaries

LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


def record(message: str = "hello %s", *args: object, **extra: Any) -> logging.LogRecord:
    made = logging.getLogger("grid.test").makeRecord(
        "grid.test", logging.INFO, __file__, 1, message, args or ("world",), None, extra=extra
    )
    return made


def parse_line(line: str) -> dict[str, Any]:
    """One JSON log line, checked for the keys every line has."""
    document = json.loads(line)
    assert isinstance(document, dict), line
    assert list(document)[: len(JSON_KEYS)] == list(JSON_KEYS), line
    assert document["level"] in LEVELS
    assert isinstance(document["logger"], str) and document["logger"]
    assert isinstance(document["message"], str)
    moment = datetime.fromisoformat(document["time"])
    assert document["time"].endswith("Z")
    assert moment.utcoffset() is not None and moment.utcoffset().total_seconds() == 0
    return document


def parse_log(text: str) -> list[dict[str, Any]]:
    lines = text.splitlines()
    assert lines, "nothing was logged"
    return [parse_line(line) for line in lines]


# --- the formatter ----------------------------------------------------------------------


def test_a_line_has_the_fixed_keys_first() -> None:
    made = record()
    made.created = 1785326400.1234  # 2026-07-29T12:00:00.123Z
    line = JsonFormatter().format(made)
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2026-07-29T12:00:00.123Z",
        "level": "INFO",
        "logger": "grid.test",
        "message": "hello world",
    }
    assert rfc3339_utc(0) == "1970-01-01T00:00:00.000Z"


def test_extras_are_written_and_cannot_replace_the_fixed_keys() -> None:
    made = record(network="mesh", site="site-a", count=3, ratio=0.5, path=Path("/x"))
    made.__dict__["message"] = "not this"  # what Formatter.format caches
    made.__dict__.update({"level": "fake", "stack": "fake", "nan": float("nan")})
    document = parse_line(JsonFormatter().format(made))
    assert document["message"] == "hello world"
    assert document["level"] == "INFO"
    assert document["network"] == "mesh"
    assert document["site"] == "site-a"
    assert (document["count"], document["ratio"], document["path"]) == (3, 0.5, "/x")
    assert document["extra_level"] == "fake"
    assert document["extra_stack"] == "fake"
    assert document["nan"] == "nan"


def test_a_line_separator_inside_a_message_stays_on_one_line() -> None:
    line = JsonFormatter().format(record("a\nb\u2028c\r%s"))
    assert len(line.splitlines()) == 1
    assert line.isascii()
    assert parse_line(line)["message"] == "a\nb\u2028c\rworld"


def test_an_exception_is_one_field() -> None:
    try:
        raise ValueError("broken")
    except ValueError:
        made = logging.getLogger("grid.test").makeRecord(
            "grid.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    document = parse_line(JsonFormatter().format(made))
    assert document["message"] == "failed"
    assert document["exception"].startswith("Traceback")
    assert "ValueError: broken" in document["exception"]


def test_kopf_object_records_carry_the_object_not_the_settings() -> None:
    kopf = pytest.importorskip("kopf")
    handler = logging.Handler()
    lines: list[str] = []
    handler.emit = lambda made: lines.append(handler.format(made))  # type: ignore[method-assign]
    handler.setFormatter(make_formatter("json"))
    objects = logging.getLogger("kopf.objects")
    objects.addHandler(handler)
    previous = objects.level
    objects.setLevel(logging.INFO)
    try:
        body = {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": "mesh", "uid": "u-1"},
        }
        logger = kopf.LocalObjectLogger(body=kopf.Body(body), settings=kopf.OperatorSettings())
        logger.info("handled %s", "mesh")
    finally:
        objects.removeHandler(handler)
        objects.setLevel(previous)
    (document,) = [parse_line(line) for line in lines]
    assert document["logger"] == "kopf.objects"
    assert document["message"] == "handled mesh"
    assert document["object"] == {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "GridNetwork",
        "name": "mesh",
        "uid": "u-1",
        "namespace": None,
    }
    assert "settings" not in document and "k8s_skip" not in document


def test_the_text_format_is_unchanged() -> None:
    made = record(network="mesh")
    made.created = 1785326400.0
    line = make_formatter("text").format(made)
    assert line.endswith(" INFO grid.test: hello world")
    with pytest.raises(ValueError, match="unknown log format"):
        make_formatter("xml")


# --- the commands -----------------------------------------------------------------------


def grid(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grid.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("command", ["agent", "operator"])
def test_log_format_is_an_option_with_two_choices(command: str) -> None:
    done = grid(command, "--help")
    assert done.returncode == 0
    assert "--log-format {text,json}" in done.stdout
    refused = grid(command, "--log-format", "xml")
    assert refused.returncode == 2
    assert "invalid choice: 'xml'" in refused.stderr


def test_the_agent_refusing_to_start_says_why_in_one_json_line(tmp_path: Path) -> None:
    (tmp_path / "resources").mkdir()
    args = ["agent", "--resources", str(tmp_path / "resources"), "--state-dir", str(tmp_path)]
    text = grid(*args)
    assert (text.returncode, text.stdout) == (2, "")
    assert text.stderr.startswith("grid agent: ")
    done = grid(*args, "--log-format", "json")
    assert (done.returncode, done.stdout) == (2, "")
    (line,) = parse_log(done.stderr)
    assert line["level"] == "ERROR"
    assert line["logger"] == "grid.agent"
    assert line["exit_status"] == 2
    assert f"grid agent: {line['message']}" == text.stderr.strip()


def test_the_operator_refusing_to_start_says_why_in_one_json_line(tmp_path: Path) -> None:
    pytest.importorskip("kopf")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"),
    }
    text = grid("operator", env=env)
    assert (text.returncode, text.stdout) == (2, "")
    assert text.stderr.startswith("grid operator: ")
    done = grid("operator", "--log-format", "json", env=env)
    assert (done.returncode, done.stdout) == (2, "")
    (line,) = parse_log(done.stderr)
    assert (line["level"], line["logger"], line["exit_status"]) == ("ERROR", "grid.operator", 2)
    assert f"grid operator: {line['message']}" == text.stderr.strip()


async def test_a_json_logged_agent_run_has_no_secret_in_any_line(
    tmp_path: Path, agent_mesh: AgentMeshes
) -> None:
    """``grid agent --log-format json --log-level DEBUG`` serving a provider whose bearer
    token Secret holds a canary: every line of standard error is one JSON object with the
    fixed keys, and no 8 characters of the token are in any of it."""
    marker = f"grid-canary-{secrets.token_hex(16)}"
    secrets_dir = mount_token(tmp_path / "secrets", marker)
    mesh = await agent_mesh(TOKEN_SITES, MeshSettings(secrets_dir=secrets_dir))
    stdout_file, stderr_file = tmp_path / "agent.out", tmp_path / "agent.err"
    agent = mesh.spawn(
        "site-a",
        "--http",
        f"127.0.0.1:{free_port(socket.SOCK_STREAM)}",
        "--log-level",
        "DEBUG",
        "--log-format",
        "json",
        log=stderr_file,
        stdout=stdout_file,
    )

    def routed() -> bool:
        return any(c.get("credential") for c in mesh.overlay_candidates("site-a"))

    await mesh.start(["site-b"])
    await agent.until("site-a routes its provider with a credential", routed, 60)
    await mesh.stop()
    stdout, stderr = stdout_file.read_text(), stderr_file.read_text()
    assert agent.process.returncode == 0, stderr[-2000:]
    assert stdout == ""
    lines = parse_log(stderr)
    assert len(lines) > 5
    assert {line["level"] for line in lines} >= {"INFO", "DEBUG"}
    messages = [line["message"] for line in lines if line["logger"] == "grid.agent"]
    assert any("overlay for grid-system/edge-gateway" in message for message in messages)
    assert any("stopped (left the mesh)" in message for message in messages)
    times = [datetime.fromisoformat(line["time"]) for line in lines]
    assert min(times) <= max(times) <= datetime.now(UTC)

    canaries = Canaries([marker.encode()])
    canaries.assert_absent(stderr, "the JSON log")
    for line in lines:
        canaries.assert_absent(json.dumps(line, ensure_ascii=False), "a decoded JSON log line")
