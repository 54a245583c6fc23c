"""What this site publishes and what it forgets.

Its own records (a record per provider it serves, its metadata, its gateway, its
certificate) written into the replicated state on every pass, the grid id it adopts, and
which peers' records to drop: a site that left, or one down or unheard for longer than
the network's stale-candidate TTL. Pure: time comes in as ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from grid.crdt.records import ProviderRecord
from grid.crdt.state import GridState
from grid.engine.events import EventLog, clip
from grid.engine.inputs import SiteInputs, same_inputs
from grid.engine.members import LIVE_STATES, MemberInfo
from grid.engine.providers import ProviderPhases
from grid.engine.records import (
    gateway_record,
    provider_metrics,
    provider_record,
    signal_thresholds,
    signals_refresh_seconds,
    site_metadata,
)
from grid.errors import CrdtLimitError, CrdtValueError
from grid.models.phases import MemberState


class Publisher:
    """This site's records: built again only when what they are made from changes, and
    what went wrong publishing them."""

    def __init__(self) -> None:
        self._records: dict[str, tuple[tuple[object, ...], ProviderRecord]] = {}
        """Per provider: what its last record was built from, and the record."""
        self._publish_errors: dict[str, str] = {}
        self.records_error: str | None = None
        """Why this site's own metadata, gateway or certificate cannot be published."""

    def drop(self, providers: Iterable[str]) -> None:
        """Forget providers this site no longer observes."""
        for name in providers:
            self._records.pop(name, None)
            self._publish_errors.pop(name, None)

    def write(  # noqa: PLR0917 - the state written, and the rooms the records come from
        self,
        state: GridState,
        inputs: SiteInputs,
        phases: ProviderPhases,
        grid_id: str | None,
        events: EventLog,
        now: datetime,
    ) -> bool:
        """Advance the providers' phases and write this site's records; returns whether a
        provider's health verdict changed (what routing reads)."""
        moment = now.timestamp()
        published: set[str] = set()
        views_changed = False
        thresholds = signal_thresholds(inputs.network.spec)
        refresh = signals_refresh_seconds(inputs.network.spec)
        for provider, observed in inputs.observations():
            name = provider.metadata.name
            publish_error = self._publish_errors.get(name)
            phase, view, changed = phases.evaluate(provider, observed, publish_error, events, now)
            views_changed |= changed
            if provider.spec.site_selector is None:
                continue
            try:
                made_from = (provider, phase, observed.signals, view.healthy)
                held = self._records.get(name)
                if held is not None and same_inputs(held[0], made_from):
                    record = held[1]
                else:
                    metrics = provider_metrics(observed.signals, view.healthy)
                    record = provider_record(provider, phase, metrics)
                    self._records[name] = (made_from, record)
                state.put_provider(record, moment, refresh_after=refresh, thresholds=thresholds)
            except (CrdtValueError, CrdtLimitError) as error:
                self._publish_errors[name] = str(error)
                continue
            self._publish_errors.pop(name, None)
            published.add(name)
        for name in set(state.own_provider_names()) - published:
            state.remove_provider(name, moment)
        self._write_site(state, inputs, grid_id, moment)
        return views_changed

    def _write_site(
        self, state: GridState, inputs: SiteInputs, grid_id: str | None, moment: float
    ) -> None:
        local = inputs.local_site
        try:
            state.set_metadata(site_metadata(local, grid_id), moment)
            resolution = inputs.egress_resolution
            gateway = gateway_record(local, resolution.address if resolution else None)
            if gateway is not None:
                state.set_gateway(gateway, moment)
            if inputs.cert_pem is not None:
                state.set_cert(inputs.cert_pem, moment)
        except (CrdtValueError, CrdtLimitError) as error:
            self.records_error = clip(f"this site's records cannot be published: {error}")
        else:
            self.records_error = None


def sites_to_forget(
    state: GridState,
    members: Mapping[str, MemberInfo],
    ttl_seconds: float,
    now: datetime,
) -> list[str]:
    """Peers whose records to drop: those that left, and those neither alive nor suspect
    unheard (no item, no membership change) for longer than ``ttl_seconds``. A site
    declared down keeps its records until then, because one declared down by mistake
    rejoins without publishing its unchanged items again."""
    moment = now.timestamp()
    stale = []
    for site in state.sites():
        if site == state.site:
            continue
        member = members.get(site)
        if member is not None and member.state in LIVE_STATES:
            continue
        if member is not None and member.state is MemberState.LEFT:
            stale.append(site)
            continue
        heard = state.last_received_at(site) or 0.0
        if member is not None:
            heard = max(heard, member.since.timestamp())
        if moment - heard > ttl_seconds:
            stale.append(site)
    return stale


def adopted_grid_id(
    current: str | None, members: Mapping[str, MemberInfo], state: GridState
) -> str | None:
    """The grid id to use without one in spec: every site starts with its own, and the
    smallest id any alive peer publishes wins, so the mesh converges on one without a
    coordinator."""
    known = [current] if current else []
    for site, member in members.items():
        metadata = state.metadata(site) if member.state is MemberState.ALIVE else None
        if metadata is not None and metadata.grid_id:
            known.append(metadata.grid_id)
    return min(known) if known else current
