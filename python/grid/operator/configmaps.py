"""The ConfigMaps Grid writes for a gateway, as pure functions: what each must hold, how it is
labelled and owned, and whether an existing one may be overwritten or needs a write at all.

Each gatewayRef gets its overlay ConfigMap (``grid-config.json`` by default), when
``consumerConfig`` is enabled, the complete gateway configuration in a second one, and while
the network has budgets, the budget document (``budgets.json``) in a third. Each carries
Grid's labels, which is how Grid recognises what it wrote (it never overwrites or deletes a
ConfigMap without them), and an ownerReference to the GridNetwork, so that the API server's
garbage collector removes them with the network even if the operator is not running (an
owner must be in the dependent's namespace or cluster-scoped, as a GridNetwork is).
``blockOwnerDeletion`` is left unset: setting it needs permission to delete the owner,
which the operator does not have (the API server would refuse the write with 422).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from grid.engine import GatewayOverlay
from grid.models.meta import API_VERSION
from grid.models.network import GatewayRef, GridNetworkSpec
from grid.render.budgets import FILE_NAME as BUDGETS_KEY
from grid.render.budgets import RenderedBudgets

JsonObject = dict[str, Any]

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "grid"
NETWORK_LABEL: Final = "grid.praxis-proxy.io/network"
GATEWAY_LABEL: Final = "grid.praxis-proxy.io/gateway"
ROLE_LABEL: Final = "grid.praxis-proxy.io/role"
REVISION_ANNOTATION: Final = "grid.praxis-proxy.io/revision"
DIGEST_ANNOTATION: Final = "grid.praxis-proxy.io/content-digest"
MAX_LABEL_VALUE: Final = 63


class Role(StrEnum):
    OVERLAY = "overlay"
    CONSUMER_CONFIG = "consumer-config"
    BUDGETS = "budgets"


Target = tuple[str, str]
"""(namespace, name) of a ConfigMap."""


@dataclass(frozen=True, slots=True)
class DesiredConfigMap:
    """A ConfigMap as Grid wants it."""

    namespace: str
    name: str
    key: str
    text: str
    role: Role
    network: str
    gateway: str
    revision: str | None

    @property
    def target(self) -> Target:
        return (self.namespace, self.name)

    @property
    def digest(self) -> str:
        """Identifies the content: the overlay's or the budget document's revision (the
        same content keeps its revision even when re-rendered at another time), else a hash
        of the text."""
        if self.role in (Role.OVERLAY, Role.BUDGETS) and self.revision is not None:
            return f"{self.key}:{self.revision}"
        return f"{self.key}:sha256:{hashlib.sha256(self.text.encode()).hexdigest()}"

    def labels(self) -> dict[str, str]:
        return {
            MANAGED_BY_LABEL: MANAGED_BY,
            NETWORK_LABEL: label_value(self.network),
            GATEWAY_LABEL: label_value(self.gateway),
            ROLE_LABEL: str(self.role),
        }

    def annotations(self) -> dict[str, str]:
        annotations = {DIGEST_ANNOTATION: self.digest}
        if self.revision is not None:
            annotations[REVISION_ANNOTATION] = self.revision
        return annotations

    def manifest(self, owner: Mapping[str, Any]) -> JsonObject:
        """The whole ConfigMap, for a create."""
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": self.labels(),
                "annotations": self.annotations(),
                "ownerReferences": [owner_reference(owner)],
            },
            "data": {self.key: self.text},
        }

    def patch(self, existing: Mapping[str, Any], owner: Mapping[str, Any]) -> JsonObject:
        """A merge patch bringing ``existing`` (one of Grid's) to this content: other keys
        Grid wrote there before (a changed configMapKey) are removed."""
        old_data = existing.get("data") or {}
        data: dict[str, str | None] = {key: None for key in old_data if key != self.key}
        data[self.key] = self.text
        references = [
            ref
            for ref in (existing.get("metadata") or {}).get("ownerReferences") or []
            if ref.get("uid") != owner_reference(owner)["uid"]
        ]
        return {
            "metadata": {
                "labels": self.labels(),
                "annotations": self.annotations(),
                "ownerReferences": [*references, owner_reference(owner)],
            },
            "data": data,
        }


def owner_reference(owner: Mapping[str, Any]) -> JsonObject:
    """An ownerReference to the GridNetwork (see the module docstring on
    ``blockOwnerDeletion``)."""
    metadata = owner.get("metadata") or {}
    return {
        "apiVersion": API_VERSION,
        "kind": "GridNetwork",
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
    }


def desired_configmaps(network: str, overlay: GatewayOverlay) -> list[DesiredConfigMap]:
    """What a gateway's ConfigMaps must hold now; empty until a first overlay is rendered
    (Grid never writes an overlay with no candidates)."""
    rendered = overlay.overlay
    if rendered is None:
        return []
    gateway = overlay.gateway
    found = [
        DesiredConfigMap(
            gateway.namespace,
            gateway.overlay_config_map,
            gateway.config_map_key,
            rendered.text,
            Role.OVERLAY,
            network,
            gateway.name,
            rendered.revision,
        )
    ]
    consumer = gateway.consumer_config
    if overlay.consumer_config is not None and consumer is not None and consumer.enabled:
        found.append(
            DesiredConfigMap(
                gateway.namespace,
                gateway.consumer_config_map,
                consumer.config_map_key,
                overlay.consumer_config,
                Role.CONSUMER_CONFIG,
                network,
                gateway.name,
                rendered.revision,
            )
        )
    return found


def budget_configmap(
    network: str, gateway: GatewayRef, rendered: RenderedBudgets
) -> DesiredConfigMap:
    """The gateway's budget document, as its ConfigMap holds it."""
    return DesiredConfigMap(
        gateway.namespace,
        gateway.budget_config_map,
        BUDGETS_KEY,
        rendered.text,
        Role.BUDGETS,
        network,
        gateway.name,
        rendered.revision,
    )


def gateway_targets(gateway: GatewayRef, *, budgets: bool = False) -> set[Target]:
    """Every ConfigMap Grid may write for a gateway (the budget document's with
    ``budgets``)."""
    targets = {(gateway.namespace, gateway.overlay_config_map)}
    consumer = gateway.consumer_config
    if consumer is not None and consumer.enabled:
        targets.add((gateway.namespace, gateway.consumer_config_map))
    if budgets:
        targets.add((gateway.namespace, gateway.budget_config_map))
    return targets


def spec_targets(spec: GridNetworkSpec) -> set[Target]:
    """Every ConfigMap Grid may write for a network."""
    budgets = bool(spec.budgets)
    return {
        target
        for gateway in spec.gateway_refs
        for target in gateway_targets(gateway, budgets=budgets)
    }


def is_managed(configmap: Mapping[str, Any], network: str) -> bool:
    """Whether Grid wrote ``configmap`` for ``network`` (and may replace or delete it)."""
    labels = (configmap.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(NETWORK_LABEL) == label_value(
        network
    )


def matches(configmap: Mapping[str, Any], desired: DesiredConfigMap, owner_uid: str | None) -> bool:
    """Whether ``configmap`` already holds what ``desired`` says (no write needed)."""
    metadata = configmap.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    data = configmap.get("data") or {}
    owned = any(ref.get("uid") == owner_uid for ref in metadata.get("ownerReferences") or [])
    return (
        annotations.get(DIGEST_ANNOTATION) == desired.digest
        and set(data) == {desired.key}
        and all(labels.get(key) == value for key, value in desired.labels().items())
        and owned
    )


def selector(network: str) -> str:
    """The label selector of everything Grid wrote for ``network``."""
    return f"{MANAGED_BY_LABEL}={MANAGED_BY},{NETWORK_LABEL}={label_value(network)}"


def label_value(name: str) -> str:
    """``name`` as a label value: object names may be longer than the 63 characters a
    label value allows, so a long one is cut and given a hash of the whole."""
    if len(name) <= MAX_LABEL_VALUE:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return f"{name[: MAX_LABEL_VALUE - 13].rstrip('.-')}-{digest}"
