"""A stand-in inference provider process for the chaos suite: ``/health`` and Prometheus
``/metrics`` (vLLM's metric names) for each provider of a site, one port each, with values
read from a JSON file that the test may rewrite at any time.

    python provider.py --host 10.77.0.11 --values values.json --ready ready.json

``values.json``: ``{"<provider>": {"port": 18001, "queue": 2, "kv": 0.25, "prefix": 0.5,
"latency_s": 0.5, "healthy": true}, ...}``; a provider's ``"spend": {"<team>": n}`` is served
as the token counter ``chaos_tokens_total{team="<team>"}`` (what a gateway exporting its
granted tokens serves, for the budgets' spend sources). Ports are bound at start; ``ready.json`` is
written (atomically) once every port listens. Standard library only, so it starts fast.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

QUEUE_METRIC = "vllm:num_requests_waiting"
KV_METRIC = "vllm:gpu_cache_usage_perc"
PREFIX_METRIC = "vllm:gpu_prefix_cache_hit_rate"
LATENCY_METRIC = "vllm:e2e_request_latency_p99_seconds"
SPEND_METRIC = "chaos_tokens_total"


class Values:
    """The values file, re-read when it changes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._values: dict[str, dict[str, Any]] = {}

    def of(self, provider: str) -> dict[str, Any]:
        with self._lock:
            try:
                info = self._path.stat()
                stamp = (info.st_mtime_ns, info.st_size)
                if stamp != self._stamp:
                    self._values = json.loads(self._path.read_text())
                    self._stamp = stamp
            except (OSError, ValueError):
                pass  # a file being replaced: keep serving the last values
            return dict(self._values.get(provider, {}))


def metrics_text(values: dict[str, Any]) -> str:
    lines = []
    for metric, key, help_text in (
        (QUEUE_METRIC, "queue", "Requests waiting."),
        (KV_METRIC, "kv", "KV cache usage (0-1)."),
        (PREFIX_METRIC, "prefix", "Prefix cache hit rate."),
        (LATENCY_METRIC, "latency_s", "P99 request latency."),
    ):
        if key in values:
            lines += [
                f"# HELP {metric} {help_text}",
                f"# TYPE {metric} gauge",
                f"{metric} {float(values[key])!r}",
            ]
    spend = values.get("spend")
    if isinstance(spend, dict):
        lines += [f"# TYPE {SPEND_METRIC.removesuffix('_total')} counter"]
        lines += [f'{SPEND_METRIC}{{team="{team}"}} {int(n)}' for team, n in sorted(spend.items())]
    return "\n".join(lines) + "\n"


def handler_for(provider: str, values: Values) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            current = values.of(provider)
            if self.path == "/health":
                healthy = current.get("healthy", True)
                self._answer(200 if healthy else 503, "ok\n" if healthy else "unhealthy\n")
            elif self.path == "/metrics":
                self._answer(200, metrics_text(current), "text/plain; version=0.0.4")
            else:
                self._answer(404, "not found\n")

        def _answer(self, status: int, body: str, kind: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--values", required=True, type=Path)
    parser.add_argument("--ready", required=True, type=Path)
    args = parser.parse_args()
    values = Values(args.values)
    initial = json.loads(args.values.read_text())
    servers = []
    for provider, settings in sorted(initial.items()):
        server = ThreadingHTTPServer(
            (args.host, int(settings["port"])), handler_for(provider, values)
        )
        server.daemon_threads = True
        servers.append(server)
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    temporary = args.ready.with_suffix(".tmp")
    temporary.write_text(json.dumps({"pid": os.getpid(), "providers": sorted(initial)}))
    temporary.replace(args.ready)
    servers[0].serve_forever()


if __name__ == "__main__":
    main()
