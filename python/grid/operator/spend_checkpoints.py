"""The operator's spend checkpoint for one network: ConfigMap ``grid-spend-<network>`` in the
operator's own namespace, key ``spend.json``, holding what this site counted of its spend
sources (:class:`~grid.engine.SpendCheckpoint`, the form the agent keeps in a file): the
last value of every series it reads and its budget slots. It is read when the network's
engine is made, before its first scrape, so a restarted operator counts on from there; it
is written at most every :data:`WRITE_INTERVAL_S` while spend is counted, and when the
network stops. Spend figures and counter readings are not secrets.

A checkpoint that cannot be used (not Grid's, not readable, another site's) is reported by
the caller and ignored: spend counts from the first scrape, as on a first start. Grid
replaces an unreadable checkpoint it wrote, and never writes over a ConfigMap without its
labels (docs/operator.md, "What survives a restart").

The same ConfigMap holds, under ``escrow.json``, this life's escrow holder
(:class:`~grid.engine.EscrowCheckpoint`): written at once each time it changed, before the
pass publishes anything of it, so a restarted operator goes on as the same holder (one
that cannot be used is set aside: a new holder starts, as on a first start)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from grid.engine import EscrowCheckpoint, SpendCheckpoint
from grid.engine.spend_checkpoint import own_checkpoint
from grid.operator.configmaps import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NETWORK_LABEL,
    ROLE_LABEL,
    is_managed,
    label_value,
    owner_reference,
)
from grid.operator.kube import KubeApi

KEY: Final = "spend.json"
ESCROW_KEY: Final = "escrow.json"
ROLE: Final = "spend-checkpoint"
WRITE_INTERVAL_S: Final = 5.0
"""The least time between two writes while spend is counted (a stop writes at once)."""
_PREFIX: Final = "grid-spend-"
_MAX_NAME: Final = 253


class CheckpointUnusable(Exception):
    """The ConfigMap holds no checkpoint this site can go on from (the message says why,
    quoting none of its content)."""


def checkpoint_name(network: str) -> str:
    """``grid-spend-<network>``; a network name too long for that is cut and given a hash
    of the whole."""
    name = _PREFIX + network
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(network.encode()).hexdigest()[:12]
    return f"{name[: _MAX_NAME - 13].rstrip('.-')}-{digest}"


class SpendCheckpoints:
    """One network's checkpoint ConfigMap."""

    def __init__(self, kube: KubeApi, namespace: str, network: str) -> None:
        self._kube = kube
        self.namespace = namespace
        self.network = network
        self.name = checkpoint_name(network)
        self._latest: bytes | None = None
        self._written: bytes | None = None
        self._exists: bool | None = None
        """Whether Grid's ConfigMap is there (None: not known, read it before writing)."""
        self._foreign = False
        self._written_at: float | None = None
        self._holder_text: str | None = None
        """The escrow holder as :meth:`load` found it."""

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    async def load(self, site: str) -> SpendCheckpoint | None:
        """The checkpoint of this site's previous life, None if there is none. Raises
        :class:`CheckpointUnusable` for one that cannot be used, and
        :class:`~grid.errors.KubernetesApiError` when it cannot be read."""
        found = await self._kube.read_configmap(self.namespace, self.name)
        self._exists = found is not None and is_managed(found, self.network)
        self._foreign = found is not None and not self._exists
        if found is None:
            return None
        if self._foreign:
            raise CheckpointUnusable(f"{self.where} was not written by Grid: left as it is")
        self._holder_text = (found.get("data") or {}).get(ESCROW_KEY)
        text = (found.get("data") or {}).get(KEY)
        if not isinstance(text, str):
            raise CheckpointUnusable(f"{self.where} has no {KEY}")
        data = text.encode()
        try:
            checkpoint = own_checkpoint(data, site)
        except ValueError as problem:
            raise CheckpointUnusable(f"{self.where}: {problem}") from None
        self._written = data
        return checkpoint

    def escrow_holder(self, site: str) -> EscrowCheckpoint | None:
        """The escrow holder of this site's previous life, as :meth:`load` found it; None
        if there was none. Raises :class:`CheckpointUnusable` for one that cannot be
        used."""
        if self._holder_text is None:
            return None
        try:
            return EscrowCheckpoint.from_json(self._holder_text.encode(), site)
        except ValueError as problem:
            raise CheckpointUnusable(f"{self.where} {ESCROW_KEY}: {problem}") from None

    async def keep_holder(self, owner: Mapping[str, Any], holder: EscrowCheckpoint) -> None:
        """Store this life's escrow holder now. Raises
        :class:`~grid.errors.KubernetesApiError` (and writes nothing over a ConfigMap that
        is not Grid's: :class:`CheckpointUnusable`)."""
        if not await self._put({ESCROW_KEY: holder.to_json().decode()}, owner):
            raise CheckpointUnusable(f"{self.where} was not written by Grid: left as it is")

    def keep(self, checkpoint: SpendCheckpoint) -> bool:
        """Take the checkpoint holding spend about to be counted; :meth:`write` stores it."""
        self._latest = checkpoint.to_json()
        return True

    async def write(self, owner: Mapping[str, Any], moment: float, *, now: bool = False) -> None:
        """Store the latest checkpoint if it is new and :data:`WRITE_INTERVAL_S` passed since
        the last write (at once with ``now``). Raises
        :class:`~grid.errors.KubernetesApiError`; the next call tries again."""
        data = self._latest
        if data is None or data == self._written or self._foreign:
            return
        recent = self._written_at is not None and moment - self._written_at < WRITE_INTERVAL_S
        if recent and not now:
            return
        self._written_at = moment
        if await self._put({KEY: data.decode()}, owner):
            self._written = data

    async def _put(self, data: Mapping[str, str], owner: Mapping[str, Any]) -> bool:
        """Merge ``data`` into the ConfigMap, making it if need be; False (writing nothing)
        when a ConfigMap of that name is not Grid's."""
        if self._exists is None:
            found = await self._kube.read_configmap(self.namespace, self.name)
            self._exists = found is not None and is_managed(found, self.network)
            self._foreign = found is not None and not self._exists
        if self._foreign:
            return False
        labels = {
            MANAGED_BY_LABEL: MANAGED_BY,
            NETWORK_LABEL: label_value(self.network),
            ROLE_LABEL: ROLE,
        }
        metadata = {"labels": labels, "ownerReferences": [owner_reference(owner)]}
        body = {"data": dict(data)}
        # Not known while the write is under way (it may fail, or be cancelled).
        exists, self._exists = self._exists, None
        if exists:
            await self._kube.patch_configmap(
                self.namespace, self.name, {"metadata": metadata, **body}
            )
        else:
            manifest = {"metadata": {"name": self.name, **metadata}, **body}
            await self._kube.create_configmap(
                self.namespace, {"apiVersion": "v1", "kind": "ConfigMap", **manifest}
            )
        self._exists = True
        return True
