"""How the agent's last read of its resource directory went: what ``/status`` reports and
the agent's metrics count (apart from :mod:`grid.agent.agent`, which the HTTP endpoints
would otherwise have to import back)."""

from __future__ import annotations

from dataclasses import dataclass

from grid.errors import ResourceError


@dataclass(frozen=True, slots=True)
class ResourceReport:
    """The last load of the resource directory: what was wrong, and whether the resources
    on disk are the ones serving."""

    errors: tuple[ResourceError, ...] = ()
    applied: bool = True
