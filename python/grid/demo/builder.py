"""The files a mesh's sites run from, written one way for every mesh Grid builds: ``grid demo``
and the tests' meshes on 127.0.0.1 (:mod:`grid.demo.mesh`), ``grid bench mesh``
(:mod:`grid.meshbench.run`) and the chaos suite's meshes in network namespaces
(``tests/chaos/mesh.py``).

A mesh gets a fresh SWIM key and a fresh CA (:class:`MeshCredentials`); each site a
certificate, and a resource directory holding the GridNetwork, every GridSite and its own
InferenceProviders. What differs between the meshes is a parameter: the names a certificate
carries, addresses, SWIM timing (:class:`MeshTiming`), budgets, how a site's egress is
reached and how its providers are observed.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from grid.demo.endpoints import KV_METRIC, LATENCY_METRIC, LOOPBACK, PREFIX_METRIC, QUEUE_METRIC
from grid.fsutil import PRIVATE_FILE_MODE, write_atomically
from grid.models.meta import API_VERSION
from grid.trust import CertificateAuthority

SITE_LABEL = "grid.praxis-proxy.io/site"
REGION_LABEL = "topology.kubernetes.io/region"
GATEWAY_NAMESPACE = "grid-system"
GATEWAY_NAME = "edge-gateway"
NETWORK_FILE = "00-network.yaml"
SITES_FILE = "10-sites.yaml"
PROVIDERS_FILE = "20-providers.yaml"


@dataclass(frozen=True, slots=True)
class MeshTiming:
    """How fast a mesh runs: its GridNetwork's SWIM settings and stale-candidate TTL, how
    often providers are observed and how often agents probe their peers' egress. Short
    intervals keep a demo under a minute and a chaos fault longer than the TTL inside a
    test."""

    probe_interval: str = "500ms"
    suspicion_timeout: str = "1500ms"
    gossip_nodes: int = 3
    stale_ttl_seconds: int = 30
    observe_interval: str = "1s"
    agent_probe_interval_s: float = 1.0


class SiteDirectory:
    """Where a site's files are, below its own ``directory``: what its agent reads
    (``resources``), what it writes (``state``), its certificate and the CA's (``tls``)."""

    directory: Path

    @property
    def resources(self) -> Path:
        return self.directory / "resources"

    @property
    def state_dir(self) -> Path:
        return self.directory / "state"

    @property
    def tls_dir(self) -> Path:
        return self.directory / "tls"


def write_swim_key(path: Path) -> Path:
    """A fresh 32-byte SWIM key at ``path``, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, secrets.token_bytes(32), PRIVATE_FILE_MODE)
    return path


class MeshCredentials:
    """What one mesh is keyed with: a fresh SWIM key (written to ``key_file``) and a fresh
    CA that certifies each site."""

    def __init__(self, key_file: Path, ca_name: str) -> None:
        self.key_file = write_swim_key(key_file)
        self._now = datetime.now(UTC)
        self._ca = CertificateAuthority.generate(ca_name, now=self._now)

    def certify(
        self,
        site: str,
        tls_dir: Path,
        *,
        dns_names: Iterable[str] = (),
        ip_addresses: Iterable[str] = (LOOPBACK,),
    ) -> str:
        """Write ``site``'s certificate and key (``tls.crt``, ``tls.key``) and the CA's
        certificate (``ca.crt``; never its key) into ``tls_dir``, as an agent reads them.
        The certificate's fingerprint: the pin the other sites trust it by."""
        issued = self._ca.issue(site, now=self._now, dns_names=dns_names, ip_addresses=ip_addresses)
        issued.write(tls_dir, "tls")
        write_atomically(tls_dir / "ca.crt", self._ca.certificate_pem.encode())
        return issued.fingerprint

    def unpresented_fingerprint(self, site: str) -> str:
        """The fingerprint of a certificate for ``site`` that it never presents: a pin
        it cannot match."""
        return self._ca.issue(site, now=self._now).fingerprint


def resource(
    kind: str, name: str, spec: dict[str, Any], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Grid resource document."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def network_document(
    name: str,
    seeds: Sequence[str],
    *,
    grid_id: str | None = None,
    timing: MeshTiming | None = None,
    budgets: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The GridNetwork every site holds: its seeds and its one gateway, with ``timing``'s
    SWIM settings and TTL (default: the network's own defaults)."""
    spec: dict[str, Any] = {} if grid_id is None else {"gridId": grid_id}
    spec["seeds"] = list(seeds)
    spec["gatewayRefs"] = [{"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE}]
    if timing is not None:
        spec["swim"] = {
            "gossipNodes": timing.gossip_nodes,
            "probeInterval": timing.probe_interval,
            "suspicionTimeout": timing.suspicion_timeout,
        }
        spec["staleCandidateTtlSeconds"] = timing.stale_ttl_seconds
    if budgets:
        spec["budgets"] = [dict(budget) for budget in budgets]
    return resource("GridNetwork", name, spec)


def mutual_tls_egress(address: str, site: str) -> dict[str, str]:
    """An egress reached over mutual TLS at ``address``, its certificate naming ``site``."""
    return {"address": address, "tlsMode": "mutual_tls", "serverName": site}


def site_document(
    name: str,
    network: str,
    *,
    region: str,
    egress: Mapping[str, str],
    pin: str,
    zone: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A GridSite trusted by certificate ``pin``, labelled with its name and region unless
    ``labels`` says otherwise."""
    spec: dict[str, Any] = {"gridNetworkRef": network, "egress": dict(egress), "region": region}
    if zone is not None:
        spec["zone"] = zone
    spec["trust"] = {"certFingerprint": pin}
    if labels is None:
        labels = {SITE_LABEL: name, REGION_LABEL: region}
    return resource("GridSite", name, spec, labels)


def scraped_observation(metrics_port: int, interval: str) -> dict[str, Any]:
    """A provider observed as a vLLM server is: ``/health`` checked and ``/metrics``
    (vLLM's metric names, on ``metrics_port``) scraped every ``interval``."""
    return {
        "healthCheck": {
            "path": "/health",
            "interval": interval,
            "timeout": "500ms",
            "healthyThreshold": 1,
            "unhealthyThreshold": 2,
        },
        "metricsConfig": {
            "port": metrics_port,
            "path": "/metrics",
            "interval": interval,
            "timeout": "500ms",
            "signals": {
                "queueDepth": {"metric": QUEUE_METRIC, "aggregation": "sum"},
                "kvCacheUtilization": {"metric": KV_METRIC},
                "prefixCacheHitRatio": {"metric": PREFIX_METRIC},
                "p99LatencyMs": {"metric": LATENCY_METRIC, "scale": 1000},
            },
        },
    }


def provider_document(
    name: str,
    *,
    network: str,
    site: str,
    models: Iterable[str],
    endpoint: str,
    cost: tuple[str, str],
    observation: Mapping[str, Any],
    capabilities: Sequence[str] = (),
) -> dict[str, Any]:
    """A self-hosted InferenceProvider of ``site`` at ``endpoint``, costing ``cost``
    (input, output per million tokens), observed as ``observation`` says (its
    ``healthCheck`` and ``metricsConfig``)."""
    entries: list[dict[str, Any]] = [{"name": model} for model in models]
    if capabilities:
        for entry in entries:
            entry["capabilities"] = list(capabilities)
    spec = {
        "gridNetworkRef": network,
        "backendKind": "local",
        "providerKind": "self_hosted",
        "models": entries,
        "endpoint": endpoint,
        "siteSelector": {"matchLabels": {SITE_LABEL: site}},
        "cost": {"inputPerMillion": cost[0], "outputPerMillion": cost[1]},
        **observation,
    }
    return resource("InferenceProvider", name, spec)


def write_documents(path: Path, documents: Sequence[Mapping[str, Any]]) -> None:
    """YAML documents in one file, replaced in one step: an agent reloading meanwhile reads
    the old file or the new one, never part of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump_all([dict(document) for document in documents], sort_keys=False)
    write_atomically(path, text.encode())
