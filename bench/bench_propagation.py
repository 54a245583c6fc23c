"""How fast a mesh of standalone agents reacts, measured on 127.0.0.1 in one process.

For meshes of 3 and 10 sites (real SWIM over encrypted UDP, real TLS probes, real provider
endpoints):

- metric propagation: a provider's queue depth changes at one site; the time until every
  other site has written an overlay with the new score. Reported end to end (from the
  change at the endpoint, so it includes waiting for the next scrape) and from the moment
  the source site published the new item (gossip and re-render only). p50 and p99 over
  every (change, receiving site) pair.
- failure removal: a site crashes; the time until every survivor's overlay has dropped its
  candidates. Once for a whole-site crash (agent and egress listener gone: the TLS probe
  notices) and once for a crash of SWIM alone (the egress keeps answering: only SWIM
  failure detection can notice).

Each figure is printed next to its baseline: the configured scrape interval, the SWIM probe
interval, and the SWIM detection bound ``2(N-1)·probeInterval + suspicionTimeout``.

    .venv/bin/python bench/bench_propagation.py [--sites 3 10] [--changes 12]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from grid.crdt.pages import PAGE_PREFIX
from grid.crdt.snapshot import Item
from grid.demo import LocalMesh, MeshSettings, ProviderPlan, SitePlan
from grid.demo.mesh import quiet_agents
from grid.engine import GatewayOverlay
from grid.membership import SwimConfig
from grid.models.fields import parse_duration

PROBE = "500ms"
SUSPICION = "1500ms"
SCRAPE = "1s"
AGENT_PROBE_S = 5.0


def plans(count: int) -> list[SitePlan]:
    regions = (("us-east", "us-east-1"), ("us-west", "us-west-2"))
    result = []
    for index in range(count):
        region, zone = regions[index % 2]
        name = f"site-{index:02d}"
        result.append(
            SitePlan(
                name,
                region,
                f"{zone}{'abc'[index % 3]}",
                (ProviderPlan(f"llm-{index:02d}", ("llama",)),),
            )
        )
    return result


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


class Recorder:
    """Item publications, with their monotonic times (overlay writes are in the mesh's
    ``overlay_log``)."""

    def __init__(self) -> None:
        self.published: list[tuple[float, str, Item]] = []

    def attach(self, mesh: LocalMesh) -> None:
        for name, site in mesh.sites.items():
            assert site.agent is not None
            site.agent.publish_listeners.append(
                lambda network, item, name=name: self.published.append(
                    (time.monotonic(), name, item)
                )
            )


async def one_change(
    mesh: LocalMesh, recorder: Recorder, source: str, change: int
) -> list[tuple[float, float]]:
    """Change the queue depth of ``source``'s provider; for every other site, the delay
    from the change and from the source's publication to that site's new overlay."""
    names = list(mesh.sites)
    provider = f"llm-{names.index(source):02d}"
    others = [s for s in names if s != source]
    before = {s: score_of(mesh, s, source) for s in others}
    queue = (40.0 if change % 2 == 0 else 4.0) + change * 0.1  # never the same twice
    published_from = len(recorder.published)
    changed_at = time.monotonic()
    mesh.sites[source].providers[provider].set_load(queue_depth=queue)
    await mesh.wait_for(
        f"change {change} seen everywhere",
        lambda: all(score_of(mesh, s, source) != before[s] for s in others),
        30,
    )
    publish_at = next(
        at
        for at, site, item in recorder.published[published_from:]
        # A site publishes its providers' signals in pages: the page after the change
        # carries it (the demo mesh has one provider per site).
        if site == source and item.key.startswith(PAGE_PREFIX)
    )
    delays = []
    for site in others:
        seen_at = next(
            at
            for at, where, overlay in mesh.overlay_log
            if where == site
            and at >= publish_at
            and _score(overlay, source) not in (None, before[site])
        )
        delays.append((seen_at - changed_at, seen_at - publish_at))
    return delays


def gone_everywhere(mesh: LocalMesh, victim: str, survivors: list[str]) -> bool:
    return all(victim not in {c["site"] for c in mesh.candidates(s)} for s in survivors)


def score_of(mesh: LocalMesh, site: str, source: str) -> float | None:
    for candidate in mesh.candidates(site):
        if candidate["site"] == source:
            return float(candidate["score"])
    return None


async def measure(count: int, changes: int) -> dict[str, object]:
    settings = MeshSettings(
        network="bench",
        probe_interval=PROBE,
        suspicion_timeout=SUSPICION,
        agent_probe_interval_s=AGENT_PROBE_S,
        observe_interval=SCRAPE,
        seeds=3,
        stale_ttl_seconds=60,
    )
    with tempfile.TemporaryDirectory(prefix="grid-bench-") as root:
        mesh = LocalMesh(Path(root), plans(count), settings)
        await mesh.prepare()
        recorder = Recorder()
        try:
            await mesh.start()
            recorder.attach(mesh)
            names = list(mesh.sites)
            everyone = set(names)
            converged = await mesh.wait_for(
                "convergence",
                lambda: all({c["site"] for c in mesh.candidates(s)} == everyone for s in names),
                120,
            )
            end_to_end: list[float] = []
            gossip: list[float] = []
            jitter = random.Random(count)
            for change in range(changes):
                source = names[change % count]
                delays = await one_change(mesh, recorder, source, change)
                end_to_end += [e2e for e2e, _ in delays]
                gossip += [hop for _, hop in delays]
                # Changes land at random points of the scrape cycle, not always the same one.
                await asyncio.sleep(jitter.uniform(0.1, 1.1))

            full_victim, swim_victim = names[-1], names[-2]
            survivors = [s for s in names if s not in (full_victim, swim_victim)]
            await mesh.crash(full_victim)
            full_removal = await mesh.wait_for(
                "whole-site crash removed",
                lambda: all(
                    full_victim not in {c["site"] for c in mesh.candidates(s)} for s in survivors
                ),
                60,
            )
            agent = mesh.sites[swim_victim].agent
            assert agent is not None
            node = agent.networks["bench"].node
            assert node is not None
            node.close()
            swim_removal = await mesh.wait_for(
                "SWIM-only crash removed",
                lambda: all(
                    swim_victim not in {c["site"] for c in mesh.candidates(s)} for s in survivors
                ),
                60,
            )
        finally:
            await mesh.stop()
        config = SwimConfig(
            probe_interval=parse_duration(PROBE),
            suspicion_timeout=parse_duration(SUSPICION),
        )
        return {
            "sites": count,
            "convergence": converged,
            "end_to_end": end_to_end,
            "gossip": gossip,
            "full_removal": full_removal,
            "swim_removal": swim_removal,
            "bound": config.detection_bound(count),
        }


def _candidates(overlay: GatewayOverlay) -> list[dict[str, object]]:
    return (
        [] if overlay.overlay is None else list(overlay.overlay.document["overlay"]["candidates"])
    )


def _score(overlay: GatewayOverlay, source: str) -> float | None:
    for candidate in _candidates(overlay):
        if candidate["site"] == source:
            return float(candidate["score"])  # type: ignore[arg-type]
    return None


def report(result: dict[str, object]) -> None:
    count = result["sites"]
    e2e: list[float] = result["end_to_end"]  # type: ignore[assignment]
    gossip: list[float] = result["gossip"]  # type: ignore[assignment]
    probe = parse_duration(PROBE)
    scrape = parse_duration(SCRAPE)
    bound: float = result["bound"]  # type: ignore[assignment]
    print(
        f"\n{count} sites (probeInterval {PROBE}, suspicionTimeout {SUSPICION}, scrape {SCRAPE}, "
        f"{len(e2e)} samples)"
    )
    print(f"  convergence after start            {result['convergence']:7.3f} s")
    print(
        f"  metric change -> overlay elsewhere  p50 {statistics.median(e2e):7.3f} s   "
        f"p99 {percentile(e2e, 0.99):7.3f} s   baseline: scrape interval {scrape:.3f} s "
        f"(p50 ratio {statistics.median(e2e) / scrape:.2f})"
    )
    print(
        f"  publish at source -> overlay        p50 {statistics.median(gossip):7.3f} s   "
        f"p99 {percentile(gossip, 0.99):7.3f} s   baseline: probe interval {probe:.3f} s "
        f"(p50 ratio {statistics.median(gossip) / probe:.3f})"
    )
    full: float = result["full_removal"]  # type: ignore[assignment]
    swim: float = result["swim_removal"]  # type: ignore[assignment]
    print(
        f"  whole-site crash -> removed         {full:7.3f} s        "
        f"baseline: agent probe interval {AGENT_PROBE_S:.1f} s, SWIM bound {bound:.2f} s"
    )
    print(
        f"  SWIM-only crash -> removed          {swim:7.3f} s        "
        f"baseline: SWIM detection bound {bound:.2f} s (ratio {swim / bound:.2f})"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[3, 10])
    parser.add_argument("--changes", type=int, default=12)
    args = parser.parse_args()
    quiet_agents(verbose=False)
    for count in args.sites:
        report(await measure(count, args.changes))


if __name__ == "__main__":
    asyncio.run(main())
