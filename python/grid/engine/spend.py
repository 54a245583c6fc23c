"""This site's spend: which spend sources it scrapes (``spec.spendSources`` whose
``siteSelector`` matches its GridSite), and how much their counters grew since the previous
scrape, counted into this site's budget slots (:meth:`~grid.crdt.state.GridState.add_spend`)
in two steps, so that a shell keeping a checkpoint writes it before anything it holds is
published: :meth:`SpendCounting.count` says what a scrape adds and the checkpoint that holds
it, :meth:`SpendCounting.commit` counts it. A restarted site resumes its slots and its
baselines from that checkpoint (docs/crdt.md, "Spend from counters"). Pure: every method
that needs time takes ``now``."""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from grid.crdt.codec import MAX_SAFE_INT
from grid.crdt.state import GridState
from grid.engine.events import clip
from grid.engine.spend_checkpoint import Slot, SourceBaseline, SpendCheckpoint
from grid.engine.targets import SpendTarget
from grid.engine.windows import budget_window, spend_horizon
from grid.models.budgets import TenantBudget
from grid.models.network import GridNetwork
from grid.models.provider import ScrapeStatus
from grid.models.selectors import selector_matches
from grid.models.site import GridSite
from grid.models.spend import SpendSource, SpendSourceStatus
from grid.observe.counters import SeriesKey, advance, read_counter
from grid.observe.scrape import ScrapeResult

WINDOW_GRACE_S = 3600.0
"""How long after its window closed (grid.engine.windows.spend_horizon) a slot and a
carried fraction stay in the checkpoint: long enough for its last value to have been
published."""

Key = tuple[str, str]
"""(tenant, window label): one budget counter."""


def reads_of(source: SpendSource) -> str:
    """What a source reads, as a digest: where from and which series. Its baseline is kept
    across a change of anything else (tenant mapping, unit, scale, timing)."""
    what = [source.url, source.server_name, source.metric, sorted(source.labels.items())]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class CountedSpend:
    """What one scrape of one source adds to this site's spend, not counted yet: a shell
    that keeps a checkpoint writes :attr:`checkpoint` durably first, then has it counted
    (:meth:`~grid.engine.SiteEngine.commit_spend`); one that could not write it drops it,
    and the next scrape counts the same increase again from the old baseline."""

    source: str
    reads: str
    baseline: Mapping[SeriesKey, float]
    amounts: Mapping[Key, int]
    """Whole units to count, per budget counter."""
    carry: Mapping[Key, float]
    checkpoint: SpendCheckpoint


@dataclass(slots=True)
class _Source:
    config: SpendSource
    reads: str
    status: SpendSourceStatus
    baseline: dict[SeriesKey, float] | None = None
    """The last value of each series; None before the first good scrape."""


class SpendCounting:
    """The spend sources one site scrapes, and what it last read of each."""

    def __init__(self, site: str) -> None:
        self._site = site
        self._sources: dict[str, _Source] = {}
        self._carry: dict[Key, float] = {}
        self._resume: tuple[int, tuple[Slot, ...]] | None = None
        """Slots to count on in, in the next state this site writes spend to."""

    def configure(self, network: GridNetwork, local_site: GridSite | None) -> None:
        """The sources whose ``siteSelector`` matches this site's GridSite (none without
        one). A source that now reads something else starts from a new baseline."""
        labels = None if local_site is None else local_site.metadata.labels
        wanted = {
            source.name: source
            for source in network.spec.spend_sources
            if labels is not None and selector_matches(source.site_selector, labels)
        }
        for name in [name for name in self._sources if name not in wanted]:
            del self._sources[name]
        for name, config in wanted.items():
            reads = reads_of(config)
            held = self._sources.get(name)
            if held is None or held.reads != reads:
                self._sources[name] = _Source(config, reads, SpendSourceStatus(name=name))
            else:
                held.config = config

    def targets(self) -> tuple[SpendTarget, ...]:
        return tuple(
            SpendTarget(
                name,
                held.config.url,
                held.config.server_name,
                held.config.interval.seconds,
                held.config.timeout.seconds,
                held.config.max_body_bytes,
            )
            for name, held in sorted(self._sources.items())
        )

    def statuses(self) -> list[SpendSourceStatus]:
        return [held.status for _, held in sorted(self._sources.items())]

    # -- counting -------------------------------------------------------------------------

    def count(
        self,
        source: str,
        result: ScrapeResult,
        state: GridState,
        network: GridNetwork,
        now: datetime,
    ) -> CountedSpend | None:
        """What a scrape of ``source`` adds; None when it adds nothing and changes no
        baseline (a failed scrape, a counter that did not move, a source not read here)."""
        held = self._sources.get(source)
        if held is None:
            return None
        self.resume_into(state, now)
        reading = None
        if result.text is not None:
            reading = read_counter(result.text, held.config.metric, held.config.labels)
        error = result.error if reading is None else reading.error
        if error is not None or reading is None:
            message = clip(f"spend scrape failed: {error}")
            held.status = SpendSourceStatus(
                name=source,
                last_scrape=ScrapeStatus(at=now, ok=False, message=message),
                series=held.status.series,
            )
            return None
        baseline, increases = advance(held.baseline, reading.series)
        budgets = {budget.tenant: budget for budget in network.spec.budgets}
        amounts, carry, problems = self._amounts(held.config, increases, budgets, state, now)
        held.status = SpendSourceStatus(
            name=source,
            last_scrape=ScrapeStatus(
                at=now, ok=True, message=clip("; ".join([*reading.skipped, *problems]))
            ),
            series=len(reading.series),
        )
        if baseline == held.baseline and not amounts and carry.items() <= self._carry.items():
            return None
        epoch = state.take_spend_epoch(now.timestamp()) if amounts else state.spend_epoch
        slots: dict[Key, int] = {(t, w): value for t, w, value in state.own_spend_slots()}
        for key, amount in amounts.items():
            slots[key] = slots.get(key, 0) + amount
        sources = {
            name: SourceBaseline(other.reads, other.baseline)
            for name, other in self._sources.items()
            if other.baseline is not None and name != source
        }
        sources[source] = SourceBaseline(held.reads, baseline)
        kept = spend_horizon(network.spec.budgets, now, WINDOW_GRACE_S)
        checkpoint = SpendCheckpoint(
            self._site,
            epoch,
            tuple(
                (t, w, value) for (t, w), value in sorted(slots.items()) if not kept.closes(t, w)
            ),
            tuple(
                (t, w, part)
                for (t, w), part in sorted({**self._carry, **carry}.items())
                if part and not kept.closes(t, w)
            ),
            MappingProxyType(sources),
        )
        return CountedSpend(source, held.reads, baseline, amounts, carry, checkpoint)

    def _amounts(
        self,
        config: SpendSource,
        increases: Mapping[SeriesKey, float],
        budgets: Mapping[str, TenantBudget],
        state: GridState,
        now: datetime,
    ) -> tuple[dict[Key, int], dict[Key, float], list[str]]:
        """Whole units per budget counter, the fractions carried, and what was left out."""
        by_tenant: dict[str, float] = defaultdict(float)
        for series, increase in increases.items():
            tenant = config.tenant or dict(series).get(config.tenant_label or "")
            if tenant:
                by_tenant[tenant] += increase
        amounts: dict[Key, int] = {}
        carry: dict[Key, float] = {}
        problems = []
        for tenant, increase in sorted(by_tenant.items()):
            budget = budgets.get(tenant)
            if budget is None or budget.unit != config.unit:
                continue  # not budgeted in this unit: the baseline still moves on
            window = budget_window(budget, now).counting
            key = (tenant, window)
            total = increase * config.scale + self._carry.get(key, 0.0)
            whole = math.floor(total)
            if whole + state.own_spend(tenant, window) > MAX_SAFE_INT:
                problems.append(f"spend of {tenant} beyond {MAX_SAFE_INT} left out")
                continue
            carry[key] = total - whole
            if whole > 0:
                amounts[key] = whole
        return amounts, carry, problems

    def commit(
        self, counted: CountedSpend, state: GridState, network: GridNetwork, now: datetime
    ) -> None:
        """Count what :meth:`count` found (unless the source was reconfigured since)."""
        held = self._sources.get(counted.source)
        if held is None or held.reads != counted.reads:
            return
        held.baseline = dict(counted.baseline)
        self._carry.update(counted.carry)
        kept = spend_horizon(network.spec.budgets, now, WINDOW_GRACE_S)
        self._carry = {key: part for key, part in self._carry.items() if not kept.closes(*key)}
        for (tenant, window), amount in counted.amounts.items():
            state.add_spend(tenant, window, amount, now.timestamp())

    # -- restarts -------------------------------------------------------------------------

    def restore(self, checkpoint: SpendCheckpoint) -> None:
        """Go on from a checkpoint of an earlier life of this site: the baselines of the
        sources that still read the same, the carried fractions, and (at the next
        :meth:`resume_into`) the slots. Raises :class:`ValueError` for another site's."""
        if checkpoint.site != self._site:
            raise ValueError(f"the spend checkpoint is site {checkpoint.site!r}'s")
        for name, saved in checkpoint.sources.items():
            held = self._sources.get(name)
            if held is not None and held.reads == saved.reads and held.baseline is None:
                held.baseline = dict(saved.series)
        self._carry = {(tenant, window): part for tenant, window, part in checkpoint.carry}
        if checkpoint.epoch is not None:
            self._resume = (checkpoint.epoch, checkpoint.slots)

    def state_replaced(self, old: GridState) -> None:
        """The engine starts a new state: this life's slots go on in it."""
        epoch = old.spend_epoch
        if self._resume is None and epoch is not None:
            self._resume = (epoch, old.own_spend_slots())

    def resume_into(self, state: GridState, now: datetime) -> None:
        """Count on in the slots of a checkpoint or of the state replaced, if any wait."""
        if self._resume is not None:
            epoch, slots = self._resume
            self._resume = None
            state.resume_spend(epoch, slots, now.timestamp())
