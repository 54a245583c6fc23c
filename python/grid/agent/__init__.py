"""The standalone agent: Grid for one site without Kubernetes (``grid agent``).

A shell around :class:`grid.engine.SiteEngine`: it owns every side effect (files, sockets,
the SWIM node, HTTP) and leaves every decision to the engine.
"""

from grid.agent.agent import Agent, NameConflictError
from grid.agent.keys import KeyFile, read_key_file
from grid.agent.options import AgentOptions, PerNetwork, parse_key_files
from grid.agent.outputs import overlay_path
from grid.agent.report import ResourceReport

__all__ = [
    "Agent",
    "AgentOptions",
    "KeyFile",
    "NameConflictError",
    "PerNetwork",
    "ResourceReport",
    "overlay_path",
    "parse_key_files",
    "read_key_file",
]
