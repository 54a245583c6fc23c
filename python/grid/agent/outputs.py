"""The agent's files: each gateway's overlay (and gateway configuration), and each
resource's status, under the state directory, every one written atomically. Overlays are
synced to disk before they replace the old file; status files, rewritten every status
interval and all of them again when the agent starts, are not (at 100 sites and 100
providers an agent writes some 40 a second, and two fsyncs cost twice the rest).

Layout::

    <state>/overlays/<network>/<namespace>/<gateway>/<configMapKey>   (grid-config.json)
    <state>/overlays/<network>/<namespace>/<gateway>/<consumer key>   (praxis.yaml)
    <state>/overlays/<network>/<namespace>/<gateway>/budgets.json     (the budget document)
    <state>/status/<Kind>/<name>.json
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grid.engine import GatewayOverlay, ResourceStatus
from grid.fsutil import write_atomically
from grid.models.meta import API_VERSION
from grid.models.network import GatewayRef
from grid.render.budgets import FILE_NAME as BUDGETS_FILE
from grid.render.budgets import RenderedBudgets

_log = logging.getLogger("grid.agent")


@dataclass(frozen=True, slots=True)
class _Written:
    text: str
    phase: str | None
    at: float


def overlay_dir(state_dir: Path, network: str, overlay: GatewayOverlay) -> Path:
    return gateway_dir(state_dir, network, overlay.gateway)


def gateway_dir(state_dir: Path, network: str, gateway: GatewayRef) -> Path:
    return state_dir / "overlays" / network / gateway.namespace / gateway.name


def overlay_path(state_dir: Path, network: str, overlay: GatewayOverlay) -> Path:
    """Where a gateway's overlay is written."""
    return overlay_dir(state_dir, network, overlay) / overlay.gateway.config_map_key


class OutputWriter:
    """Writes overlays when their revision changes and status files when they change,
    remembering what it wrote so that nothing is rewritten for nothing."""

    def __init__(self, state_dir: Path, *, status_interval_s: float) -> None:
        self._state_dir = state_dir
        self._status_interval_s = status_interval_s
        self._overlays: dict[Path, str] = {}
        self._configs: dict[Path, str] = {}
        self._statuses: dict[tuple[str, str], _Written] = {}
        self.failures = 0
        """Writes that failed (each one logged)."""

    @property
    def state_dir(self) -> Path:
        return self._state_dir

    def write_overlay(self, network: str, overlay: GatewayOverlay) -> Path | None:
        """Write the overlay if its revision is new to this writer; the path written, or
        None when nothing was written (no document yet, same revision, or a failure)."""
        if overlay.overlay is None:
            return None
        path = overlay_path(self._state_dir, network, overlay)
        # The configuration first, and whenever it changes (a token's key listed ahead of
        # the overlay naming it changes the configuration alone): what the overlay names is
        # then always in the configuration before.
        consumer = overlay.gateway.consumer_config
        if overlay.consumer_config is not None and consumer is not None:
            config_path = path.with_name(consumer.config_map_key)
            if self._configs.get(config_path) != overlay.consumer_config and self._write(
                config_path, overlay.consumer_config.encode()
            ):
                self._configs[config_path] = overlay.consumer_config
        revision = overlay.overlay.revision
        if self._overlays.get(path) == revision:
            return None
        if not self._write(path, overlay.overlay.text.encode()):
            return None
        self._overlays[path] = revision
        return path

    def write_budgets(
        self, network: str, gateway: GatewayRef, rendered: RenderedBudgets
    ) -> Path | None:
        """Write a gateway's budget document if its revision is new to this writer; the
        path written, or None."""
        path = gateway_dir(self._state_dir, network, gateway) / BUDGETS_FILE
        if self._overlays.get(path) == rendered.revision:
            return None
        if not self._write(path, rendered.text.encode()):
            return None
        self._overlays[path] = rendered.revision
        return path

    def write_status(
        self, kind: str, name: str, status: ResourceStatus, now: float, *, force: bool = False
    ) -> bool:
        """Write a resource's status if it changed: at once when its phase changed (or
        ``force``), else at most once per status interval (probe and check times change
        constantly)."""
        phase = str(status.phase)
        previous = self._statuses.get((kind, name))
        recent = previous is not None and now - previous.at < self._status_interval_s
        if previous is not None and previous.phase == phase and recent and not force:
            # Decided before encoding: a site's refresh passes come several times a second.
            return False
        document: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": name},
            "status": status.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        # One line: the C encoder (json's indenting encoder is pure Python, 4x slower).
        text = json.dumps(document, sort_keys=True) + "\n"
        if previous is not None and previous.text == text:
            return False
        path = self._state_dir / "status" / kind / f"{name}.json"
        if not self._write(path, text.encode(), durable=False):
            return False
        self._statuses[(kind, name)] = _Written(text, phase, now)
        return True

    def _write(self, path: Path, data: bytes, *, durable: bool = True) -> bool:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, data, durable=durable)
        except OSError as error:
            self.failures += 1
            _log.error("cannot write %s: %s", path, error.strerror or type(error).__name__)
            return False
        return True
