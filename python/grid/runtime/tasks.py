"""Background tasks a shell's network runs: each named after the network, a failure
logged rather than lost, and all of them cancelled together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any


class Tasks:
    """The running tasks of one owner; ``prefix`` starts their names and log lines."""

    def __init__(self, logger: logging.Logger, prefix: str) -> None:
        self._log = logger
        self._prefix = prefix
        self._running: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None], name: str = "") -> asyncio.Task[None]:
        """Run ``coroutine`` (named ``name``, else after its function)."""
        label = name or getattr(coroutine, "__qualname__", "task")
        task = asyncio.create_task(coroutine, name=f"{self._prefix} {label}")
        self._running.add(task)
        task.add_done_callback(self._finished)
        return task

    async def cancel_all(self) -> None:
        """Cancel every task and wait until they are gone."""
        tasks = list(self._running)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        # A task that ends with an error would otherwise only be noticed when collected.
        if not task.cancelled() and task.exception() is not None:
            self._log.error("%s stopped: %r", task.get_name(), task.exception())
