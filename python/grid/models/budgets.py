"""Tenant budgets: a cap per tenant over a window of time, and what each tenant spent in
its current window. A budget's window is one of three kinds (docs/resources.md):

- ``window: 24h``: fixed windows of that length, aligned to the Unix epoch;
- ``calendar: {period: month, timeZone: Europe/Paris}``: calendar days, weeks (from Monday)
  or months, starting at midnight in an IANA time zone;
- ``rolling: {length: 24h, step: 1h}``: the spend of the last ``length``, counted in steps
  of ``step`` (the window moves on by one step at a time).

Every site computes the same windows from its own clock, so a new window starts from zero
at every site at the same instant by the sites' clocks (grid.engine.windows)."""

from __future__ import annotations

import zoneinfo
from enum import StrEnum
from typing import Annotated, Self

from pydantic import AwareDatetime, ConfigDict, Field, field_validator, model_validator

from grid.models.common import GridModel
from grid.models.fields import DNS_LABEL_PATTERN, DnsSubdomain, Duration, Token, within
from grid.models.validation_rules import ValidationRule, present, validations

MAX_ROLLING_STEPS = 32
"""Most steps a rolling window is counted in: each step of each tenant is a budget counter
(at most 4096 are tracked, grid.crdt.budget.MAX_COUNTERS)."""

TIME_ZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$"

ONE_WINDOW = ValidationRule(
    f"[{present('window')}, {present('calendar')}, {present('rolling')}].exists_one(s, s)",
    "set exactly one of window, calendar or rolling",
)
_LENGTH_MS = "duration(self.length).getMilliseconds()"
_STEP_MS = "duration(self.step).getMilliseconds()"
STEPS_FIT_THE_LENGTH = ValidationRule(
    f"{_LENGTH_MS} % {_STEP_MS} == 0 && {_LENGTH_MS} <= {MAX_ROLLING_STEPS} * {_STEP_MS}",
    f"length must be a whole number of steps, at most {MAX_ROLLING_STEPS}",
    field_path=".step",
)


class CalendarPeriod(StrEnum):
    DAY = "day"
    WEEK = "week"
    """From Monday 00:00 (ISO 8601 weeks)."""
    MONTH = "month"


class CalendarWindow(GridModel):
    """Calendar days, weeks or months, each starting at midnight in ``timeZone``."""

    period: CalendarPeriod
    time_zone: str = Field(
        "UTC",
        max_length=64,
        pattern=TIME_ZONE_PATTERN,
        description="IANA time zone the period's midnight is read in, e.g. Europe/Paris.",
    )

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, name: str) -> str:
        try:
            zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {name!r}: give an IANA name such as Europe/Paris or UTC"
            ) from None
        return name


def _millis(duration: Duration) -> int:
    return round(duration.seconds * 1000)


class RollingWindow(GridModel):
    """The spend of the last ``length``, counted in steps of ``step`` aligned to the Unix
    epoch: at any moment the window holds the current step and the steps before it that
    make up ``length``, so it covers between ``length - step`` and ``length`` of the past."""

    model_config = ConfigDict(json_schema_extra=validations(STEPS_FIT_THE_LENGTH))

    length: Annotated[Duration, within(60, 366 * 86400)] = Field(
        description="How far back the window reaches, e.g. 24h."
    )
    step: Annotated[Duration, within(60, 31 * 86400)] = Field(
        description="How far the window moves at a time, e.g. 1h; length is a whole number "
        f"of steps, at most {MAX_ROLLING_STEPS}."
    )

    @model_validator(mode="after")
    def _steps_fit(self) -> Self:
        length, step = _millis(self.length), _millis(self.step)
        if length % step or length > MAX_ROLLING_STEPS * step:
            raise ValueError(STEPS_FIT_THE_LENGTH.message)
        return self

    @property
    def steps(self) -> int:
        """How many steps the window sums."""
        return _millis(self.length) // _millis(self.step)


class BudgetEnforcement(StrEnum):
    """What a budget's cap means under partition (docs/crdt.md, "Escrow")."""

    LOWER_BOUND = "lowerBound"
    """Sites keep serving and report the spend they know, a lower bound while some site is
    not heard from: a partition may let the mesh spend past the cap."""
    ESCROW = "escrow"
    """The cap is split into per-site allowances moved between sites by transfers; a site
    lets its gateways grant only its allowance, so the mesh never spends past the cap,
    partition or not. Fixed and calendar windows only; every site must run a release that
    speaks protocol 3."""


class TenantBudget(GridModel):
    """A tenant's spending cap over a window, counted with a G-Counter across sites (under
    a partition each site sees a lower bound)."""

    model_config = ConfigDict(json_schema_extra=validations(ONE_WINDOW))

    tenant: Token
    cap: int = Field(ge=0, le=2**53, description="Budget in whole units per window.")
    window: Annotated[Duration, within(60, 366 * 86400)] | None = Field(
        None, description="Length of fixed windows aligned to the Unix epoch, e.g. 24h."
    )
    calendar: CalendarWindow | None = Field(
        None, description="Calendar days, weeks or months in a time zone, instead of window."
    )
    rolling: RollingWindow | None = Field(
        None, description="A window that moves on in steps, instead of window."
    )
    unit: str = Field(
        "tokens",
        pattern=DNS_LABEL_PATTERN,
        max_length=63,
        description="What the cap counts (tokens, requests, microdollars, ...).",
    )
    warn_at: int = Field(
        80,
        ge=1,
        le=100,
        description="Percent of the cap at which the tenant's budget turns from ok to warn.",
    )
    enforcement: BudgetEnforcement = Field(
        BudgetEnforcement.LOWER_BOUND,
        description="lowerBound: sites report a lower bound under partition; escrow: each "
        "site grants only its allowance, so the cap holds under partition.",
    )

    @model_validator(mode="after")
    def _one_window(self) -> Self:
        if [self.window, self.calendar, self.rolling].count(None) != 2:
            raise ValueError(ONE_WINDOW.message)
        return self

    @property
    def window_name(self) -> str:
        """The window as written, for metrics and the live view: ``24h``, ``month in
        Europe/Paris``, ``24h rolling by 1h``."""
        if self.calendar is not None:
            return f"{self.calendar.period} in {self.calendar.time_zone}"
        if self.rolling is not None:
            return f"{self.rolling.length} rolling by {self.rolling.step}"
        return str(self.window)


class BudgetState(StrEnum):
    """Where a tenant's known spend stands against its budget."""

    OK = "ok"
    WARN = "warn"
    """At least ``warnAt`` percent of the cap, below the cap."""
    EXHAUSTED = "exhausted"
    """The cap reached."""


class TenantBudgetStatus(GridModel):
    """Spending of one tenant in the current window."""

    tenant: Token
    used: int = Field(ge=0, description="Units used in the current window (lower bound).")
    cap: int = Field(ge=0)
    state: BudgetState | None = Field(None, description="ok, warn or exhausted.")
    complete: bool | None = Field(
        None,
        description="Whether used is the mesh's whole spend (every site is heard from); "
        "false: a lower bound, the network's unheardSites may have spent more.",
    )
    window_start: AwareDatetime | None = None
    window_end: AwareDatetime | None = Field(
        None, description="When the current window ends and the next starts from zero."
    )
    exhausted: bool = False
    remaining: int | None = Field(None, ge=0, description="cap - used, 0 once exhausted.")
    enforcement: BudgetEnforcement | None = None
    allowance: int | None = Field(
        None,
        ge=0,
        description="escrow: what this site's gateways may grant of the tenant in this "
        "window, all its lives together; state is exhausted here once siteUsed reaches it "
        "and no allowance is left to grant.",
    )
    site_used: int | None = Field(None, ge=0, description="escrow: what this site counted of used.")


class UnheardSite(GridModel):
    """A site whose latest spend this site may not hold: it is not alive in SWIM here."""

    site: DnsSubdomain
    since: AwareDatetime | None = Field(
        None, description="When it stopped being heard; null: never heard from."
    )
