"""The operator's writes through the API: each gateway's ConfigMaps (written only when their
content changed, never over a ConfigMap Grid did not write, deleted when their gatewayRef
goes, the budget document's when the network has no budgets left) and the statuses of
Grid's resources (written only when they changed)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from grid.engine import SiteEngine
from grid.errors import KubernetesApiError
from grid.models.network import GridNetwork
from grid.operator.configmaps import (
    DesiredConfigMap,
    Target,
    budget_configmap,
    desired_configmaps,
    is_managed,
    matches,
    spec_targets,
)
from grid.operator.kube import KubeApi
from grid.operator.metrics import OperatorMetrics
from grid.operator.status import StatusMemory
from grid.render.budgets import BudgetScope, render_budget_document
from grid.runtime.notices import Notices

_log = logging.getLogger("grid.operator")


@dataclass(slots=True)
class _Written:
    """What became of the last write of one ConfigMap."""

    digest: str | None
    ok: bool
    message: str = ""
    at: float = 0.0


class ConfigMapWriter:
    """Keeps one network's ConfigMaps in line with its engine's overlays."""

    def __init__(
        self,
        network: str,
        kube: KubeApi,
        metrics: OperatorMetrics,
        notices: Notices,
        *,
        retry_s: float,
    ) -> None:
        self._network = network
        self._kube = kube
        self._metrics = metrics
        self._notices = notices
        self._retry_s = retry_s
        self._written: dict[Target, _Written] = {}
        self._retired: set[Target] = set()
        self._messages: dict[tuple[str, str], str] = {}
        self._budgets: tuple[object, list[DesiredConfigMap]] = (None, [])
        """The figures the budget documents were last rendered from, and them."""

    @property
    def targets(self) -> set[Target]:
        """Every ConfigMap written, or known from an earlier spec."""
        return set(self._written) | self._retired

    def message(self, namespace: str, gateway: str) -> str:
        """Why the gateway's ConfigMaps could not be written ("" when they were)."""
        return self._messages.get((namespace, gateway), "")

    def retire(self, targets: set[Target]) -> None:
        """ConfigMaps an earlier spec named: deleted unless the current spec wants them."""
        self._retired |= targets

    async def sync(
        self,
        engine: SiteEngine,
        network: GridNetwork,
        owner: Mapping[str, Any],
        *,
        hold_budgets: bool = False,
    ) -> None:
        """Write what changed, retry what failed (after ``retry_s``), delete what the spec no
        longer names. A gateway without a rendered overlay keeps its ConfigMap; with
        ``hold_budgets`` the budget documents stay as last rendered (the escrow holder they
        would grant from is not stored yet)."""
        desired: dict[Target, tuple[DesiredConfigMap, tuple[str, str]]] = {}
        for overlay in engine.overlays.values():
            for configmap in desired_configmaps(self._network, overlay):
                desired[configmap.target] = (configmap, overlay.key)
        budgets = self._budgets[1] if hold_budgets else self._budget_configmaps(engine, network)
        for configmap in budgets:
            desired[configmap.target] = (configmap, (configmap.namespace, configmap.gateway))
        moment = time.monotonic()
        messages: dict[tuple[str, str], list[str]] = {}
        for target, (configmap, gateway) in sorted(desired.items()):
            written = self._written.get(target)
            if written is not None and written.ok and written.digest == configmap.digest:
                continue
            if written is not None and not written.ok and moment - written.at < self._retry_s:
                messages.setdefault(gateway, []).append(written.message)
                continue
            outcome = await self._put(configmap, owner)
            self._written[target] = outcome
            if not outcome.ok:
                messages.setdefault(gateway, []).append(outcome.message)
        self._messages = {gateway: "; ".join(found) for gateway, found in messages.items()}
        for target in sorted(self.targets - spec_targets(network.spec)):
            if await delete_managed_configmap(self._kube, self._metrics, self._network, target):
                self._notices.say(f"configmap {target[0]}/{target[1]}", "ConfigMap removed")
                self._written.pop(target, None)
                self._retired.discard(target)

    def _budget_configmaps(
        self, engine: SiteEngine, network: GridNetwork
    ) -> list[DesiredConfigMap]:
        """Each gateway's budget document while the network has budgets, rendered again
        only when a figure changed."""
        spec, status = network.spec, engine.network_status
        if not spec.budgets:
            return []
        figures = (spec.budgets, spec.gateway_refs, status.budgets, status.unheard_sites)
        if figures != self._budgets[0]:
            now = datetime.now(UTC)
            rendered = [
                budget_configmap(
                    self._network,
                    gateway,
                    render_budget_document(
                        BudgetScope(self._network, gateway.name, gateway.namespace, engine.site),
                        spec.budgets,
                        status,
                        now,
                    ),
                )
                for gateway in spec.gateway_refs
            ]
            self._budgets = (figures, rendered)
        return self._budgets[1]

    async def _put(self, configmap: DesiredConfigMap, owner: Mapping[str, Any]) -> _Written:
        namespace, name = configmap.target
        topic = f"configmap {namespace}/{name}"
        now = time.monotonic()
        try:
            existing = await self._kube.read_configmap(namespace, name)
            if existing is None:
                await self._kube.create_configmap(namespace, configmap.manifest(owner))
                operation = "create"
            elif not is_managed(existing, self._network):
                self._metrics.configmap_writes.labels("patch", "conflict").inc()
                message = (
                    f"ConfigMap {namespace}/{name} exists and was not written by Grid for "
                    f"network {self._network}: it is left alone (remove it, or set the "
                    "gatewayRef's configMapName)"
                )
                self._notices.say(topic, message, logging.WARNING)
                return _Written(None, False, message, now)
            elif matches(existing, configmap, owner.get("metadata", {}).get("uid")):
                return _Written(configmap.digest, True, "", now)
            else:
                await self._kube.patch_configmap(namespace, name, configmap.patch(existing, owner))
                operation = "patch"
        except KubernetesApiError as error:
            self._metrics.configmap_writes.labels("write", "error").inc()
            hint = (
                f" (bind the grid-operator-namespaced ClusterRole in namespace {namespace})"
                if error.status == 403
                else ""
            )
            message = f"ConfigMap {namespace}/{name} not written: {error}{hint}"
            self._notices.say(topic, message, logging.WARNING)
            return _Written(None, False, message, now)
        self._metrics.configmap_writes.labels(operation, "ok").inc()
        self._notices.say(
            topic,
            f"ConfigMap {namespace}/{name} written ({operation} {configmap.key}, revision "
            f"{(configmap.revision or '')[:12]})",
        )
        return _Written(configmap.digest, True, "", now)


async def delete_managed_configmap(
    kube: KubeApi, metrics: OperatorMetrics, network: str, target: Target
) -> bool:
    """Delete a ConfigMap if Grid wrote it for ``network``; True when it is gone (or is not
    Grid's to delete), False when it could not be deleted now."""
    namespace, name = target
    try:
        existing = await kube.read_configmap(namespace, name)
        if existing is None or not is_managed(existing, network):
            return True
        version = existing.get("metadata", {}).get("resourceVersion")
        await kube.delete_configmap(namespace, name, resource_version=version)
    except KubernetesApiError as error:
        metrics.configmap_writes.labels("delete", "error").inc()
        _log.warning("network %s: ConfigMap %s/%s not deleted: %s", network, namespace, name, error)
        return False
    metrics.configmap_writes.labels("delete", "ok").inc()
    return True


class StatusWriter:
    """Writes statuses through the API, only what changed (see :class:`StatusMemory`)."""

    def __init__(self, kube: KubeApi, metrics: OperatorMetrics, interval_s: float) -> None:
        self._kube = kube
        self._metrics = metrics
        self._memory = StatusMemory(interval_s)

    def last(self, kind: str, name: str) -> Mapping[str, Any] | None:
        """The status last written (None before the first write)."""
        return self._memory.last(kind, name)

    def keep_only(self, keys: set[tuple[str, str]]) -> None:
        """Forget what was written for every resource but ``keys``."""
        self._memory.keep_only(keys)

    async def write(
        self,
        kind: str,
        name: str,
        document: Mapping[str, Any],
        stored: Mapping[str, Any],
        moment: float,
    ) -> str | None:
        """Patch the status if it is due; the problem when the patch failed."""
        patch = self._memory.due(kind, name, document, stored, moment)
        if patch is None:
            return None
        try:
            answer = await self._kube.patch_status(kind, name, patch)
        except KubernetesApiError as error:
            self._metrics.status_patches.labels(kind, "error").inc()
            return str(error)
        if answer is None:
            self._memory.forget(kind, name)
            return None
        self._metrics.status_patches.labels(kind, "ok").inc()
        self._memory.wrote(kind, name, document, moment)
        return None
