"""The harness helpers fail loudly and precisely: ``eventually`` says what it waited for and
what it last saw, an operator that cannot start is reported with its error, operators
stop quickly, and kmock's own markers still choose the server class."""

from __future__ import annotations

import time
from typing import Any

import kmock as kmock_lib
import kopf
import pytest

from k8s.cluster import Cluster
from k8s.emulator import GRID_NETWORKS, GridKubernetesEmulator
from k8s.kopf_runner import run_operator
from k8s.waiting import eventually, wait_for_watch

pytestmark = pytest.mark.timeout(30)


async def test_eventually_returns_the_first_truthy_result() -> None:
    attempts: list[int] = []

    def third_time_lucky() -> str | None:
        attempts.append(1)
        return "ready" if len(attempts) >= 3 else None

    assert await eventually(third_time_lucky, interval=0.001) == "ready"
    assert len(attempts) == 3


async def test_eventually_accepts_async_checks_and_retries_on_exceptions() -> None:
    calls: list[int] = []

    async def flaky() -> int:
        calls.append(1)
        if len(calls) < 2:
            raise LookupError("not there yet")
        return 42

    assert await eventually(flaky, interval=0.001) == 42


async def test_eventually_reports_what_it_waited_for_and_the_last_error() -> None:
    def never() -> None:
        raise LookupError("configmap grid-overlay not found")

    started = time.monotonic()
    with pytest.raises(AssertionError) as raised:
        await eventually(never, timeout=0.2, interval=0.02, what="the overlay ConfigMap")
    assert time.monotonic() - started < 1.0
    message = str(raised.value)
    assert "not satisfied within 0.2s" in message
    assert "the overlay ConfigMap" in message
    assert "LookupError: configmap grid-overlay not found" in message
    assert isinstance(raised.value.__cause__, LookupError)


async def test_eventually_reports_the_last_falsy_result() -> None:
    with pytest.raises(AssertionError, match=r"last result: \[\]"):
        await eventually(list, timeout=0.05, interval=0.01)


async def test_wait_for_watch_times_out_with_the_resource_named(cluster: Cluster) -> None:
    with pytest.raises(
        AssertionError, match=r"a watch on grid\.praxis-proxy\.io/v1alpha1/gridnetworks"
    ):
        await wait_for_watch(cluster.emulator, GRID_NETWORKS, timeout=0.1)


async def test_an_operator_that_fails_to_start_is_reported(cluster: Cluster) -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def refuse(**_: Any) -> None:
        raise kopf.PermanentError("settings are unusable")

    started = time.monotonic()
    with pytest.raises(AssertionError, match="stopped before it was ready") as raised:
        async with run_operator(registry, cluster, startup_timeout=10):
            pytest.fail("the block must not run")
    assert "settings are unusable" in str(raised.value)
    assert raised.value.__cause__ is not None
    # kopf itself gives its remaining tasks a fixed 5 s before it returns the failure.
    assert time.monotonic() - started < 8.0, "a failed startup is reported, not timed out"


async def test_operators_start_and_stop_quickly(cluster: Cluster) -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.create("grid.praxis-proxy.io", "v1alpha1", "gridnetworks", registry=registry)
    def noop(**_: Any) -> None:
        pass

    started = time.monotonic()
    async with run_operator(registry, cluster, watching=[GRID_NETWORKS]) as operator:
        ready = time.monotonic()
        assert operator.alive
    stopped = time.monotonic()
    assert not operator.thread.is_alive()
    assert ready - started < 5.0, f"startup took {ready - started:.2f}s"
    assert stopped - ready < 3.0, f"stopping took {stopped - ready:.2f}s"
    await eventually(
        lambda: cluster.emulator.watch_count(GRID_NETWORKS) == 0,
        what="the stopped operator's watch closing",
    )


@pytest.mark.kmock(cls=kmock_lib.KubernetesEmulator)
async def test_a_kmock_marker_still_chooses_the_server_class(kmock: Any) -> None:
    assert type(kmock) is kmock_lib.KubernetesEmulator


async def test_the_default_server_is_the_grid_emulator(kmock: Any) -> None:
    assert isinstance(kmock, GridKubernetesEmulator)
