"""What the live view (and the agent's ``/status``) shows of a network's SWIM node: where
it runs, the key ids it holds (never the keys) and whether its view of the mesh's items is
complete."""

from __future__ import annotations

from dataclasses import dataclass

from grid.errors import GridError
from grid.membership import SwimNode


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the view shows of a network's SWIM node (no key material)."""

    running: bool
    address: str | None
    generation: int | None
    key_ids: tuple[str, ...]
    caught_up: bool = False
    """The node walked a peer's whole store since it joined (or found members again) and
    no item waits for its origin's certificate: its view of the items is complete."""
    items_waiting: int = 0
    """Items held back until their origin's certificate is verified."""


def catch_up(node: SwimNode | None) -> tuple[bool, int]:
    """Whether the node's view of the mesh's items is complete, and how many items wait
    for their origin's certificate (False, 0 for a node not running)."""
    if node is None or not node.running:
        return False, 0
    try:
        stats = node.stats()
    except GridError:
        return False, 0  # stopped between the check and the call
    return bool(stats["caught_up"]), stats["items_waiting"]


def node_info(node: SwimNode | None) -> NodeInfo | None:
    """The view's account of ``node`` (None: no node)."""
    if node is None:
        return None
    caught_up, waiting = catch_up(node)
    return NodeInfo(
        node.running, node.address, node.generation, tuple(node.key_ids()), caught_up, waiting
    )
