"""SWIM nodes of another release of Grid, for tests of a mesh that mixes releases (an
upgrade in progress): a :class:`RemoteSwimNode` runs a ``SwimNode`` in a child process of
that release's interpreter (``support/remote_node_server.py``) and offers the methods and
properties the tests use on a ``SwimNode``, so a test can take either.

A :class:`Release` makes nodes of one release: :data:`CURRENT` makes ``SwimNode``s in this
process, ``Release(name, python)`` makes remote ones.

The child dies with the thread that started it (``PR_SET_PDEATHSIG``, set by the child
itself) and when its stdin closes; :meth:`RemoteSwimNode.close` ends it. An exception in
the child comes back as the same ``grid.errors`` class where this release has one, else as
:class:`RemoteNodeError`, with the child's message and its traceback as a note.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import select
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeAlias

import grid.errors
import grid.membership
from grid.membership import Event, Member, SwimConfig, SwimCredentials, SwimNode

SERVER = Path(__file__).with_name("remote_node_server.py")
#: How long a call may take beyond what it waits for; the slowest (``leave``, ``close``)
#: join the node's thread.
CALL_TIMEOUT = 30.0
# What the child may send back as a dataclass: the types of members and events.
RETURNED_TYPES = ("Member", "MemberEvent", "ItemEvent", "NameConflict", "VersionRefused")


class RemoteNodeError(RuntimeError):
    """The child failed: an exception this release has no class for, or the child's end."""


def _encode(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"$bytes"}:
        return base64.b64decode(value["$bytes"])
    if "$type" in value:
        name = value["$type"]
        kind = getattr(grid.membership, name, None) if name in RETURNED_TYPES else None
        if kind is None:
            raise RemoteNodeError(f"the child returned a {name}, which this release lacks")
        # JSON has no tuples; the dataclasses' sequence fields (ranges) are tuples.
        fields = {
            k: tuple(v) if isinstance(v, list) else v for k, v in _decode(value["fields"]).items()
        }
        return kind(**fields)
    return {k: _decode(v) for k, v in value.items()}


def _config_for_child(config: SwimConfig) -> dict[str, Any]:
    """Every setting, and which ones differ from this release's defaults: the child takes
    every setting its release knows, and refuses one it lacks only if it is not the default
    (a setting added since is no reason to fail while a test leaves it alone)."""
    default = SwimConfig()
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    changed = [name for name, value in settings.items() if value != getattr(default, name)]
    return {"settings": settings, "changed": changed}


def _error_from_child(error: Mapping[str, str]) -> Exception:
    kind = getattr(grid.errors, error["type"], None)
    raised: Exception | None = None
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            raised = kind(error["message"])
        except TypeError:  # a class whose constructor takes more than a message
            raised = None
    if raised is None:
        raised = RemoteNodeError(f"{error['type']}: {error['message']}")
    raised.add_note(f"in the remote node:\n{error['traceback']}")
    return raised


class _Child:
    """The child process and its pipes; closed by :meth:`end` or when garbage collected."""

    def __init__(self, python: Path) -> None:
        # The child's stderr, read back when it fails; open as long as the child lives.
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(
            # Isolated (-I): neither the tests' directories nor PYTHONPATH, so the child
            # imports its own release's modules only.
            [str(python), "-I", str(SERVER), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self.lock = threading.Lock()

    def call(self, op: str, *args: Any, waits: float | None = 0.0, **kwargs: Any) -> Any:
        """The child's answer to ``op``; ``waits`` is how long the op itself may block
        (None: for ever)."""
        request = json.dumps({"op": op, "args": _encode(args), "kwargs": _encode(kwargs)})
        with self.lock:
            stdin, stdout = self.pipes()
            try:
                stdin.write(request + "\n")
                stdin.flush()
                if waits is not None:
                    ready, _, _ = select.select([stdout], [], [], waits + CALL_TIMEOUT)
                    if not ready:
                        # The exchange is out of step from here on: the child is of no use.
                        self.process.kill()
                        raise RemoteNodeError(f"no answer to {op} in {waits + CALL_TIMEOUT}s")
                line = stdout.readline()
            except (BrokenPipeError, OSError):
                line = ""
            if not line:
                raise RemoteNodeError(f"the remote node ended during {op}: {self.last_words()}")
        answer = json.loads(line)
        if "error" in answer:
            raise _error_from_child(answer["error"])
        return _decode(answer["ok"])

    def pipes(self) -> tuple[IO[str], IO[str]]:
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None or stdin.closed:
            raise RemoteNodeError(f"the remote node has ended: {self.last_words()}")
        return stdin, stdout

    def last_words(self) -> str:
        code = self.process.poll()
        self.stderr.seek(0)
        tail = self.stderr.read()[-4000:].decode("utf-8", "replace").strip()
        return f"exit code {code}; stderr: {tail or '(empty)'}"

    def end(self) -> None:
        """Closes stdin (the child closes its node and exits), killing it if it lingers."""
        with self.lock:
            if self.process.stdin is not None and not self.process.stdin.closed:
                with contextlib.suppress(BrokenPipeError):
                    self.process.stdin.close()
            try:
                self.process.wait(timeout=CALL_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.stderr.close()


class RemoteSwimNode:
    """A ``SwimNode`` of the release installed for ``python``, in a child process; same
    constructor and the methods and properties of a ``SwimNode`` the tests use.

    :meth:`close` ends the child after keeping what a closed node still answers (its
    members, counters, generation and the events not yet taken), so a test reads a closed
    remote node as it reads a closed local one."""

    def __init__(
        self,
        python: Path,
        bind: str,
        site: str,
        advertise: str | None,
        keys: Sequence[bytes],
        config: SwimConfig | None = None,
        *,
        credentials: SwimCredentials,
        generation: int | None = None,
    ) -> None:
        self.config = config or SwimConfig()
        self._child = _Child(python)
        self._finalizer = weakref.finalize(self, self._child.end)
        self._events: list[Event] = []
        self._closed: dict[str, Any] | None = None
        try:
            fixed = self._child.call(
                "create",
                bind,
                site,
                advertise,
                list(keys),
                _config_for_child(self.config),
                {
                    "certificate_chain": list(credentials.certificate_chain),
                    "private_key": credentials.private_key,
                    "trust_anchors": list(credentials.trust_anchors),
                    "pins": {s: list(p) for s, p in credentials.pins.items()},
                },
                generation,
            )
        except BaseException:
            self._finalizer()
            raise
        self._address: str = fixed["address"]
        self._bound_address: str = fixed["bound_address"]
        self._site: str = fixed["site"]

    def _call(self, op: str, *args: Any) -> Any:
        if self._closed is not None:
            raise RemoteNodeError(f"{op}: the remote node of {self._site} is closed")
        return self._child.call(op, *args)

    def __repr__(self) -> str:
        return f"RemoteSwimNode({self._site} at {self._address})"

    @property
    def address(self) -> str:
        return self._address

    @property
    def bound_address(self) -> str:
        return self._bound_address

    @property
    def site(self) -> str:
        return self._site

    @property
    def generation(self) -> int:
        if self._closed is not None:
            return int(self._closed["generation"])
        return int(self._call("generation"))

    @property
    def running(self) -> bool:
        return self._closed is None and bool(self._call("running"))

    def start(self) -> None:
        self._call("start")

    def join(self, seeds: Sequence[str]) -> None:
        self._call("join", list(seeds))

    def leave(self) -> None:
        self._call("leave")

    def close(self) -> None:
        """Stops the node at once, keeps what a closed node answers, and ends the child."""
        if self._closed is not None:
            return
        try:
            self._call("close")
            self._events += self._call("events", 0)
            self._closed = {
                "generation": self._call("generation"),
                "members": self._call("members"),
                "stats": self._call("stats"),
            }
        finally:
            self._finalizer()

    def members(self) -> list[Member]:
        if self._closed is not None:
            return list(self._closed["members"])
        return list(self._call("members"))

    def local(self) -> Member:
        return Member(self.site, self.address, "alive", self.generation)

    def publish(self, lane: str, key: str, version: int, payload: bytes) -> bool:
        return bool(self._call("publish", lane, key, version, bytes(payload)))

    def stats(self) -> dict[str, int]:
        if self._closed is not None:
            return dict(self._closed["stats"])
        return dict(self._call("stats"))

    def next_event(self, timeout: float | None = None) -> Event | None:
        """As ``SwimNode.next_event``; every event already waiting in the child comes over
        in the same call, so draining a node costs one round trip."""
        if not self._events and self._closed is None:
            self._events = self._child.call("events", timeout, waits=timeout)
        return self._events.pop(0) if self._events else None


Node: TypeAlias = SwimNode | RemoteSwimNode


@dataclass(frozen=True)
class Release:
    """A release nodes can be made of: this process's Grid (``python`` None), or the one
    installed for another interpreter, whose nodes are :class:`RemoteSwimNode`\\ s."""

    name: str
    python: Path | None = None

    def node(
        self,
        bind: str,
        site: str,
        advertise: str | None,
        keys: Sequence[bytes],
        config: SwimConfig | None = None,
        *,
        credentials: SwimCredentials,
        generation: int | None = None,
    ) -> Node:
        """A node of this release, made as ``SwimNode(...)`` is (not started)."""
        if self.python is None:
            return SwimNode(
                bind, site, advertise, keys, config, credentials=credentials, generation=generation
            )
        return RemoteSwimNode(
            self.python,
            bind,
            site,
            advertise,
            keys,
            config,
            credentials=credentials,
            generation=generation,
        )

    def __str__(self) -> str:
        return self.name


CURRENT = Release("current")
