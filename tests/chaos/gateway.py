"""A site's egress gateway stand-in for the chaos suite: the agent's own TLS egress listener
(``grid.agent.egress``) run as a process of its own, as a real egress gateway is. Peers
probe it to trust the site; it goes on answering while the site's agent is paused, wedged
or crashed, so only SWIM (or staleness) can tell them the agent is gone.

    python gateway.py --listen 10.77.0.11:8443 --tls-dir TLS --ready ready.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from grid.agent.egress import EgressListener, server_context


async def serve(listen: str, tls_dir: Path, ready: Path) -> None:
    context = server_context(tls_dir / "tls.crt", tls_dir / "tls.key", tls_dir / "ca.crt")
    listener = EgressListener(listen, context)
    await listener.start()
    temporary = ready.with_suffix(".tmp")
    temporary.write_text(json.dumps({"pid": os.getpid(), "address": listener.address}))
    temporary.replace(ready)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--tls-dir", required=True, type=Path)
    parser.add_argument("--ready", required=True, type=Path)
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.tls_dir, args.ready))


if __name__ == "__main__":
    main()
