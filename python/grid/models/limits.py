"""Bounds on what Grid reads: resource files and directories, and the objects the operator
receives from the Kubernetes API (custom resources, Secrets).

A hostile or runaway input is refused with a message saying which limit it broke, before
it is expanded or validated, so that reading it takes bounded time and memory. The limits
are far above what real resources need: a GridNetwork, GridSite or InferenceProvider is a
few hundred bytes and a few dozen values; the Kubernetes API itself stores no object
larger than about 1.5 MiB. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

KIB: Final = 1024
MIB: Final = 1024 * KIB

MAX_FILE_BYTES: Final = 1 * MIB
"""Largest resource file read (one file may hold many documents)."""
MAX_DIRECTORY_BYTES: Final = 16 * MIB
"""Largest total size of the YAML files of a resource directory."""
MAX_DIRECTORY_FILES: Final = 1000
"""Most YAML files in a resource directory."""
MAX_DOCUMENTS: Final = 10_000
"""Most YAML documents in a resource directory, all files together."""
MAX_NODES_PER_DOCUMENT: Final = 20_000
"""Most values in one document: every mapping, list, key, list item and scalar counts
(a label is two: its key and its value)."""
MAX_NODES_PER_DIRECTORY: Final = 200_000
"""Most values in a resource directory, all documents together."""
MAX_DEPTH: Final = 64
"""Deepest nesting of mappings and lists (Grid's resources need fewer than 10 levels)."""
MAX_OBJECT_BYTES: Final = MAX_FILE_BYTES
"""Largest object the operator takes from the API: a custom resource (its strings added
up) or one Secret entry (base64 text as served)."""
LOAD_TIME_LIMIT_S: Final = 30.0
"""How long the agent lets one read of its resource directory run before giving up on it
(the limits above keep a real read far below that)."""

ALIASES_REFUSED: Final = "YAML aliases are not allowed in resource files"
ANCHORS_REFUSED: Final = (
    "YAML aliases are not allowed in resource files, nor the anchors (&name) they refer to"
)


def format_size(size: int) -> str:
    """``1 MiB``, ``8.9 MiB``, ``640 KiB``, ``17 bytes``."""
    for unit, scale in (("MiB", MIB), ("KiB", KIB)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} bytes"


def size_problem(size: int, limit: int = MAX_OBJECT_BYTES) -> str | None:
    """Why something of ``size`` bytes is refused (``is 8.9 MiB, more than the 1 MiB
    limit``), or None when it is within ``limit``."""
    if size <= limit:
        return None
    return f"is {format_size(size)}, more than the {format_size(limit)} limit"


def nodes_problem(limit: int = MAX_NODES_PER_DOCUMENT) -> str:
    return (
        f"more than {limit:,} values (mappings, lists, keys, items and scalars) in one "
        "document, the limit"
    )


def depth_problem(limit: int = MAX_DEPTH) -> str:
    return f"nested more than {limit} levels deep, the limit"


def structure_problem(
    document: object,
    *,
    max_nodes: int = MAX_NODES_PER_DOCUMENT,
    max_depth: int = MAX_DEPTH,
    max_bytes: int = MAX_OBJECT_BYTES,
) -> str | None:
    """Why a decoded document (mappings, lists, scalars) is refused: too many values, too
    deeply nested, or strings adding up to too many bytes; None when it is within the
    limits. Walks at most ``max_nodes`` values, without recursion, so a document whose
    parts are shared (a graph rather than a tree) is refused rather than expanded."""
    nodes, size = 1, 0
    pending: list[tuple[object, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > max_depth:
            return depth_problem(max_depth)
        if isinstance(value, str | bytes):
            size += len(value)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                nodes += 2
                if nodes > max_nodes:
                    return nodes_problem(max_nodes)
                size += len(key) if isinstance(key, str | bytes) else 8
                pending.append((item, depth + 1))
        elif isinstance(value, Sequence):
            for item in value:
                nodes += 1
                if nodes > max_nodes:
                    return nodes_problem(max_nodes)
                pending.append((item, depth + 1))
        else:
            size += 8
        if size > max_bytes:
            return f"its values add up to more than {format_size(max_bytes)}, the limit"
    return None
