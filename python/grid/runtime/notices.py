"""Log lines about a state that holds across the passes of a loop (a missing Secret, a
node that cannot bind, a refused write): written when the state starts or changes, not on
every pass."""

from __future__ import annotations

import logging


class Notices:
    """One log line per topic, repeated only when its message changes."""

    def __init__(self, logger: logging.Logger, prefix: str) -> None:
        self._logger = logger
        self._prefix = prefix
        self._last: dict[str, str] = {}

    def say(self, topic: str, message: str, level: int = logging.INFO) -> None:
        if self._last.get(topic) != message:
            self._last[topic] = message
            self._logger.log(level, "%s: %s", self._prefix, message)

    @property
    def prefix(self) -> str:
        """What every line starts with (``network lab``)."""
        return self._prefix
