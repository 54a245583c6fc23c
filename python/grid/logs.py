"""Log formats of the long-running commands (``grid agent``, ``grid operator``):
``--log-format text`` (one human line per record, as before) or ``--log-format json`` (one
JSON object per line, for log collectors).

A JSON line holds, in this order:

- ``time``: when the record was made, RFC 3339 in UTC with milliseconds
  (``2026-07-29T12:00:00.123Z``);
- ``level``: ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` or ``CRITICAL``;
- ``logger``: the logger's name (``grid.agent``, ``grid.operator``, ``kopf.objects``, ...);
- ``message``: the message with its arguments, exactly as the text format writes it;
- the record's structured extras (what the code passes as ``extra=``), each under its own
  key; kopf's object reference (``k8s_ref``) is written as ``object`` (the key kopf's own
  JSON format uses), and kopf's ``settings`` and ``k8s_skip`` are left out;
- ``exception`` (the formatted traceback) when the record carries one, ``stack`` when it
  carries a stack.

An extra never replaces one of the fixed keys: one named like them is written with an
``extra_`` prefix. Values that are not JSON (a path, an enum) are written as ``str()``
gives them, as ``%s`` would in the message.

Both formats write what the message already says and nothing more: no record attribute
beyond the extras the code chose to pass, so a secret kept out of the text logs is kept out
of the JSON ones too.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

LOG_FORMATS = ("text", "json")
"""The choices of ``--log-format``."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
"""The choices of ``--log-level``."""

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The text format (the one the commands always had)."""

JSON_KEYS = ("time", "level", "logger", "message")
"""The keys every JSON line holds, first and in this order."""

KOPF_OBJECT_KEY = "object"
"""Where kopf's per-object reference (its ``k8s_ref`` extra) is written."""

# Attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD_ATTRIBUTES = frozenset(
    {
        *logging.LogRecord("", logging.INFO, "", 0, "", (), None).__dict__,
        "message",
        "asctime",
        "taskName",
    }
)
# kopf's per-object loggers pass the operator's settings and a flag saying whether to post
# the record as an Event: neither is part of the message.
_LEFT_OUT_EXTRAS = frozenset({"settings", "k8s_skip"})
_RENAMED_EXTRAS = {"k8s_ref": KOPF_OBJECT_KEY}
_RESERVED = frozenset({*JSON_KEYS, "exception", "stack"})


def rfc3339_utc(timestamp: float) -> str:
    """``timestamp`` (seconds since the epoch) as RFC 3339 in UTC, to the millisecond."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # NaN and the infinities are not JSON
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(item) for item in value]
    return str(value)


def record_extras(record: logging.LogRecord) -> dict[str, Any]:
    """The structured extras of ``record`` as they are written (see the module's docs)."""
    extras: dict[str, Any] = {}
    for name, value in record.__dict__.items():
        if name in _STANDARD_ATTRIBUTES or name in _LEFT_OUT_EXTRAS or name.startswith("_"):
            continue
        key = _RENAMED_EXTRAS.get(name, name)
        if key in _RESERVED:
            key = f"extra_{key}"
        extras[key] = _jsonable(value)
    return extras


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines inside values are escaped, and
    everything beyond ASCII is written as \\u escapes)."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": rfc3339_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        document.update(record_extras(record))
        if record.exc_info:
            document["exception"] = record.exc_text or self.formatException(record.exc_info)
        elif record.exc_text:
            document["exception"] = record.exc_text
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        # ASCII only: no line separator (U+2028, ...) can split a line for any reader.
        return json.dumps(document)


def make_formatter(log_format: str) -> logging.Formatter:
    """The formatter of ``--log-format`` (``text`` or ``json``)."""
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"unknown log format {log_format!r} (choose from {', '.join(LOG_FORMATS)})")


def configure_logging(level: str, log_format: str = "text", stream: TextIO | None = None) -> None:
    """Send every logger's records at ``level`` and above to ``stream`` (standard error) in
    ``log_format``. Like :func:`logging.basicConfig`, it does nothing when the root logger
    already has handlers (a host program's own configuration wins)."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(make_formatter(log_format))
    logging.basicConfig(level=level, handlers=[handler])


def add_logging_options(parser: Any) -> None:
    """``--log-level`` and ``--log-format``, the same on every long-running command."""
    parser.add_argument("--log-level", default="INFO", choices=list(LOG_LEVELS))
    parser.add_argument(
        "--log-format",
        default="text",
        choices=list(LOG_FORMATS),
        help="text: one line per record (default); json: one JSON object per line with "
        "time (RFC 3339, UTC), level, logger, message and the record's extras",
    )
