"""The operator's Prometheus metrics, in a registry of its own: counters of what it did
(ConfigMap writes, status patches, Events, Secret reads, GridSites created, items
gossiped) and gauges read from the running networks at scrape time (members, trusted sites,
overlay candidates, resource phases, SWIM counters).

Labels carry names of networks, gateways, namespaces, kinds and resources, phases and
outcomes: never a key, a token or anything read from a Secret.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from grid.runtime.metrics import NetworkGauges

if TYPE_CHECKING:
    from grid.engine import GatewayOverlay
    from grid.operator.runtime import NetworkRuntime


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
        self.items_published = Counter(
            "grid_operator_items_published",
            "Items handed to SWIM.",
            ["network", "lane"],
            registry=registry,
        )
        self.name_conflicts = Counter(
            "grid_operator_swim_name_conflicts",
            "Other live nodes claiming this site's name: refused, or yielded to (the node "
            "stopped).",
            ["network", "outcome"],
            registry=registry,
        )
        self.items_received = Counter(
            "grid_operator_items_received",
            "Items received from peers, by outcome.",
            ["network", "lane", "outcome"],
            registry=registry,
        )

    def watch(self, runtimes: Callable[[], Iterable[NetworkRuntime]]) -> None:
        """Report the networks ``runtimes`` returns at every scrape."""
        self.registry.register(_NetworkCollector(runtimes))


class _NetworkCollector(Collector):
    """Gauges read from the running networks at scrape time."""

    def __init__(self, runtimes: Callable[[], Iterable[NetworkRuntime]]) -> None:
        self._runtimes = runtimes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        networks = GaugeMetricFamily(
            "grid_operator_networks",
            "GridNetworks this operator runs, by SWIM state.",
            labels=["membership"],
        )
        gauges = NetworkGauges(
            "1 while the last render or write was refused and the previous overlay is kept."
        )
        running = stopped = 0
        for runtime in sorted(self._runtimes(), key=lambda r: r.name):
            name = runtime.name
            if gauges.add_node(name, runtime.node):
                running += 1
            else:
                stopped += 1
            composed = runtime.network_status
            if composed is not None:
                gauges.add_phase(name, "GridNetwork", name, str(composed.phase))
            engine = runtime.engine
            if engine is None:
                continue
            gauges.add_engine(
                name,
                engine,
                partial(_held_back, runtime),
                # The network's phase is the one composed with what only the shell knows.
                phases_of=lambda kind: kind != "GridNetwork",
            )
        networks.add_metric(["running"], running)
        networks.add_metric(["stopped"], stopped)
        yield networks
        yield from gauges.families()


def _held_back(runtime: NetworkRuntime, overlay: GatewayOverlay) -> bool:
    """Whether the gateway's overlay failed to render or its ConfigMaps to be written."""
    return bool(overlay.message or runtime.write_message(*overlay.key))
