"""The live mesh view: a read-only page at ``/`` of the agent's and the operator's HTTP
port, and the JSON document it polls (``/view.json``). :mod:`grid.view.model` builds the
document from the engine (pure); :mod:`grid.view.history` records member transitions;
:mod:`grid.view.node` reads the SWIM node; :mod:`grid.view.serve` serves both.
docs/observability.md describes what it shows."""

from grid.view.history import MemberHistory, Transition
from grid.view.model import NetworkSource, network_document, view_document
from grid.view.node import NodeInfo, catch_up, node_info
from grid.view.serve import LiveView

__all__ = [
    "LiveView",
    "MemberHistory",
    "NetworkSource",
    "NodeInfo",
    "Transition",
    "catch_up",
    "network_document",
    "node_info",
    "view_document",
]
