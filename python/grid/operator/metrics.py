"""The operator's Prometheus metrics, in a registry of its own: counters of what only the
operator does (``grid_operator_*``: ConfigMap writes, status patches, Events, Secret reads,
GridSites created, failed reconcile passes) and Grid's families, the same as the agent's,
read from the running networks at scrape time (:mod:`grid.runtime.metrics`; the list is
in docs/observability.md).

Labels carry names of networks, gateways, namespaces, kinds and resources, phases and
outcomes: never a key, a token or anything read from a Secret.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter

from grid.runtime.metrics import Exposition, GridCollector, NetworkView, ScrapedSwimDriver
from grid.runtime.minters import TokenMinters
from grid.runtime.tokens import CREDENTIAL_EXPIRY_FAMILY

if TYPE_CHECKING:
    from grid.engine import GatewayOverlay, SiteEngine
    from grid.models.network import GridNetworkStatus
    from grid.runtime.observers import Observers


class ScrapedNetwork(Protocol):
    """What a scrape reads from one of the operator's networks
    (:class:`grid.operator.runtime.NetworkRuntime`, which imports this module, as do its
    credential checks and writers that count what they do: a protocol here, not an import
    back)."""

    @property
    def name(self) -> str: ...

    @property
    def engine(self) -> SiteEngine | None: ...

    @property
    def mesh(self) -> ScrapedSwimDriver: ...

    @property
    def observers(self) -> Observers: ...

    @property
    def network_status(self) -> GridNetworkStatus | None: ...

    @property
    def tokens(self) -> TokenMinters: ...

    def write_message(self, namespace: str, gateway: str) -> str:
        """Why the gateway's ConfigMaps could not be written ("" when they were)."""


class OperatorMetrics:
    """Counters the operator increments as it works."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.configmap_writes = Counter(
            "grid_operator_configmap_writes",
            "ConfigMap writes by operation and outcome (a ConfigMap already up to date is "
            "not written and not counted).",
            ["operation", "outcome"],
            registry=registry,
        )
        self.status_patches = Counter(
            "grid_operator_status_patches",
            "Status patches of Grid resources by kind and outcome.",
            ["kind", "outcome"],
            registry=registry,
        )
        self.events = Counter(
            "grid_operator_events",
            "Kubernetes Events posted, by kind of object and type.",
            ["kind", "type"],
            registry=registry,
        )
        self.secret_reads = Counter(
            "grid_operator_secret_reads",
            "Secret reads by purpose (trust material or a provider credential check) and outcome.",
            ["purpose", "outcome"],
            registry=registry,
        )
        self.sites_created = Counter(
            "grid_operator_sites_created",
            "GridSites created for peers discovered over SWIM.",
            ["network"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "grid_operator_reconcile_errors",
            "Reconcile passes that failed unexpectedly (logged with their cause).",
            ["network"],
            registry=registry,
        )

    def watch(self, runtimes: Callable[[], Iterable[ScrapedNetwork]]) -> None:
        """Report Grid's families (:mod:`grid.runtime.metrics`) for the networks
        ``runtimes`` returns, read at every scrape."""

        def minted(out: Exposition) -> None:
            now = datetime.now(UTC)
            for runtime in sorted(runtimes(), key=lambda r: r.name):
                for provider, expires_at in sorted(runtime.tokens.expiries(now).items()):
                    out.add(
                        CREDENTIAL_EXPIRY_FAMILY.name,
                        (runtime.name, provider),
                        expires_at.timestamp(),
                    )

        self.registry.register(
            GridCollector(
                "operator",
                lambda: [_view(runtime) for runtime in runtimes()],
                extra=minted,
            )
        )


def _view(runtime: ScrapedNetwork) -> NetworkView:
    composed = runtime.network_status
    return NetworkView(
        runtime.name,
        runtime.engine,
        runtime.mesh,
        runtime.observers.durations,
        partial(_held_back, runtime),
        # The network's phase is the one composed with what only the shell knows.
        network_phase=None if composed is None else str(composed.phase),
    )


def _held_back(runtime: ScrapedNetwork, overlay: GatewayOverlay) -> bool:
    """Whether the gateway's overlay failed to render or its ConfigMaps to be written."""
    return bool(overlay.message or runtime.write_message(*overlay.key))
