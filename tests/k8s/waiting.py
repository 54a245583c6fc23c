"""Polling helpers: wait for something an operator does in the background."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import kmock

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
"""Generous: a passing wait returns as soon as its condition holds, and a loaded two-core
machine can take many seconds to get there."""
DEFAULT_INTERVAL = 0.05


class WatchCounter(Protocol):
    """An API server that says how many watch streams are open: kmock's emulator, or a
    test's :class:`~k8s.cluster.Cluster` of either backend."""

    def watch_count(self, resource: kmock.resource) -> int: ...


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    what: str | None = None,
) -> T:
    """Call ``check`` until it returns a truthy value and return that value.

    ``check`` may be sync or async. A falsy result or any exception (a failed ``assert``,
    a 404 from the API) means "not yet". When ``timeout`` passes, an ``AssertionError``
    names what was awaited, how long, and the last result or exception (chained).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempts = 0
    last_result: object = None
    last_error: Exception | None = None
    while True:
        attempts += 1
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except Exception as error:
            last_error, last_result = error, None
        else:
            if result:
                return result
            last_error, last_result = None, result
        if loop.time() >= deadline:
            break
        await asyncio.sleep(interval)
    description = what or getattr(check, "__qualname__", repr(check))
    outcome = (
        f"last error: {type(last_error).__name__}: {last_error}"
        if last_error is not None
        else f"last result: {last_result!r}"
    )
    raise AssertionError(
        f"not satisfied within {timeout:g}s ({attempts} attempts): {description}; {outcome}"
    ) from last_error


async def wait_for_watch(
    server: WatchCounter,
    resource: kmock.resource,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Wait until a watch stream on ``resource`` is open on ``server``: from then on, an
    operator sees every change to that resource as it happens."""
    await eventually(
        lambda: server.watch_count(resource) > 0,
        timeout=timeout,
        what=f"a watch on {resource.group or 'core'}/{resource.version}/{resource.plural}",
    )
