"""Run a kopf operator against a test's cluster (kmock or a real API server), in a thread of
its own.

kopf gets its own thread and event loop: the emulator serves from the test's loop, and an
operator sharing that loop stops slowly and can hang the test's teardown. Stopping goes
through kopf's ``stop_flag``, which ends the operator gracefully well within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import kmock
import kopf

from .cluster import Cluster
from .waiting import wait_for_watch

STARTUP_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0

# Where each registry logs in (server, default namespace). kopf runs every login handler
# of a registry, so a registry bound to two clusters would connect at random: refuse that.
_REGISTRY_LOGINS: weakref.WeakKeyDictionary[kopf.OperatorRegistry, tuple[str, str]] = (
    weakref.WeakKeyDictionary()
)


@dataclass
class RunningOperator:
    """A kopf operator running in its own thread, on its own event loop."""

    name: str
    server: str
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    # A flag on the operator's own loop, set thread-safely: kopf awaits it directly rather
    # than parking an executor thread on it, so the loop closes as soon as kopf returns.
    # (The flag, not task cancellation, is what lets kopf run its cleanup handlers.)
    stop_flag: asyncio.Event = field(default_factory=asyncio.Event)
    ready_flag: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread = field(default_factory=threading.Thread)
    failure: BaseException | None = None

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def request_stop(self) -> None:
        """Ask kopf to stop (callable from any thread, any number of times)."""
        with contextlib.suppress(RuntimeError):  # the loop has already closed
            self.loop.call_soon_threadsafe(self.stop_flag.set)


def fast_settings() -> kopf.OperatorSettings:
    """kopf settings for tests: react within milliseconds, retry quickly, exit quickly."""
    settings = kopf.OperatorSettings()
    settings.queueing.idle_timeout = 1.0
    settings.queueing.exit_timeout = 1.0
    settings.networking.request_timeout = 10.0
    settings.networking.error_backoffs = [0.1, 0.2, 0.5, 1.0]
    settings.watching.reconnect_backoff = 0.05
    # Never let kopf SIGKILL the whole test process if its exit is slow.
    settings.process.ultimate_exiting_timeout = None
    return settings


def _bind_login(registry: kopf.OperatorRegistry, login: kopf.ConnectionInfo) -> None:
    server, namespace = login.server, login.default_namespace or "default"
    bound = _REGISTRY_LOGINS.get(registry)
    if bound == (server, namespace):
        return
    if bound is not None:
        raise ValueError(
            f"this registry already logs in to {bound[0]} (namespace {bound[1]}); build one "
            f"registry per operator instead of reusing it for {server} (namespace {namespace})"
        )

    @kopf.on.login(registry=registry, id="test-harness-login")
    def login_to_cluster(**_: Any) -> kopf.ConnectionInfo:
        return login

    _REGISTRY_LOGINS[registry] = (server, namespace)


def _describe(failure: BaseException) -> str:
    """A failure with the errors of the handlers behind it (kopf's ActivityError only
    says that "one or more handlers failed")."""
    outcomes = getattr(failure, "outcomes", None) or {}
    causes = [
        f"{handler_id}: {outcome.exception!r}"
        for handler_id, outcome in outcomes.items()
        if getattr(outcome, "exception", None) is not None
    ]
    return f"{failure!r}" + (f" ({'; '.join(causes)})" if causes else "")


def _wait_until_ready(operator: RunningOperator, timeout: float) -> bool:
    """Block until kopf reports readiness or its thread dies (run via ``to_thread``)."""
    step = 0.02
    waited = 0.0
    while waited < timeout:
        if operator.ready_flag.wait(step):
            return True
        if not operator.thread.is_alive():
            return False
        waited += step
    return False


@contextlib.asynccontextmanager
async def run_operator(
    registry: kopf.OperatorRegistry,
    cluster: Cluster,
    *,
    watching: Iterable[kmock.resource] = (),
    settings: kopf.OperatorSettings | None = None,
    namespace: str = "default",
    token: str | None = None,
    name: str | None = None,
    startup_timeout: float = STARTUP_TIMEOUT,
    stop_timeout: float = STOP_TIMEOUT,
) -> AsyncIterator[RunningOperator]:
    """Run ``registry``'s handlers cluster-wide against ``cluster`` until the block ends.

    Entering waits until kopf is ready and, for each resource in ``watching``, until its
    watch stream is open, so objects created inside the block are seen as new events.
    ``namespace`` is the operator's own namespace, where kopf posts Events about
    cluster-scoped objects (in a pod it is the ServiceAccount's namespace); kopf logs in
    with ``token`` (None: as the cluster's admin).
    Leaving stops the operator and fails if it does not stop within ``stop_timeout`` or
    if it crashed.
    """
    _bind_login(registry, cluster.connection_info(namespace, token))
    label = name or f"operator@{cluster.name}"
    operator = RunningOperator(name=label, server=cluster.url)

    def serve() -> None:
        loop = operator.loop
        try:
            kopf.run(
                loop=loop,
                registry=registry,
                settings=settings or fast_settings(),
                clusterwide=True,
                standalone=True,
                stop_flag=operator.stop_flag,
                ready_flag=operator.ready_flag,
            )
        except BaseException as error:  # reported to the test when the block ends
            operator.failure = error
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    operator.thread = threading.Thread(target=serve, name=f"kopf-{label}", daemon=True)
    operator.thread.start()
    try:
        if not await asyncio.to_thread(_wait_until_ready, operator, startup_timeout):
            if operator.failure is not None:
                raise AssertionError(
                    f"{label} stopped before it was ready: {_describe(operator.failure)}"
                ) from operator.failure
            raise AssertionError(f"{label} did not become ready within {startup_timeout:g}s")
        for resource in watching:
            await wait_for_watch(cluster, resource, timeout=startup_timeout)
        yield operator
    finally:
        operator.request_stop()
        await asyncio.to_thread(operator.thread.join, stop_timeout)
    if operator.thread.is_alive():
        raise AssertionError(f"{label} did not stop within {stop_timeout:g}s")
    if operator.failure is not None:
        raise AssertionError(
            f"{label} crashed: {_describe(operator.failure)}"
        ) from operator.failure
