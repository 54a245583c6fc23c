"""Pydantic models of Grid's custom resources, their statuses and phases.

Pure: nothing here does I/O beyond reading the files it is asked to load, reads a clock or
starts a thread. Shared by the operator, the standalone agent and the CLI.
"""

from grid.models.conditions import (
    Condition,
    ConditionStatus,
    ConditionUpdate,
    find_condition,
    set_condition,
)
from grid.models.fields import Duration, normalize_fingerprint, parse_duration, split_host_port
from grid.models.meta import API_VERSION, GROUP, VERSION, ObjectMeta, SecretKeyRef
from grid.models.network import (
    GatewayRef,
    GridNetwork,
    GridNetworkPhase,
    GridNetworkSpec,
    GridNetworkStatus,
    generate_grid_id,
    resolve_grid_id,
)
from grid.models.provider import (
    InferenceProvider,
    InferenceProviderPhase,
    InferenceProviderSpec,
    InferenceProviderStatus,
)
from grid.models.resources import (
    LoadedResources,
    Resource,
    dump_resource,
    load_resource,
    load_resources_from_dir,
)
from grid.models.selectors import LabelSelector, select, selector_matches
from grid.models.site import (
    AUTO_DISCOVER_LABEL,
    GridSite,
    GridSitePhase,
    GridSiteSpec,
    GridSiteStatus,
)

__all__ = [
    "API_VERSION",
    "AUTO_DISCOVER_LABEL",
    "GROUP",
    "VERSION",
    "Condition",
    "ConditionStatus",
    "ConditionUpdate",
    "Duration",
    "GatewayRef",
    "GridNetwork",
    "GridNetworkPhase",
    "GridNetworkSpec",
    "GridNetworkStatus",
    "GridSite",
    "GridSitePhase",
    "GridSiteSpec",
    "GridSiteStatus",
    "InferenceProvider",
    "InferenceProviderPhase",
    "InferenceProviderSpec",
    "InferenceProviderStatus",
    "LabelSelector",
    "LoadedResources",
    "ObjectMeta",
    "Resource",
    "SecretKeyRef",
    "dump_resource",
    "find_condition",
    "generate_grid_id",
    "load_resource",
    "load_resources_from_dir",
    "normalize_fingerprint",
    "parse_duration",
    "resolve_grid_id",
    "select",
    "selector_matches",
    "set_condition",
    "split_host_port",
]
