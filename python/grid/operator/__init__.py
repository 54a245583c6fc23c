"""The Kubernetes operator: Grid for one cluster (``grid operator``).

A shell around :class:`grid.engine.SiteEngine`, like the standalone agent: kopf reports
Grid's resources, and the operator runs one SWIM node and site engine per GridNetwork,
reads the Secrets the resources name, and writes what the engine decides back to the
cluster (overlay ConfigMaps, statuses, Events, auto-discovered GridSites). kopf's handlers
(:mod:`grid.operator.handlers`) stay thin; the rest are plain functions and classes.
"""

from grid.operator.handlers import build_registry, configure, post_event
from grid.operator.operator import Operator
from grid.operator.options import OperatorOptions

__all__ = ["Operator", "OperatorOptions", "build_registry", "configure", "post_event"]
