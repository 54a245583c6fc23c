"""One ``SwimNode`` of whichever release of Grid this interpreter has installed, driven
over stdin/stdout by ``support.remote_node`` (the tests' side).

It runs under another release's interpreter (the previous release's virtualenv), so it is
a standalone script: it imports the standard library and that release's
``grid.membership``, nothing of the tests and nothing newer.

Protocol: one JSON object a line each way. A request is ``{"op": name, "args": [...],
"kwargs": {...}}``; the answer is ``{"ok": value}`` or ``{"error": {"type", "message",
"traceback"}}``. Bytes travel as ``{"$bytes": base64}``, the node's dataclasses (members,
events) as ``{"$type": class name, "fields": {...}}``. ``create`` makes the node (once),
its config given as every setting and the names of those set away from the tests' defaults;
``events`` waits up to ``timeout`` for one event and returns it with every other one
already waiting; every other op calls the node's method or reads its property of that name.
End of input closes the node and ends the process.
"""

from __future__ import annotations

import base64
import ctypes
import dataclasses
import json
import os
import signal
import sys
import traceback
from typing import Any

from grid.membership import SwimConfig, SwimCredentials, SwimNode

_PR_SET_PDEATHSIG = 1
# The node's methods and properties the tests' side uses, and nothing else.
METHODS = frozenset({"start", "join", "leave", "close", "members", "stats", "publish"})
PROPERTIES = frozenset({"address", "bound_address", "site", "generation", "running"})


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the thread that started it ends; done here rather than
    between fork and exec because the tests' process runs threads (taps, native nodes)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent_pid:  # the parent ended before prctl took effect
        os._exit(1)


def encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"$type": type(value).__name__, "fields": fields}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


class Server:
    def __init__(self) -> None:
        self.node: SwimNode | None = None

    def create(
        self,
        bind: str,
        site: str,
        advertise: str | None,
        keys: list[bytes],
        config: dict[str, Any],
        credentials: dict[str, Any],
        generation: int | None,
    ) -> dict[str, Any]:
        if self.node is not None:
            raise RuntimeError("this process already runs a node")
        known = {f.name for f in dataclasses.fields(SwimConfig)}
        unknown = sorted(set(config["changed"]) - known)
        if unknown:
            raise TypeError(f"this release's SwimConfig has no {', '.join(unknown)}")
        settings = {k: v for k, v in config["settings"].items() if k in known}
        self.node = SwimNode(
            bind,
            site,
            advertise,
            keys,
            SwimConfig(**settings),
            credentials=SwimCredentials(
                tuple(credentials["certificate_chain"]),
                credentials["private_key"],
                tuple(credentials["trust_anchors"]),
                {s: tuple(pins) for s, pins in credentials["pins"].items()},
            ),
            generation=generation,
        )
        return {name: getattr(self.node, name) for name in ("address", "bound_address", "site")}

    def events(self, timeout: float | None) -> list[Any]:
        node = self.require()
        first = node.next_event(timeout)
        if first is None:
            return []
        return [first, *iter(lambda: node.next_event(0), None)]

    def require(self) -> SwimNode:
        if self.node is None:
            raise RuntimeError("no node yet: 'create' first")
        return self.node

    def handle(self, op: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if op == "create":
            return self.create(*args, **kwargs)
        if op == "events":
            return self.events(*args, **kwargs)
        if op in PROPERTIES:
            return getattr(self.require(), op)
        if op in METHODS:
            return getattr(self.require(), op)(*args, **kwargs)
        raise ValueError(f"unknown operation {op!r}")


def main() -> None:
    die_with_parent(int(sys.argv[1]))
    # Answers go to the original stdout; anything else printing to it (the release's own
    # code, a native library) lands in stderr instead of corrupting the protocol.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    server = Server()
    try:
        for line in sys.stdin:
            request = json.loads(line)
            try:
                result = server.handle(
                    request["op"],
                    decode(request.get("args", [])),
                    decode(request.get("kwargs", {})),
                )
                answer: dict[str, Any] = {"ok": encode(result)}
            except Exception as error:
                answer = {
                    "error": {
                        "type": type(error).__name__,
                        "message": str(error),
                        "traceback": traceback.format_exc(),
                    }
                }
            answers.write(json.dumps(answer) + "\n")
    finally:
        if server.node is not None:
            server.node.close()


if __name__ == "__main__":
    main()
