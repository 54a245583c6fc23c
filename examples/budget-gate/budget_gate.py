"""A budget gate: an HTTP authorization service that a gateway asks before it forwards a
request (Envoy's ext_authz in HTTP mode, or any proxy's auth subrequest), answering from
the budget document Grid writes beside the gateway's overlay.

    python budget_gate.py /var/lib/grid/overlays/prod/grid-system/edge/budgets.json \
        --network prod --gateway edge --namespace grid-system --port 9191

For each request it reads the tenant from a header (``x-tenant`` by default) and answers
403 when the tenant's budget is ``exhausted``, 200 otherwise (a tenant without a budget,
or no tenant at all, passes). It re-reads the document when the file changes and takes a
new one only when it is whole and Grid's: its schema, its scope, and its revision, the
SHA-256 of the canonical JSON of its ``budgets`` member (docs/overlay.md, "The budget
document"); until then it keeps the last good one. Standard library only."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STATES = ("ok", "warn", "exhausted")


def canonical(value: Any) -> bytes:
    """RFC 8785 for the values a budget document holds (objects with ASCII keys, strings,
    integers, booleans, null): sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def check(document: Any, scope: dict[str, str]) -> dict[str, str]:
    """Each tenant's state, if ``document`` is a whole budget document of ``scope``;
    ValueError saying what is wrong otherwise."""
    if not isinstance(document, dict) or document.get("kind") != "grid.budgets":
        raise ValueError("not a budget document")
    if document.get("schema_version") != 1:
        raise ValueError(f"schema_version {document.get('schema_version')!r} is not 1")
    for key, wanted in scope.items():
        held = document.get("scope", {}).get(key)
        if held != wanted:
            raise ValueError(f"scope.{key} is {held!r}, not {wanted!r}")
    budgets = document.get("budgets")
    revision = document.get("revision", {}).get("value")
    if hashlib.sha256(canonical(budgets)).hexdigest() != revision:
        raise ValueError("the revision is not the digest of the budgets: torn or edited")
    states = {}
    for tenant in budgets["tenants"]:
        if tenant["state"] not in STATES:
            raise ValueError(f"tenant {tenant['tenant']!r} has no known state")
        states[tenant["tenant"]] = tenant["state"]
    return states


class Gate:
    """The last good document's states, reloaded when the file changes."""

    def __init__(self, path: str, scope: dict[str, str]) -> None:
        self.path = path
        self.scope = scope
        self.states: dict[str, str] = {}
        self.revision: str | None = None
        self._seen: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def refresh(self) -> None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return  # not written yet, or being replaced: keep what we have
        seen = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if seen == self._seen:
                return
            self._seen = seen
            try:
                with open(self.path, "rb") as file:
                    document = json.load(file)
                self.states = check(document, self.scope)
                self.revision = document["revision"]["value"]
                print(f"budget-gate: revision {self.revision[:12]}", file=sys.stderr, flush=True)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                print(f"budget-gate: keeping the last document: {error}", file=sys.stderr)

    def allows(self, tenant: str | None) -> bool:
        self.refresh()
        return tenant is None or self.states.get(tenant) != "exhausted"


def serve(gate: Gate, header: str, host: str, port: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            tenant = self.headers.get(header)
            allowed = gate.allows(tenant)
            body = b"" if allowed else f"tenant {tenant} has exhausted its budget\n".encode()
            self.send_response(200 if allowed else 403)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_HEAD = _answer  # every method asks the same question

        def log_message(self, format: str, *args: Any) -> None:
            return  # one line per request is the gateway's business

    server = ThreadingHTTPServer((host, port), Handler)
    print(f"budget-gate: listening on {server.server_address[0]}:{server.server_port}", flush=True)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description="Deny the requests of exhausted tenants.")
    parser.add_argument("document", help="the gateway's budgets.json")
    parser.add_argument("--network", required=True)
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--header", default="x-tenant", help="the header naming the tenant")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9191)
    args = parser.parse_args()
    scope = {"network": args.network, "gateway": args.gateway, "namespace": args.namespace}
    gate = Gate(args.document, scope)
    gate.refresh()
    serve(gate, args.header, args.host, args.port)


if __name__ == "__main__":
    main()
