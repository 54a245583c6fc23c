"""The real API server's record of the requests it served: its audit log.

kmock keeps every request it receives (:func:`k8s.rbac.served_requests`); a real
kube-apiserver writes the same facts (who, which verb on which object, the answer's code) to
an audit log when told to. :class:`AuditedControlPlane` tells it to, and :class:`AuditLog`
reads the log as it grows, so that a test can ask the real server the questions it asks
kmock's log: which calls the operator made, which were refused, whether a watch is open.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .control_plane import ControlPlane
from .rbac import Access, ServedRequest

# Every request at the Metadata level (no bodies: they would hold Secrets), except the
# server's own loopback calls. Watches are logged when their stream starts (ResponseStarted)
# and again when it ends (ResponseComplete).
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: ["system:apiserver"]
  - level: Metadata
"""
STREAM_STARTED = "ResponseStarted"
ANSWERED = "ResponseComplete"


class AuditedControlPlane(ControlPlane):
    """A :class:`ControlPlane` whose API server writes an audit log of every request."""

    @property
    def audit_log_path(self) -> Path:
        return self.work_dir / "audit.log"

    def api_server_arguments(self) -> list[str]:
        policy = self.work_dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY, encoding="utf-8")
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log_path}",
            # Each event is written before the request's handler returns.
            "--audit-log-mode=blocking",
        ]


class AuditLog:
    """The audit log's events in order, read incrementally as the server appends them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._events: list[Mapping[str, Any]] = []
        self._offset = 0

    def events(self) -> Sequence[Mapping[str, Any]]:
        """Every event so far (a line still being written is read next time)."""
        if self.path.exists():
            with self.path.open("rb") as log:
                log.seek(self._offset)
                text = log.read()
            complete = text[: text.rfind(b"\n") + 1]
            self._offset += len(complete)
            self._events.extend(json.loads(line) for line in complete.splitlines() if line)
        return self._events


def served_request(event: Mapping[str, Any]) -> ServedRequest:
    """One answered request (a ``ResponseComplete`` event) as :mod:`k8s.rbac` names it."""
    target = event.get("objectRef")
    access = None
    if target is not None and target.get("resource"):
        resource = target["resource"]
        if target.get("subresource"):
            resource = f"{resource}/{target['subresource']}"
        access = Access(
            event["verb"],
            target.get("apiGroup", ""),
            resource,
            target.get("namespace"),
            target.get("name"),
        )
    status = (event.get("responseStatus") or {}).get("code")
    return ServedRequest(access, event.get("userAgent", ""), status)


def answered(events: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    return (event for event in events if event.get("stage") == ANSWERED)


def open_watches(events: Sequence[Mapping[str, Any]], plural: str) -> int:
    """How many watch streams on ``plural`` have started and not yet ended."""
    started, ended = set(), set()
    for event in events:
        target = event.get("objectRef") or {}
        if event.get("verb") != "watch" or target.get("resource") != plural:
            continue
        if event.get("stage") == STREAM_STARTED:
            started.add(event["auditID"])
        elif event.get("stage") == ANSWERED:
            ended.add(event["auditID"])
    return len(started - ended)
