"""What must hold once a chaos schedule is healed, and what must hold all along.

After the heal, within a bound (checked together, "one view"):

(a) **Overlays.** Every site's overlay file lists exactly the candidates a fresh what-if
    render gives for that site (``grid render``'s code path: ``build_what_if``,
    ``rank_candidates`` with the network's stale TTL, ``render_overlay``) over the union of
    every site's *current* resources, with each provider's signals as its endpoint serves
    them. Compared: the whole candidate list, in order, every field (site, model, cluster,
    tier, admission, score and its breakdown, freshness, rank, stable id). The provider
    values are exact in binary and in the replicated units, so a remote candidate built from
    a record scores exactly as the render does; they differ between providers, so no order
    rests on a tie. Nothing else is compared (the revision also digests the grid id and the
    render time).
(b) **Records.** Every site holds, for every site (itself included), exactly the providers
    that site currently declares, each with its current models and cost, Available and
    healthy: every provider edit made anywhere is present everywhere.
(c) **Budget.** Every site's known spend of the tenant, per window, equals the spend the
    sites acknowledged counting, less what only a crashed process knew (see
    :mod:`chaos.schedule`: the harness waits for spend to reach another process before it
    kills one, and counts the shortfall if it never does).

All along (every overlay file written, and each site's latest refresh every 0.2 s):

(d) **No route to a departed site.** No overlay a site renders lists a candidate of a site
    it sees as ``down`` or ``left`` in the same refresh. (Between a membership event and the
    refresh it wakes, a few milliseconds, the engine knows more than its overlay says; a
    snapshot taken then is not a routing decision, so views are judged on what the latest
    refresh left. A refresh may also put its render off, paced by ``renderInterval``, up to
    a second: until that render, which the overlay log judges, its snapshot is not a
    routing decision either.)
(e) **A wedged site leaves.** A site whose agent stopped writing while its SWIM thread still
    answers (seen alive) leaves every other site's overlay once its records are older than
    ``staleCandidateTtlSeconds``: no refresh later than the TTL plus 2 s after the wedge
    began lists it, until the wedge ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chaos.mesh import ChaosMesh
from grid.demo.builder import GATEWAY_NAME, GATEWAY_NAMESPACE
from grid.models.resources import LoadedResources, load_resources_from_dir
from grid.render.overlay import render_overlay
from grid.render.whatif import MetricsReport, ProviderReport, build_what_if
from grid.scoring.ranking import rank_candidates

GONE = ("down", "left")


def expected_records(mesh: ChaosMesh) -> dict[str, dict[str, dict[str, Any]]]:
    """What every site should hold of each site's providers, from their current plans."""
    return {
        site.name: {
            plan.name: {
                "models": sorted(plan.models),
                "cost": list(plan.cost_micro_usd),
                "phase": "Available",
                "healthy": True,
            }
            for plan in site.plan.providers
        }
        for site in mesh.sites.values()
    }


def _held(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "models": sorted(record.get("models", [])),
        "cost": record.get("cost"),
        "phase": record.get("phase"),
        "healthy": record.get("healthy"),
    }


def record_problems(
    expected: dict[str, dict[str, dict[str, Any]]], viewer: str, view: dict[str, Any]
) -> list[str]:
    """(b) for one site: every record it lacks, holds in an old version, or should not
    hold."""
    problems = []
    held = view.get("records", {})
    for origin, providers in sorted(expected.items()):
        have = held.get(origin, {})
        for name, want in sorted(providers.items()):
            if name not in have:
                problems.append(f"{viewer} lacks {origin}/{name}")
            elif _held(have[name]) != want:
                problems.append(
                    f"{viewer} holds {origin}/{name} as {_held(have[name])}, not {want}"
                )
        for name in sorted(set(have) - set(providers)):
            problems.append(f"{viewer} holds {origin}/{name}, which {origin} does not declare")
    for origin in sorted(set(held) - set(expected)):
        problems.append(f"{viewer} holds records of unknown site {origin}")
    return problems


def records_missing(
    expected: dict[str, dict[str, dict[str, Any]]], viewer: str, view: dict[str, Any] | None
) -> int:
    """How many of the expected records ``viewer`` lacks or holds in an old version."""
    held = {} if view is None else view.get("records", {})
    missing = 0
    for origin, providers in expected.items():
        for name, want in providers.items():
            have = held.get(origin, {}).get(name)
            if have is None or _held(have) != want:
                missing += 1
    return missing


def budget_problems(expected: dict[str, int], viewer: str, view: dict[str, Any]) -> list[str]:
    """(c) for one site."""
    known = view.get("budgets", {})
    return [
        f"{viewer} knows {known.get(counter, 0)} of {counter}, spent {total}"
        for counter, total in sorted(expected.items())
        if known.get(counter, 0) != total
    ]


def union_resources(mesh: ChaosMesh) -> LoadedResources:
    """The network and sites (the same at every site) and every site's current providers."""
    loaded = [load_resources_from_dir(site.resources) for site in mesh.sites.values()]
    for resources in loaded:
        if resources.errors:
            raise AssertionError(f"invalid resources: {resources.errors}")
    first = loaded[0]
    providers = [provider for resources in loaded for provider in resources.providers]
    return LoadedResources(resources=(*first.networks, *first.sites, *providers))


def served_metrics(mesh: ChaosMesh) -> MetricsReport:
    """Each provider's signals as its endpoint serves them (the scrape multiplies the
    latency by the mapping's scale, 1000, as done here)."""
    return MetricsReport(
        providers={
            plan.name: ProviderReport(
                queue_depth=float(plan.queue),
                kv_cache_utilization=plan.kv,
                prefix_cache_hit_ratio=plan.prefix,
                p99_latency_ms=plan.latency_s * 1000,
                healthy=True,
            )
            for site in mesh.sites.values()
            for plan in site.plan.providers
        }
    )


def rendered_candidates(mesh: ChaosMesh) -> dict[str, list[dict[str, Any]]]:
    """The candidates a fresh render gives each site."""
    resources = union_resources(mesh)
    metrics = served_metrics(mesh)
    now = datetime.now(UTC)
    rendered = {}
    for name in mesh.names:
        what_if = build_what_if(
            resources, site=name, gateway=GATEWAY_NAME, namespace=GATEWAY_NAMESPACE, metrics=metrics
        )
        spec = what_if.network.spec
        ranking = rank_candidates(
            what_if.candidates,
            what_if.consumer,
            spec.scoring,
            now,
            stale_after_seconds=spec.stale_candidate_ttl_seconds,
        )
        overlay = render_overlay(ranking, what_if.scope, what_if.source, now)
        rendered[name] = list(overlay.document["overlay"]["candidates"])
    return rendered


def _route(candidate: dict[str, Any]) -> str:
    return f"{candidate.get('site')}/{candidate.get('name')}@{candidate.get('cluster')}"


def overlay_problems(
    name: str, document: dict[str, Any] | None, expected: list[dict[str, Any]]
) -> list[str]:
    """(a) for one site: how its overlay file differs from the fresh render."""
    if document is None:
        return [f"{name} has no overlay file"]
    live = document.get("overlay", {}).get("candidates", [])
    if live == expected:
        return []
    have = [_route(c) for c in live]
    want = [_route(c) for c in expected]
    missing = [route for route in want if route not in have]
    extra = [route for route in have if route not in want]
    if missing or extra:
        return [f"{name}'s overlay lacks {missing} and has extra {extra}"]
    if have != want:
        return [f"{name}'s overlay order {have} differs from the render's {want}"]
    for got, wanted in zip(live, expected, strict=True):
        if got != wanted:
            fields = sorted(k for k in set(got) | set(wanted) if got.get(k) != wanted.get(k))
            details = {k: (got.get(k), wanted.get(k)) for k in fields}
            return [f"{name}'s candidate {_route(got)} differs from the render: {details}"]
    return [f"{name}'s overlay differs from the render"]


def routing_violations(viewer: str, members: dict[str, Any], routes: list[list[str]]) -> set[str]:
    """(d) for one snapshot: candidates of sites the viewer sees as gone."""
    found = set()
    for site, provider, _cluster in routes:
        if site == viewer:
            continue
        state = members.get(site, {}).get("state")
        if state in GONE:
            found.add(f"(d) {viewer} routed to {site}/{provider} while it saw {site} {state}")
    return found


@dataclass
class OneView:
    """The outcome of one check of (a), (b) and (c) at every site."""

    problems: list[str] = field(default_factory=list)
    records_missing: int = 0
    spend_missing: int = 0

    @property
    def holds(self) -> bool:
        return not self.problems


def check_one_view(mesh: ChaosMesh, expected_budgets: dict[str, int]) -> OneView:
    """(a), (b) and (c) at every site, now."""
    outcome = OneView()
    expected = expected_records(mesh)
    rendered = rendered_candidates(mesh)
    for name in mesh.names:
        view = mesh.view(name)
        outcome.records_missing += records_missing(expected, name, view)
        if view is None:
            outcome.problems.append(f"{name} has no current view (is its agent running?)")
            outcome.spend_missing += sum(expected_budgets.values())
            continue
        outcome.problems += record_problems(expected, name, view)
        outcome.problems += budget_problems(expected_budgets, name, view)
        known = view.get("budgets", {})
        outcome.spend_missing += sum(
            max(total - known.get(counter, 0), 0) for counter, total in expected_budgets.items()
        )
        outcome.problems += overlay_problems(name, mesh.overlay_document(name), rendered[name])
    return outcome
