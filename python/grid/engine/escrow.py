"""Escrowed budgets as one site runs them: each refresh, for each budget with
``enforcement: escrow``, this site's holder (grid.crdt.escrow) claims its share when a
window starts, releases allowance to its gateways ahead of their spend, asks a peer for
allowance when its own runs low, and answers peers that ask it. What the budget document
and the status show of it comes back as :class:`EscrowFigures`. Pure: ``now`` is passed
in; the keeper remembers recent spend and its open requests between refreshes.

The rules that keep the cap (docs/crdt.md, "Escrow"): a holder claims a share only for a
window that started at least :data:`CLAIM_SLACK_S` after its life began, so no two lives of
a site claim the same window; shares split the cap among the configured sites; a holder
grants and gives away only what it sees available (the CRDT refuses anything else)."""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC

from grid.crdt.budget import slot_id
from grid.crdt.escrow import MAX_PARTNERS, EscrowBook, EscrowRecord, holder_site
from grid.crdt.state import GridState
from grid.engine.members import MemberInfo
from grid.engine.windows import MAX_CLOCK_SKEW_S, BudgetWindow
from grid.errors import CrdtLimitError, CrdtValueError
from grid.models.budgets import BudgetEnforcement, TenantBudget
from grid.models.conditions import ConditionUpdate
from grid.models.phases import MemberState, condition_update

ESCROW_PROTOCOL = 3
"""The first SWIM protocol version whose releases read escrow items and grant only their
allowance: a site that speaks less (release 0.2.0) spends without one."""
CLAIM_SLACK_S = 2 * MAX_CLOCK_SKEW_S
"""How long before a window's start a life must have begun to claim its site's share. Two
lives of one site never run at once, so a later life began after an earlier one granted
in the window; with clocks within the tolerated skew of the true time, the later life's
clock reads at most twice the skew less, and it cannot mistake itself for a life that
began before the window."""
HEADROOM_S = 5.0
"""Allowance released to the gateways beyond what they spent: this long at the recent
spend rate (at least the floor), so they need not wait for the next scrape."""
RESERVE_S = 20.0
"""What a site wants at hand (released and not): this long at its recent rate; below it,
it asks a peer; a donor keeps this much of its own and gives the rest."""
RATE_WINDOW_S = 5.0
"""Recent spend is measured over this long."""
ASK_TIMEOUT_S = 3.0
"""An ask not answered this long is taken as lost (the donor is cut off or has nothing to
give): the site asks again, another donor if one has more."""
FLOOR_DIVISOR = 10
"""A site's floor, what it keeps and releases whatever its rate: a tenth of an even share
of the cap (at least 1)."""


@dataclass(frozen=True, slots=True)
class EscrowFigures:
    """One escrowed budget at this site in its current window."""

    allowance: int
    """What this site's gateways may grant in the window: every known life's grants."""
    site_used: int
    """What this site counted of the tenant's spend in the window."""
    exhausted_here: bool
    """This site's allowance is used and it holds nothing more to release."""


@dataclass(frozen=True, slots=True)
class EscrowPlan:
    """Inputs of one refresh besides the budgets and the state."""

    sites: Sequence[str]
    """The network's configured sites: the cap is split evenly among them."""
    members: Mapping[str, MemberInfo]
    held: bool
    """Whether every peer runs escrow (else nothing is claimed, granted or moved)."""


@dataclass(slots=True)
class _Changes:
    """What one refresh changes of this holder's record."""

    claim: tuple[int, int] | None = None
    grant: int = 0
    send: dict[str, int] = field(default_factory=dict)
    ask: dict[str, int] = field(default_factory=dict)
    rate: int | None = None

    def __bool__(self) -> bool:
        return bool(self.claim or self.grant or self.send or self.ask or self.rate is not None)


class EscrowKeeper:
    """This site's escrow holder, across refreshes."""

    def __init__(self, site: str) -> None:
        self._site = site
        self._samples: dict[tuple[str, str], deque[tuple[float, int]]] = {}
        """(time, this site's spend) of each escrowed window, the last RATE_WINDOW_S."""
        self._asked_at: dict[tuple[str, str, str], float] = {}
        """When this life last asked each donor, per (tenant, window, donor)."""
        self._claims_from = 0.0
        """No window that started earlier is claimed (see :meth:`claim_from`)."""
        self._unescrowed_at: dict[str, float] = {}
        """When this life last saw each tenant's budget configured without escrow (in
        memory: a life that never saw it so fails closed in a window it began within)."""

    def note_budgets(self, budgets: Sequence[TenantBudget], now: float) -> None:
        """The budgets as configured now: the latest time this life saw each tenant's
        budget not escrowed (or with a rolling window) is kept (a switch to escrow within a
        window is told by it)."""
        for budget in budgets:
            # A rolling window is counted as lowerBound whatever its enforcement.
            if budget.enforcement is not BudgetEnforcement.ESCROW or budget.rolling is not None:
                self._unescrowed_at[budget.tenant] = now

    def claim_from(self, moment: float) -> None:
        """Claim no window that started before ``moment``: this holder goes on from an
        earlier life whose view of the budgets is lost (a switch within a window)."""
        self._claims_from = moment

    def switched_in(self, tenant: str, window: BudgetWindow) -> bool:
        """Whether this life saw the tenant's budget not escrowed within ``window``: the
        spend this site counted in it so far was under no allowance."""
        at = self._unescrowed_at.get(tenant)
        return at is not None and at >= window.start.timestamp()

    def step(
        self,
        budget: TenantBudget,
        window: BudgetWindow,
        state: GridState,
        plan: EscrowPlan,
        now: float,
        *,
        may_claim: bool = True,
    ) -> EscrowFigures:
        """Run ``budget``'s escrow for one refresh and report where it stands; a holder
        claims its share only if ``may_claim`` (not after a switch within the window)."""
        tenant, label = budget.tenant, window.counting
        epoch = state.take_escrow_epoch(now)
        holder = slot_id(self._site, epoch)
        book = state.escrow
        used = state.site_spend(tenant, label, self._site)
        rate = self._rate(tenant, label, used, now)
        if plan.held:
            self._forget_old(tenant, label)
            floor = max(1, budget.cap // max(len(plan.sites), 1) // FLOOR_DIVISOR)
            changes = self._changes(
                budget, window, book, plan, holder, used, rate, floor, now, may_claim=may_claim
            )
            if changes:
                _write(state, tenant, label, changes, now)
        allowance = book.granted_by_site(tenant, label, self._site)
        available = book.available(tenant, label, holder)
        return EscrowFigures(allowance, used, used >= allowance and available <= 0)

    def _changes(  # noqa: PLR0917 - one holder's view of one window
        self,
        budget: TenantBudget,
        window: BudgetWindow,
        book: EscrowBook,
        plan: EscrowPlan,
        holder: str,
        used: int,
        rate: float,
        floor: int,
        now: float,
        *,
        may_claim: bool,
    ) -> _Changes:
        tenant, label = budget.tenant, window.counting
        epoch = int(holder.rpartition("#")[2])
        record = book.record(tenant, label, holder)
        changes = _Changes()
        if self._site not in plan.sites:
            # Retiring (its GridSite removed while it runs): it releases nothing more and
            # keeps nothing back, so what it holds goes to the peers that ask. Only its own
            # signed sends move it: nobody takes a silent site's allowance.
            floor = 0
        share = 0
        if (
            may_claim
            and window.start.timestamp() >= self._claims_from
            and (record is None or not record.of)
            and epoch <= (window.start.timestamp() - CLAIM_SLACK_S) * 1000
        ):
            share = even_share(budget.cap, plan.sites, self._site)
            changes.claim = (share, len(plan.sites))
        available = book.available(tenant, label, holder) + share
        # Release ahead of the gateways' spend.
        margin = book.granted_by_site(tenant, label, self._site) - used
        headroom = max(floor, math.ceil(rate * HEADROOM_S)) if floor else 0
        grant = min(max(available, 0), max(headroom - margin, 0))
        if grant:
            changes.grant = grant
            available -= grant
            margin += grant
        keep = max(floor, math.ceil(rate * RESERVE_S)) if floor else 0
        # Answer the peers that asked this holder.
        sends: dict[str, int] = {}
        partners = set(record.sent) if record is not None else set()
        for asker, asking in sorted(book.holders(tenant, label).items()):
            owed = asking.asks.get(holder, 0) - (record.sent.get(asker, 0) if record else 0)
            spare = available - keep
            if owed <= 0 or spare <= 0 or holder_site(asker) == self._site:
                continue
            if asker not in partners and len(partners) >= MAX_PARTNERS:
                continue
            sends[asker] = min(owed, spare)
            partners.add(asker)
            available -= sends[asker]
        changes.send = sends
        # Ask a peer when what this site has at hand runs below what it wants.
        pending = self._pending(book, tenant, label, holder, now)
        need = keep - available - max(margin, 0) - pending
        if need > 0:
            donor = _donor(book, tenant, label, holder, plan, floor, record, self._site)
            if donor is not None:
                # The ask counter rises to owe ``need`` in all: what the donor still owes
                # of an earlier, timed-out ask counts towards it.
                asked = 0 if record is None else record.asks.get(donor, 0)
                given = book.record(tenant, label, donor)
                owed = asked - (0 if given is None else given.sent.get(holder, 0))
                if need > owed:
                    changes.ask = {donor: need - max(owed, 0)}
                self._asked_at[(tenant, label, donor)] = now
        published = 0 if record is None else record.rate
        per_minute = round(rate * 60)
        if changes or abs(per_minute - published) > max(1, published // 4):
            changes.rate = per_minute
        return changes

    def _pending(self, book: EscrowBook, tenant: str, label: str, holder: str, now: float) -> int:
        """What this holder asked for lately and has not received yet."""
        record = book.record(tenant, label, holder)
        if record is None:
            return 0
        pending = 0
        for donor, asked in record.asks.items():
            at = self._asked_at.get((tenant, label, donor))
            if at is None or now - at > ASK_TIMEOUT_S:
                continue
            given = book.record(tenant, label, donor)
            pending += max(asked - (0 if given is None else given.sent.get(holder, 0)), 0)
        return pending

    def _rate(self, tenant: str, label: str, used: int, now: float) -> float:
        """This site's spend per second over the last :data:`RATE_WINDOW_S`."""
        samples = self._samples.setdefault((tenant, label), deque())
        samples.append((now, used))
        while len(samples) > 2 and now - samples[1][0] >= RATE_WINDOW_S:
            samples.popleft()
        first_at, first = samples[0]
        elapsed = now - first_at
        return (used - first) / elapsed if elapsed > 0 else 0.0

    def _forget_old(self, tenant: str, label: str) -> None:
        """Drop what this keeper remembers of the tenant's earlier windows."""
        for sampled in [k for k in self._samples if k[0] == tenant and k[1] != label]:
            del self._samples[sampled]
        for asked in [k for k in self._asked_at if k[0] == tenant and k[1] != label]:
            del self._asked_at[asked]


def _write(state: GridState, tenant: str, label: str, changes: _Changes, now: float) -> None:
    """Write ``changes``; a write refused whole changes nothing, and the next refresh plans
    again. A record that a new partner would make too large for one item (long site names)
    is written without the transfers and asks, so the site goes on releasing what it holds."""
    try:
        state.write_escrow(
            tenant,
            label,
            now,
            claim=changes.claim,
            grant=changes.grant,
            send=changes.send,
            ask=changes.ask,
            rate=changes.rate,
        )
    except CrdtLimitError:
        with contextlib.suppress(CrdtValueError, CrdtLimitError):
            state.write_escrow(
                tenant, label, now, claim=changes.claim, grant=changes.grant, rate=changes.rate
            )
    except CrdtValueError:
        pass


def even_share(cap: int, sites: Sequence[str], site: str) -> int:
    """``site``'s part of ``cap`` split evenly among ``sites`` (the remainder's units to the
    first sites by name): the parts sum to ``cap`` exactly; 0 for a site not listed."""
    ordered = sorted(set(sites))
    if site not in ordered:
        return 0
    index = ordered.index(site)
    return cap // len(ordered) + (1 if index < cap % len(ordered) else 0)


def _donor(  # noqa: PLR0917 - the asker's view of its peers
    book: EscrowBook,
    tenant: str,
    label: str,
    holder: str,
    plan: EscrowPlan,
    floor: int,
    record: EscrowRecord | None,
    site: str,
) -> str | None:
    """The peer holder with the most to give: the latest life of a live site, whose
    allowance at hand exceeds what it keeps; None when none has any."""
    latest: dict[str, tuple[int, str]] = {}
    for other in book.holders(tenant, label):
        other_site = holder_site(other)
        epoch = int(other.rpartition("#")[2])
        if other_site != site and epoch > latest.get(other_site, (0, ""))[0]:
            latest[other_site] = (epoch, other)
    asked = set() if record is None else set(record.asks)
    best: tuple[int, str] | None = None
    for other_site, (_, other) in sorted(latest.items()):
        member = plan.members.get(other_site)
        if member is None or member.state is not MemberState.ALIVE:
            continue
        if other not in asked and len(asked) >= MAX_PARTNERS:
            continue
        published = book.record(tenant, label, other)
        rate = 0 if published is None else published.rate / 60
        # A retiring site (no longer configured) keeps nothing back.
        kept = max(floor, math.ceil(rate * RESERVE_S)) if other_site in plan.sites else 0
        spare = book.available(tenant, label, other) - kept
        if spare > 0 and (best is None or spare > best[0]):
            best = (spare, other)
    return None if best is None else best[1]


ESCROW_CONDITION = "EscrowHeld"


def run_escrow(  # noqa: PLR0917 - the keeper, the budgets and their windows, state, plan, time
    keeper: EscrowKeeper,
    budgets: Sequence[TenantBudget],
    windows: Mapping[str, BudgetWindow],
    state: GridState,
    plan: EscrowPlan,
    now: float,
) -> dict[str, EscrowFigures]:
    """One refresh of every escrowed budget with a fixed or calendar window (``windows``:
    each budget's current one, by tenant) that is escrowed in that window
    (:meth:`EscrowKeeper.escrowed_in`); their figures, by tenant."""
    keeper.note_budgets(budgets, now)
    figures = {}
    for budget in budgets:
        if budget.enforcement is not BudgetEnforcement.ESCROW or budget.rolling is not None:
            continue
        window = windows[budget.tenant]
        switched = keeper.switched_in(budget.tenant, window)
        if switched and not _claimed(state, budget.tenant, window):
            continue  # lowerBound until the next window (switched_within says so)
        figures[budget.tenant] = keeper.step(
            budget, window, state, plan, now, may_claim=not switched
        )
    return figures


def _claimed(state: GridState, tenant: str, window: BudgetWindow) -> bool:
    """Whether some holder, this site's or a peer's, claimed a share of ``window``: the
    mesh escrows it."""
    return any(record.of for record in state.escrow.holders(tenant, window.counting).values())


def switched_within(
    keeper: EscrowKeeper,
    budgets: Sequence[TenantBudget],
    windows: Mapping[str, BudgetWindow],
    state: GridState,
) -> list[tuple[str, BudgetWindow]]:
    """The escrowed budgets (fixed or calendar windows) counted as lowerBound in their
    current window, with the window: this site saw them switched to escrow within it and no
    holder claimed a share of it. Escrow starts with the next window."""
    return [
        (budget.tenant, windows[budget.tenant])
        for budget in budgets
        if budget.enforcement is BudgetEnforcement.ESCROW
        and budget.rolling is None
        and keeper.switched_in(budget.tenant, windows[budget.tenant])
        and not _claimed(state, budget.tenant, windows[budget.tenant])
    ]


def escrow_condition(
    budgets: Sequence[TenantBudget],
    old_peers: Sequence[str],
    generation: int | None,
    switched: Sequence[tuple[str, BudgetWindow]] = (),
) -> ConditionUpdate | None:
    """``EscrowHeld``, while some budget asks for escrow: True when every escrowed cap
    holds; False, saying why, when a peer runs a release without escrow (its sites spend
    without allowance: nothing is claimed, granted or moved here meanwhile), a budget
    was ``switched`` to escrow within its current window (lowerBound until the next one
    starts, said with when) or a budget with a rolling window asks for it (counted as
    lowerBound)."""
    escrowed = [b for b in budgets if b.enforcement is BudgetEnforcement.ESCROW]
    if not escrowed:
        return None
    rolling = [b.tenant for b in escrowed if b.rolling is not None]
    problems = []
    reason = "CapsHeld"
    if switched:
        reason = "SwitchedWithinWindow"
        problems.append(
            "switched to escrow within the current window, whose spend so far was counted "
            "without allowances: lowerBound until the next window starts, when each site "
            "claims its share: "
            + ", ".join(
                f"{tenant} (from {window.end.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ})"
                for tenant, window in switched[:20]
            )
        )
    if old_peers:
        reason = "PeerWithoutEscrow"
        problems.append(
            f"{', '.join(old_peers[:20])} speak(s) a protocol below {ESCROW_PROTOCOL} "
            "(release 0.2.0) and spend without allowance: escrow is held back until every "
            "site runs this release; gateways keep the allowance already granted"
        )
    if rolling:
        reason = reason if reason != "CapsHeld" else "RollingWindow"
        problems.append(
            "escrow applies to fixed and calendar windows; counted as lowerBound: "
            + ", ".join(rolling[:20])
        )
    if problems:
        return condition_update(ESCROW_CONDITION, False, reason, "; ".join(problems), generation)
    return condition_update(ESCROW_CONDITION, True, reason, "", generation)


def peers_without_escrow(
    members: Mapping[str, MemberInfo], protocols: Mapping[str, int]
) -> list[str]:
    """The members (those that left excepted) last heard speaking a protocol below
    :data:`ESCROW_PROTOCOL`."""
    return sorted(
        site
        for site, member in members.items()
        if member.state is not MemberState.LEFT
        and protocols.get(site, ESCROW_PROTOCOL) < ESCROW_PROTOCOL
    )
