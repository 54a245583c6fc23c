"""Rendering: the routing overlay document the gateway reads, its validator, and the
complete gateway configuration (``consumerConfig``). Pure: ``now`` is passed in."""

from grid.render.consumer import ClusterEndpoint, consumer_config, consumer_config_yaml
from grid.render.digest import content_digest, stable_id
from grid.render.overlay import (
    MAX_CANDIDATES,
    OverlayScope,
    OverlaySource,
    RenderedOverlay,
    render_overlay,
)
from grid.render.validate import ExpectedScope, RejectReason, Verdict, validate_overlay

__all__ = [
    "MAX_CANDIDATES",
    "ClusterEndpoint",
    "ExpectedScope",
    "OverlayScope",
    "OverlaySource",
    "RejectReason",
    "RenderedOverlay",
    "Verdict",
    "consumer_config",
    "consumer_config_yaml",
    "content_digest",
    "render_overlay",
    "stable_id",
    "validate_overlay",
]
