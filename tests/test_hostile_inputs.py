"""Hostile resource files and objects are refused in bounded time and memory (issue 19).

Every loader case runs in a forked child whose address space is capped and which is killed
when it overruns, so a regression fails the test instead of taking the machine's memory;
the child reports how long the load took and how much its resident memory grew. The agent
cases run a real ``grid agent`` process (and an in-process agent) and check that its event
loop keeps serving while a bomb is refused, that the last good resources keep serving,
and that SIGTERM stops it at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import grid.agent.agent as agent_module
import grid.models.resources as resources_module
from grid.agent import Agent
from grid.demo import DemoProvider
from grid.demo.mesh import free_port
from grid.errors import InvalidResourceError, SecretMaterialError
from grid.models import load_resource, load_resources_from_dir
from grid.models.limits import (
    ALIASES_REFUSED,
    MAX_DIRECTORY_FILES,
    MAX_FILE_BYTES,
    MAX_NODES_PER_DOCUMENT,
)
from grid.models.network import GridNetwork
from grid.models.resources import LoadedResources
from grid.operator.cache import ResourceCache
from grid.operator.secrets import load_trust_material
from grid.operator.validation import check_manifest
from support.agents import AgentProcess
from test_agent import (
    NETWORK,
    SITE,
    SITE_YAML,
    Lab,
    agent_args,
    eventually,
    fetch,
    network_yaml,
    provider_yaml,
)

REFUSE_S = 2.0
"""A hostile input must be refused within this (generous on a loaded 2-core machine)."""
GROWTH_MB = 64
"""... and grow the resident memory by less than this."""
CHILD_TIMEOUT_S = 60.0
CHILD_EXTRA_ADDRESS_SPACE = 1 << 30
MARKER = "grid-hostile-payload"
"""In the bombs' values: it must never appear in a log line or a response."""
API_VERSION_LINE = "apiVersion: grid.praxis-proxy.io/v1alpha1\n"


# --- hostile inputs ----------------------------------------------------------------------


def alias_bomb(depth: int) -> str:
    """Billion laughs: level ``n`` is a list of nine aliases of level ``n - 1``, so the
    last level expands to ``9 ** (depth + 1)`` strings (depth 9: 808 bytes, 3.5 billion
    strings)."""
    lines = [
        API_VERSION_LINE,
        "kind: InferenceProvider\nmetadata: {name: bomb}\nspec:\n",
        f"  l0: &l0 [{', '.join([MARKER] * 9)}]\n",
    ]
    for level in range(1, depth + 1):
        lines.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]\n")
    return "".join(lines)


def labelled_provider(labels: int) -> str:
    """A valid InferenceProvider with ``labels`` labels (600,000: 12.4 MB; a
    file of 8.9 MB written longhand)."""
    lines = "".join(f"    k{i}: v{i}\n" for i in range(labels))
    return (
        f"{API_VERSION_LINE}kind: InferenceProvider\nmetadata:\n  name: big\n  labels:\n{lines}"
        "spec:\n  gridNetworkRef: lab\n  backendKind: local\n  providerKind: self_hosted\n"
        "  models: [{name: llama}]\n  endpoint: http://llama:8000\n"
    )


GOOD_SITE = (
    f"{API_VERSION_LINE}kind: GridSite\nmetadata: {{name: good}}\nspec: {{gridNetworkRef: lab}}\n"
)


# --- running a load in a capped child ----------------------------------------------------


@dataclass(frozen=True)
class Measured:
    result: Any
    seconds: float
    growth_mb: float


def _proc_status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise LookupError(field)


def _reset_peak() -> bool:
    """Reset VmHWM (the peak resident size) to the current size, where Linux allows it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")
    except OSError:
        return False
    return True


def isolated(function: Callable[[], Any]) -> Measured:
    """``function()`` run in a forked child: its address space may grow by at most 1 GiB,
    it is killed after ``CHILD_TIMEOUT_S``, and it reports its JSON-able result, how long
    the call took and how much the resident memory grew (at its peak, where measurable)."""
    address_space = _proc_status_kb("VmSize") * 1024 + CHILD_EXTRA_ADDRESS_SPACE
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(reading)
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (address_space, hard))
            peak_known = _reset_peak()
            before = _proc_status_kb("VmRSS")
            started = time.monotonic()
            result = function()
            seconds = time.monotonic() - started
            after = _proc_status_kb("VmHWM" if peak_known else "VmRSS")
            payload = {"result": result, "seconds": seconds, "growth_kb": after - before}
        except BaseException as error:  # reported to the parent, which fails the test
            payload = {"error": f"{type(error).__name__}: {error}"[:2000]}
        try:
            data = json.dumps(payload).encode()
            while data:
                data = data[os.write(writing, data) :]
        finally:
            os._exit(0)
    os.close(writing)
    chunks: list[bytes] = []
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    try:
        while True:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([reading], [], [], max(0.0, remaining))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"the load did not end within {CHILD_TIMEOUT_S:g}s")
            chunk = os.read(reading, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(reading)
        _, status = os.waitpid(pid, 0)
    assert chunks, f"the child died without a report (wait status {status})"
    payload = json.loads(b"".join(chunks))
    assert "error" not in payload, payload.get("error")
    return Measured(payload["result"], payload["seconds"], payload["growth_kb"] / 1024)


def summary(loaded: LoadedResources) -> dict[str, Any]:
    return {
        "resources": [r.metadata.name for r in loaded.resources],
        "errors": [
            [None if e.file is None else Path(e.file).name, e.document, e.reason]
            for e in loaded.errors
        ],
    }


def load_isolated(directory: Path) -> tuple[dict[str, Any], Measured]:
    measured = isolated(lambda: summary(load_resources_from_dir(directory)))
    return measured.result, measured


def assert_bounded(measured: Measured, seconds: float = REFUSE_S) -> None:
    assert measured.seconds < seconds, f"took {measured.seconds:.2f}s"
    assert measured.growth_mb < GROWTH_MB, f"resident memory grew {measured.growth_mb:.0f} MB"


def only_error(result: dict[str, Any]) -> list[Any]:
    (error,) = result["errors"]
    assert MARKER not in json.dumps(error)
    return list(error)


# --- the loader --------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [9, 7], ids=["billion-laughs", "alias-depth-7"])
def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path, depth: int) -> None:
    bomb = alias_bomb(depth)
    (tmp_path / "bomb.yaml").write_text(bomb)
    (tmp_path / "site.yaml").write_text(GOOD_SITE)
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    assert result["resources"] == ["good"]  # the other files still load
    file, document, reason = only_error(result)
    assert (file, document) == ("bomb.yaml", 0)
    # Refused at the first anchor, on line 5 of the file.
    assert reason.startswith(f"YAML error at line 5, column 7: {ALIASES_REFUSED}")


def test_an_alias_alone_and_a_merge_key_are_refused(tmp_path: Path) -> None:
    (tmp_path / "alias.yaml").write_text("---\n# a comment\n" + GOOD_SITE + "extra: *elsewhere\n")
    (tmp_path / "merge.yaml").write_text(GOOD_SITE + "spec: {<<: *base}\n")
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    assert result["errors"] == [
        ["alias.yaml", 0, f"YAML error at line 7, column 8: {ALIASES_REFUSED}"],
        ["merge.yaml", 0, f"YAML error at line 5, column 12: {ALIASES_REFUSED}"],
    ]


def test_an_oversized_file_is_refused_unread(tmp_path: Path) -> None:
    # The provider of the issue: 600,000 labels.
    (tmp_path / "huge.yaml").write_text(labelled_provider(600_000))
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    file, document, reason = only_error(result)
    assert (file, document) == ("huge.yaml", None)
    assert reason == "the file is 11.8 MiB, more than the 1 MiB limit per file"


def test_a_dense_file_within_the_size_limit_is_refused_at_the_value_limit(
    tmp_path: Path,
) -> None:
    text = labelled_provider(45_000)
    assert len(text) < MAX_FILE_BYTES
    (tmp_path / "dense.yaml").write_text(text)
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    file, document, reason = only_error(result)
    assert (file, document) == ("dense.yaml", 0)
    assert f"more than {MAX_NODES_PER_DOCUMENT:,} values" in reason
    assert reason.startswith("YAML error at line ")


def test_a_directory_over_the_total_limit_loads_nothing(tmp_path: Path) -> None:
    block = "# padding\n" * (MAX_FILE_BYTES // 10 - 10)
    for number in range(17):
        (tmp_path / f"{number:02}.yaml").write_text(GOOD_SITE.replace("good", f"s{number}") + block)
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    file, document, reason = only_error(result)
    assert (file, document) == (tmp_path.name, None)
    assert reason.startswith("the YAML files add up to 17.0 MiB, more than the 16 MiB limit")
    assert reason.endswith("nothing was loaded")
    assert result["resources"] == []


def test_a_directory_with_too_many_files_loads_nothing(tmp_path: Path) -> None:
    for number in range(MAX_DIRECTORY_FILES + 1):
        (tmp_path / f"{number:04}.yaml").write_text("")
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    (_, _, reason) = only_error(result)
    assert reason.startswith(f"more than {MAX_DIRECTORY_FILES:,} YAML files")


@pytest.mark.parametrize(
    "nesting",
    [
        "spec: " + "[" * 10_000 + "]" * 10_000 + "\n",
        "spec: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n",
        "spec:\n" + "".join("  " * level + "-\n" for level in range(1000)),
        "spec: " + "[" * 100 + "]" * 100 + "\n",
    ],
    ids=["10000-lists", "10000-mappings", "1000-block-lists", "100-lists"],
)
def test_deep_nesting_is_refused_without_recursion(tmp_path: Path, nesting: str) -> None:
    (tmp_path / "deep.yaml").write_text(f"{API_VERSION_LINE}kind: GridSite\n{nesting}")
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    file, document, reason = only_error(result)
    assert (file, document) == ("deep.yaml", 0)
    # libyaml stops at its own depth (1000); anything shallower stops at Grid's (64).
    assert "nested more than 64 levels deep" in reason or "maximum nesting depth" in reason


def test_binary_garbage_is_refused(tmp_path: Path) -> None:
    generator = random.Random(19)
    (tmp_path / "random.yaml").write_bytes(generator.randbytes(256 * 1024))
    # Valid UTF-8, but control characters YAML does not allow.
    controls = bytes(generator.choice(b"\x00\x01\x02\x07\x1bab: \n") for _ in range(65536))
    (tmp_path / "controls.yaml").write_bytes(controls)
    (tmp_path / "nul.yaml").write_bytes(GOOD_SITE.encode() + b"extra: a\x00b\n")
    (tmp_path / "zz-site.yaml").write_text(GOOD_SITE)
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    assert result["resources"] == ["good"]
    errors = {file: reason for file, _, reason in result["errors"]}
    assert set(errors) == {"random.yaml", "controls.yaml", "nul.yaml"}
    assert errors["random.yaml"].startswith("cannot read: file is not UTF-8 text")
    assert errors["controls.yaml"].startswith("YAML error")
    # libyaml says "control characters", PyYAML alone "special characters".
    assert errors["nul.yaml"].startswith("YAML error at line 5, column 9: ")
    assert errors["nul.yaml"].endswith(" characters are not allowed")


def test_invalid_utf8_is_refused_with_its_offset(tmp_path: Path) -> None:
    (tmp_path / "latin1.yaml").write_bytes(GOOD_SITE.encode() + b"extra: caf\xe9\n")
    (tmp_path / "truncated.yaml").write_bytes(b"a: \xe2\x82")
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    offset = len(GOOD_SITE) + len("extra: caf")
    assert result["errors"] == [
        [
            "latin1.yaml",
            None,
            f"cannot read: file is not UTF-8 text (invalid byte at offset {offset})",
        ],
        ["truncated.yaml", None, "cannot read: file is not UTF-8 text (invalid byte at offset 3)"],
    ]


def test_an_integer_too_long_to_convert_is_an_error_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "digits.yaml").write_text(GOOD_SITE + "extra: " + "9" * 100_000 + "\n")
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    assert only_error(result)[2] == "YAML error at line 5, column 8: integer too long to convert"


# --- files changed under the reader ------------------------------------------------------


@pytest.fixture
def swap_on_open(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Callable[[Path], None]]]:
    """Actions run when the loader opens a file, keyed by file name: ``before`` (between
    listing and opening) or ``after`` (between opening and reading)."""
    actions: dict[str, Callable[[Path], None]] = {}
    real_open = resources_module._open_file

    def open_file(path: Path) -> int:
        before = actions.get(f"before:{path.name}")
        if before is not None:
            before(path)
        descriptor = real_open(path)
        after = actions.get(f"after:{path.name}")
        if after is not None:
            after(path)
        return descriptor

    monkeypatch.setattr(resources_module, "_open_file", open_file)
    yield actions


def test_a_file_replaced_mid_read_is_read_whole_in_one_version(
    tmp_path: Path, swap_on_open: dict[str, Callable[[Path], None]]
) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(GOOD_SITE)
    replacement = tmp_path / "next.tmp"
    replacement.write_text(alias_bomb(9))

    def replace(path: Path) -> None:
        os.replace(replacement, path)  # an editor's atomic save, after the open

    swap_on_open["after:site.yaml"] = replace
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    assert result == {"resources": ["good"], "errors": []}  # the version that was opened


def test_files_deleted_or_swapped_for_a_fifo_or_grown_are_reported(
    tmp_path: Path, swap_on_open: dict[str, Callable[[Path], None]]
) -> None:
    for name in ("a-deleted.yaml", "b-fifo.yaml", "c-grown.yaml", "d-site.yaml"):
        (tmp_path / name).write_text(GOOD_SITE.replace("good", name[0]))

    def to_fifo(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)  # nobody ever writes: a blocking open would hang forever

    def grow(path: Path) -> None:
        with path.open("a") as file:
            file.write("# padding\n" * (MAX_FILE_BYTES // 10 + 1))

    swap_on_open["before:a-deleted.yaml"] = Path.unlink
    swap_on_open["before:b-fifo.yaml"] = to_fifo
    swap_on_open["after:c-grown.yaml"] = grow
    result, measured = load_isolated(tmp_path)
    assert_bounded(measured)
    assert result["resources"] == ["d"]
    assert result["errors"] == [
        ["a-deleted.yaml", None, "cannot read: the file disappeared while the directory was read"],
        ["b-fifo.yaml", None, "cannot read: not a regular file"],
        ["c-grown.yaml", None, "cannot read: the file is larger than 1 MiB, the limit per file"],
    ]


def test_an_interrupted_read_stops_with_the_reason(tmp_path: Path) -> None:
    for number in range(5):
        (tmp_path / f"{number}.yaml").write_text(GOOD_SITE.replace("good", f"s{number}"))
    calls = 0

    def interrupt() -> str | None:
        nonlocal calls
        calls += 1
        return "the agent is stopping" if calls > 2 else None

    loaded = load_resources_from_dir(tmp_path, interrupt=interrupt)
    assert [r.metadata.name for r in loaded.resources] == ["s0", "s1"]
    (error,) = loaded.errors
    assert error.file == str(tmp_path / "2.yaml") and error.document == 0
    assert error.reason == "the agent is stopping; 2 more file(s) not read"


# --- objects from the Kubernetes API -----------------------------------------------------


def shared_lists(depth: int) -> list[Any]:
    """What an alias bomb decodes to: a graph whose parts are shared, 9**depth leaves."""
    level: list[Any] = [MARKER] * 9
    for _ in range(depth):
        level = [level] * 9
    return level


def provider_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "grid.praxis-proxy.io/v1alpha1",
        "kind": "InferenceProvider",
        "metadata": {"name": "big"},
        "spec": {
            "gridNetworkRef": "lab",
            "backendKind": "local",
            "providerKind": "self_hosted",
            "models": [{"name": "llama"}],
            "endpoint": "http://llama:8000",
        },
    }
    body.update(extra)
    return body


def test_a_custom_resource_over_the_limits_is_refused_in_its_conditions() -> None:
    labels = {f"k{i}": f"v{i}" for i in range(100_000)}  # about 1.3 MB: what etcd takes
    deep: list[Any] = []
    for _ in range(10_000):
        deep = [deep]

    def check() -> dict[str, Any]:
        many = provider_body(metadata={"name": "big", "labels": labels})
        cache = ResourceCache()
        entry = cache.apply(many)
        assert entry is not None and entry.resource is None
        return {
            "labels": entry.problems,
            "deep": check_manifest(provider_body(spec={"x": deep})).problems,
            "shared": check_manifest(provider_body(spec={"x": shared_lists(9)})).problems,
        }

    measured = isolated(check)
    assert_bounded(measured)
    values = "more than 20,000 values (mappings, lists, keys, items and scalars)"
    assert [problem.split(" in one")[0] for problem in measured.result["labels"]] == [values]
    assert measured.result["deep"] == ["nested more than 64 levels deep, the limit"]
    assert measured.result["shared"][0].startswith(values)


def test_load_resource_refuses_a_shared_graph_before_expanding_it() -> None:
    def load() -> str:
        with pytest.raises(InvalidResourceError) as refused:
            load_resource(provider_body(spec={"x": shared_lists(9)}))
        return str(refused.value)

    measured = isolated(load)
    assert_bounded(measured)
    assert measured.result.startswith("InferenceProvider big: more than 20,000 values")


class Secrets:
    """A SecretSource serving one oversized Secret entry."""

    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    async def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        return self.data


async def test_an_oversized_secret_entry_is_refused_before_decoding() -> None:
    network = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": "lab"},
            "spec": {"tls": {"swimKeyRef": {"name": "swim", "namespace": "grid", "key": "k"}}},
        }
    )
    assert isinstance(network, GridNetwork)
    source = Secrets({"k": "A" * (2 * MAX_FILE_BYTES)})
    started = time.monotonic()
    with pytest.raises(SecretMaterialError) as refused:
        await load_trust_material(source, network.spec.tls, datetime.now(UTC))
    assert time.monotonic() - started < REFUSE_S
    assert str(refused.value) == (
        "Secret grid/swim, key k (spec.tls.swimKeyRef) is 2 MiB, more than the 1 MiB limit "
        "(as base64)"
    )
    many = Secrets({f"key{i}": "" for i in range(1000)})
    with pytest.raises(SecretMaterialError) as missing:
        await load_trust_material(many, network.spec.tls, datetime.now(UTC))
    assert str(missing.value).endswith("key114, key115 and 980 more)")


# --- the agent ---------------------------------------------------------------------------


def unhealthy_fast(text: str) -> str:
    return text.replace("healthyThreshold: 1", "healthyThreshold: 1, unhealthyThreshold: 1")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise LookupError("VmRSS")


@pytest.fixture
async def providers() -> Any:
    started = []
    for _ in range(2):
        endpoint = DemoProvider(
            queue_depth=1, kv_cache_utilization=0.1, prefix_cache_hit_ratio=0.5, p99_latency_s=0.2
        )
        await endpoint.start()
        started.append(endpoint)
    yield started
    for endpoint in started:
        await endpoint.stop()


async def test_grid_agent_keeps_serving_through_a_bomb_and_stops_on_sigterm(
    lab: Lab, providers: list[DemoProvider], tmp_path: Path
) -> None:
    llama, qwen = providers
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    lab.write("20-llama.yaml", unhealthy_fast(provider_yaml("llama-a", llama.url)))
    lab.write("30-qwen.yaml", unhealthy_fast(provider_yaml("qwen-a", qwen.url, model="qwen")))
    http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    options = ["--site", SITE, "--http", http, "--reload-interval", "0.2", "--probe-interval", "1"]
    agent = AgentProcess(agent_args(lab, *options), tmp_path / "agent.log")
    polls: list[tuple[float, int]] = []
    polling = True

    async def poll_health(session: aiohttp.ClientSession) -> None:
        while polling:
            started = time.monotonic()
            try:
                async with session.get(
                    f"http://{http}/healthz", timeout=aiohttp.ClientTimeout(total=1.0)
                ) as response:
                    await response.read()
                    polls.append((time.monotonic() - started, response.status))
            except (aiohttp.ClientError, TimeoutError):
                polls.append((time.monotonic() - started, 0))
            await asyncio.sleep(0.05)

    async def status() -> dict[str, Any]:
        async with session.get(f"http://{http}/status") as response:
            return dict(await response.json())

    try:
        await agent.until(
            "both providers routed", lambda: sorted(lab.overlay_names()) == ["llama", "qwen"]
        )
        rss_before = rss_mb(agent.process.pid)
        async with aiohttp.ClientSession() as session:
            poller = asyncio.create_task(poll_health(session))
            # The bomb and the 600,000-label provider of the issue, dropped in together.
            lab.write("50-bomb.yaml", alias_bomb(9))
            lab.write("60-huge.yaml", labelled_provider(600_000))
            report: dict[str, Any] = {}

            async def refused() -> bool:
                report.update(await status())
                return len(report["resources"]["errors"]) == 2

            deadline = time.monotonic() + 20
            while not await refused():
                agent.check_running("the refusal reported")
                assert time.monotonic() < deadline, "the refusal is not reported"
                await asyncio.sleep(0.1)
            resources = report["resources"]
            assert resources["applied"] is False
            bomb, huge = resources["errors"]
            assert bomb["file"].endswith("50-bomb.yaml")
            assert ALIASES_REFUSED in bomb["reason"] and "line 5" in bomb["reason"]
            assert huge["file"].endswith("60-huge.yaml") and "1 MiB limit" in huge["reason"]
            # The last good resources keep serving: the overlay is rewritten from them.
            qwen.healthy = False
            await agent.until(
                "overlay rewritten without qwen", lambda: lab.overlay_names() == ["llama"], 20
            )
            network = (await status())["networks"][NETWORK]
            assert network["membership"]["running"] is True
            # Polled throughout: from before the drop, past the refusal and the rewrite.
            await eventually("20 polls of /healthz", lambda: len(polls) >= 20)
            polling = False
            await poller
        assert rss_mb(agent.process.pid) - rss_before < GROWTH_MB
        failed = [poll for poll in polls if poll[1] != 200]
        assert not failed, f"/healthz failed: {failed[:5]} of {len(polls)}"
        assert max(seconds for seconds, _ in polls) < 1.0
        stopping = time.monotonic()
        code = await asyncio.to_thread(agent.stop, 10)
        assert time.monotonic() - stopping < 10
        assert code == 0, agent.log_tail()
    finally:
        polling = False
        agent.close()
    text = agent.log.read_text()
    assert MARKER not in text and "k599999" not in text
    refusals = [line for line in text.splitlines() if ALIASES_REFUSED in line]
    assert refusals and all("50-bomb.yaml" in line for line in refusals)


async def test_a_read_that_hangs_is_abandoned_and_does_not_hold_up_stop(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    monkeypatch.setattr(agent_module, "LOAD_TIME_LIMIT_S", 0.3)
    monkeypatch.setattr(agent_module, "READ_GRACE_S", 0.3)
    agent = Agent(lab.options())
    await agent.start()
    release = threading.Event()
    real_load = agent_module.load_resources_from_dir

    def hanging_load(*args: Any, **kwargs: Any) -> LoadedResources:
        release.wait(30)  # a file system that does not answer
        return real_load(*args, **kwargs)

    monkeypatch.setattr(agent_module, "load_resources_from_dir", hanging_load)
    try:
        lab.write("20-more.yaml", GOOD_SITE)
        await eventually("read abandoned", lambda: not agent.report.applied)
        (error,) = agent.report.errors
        assert error.reason.startswith("reading did not finish within 0.6 s and was abandoned")
        assert (await fetch(agent, "/healthz"))[0] == 200
        status = json.loads((await fetch(agent, "/status"))[1])
        assert status["resources"]["errors"][0]["reason"] == error.reason
        stopping = time.monotonic()
        await agent.stop()  # the worker is still blocked: stop does not wait for it
        assert time.monotonic() - stopping < 5
    finally:
        release.set()
        await agent.stop()


async def test_the_agent_reads_off_the_event_loop(lab: Lab) -> None:
    """While a large directory is read, the event loop keeps turning."""
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    agent = Agent(lab.options())
    await agent.start()
    try:
        # Documents of other API groups: parsed, then skipped (nothing new to apply).
        data = ", ".join(f"k{i}: v" for i in range(10))
        foreign = [
            f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\ndata: {{{data}}}\n"
            for i in range(1200)
        ]
        ticks, longest = 0, 0.0

        async def tick() -> None:
            nonlocal ticks, longest
            while True:
                started = time.monotonic()
                await asyncio.sleep(0.01)
                longest = max(longest, time.monotonic() - started)
                ticks += 1

        ticker = asyncio.create_task(tick())
        for number in range(4):
            lab.write(f"2{number}-foreign.yaml", "---\n".join(foreign))
        await eventually(
            "4800 documents read",
            lambda: agent._resources is not None and len(agent._resources.skipped) == 4800,
            timeout=60,
        )
        ticker.cancel()
        assert ticks > 10 and longest < 0.5, (ticks, longest)
    finally:
        await agent.stop()


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(tmp_path)
