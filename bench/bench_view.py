"""Time to first render of the live view, in a real headless Chromium, at 100 members and
1,000 candidates, beside a 10-member, 100-candidate mesh in the same run.

The state is built with real engines, as gossip would leave it (bench_metrics.py's
builders): N peer sites, each with 10 providers, publish their items; the viewing site
receives them, sees every peer alive and trusted, and ranks them. The view is served by
the real :class:`~grid.view.LiveView` on a real HTTP server on loopback; its SWIM node is
described by a stand-in (the view reads only its address, generation and key ids).

One sample is a fresh navigation to ``/``: the browser's Performance API gives the time
from navigation start to the page's ``grid-view-rendered`` mark, set once the first
``/view.json`` arrived and every part was drawn and laid out. Two cases per size:

- cold: a new LiveView per sample, so the server explains the ranking and computes the
  route matrix (one real ranking per consuming site) for that request, as for the first
  viewer after the ranking changed;
- warm: a LiveView that answered before, holding the explanations of the same ranking, as
  for a viewer that opens the page while others watch.

The sizes and cases take turns within every round, so that a busy machine slows them
alike; the first round warms up. Medians; the ratio is against the small mesh.

Needs chromium and chromedriver (apt-get install chromium chromium-driver) and selenium.

Run: .venv/bin/python bench/bench_view.py [--rounds 11]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_metrics import NETWORK, build_viewer
from grid.engine import SiteEngine
from grid.errors import ConfigError
from grid.runtime.http import Endpoint
from grid.view import LiveView, NetworkSource, NodeInfo

SIZES = {"100 members, 1,000 candidates": 100, "10 members, 100 candidates": 10}
NODE = NodeInfo(True, "10.0.0.1:7946", 1, ("k-1",))
RENDERED = (
    "const mark = performance.getEntriesByName('grid-view-rendered')[0];"
    "const data = performance.getEntriesByType('resource')"
    "  .find(entry => entry.name.endsWith('/view.json'));"
    "return mark ? [mark.startTime, data ? data.responseEnd : null,"
    "  data ? data.encodedBodySize : null] : null;"
)


class Loop:
    """An asyncio loop in a thread: the servers run there while the browser blocks."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout=120)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


async def serve(engine: SiteEngine) -> tuple[Endpoint, LiveView]:
    view = LiveView("agent", lambda: [NetworkSource(NETWORK, engine, NODE)])
    endpoint = Endpoint("127.0.0.1", 0, view.routes(), error=ConfigError)
    await endpoint.start()
    return endpoint, view


@contextmanager
def chromium() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        raise SystemExit("needs chromium and chromedriver on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-sandbox",
        "--disable-extensions",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def first_render(driver: Any, address: str) -> tuple[float, float, float]:
    """(ms to the rendered mark, ms to the end of the /view.json response, its bytes)."""
    driver.get("about:blank")
    driver.get(f"http://{address}/")
    deadline = time.monotonic() + 120
    while True:
        found = driver.execute_script(RENDERED)
        if found:
            return float(found[0]), float(found[1] or 0), float(found[2] or 0)
        if time.monotonic() > deadline:
            raise SystemExit(f"the page at {address} never rendered")
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    loop = Loop()
    engines = {}
    for label, peers in SIZES.items():
        started = time.perf_counter()
        engines[label] = build_viewer(peers)
        print(f"{label}: built in {time.perf_counter() - started:.1f} s")
    warm = {label: loop.run(serve(engine)) for label, engine in engines.items()}
    samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with chromium() as driver:
        for round_ in range(args.rounds + 1):
            for label, engine in engines.items():
                endpoint, _ = loop.run(serve(engine))
                cold = first_render(driver, endpoint.address)
                loop.run(endpoint.stop())
                hot = first_render(driver, warm[label][0].address)
                if round_:  # the first round warms the browser and the server up
                    samples.setdefault((label, "cold"), []).append(cold)
                    samples.setdefault((label, "warm"), []).append(hot)
    for endpoint, _ in warm.values():
        loop.run(endpoint.stop())
    loop.close()
    print(f"\nmedians of {args.rounds} navigations each (ms from navigation start)")
    print(f"{'mesh':<32}{'case':<7}{'rendered':>10}{'view.json in':>14}{'view.json':>12}")
    medians = {}
    for (label, case), values in samples.items():
        rendered = statistics.median(v[0] for v in values)
        arrived = statistics.median(v[1] for v in values)
        size = statistics.median(v[2] for v in values)
        medians[label, case] = rendered
        print(f"{label:<32}{case:<7}{rendered:>10.0f}{arrived:>14.0f}{size / 1024:>9.0f} KiB")
    large, small = SIZES
    for case in ("cold", "warm"):
        ratio = medians[large, case] / medians[small, case]
        print(f"ratio {case}: {ratio:.1f}x the small mesh")


if __name__ == "__main__":
    main()
