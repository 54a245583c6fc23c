"""Where a minter writes, in memory: a :class:`~grid.runtime.tokens.TokenSink` that keeps
each key's token as a Secret or a directory would, and every token in the order written."""

from __future__ import annotations


class MemoryTokens:
    """The keys and tokens a minter wrote (``held``), pruned as it asks, and ``tokens``:
    every token written, in order. ``broken``: writes fail as a read-only volume does."""

    def __init__(self, held: dict[str, str] | None = None) -> None:
        self.held: dict[str, str] = dict(held or {})
        self.tokens: list[str] = []
        self.broken = False

    async def keys(self) -> tuple[str, ...]:
        return tuple(sorted(self.held))

    async def write(self, key: str, token: str, keep: frozenset[str]) -> None:
        if self.broken:
            raise PermissionError(13, "Permission denied")
        self.held[key] = token
        self.tokens.append(token)
        for held in list(self.held):
            if held != key and held not in keep and held.startswith("token"):
                del self.held[held]
