"""LocalCandidates: this site's own candidates kept between renders, built again only for
the providers whose view changed, and whole when the resources changed; always what
``local_candidates`` builds from the same inputs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from grid.engine.candidates import LocalCandidates, LocalView, local_candidates
from grid.models.network import GridNetwork
from grid.models.provider import InferenceProvider
from grid.models.resources import load_resources_from_dir
from grid.models.selectors import selector_matches
from grid.models.site import GridSite
from grid.observe.signals import Signals
from grid.render.whatif import WhatIf

MESH = Path(__file__).resolve().parent / "golden" / "mesh"
SITE = "alpha"


def resources() -> tuple[GridNetwork, GridSite, tuple[InferenceProvider, ...]]:
    """The golden mesh as site alpha's engine holds it: the providers it observes (those
    placed at alpha and those tied to no site), in name order."""
    loaded = load_resources_from_dir(MESH)
    assert loaded.errors == ()
    (network,) = loaded.networks
    (site,) = [entry for entry in loaded.sites if entry.metadata.name == SITE]
    observed = tuple(
        provider
        for provider in sorted(loaded.providers, key=lambda entry: entry.metadata.name)
        if provider.spec.site_selector is None
        or selector_matches(provider.spec.site_selector, site.metadata.labels)
    )
    assert len(observed) >= 3
    return network, site, observed


def view(rng: random.Random) -> LocalView:
    return LocalView(
        healthy=rng.choice((True, False, None)),
        degraded=rng.random() < 0.2,
        signals=Signals(
            queue_depth=float(rng.randint(0, 40)),
            kv_cache_utilization=rng.random(),
            p99_latency_ms=rng.uniform(50, 2000),
        ),
    )


def build(
    held: LocalCandidates,
    network: GridNetwork,
    site: GridSite,
    providers: tuple[InferenceProvider, ...],
    views: dict[str, LocalView],
) -> WhatIf:
    """What ``held`` gives, checked to be what ``local_candidates`` builds anew."""
    arguments = {
        "gateway": network.spec.gateway_refs[0],
        "site_name": SITE,
        "local_site": site,
        "providers": providers,
        "views": views,
    }
    kept = held.of(network, **arguments)  # type: ignore[arg-type]
    assert kept == local_candidates(network, **arguments)  # type: ignore[arg-type]
    return kept


def test_nothing_changed_is_the_last_build() -> None:
    network, site, providers = resources()
    rng = random.Random(1)
    views = {provider.metadata.name: view(rng) for provider in providers}
    held = LocalCandidates()
    first = build(held, network, site, providers, views)
    assert build(held, network, site, providers, dict(views)) is first


def test_only_the_provider_whose_view_changed_is_built_again() -> None:
    network, site, providers = resources()
    rng = random.Random(2)
    views = {provider.metadata.name: view(rng) for provider in providers}
    held = LocalCandidates()
    before = build(held, network, site, providers, views)
    changed = providers[1].metadata.name
    views[changed] = view(rng)
    after = build(held, network, site, providers, views)
    assert len(after.candidates) == len(before.candidates)
    for old, new in zip(before.candidates, after.candidates, strict=True):
        assert old.key == new.key
        assert (old is new) == (new.provider != changed)


def test_new_resources_build_everything_again() -> None:
    network, site, providers = resources()
    rng = random.Random(3)
    views = {provider.metadata.name: view(rng) for provider in providers}
    held = LocalCandidates()
    before = build(held, network, site, providers, views)
    again_loaded = resources()
    after = build(held, *again_loaded, views)
    assert not any(old is new for old, new in zip(before.candidates, after.candidates, strict=True))
    build(held, network, site, providers[:-1], views)


@pytest.mark.parametrize("seed", range(6))
def test_view_after_view_it_holds_what_building_anew_gives(seed: int) -> None:
    network, site, providers = resources()
    rng = random.Random(seed)
    views: dict[str, LocalView] = {}
    held = LocalCandidates()
    for _ in range(40):
        for provider in rng.sample(providers, rng.randint(0, len(providers))):
            name = provider.metadata.name
            if rng.random() < 0.15:
                views.pop(name, None)
            else:
                views[name] = view(rng)
        build(held, network, site, providers, views)


def test_a_build_that_fails_changes_nothing_held() -> None:
    # Extraction bounds every signal, so the engine never holds such a view: it stands for
    # any failure of a partial build.
    network, site, providers = resources()
    rng = random.Random(4)
    views = {provider.metadata.name: view(rng) for provider in providers}
    held = LocalCandidates()
    before = build(held, network, site, providers, views)
    name = providers[0].metadata.name
    good = views[name]
    views[name] = LocalView(healthy=True, degraded=False, signals=Signals(queue_depth=-1.0))
    with pytest.raises(ValueError, match="queue_depth"):
        build(held, network, site, providers, views)
    views[name] = good
    assert build(held, network, site, providers, views) is before
