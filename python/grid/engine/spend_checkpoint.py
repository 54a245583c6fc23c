"""What a site keeps durably of its spend counting, so that a restart loses and
double-counts nothing: the epoch of its budget slots and their values, the fractions of a
unit carried to the next increase, and the last value of every series of every spend
source it reads. Written by the shell before the spend it holds is published (the agent
keeps it in ``<state>/spend/<network>.json``), read back when the site starts. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grid.crdt.codec import MAX_SAFE_INT
from grid.observe.counters import SeriesKey

FORMAT = 1

Slot = tuple[str, str, int]
"""(tenant, window label, value)."""
Carry = tuple[str, str, float]
"""(tenant, window label, the fraction of a unit not counted yet)."""


@dataclass(frozen=True, slots=True)
class SourceBaseline:
    """The last value of every series of one spend source, and what the source reads
    (:func:`grid.engine.spend.reads_of`): a source that now reads something else starts
    from a new baseline."""

    reads: str
    series: Mapping[SeriesKey, float]


@dataclass(frozen=True, slots=True)
class SpendCheckpoint:
    """One site's spend counting at one moment."""

    site: str
    epoch: int | None
    slots: tuple[Slot, ...] = ()
    carry: tuple[Carry, ...] = ()
    sources: Mapping[str, SourceBaseline] = field(default_factory=lambda: MappingProxyType({}))

    def to_json(self) -> bytes:
        """The checkpoint as the file holds it (every value exact: JSON floats round-trip)."""
        document = {
            "format": FORMAT,
            "site": self.site,
            "epoch": self.epoch,
            "slots": [list(slot) for slot in self.slots],
            "carry": [[tenant, window, float(part)] for tenant, window, part in self.carry],
            "sources": [
                {
                    "name": name,
                    "reads": baseline.reads,
                    "series": [
                        [[list(pair) for pair in key], float(value)]
                        for key, value in baseline.series.items()
                    ],
                }
                for name, baseline in sorted(self.sources.items())
            ],
        }
        return json.dumps(document, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> SpendCheckpoint:
        """Reads :meth:`to_json`'s form; :class:`ValueError` (saying what is wrong, quoting
        nothing) for anything else."""
        try:
            document = _Document.model_validate_json(data)
        except ValidationError as error:
            where = ".".join(str(part) for part in error.errors()[0]["loc"]) or "document"
            raise ValueError(f"the spend checkpoint is not valid at {where}") from None
        if document.format != FORMAT:
            raise ValueError(f"the spend checkpoint has format {document.format}, not {FORMAT}")
        return cls(
            document.site,
            document.epoch,
            tuple(document.slots),
            tuple(document.carry),
            MappingProxyType(
                {
                    source.name: SourceBaseline(
                        source.reads,
                        {key: value for key, value in source.series},
                    )
                    for source in document.sources
                }
            ),
        )


def own_checkpoint(data: bytes, site: str) -> SpendCheckpoint:
    """The checkpoint ``data`` holds, if it is ``site``'s: :class:`ValueError` (saying what
    is wrong, quoting nothing) for one that cannot be read or is another site's."""
    checkpoint = SpendCheckpoint.from_json(data)
    if checkpoint.site != site:
        raise ValueError(f"it is site {checkpoint.site!r}'s, not {site!r}'s")
    return checkpoint


_Count = Annotated[int, Field(ge=0, le=MAX_SAFE_INT)]
_Value = Annotated[float, Field(ge=0, allow_inf_nan=False)]
_Fraction = Annotated[float, Field(ge=0, lt=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Source(_Strict):
    name: str
    reads: str
    series: list[tuple[tuple[tuple[str, str], ...], _Value]]


class _Document(_Strict):
    format: int
    site: str
    epoch: Annotated[int, Field(gt=0, le=MAX_SAFE_INT)] | None
    slots: list[tuple[str, str, _Count]]
    carry: list[tuple[str, str, _Fraction]]
    sources: list[_Source]
