"""What every network the operator runs shares: options, the Kubernetes API and its cache,
metrics, the HTTP session, the Event poster and the SWIM ports; and the clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from grid.models.phases import EventType
from grid.operator.cache import ResourceCache
from grid.operator.kube import KubeApi
from grid.operator.metrics import OperatorMetrics
from grid.operator.options import OperatorOptions
from grid.operator.ports import SwimPorts

PostEvent = Callable[[Mapping[str, Any], EventType, str, str], None]
"""Posts a Kubernetes Event: (object reference, type, reason, message)."""


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Shared:
    """What every network of the operator shares."""

    options: OperatorOptions
    kube: KubeApi
    cache: ResourceCache
    metrics: OperatorMetrics
    session: aiohttp.ClientSession
    post_event: PostEvent
    ports: SwimPorts
