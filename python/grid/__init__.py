"""Grid: a control plane that routes AI inference across sites."""

from grid._native import __version__

__all__ = ["__version__"]
