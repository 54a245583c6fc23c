"""A budget gate: an HTTP authorization service that a gateway asks before it forwards a
request (Envoy's ext_authz in HTTP mode, or any proxy's auth subrequest), answering from
the budget document Grid writes beside the gateway's overlay.

    python budget_gate.py /var/lib/grid/overlays/prod/grid-system/edge/budgets.json \
        --network prod --gateway edge --namespace grid-system --port 9191

For each request it reads the tenant from a header (``x-tenant`` by default) and answers
403 when the tenant's budget is ``exhausted``, 200 otherwise (a tenant without a budget,
or no tenant at all, passes). For an escrowed budget (``enforcement: escrow``) it also
keeps to this site's ``allowance``: it counts what it admitted of the tenant in the
window, each request at the cost its ``x-grid-cost`` header gives (the most the request
may spend, e.g. its max_tokens; 1 without the header), and admits a request only while
that cost fits in ``allowance`` less the larger of what it admitted and the document's
``site_used`` (what Grid counted at this site: other gates' spend, and this one's before a
restart). A header that is not a whole number >= 0 is answered 400. It re-reads the
document when the file changes and takes a new one only when it is whole and Grid's: its
schema, its scope, and its revision, the SHA-256 of the canonical JSON of its ``budgets``
member (docs/overlay.md, "The budget document"); until then it keeps the last good one.
Standard library only."""

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
ESCROW_FIGURES = ("allowance", "site_used")
COST_HEADER = "x-grid-cost"


def canonical(value: Any) -> bytes:
    """RFC 8785 for the values a budget document holds (objects with ASCII keys, strings,
    integers, booleans, null): sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def check(document: Any, scope: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each tenant's figures (``state``, and for escrow ``allowance``, ``site_used``,
    ``window_start``), if ``document`` is a whole budget document of ``scope``; ValueError
    saying what is wrong otherwise."""
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
    tenants = {}
    for tenant in budgets["tenants"]:
        if tenant["state"] not in STATES:
            raise ValueError(f"tenant {tenant['tenant']!r} has no known state")
        escrowed = tenant.get("enforcement") == "escrow"
        if escrowed and not all(isinstance(tenant.get(k), int) for k in ESCROW_FIGURES):
            raise ValueError(f"tenant {tenant['tenant']!r} is escrowed without its allowance")
        tenants[tenant["tenant"]] = tenant
    return tenants


class Gate:
    """The last good document's figures, reloaded when the file changes, and what this gate
    admitted of each escrowed tenant in its window."""

    def __init__(self, path: str, scope: dict[str, str]) -> None:
        self.path = path
        self.scope = scope
        self.tenants: dict[str, dict[str, Any]] = {}
        self.revision: str | None = None
        self.admitted: dict[tuple[str, str], int] = {}
        """What this gate admitted, by (tenant, window_start)."""
        self._seen: tuple[int, int, int] | None = None
        self._lock = threading.Lock()

    def refresh(self) -> None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return  # not written yet, or being replaced: keep what we have
        # Grid replaces the file whole (a new inode), so a change of the same size within
        # one tick of the file system's clock is seen too.
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if seen == self._seen:
                return
            self._seen = seen
            try:
                with open(self.path, "rb") as file:
                    document = json.load(file)
                self.tenants = check(document, self.scope)
                self.revision = document["revision"]["value"]
                print(f"budget-gate: revision {self.revision[:12]}", file=sys.stderr, flush=True)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                print(f"budget-gate: keeping the last document: {error}", file=sys.stderr)
            current = {(t, f.get("window_start")) for t, f in self.tenants.items()}
            self.admitted = {k: v for k, v in self.admitted.items() if k in current}

    def allows(self, tenant: str | None, cost: int = 1) -> bool:
        """Whether to admit a request of ``tenant`` that may spend ``cost``; an admitted
        request of an escrowed tenant is counted against this site's allowance."""
        self.refresh()
        figures = self.tenants.get(tenant or "")
        if tenant is None or figures is None:
            return True
        if figures["state"] == "exhausted":
            return False
        if figures.get("enforcement") != "escrow":
            return True
        key = (tenant, figures["window_start"])
        with self._lock:
            used = max(self.admitted.get(key, 0), figures["site_used"])
            if used + cost > figures["allowance"]:
                return False
            self.admitted[key] = self.admitted.get(key, 0) + cost
            return True


def cost_of(value: str | None) -> int | None:
    """A request's cost from its header: 1 without one, None for one that is not a whole
    number >= 0."""
    if value is None:
        return 1
    text = value.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 15 else None


def serve(gate: Gate, header: str, host: str, port: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            tenant = self.headers.get(header)
            cost = cost_of(self.headers.get(COST_HEADER))
            if cost is None:
                code, body = 400, f"{COST_HEADER} must be a whole number >= 0\n".encode()
            elif gate.allows(tenant, cost):
                code, body = 200, b""
            else:
                code, body = 403, f"tenant {tenant} has no budget left here\n".encode()
            self.send_response(code)
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
