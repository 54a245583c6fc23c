"""Trust in the sites: each GridSite's phase machine, fed by membership, the probe of its
egress and the certificate it advertises, and the set of sites it makes routable (those
Active: their certificate matched a pin). Pure: time comes in as ``now``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime

from grid.crdt.state import GridState
from grid.engine.advertised import AdvertisedCerts, advertised_condition
from grid.engine.certificates import SiteCertificate
from grid.engine.egress import EGRESS_RESOLVED, EgressResolution
from grid.engine.events import SITE_KIND, EventLog, with_condition
from grid.engine.inputs import SiteInputs, same_inputs
from grid.engine.members import Members
from grid.engine.probes import Probes
from grid.models.conditions import Condition
from grid.models.phases import MemberState, SiteObservation, evaluate_site
from grid.models.site import EgressTlsMode, GridSite, GridSitePhase, GridSiteStatus
from grid.render.consumer import ClusterEndpoint


def site_egress(inputs: SiteInputs, state: GridState, site: str) -> ClusterEndpoint | None:
    """Where ``site`` is reached: its GridSite's egress address (for this site also the one
    read through ``spec.egress.from``), else the gateway it advertises (not for this site,
    whose own advertisement says nothing new)."""
    resource = inputs.sites.get(site)
    egress = resource.spec.egress if resource is not None else None
    if egress is not None and egress.address is not None:
        return ClusterEndpoint(egress.address, egress.tls_mode, egress.server_name)
    if egress is not None and site == inputs.site:
        resolution = inputs.egress_resolution
        address = resolution.address if resolution is not None else None
        return (
            None
            if address is None
            else ClusterEndpoint(address, egress.tls_mode, egress.server_name)
        )
    # A GridSite of another site that reads its egress from an object of that site's
    # cluster: its address arrives as the gateway that site announces.
    learned = state.gateway(site) if site != inputs.site else None
    if learned is None:
        return None
    try:
        mode = EgressTlsMode(learned.tls_mode)
    except ValueError:
        return None
    return ClusterEndpoint(learned.address, mode, learned.server_name)


class SiteTrust:
    """The status of every GridSite of the network, and the sites it trusts."""

    def __init__(self, site: str) -> None:
        self._site = site
        self._status: dict[str, GridSiteStatus] = {}
        self._settled: dict[str, tuple[object, ...]] = {}
        """What each site's status was evaluated from, while evaluating it again from the
        same would take no transition: a pass skips the evaluation while nothing of it
        changes."""
        self.trusted: frozenset[str] = frozenset()
        """Sites (this one excluded) whose GridSite is Active."""

    def statuses(self) -> Iterator[tuple[str, GridSiteStatus]]:
        """(site, status) in name order."""
        return iter(sorted(self._status.items()))

    def unreachable(self) -> tuple[str, ...]:
        """Other sites whose phase is Unreachable."""
        return tuple(
            name
            for name, status in self._status.items()
            if name != self._site and status.phase is GridSitePhase.UNREACHABLE
        )

    def evaluate(  # noqa: PLR0917 - the rooms a site's phase is read from
        self,
        inputs: SiteInputs,
        state: GridState,
        members: Members,
        probes: Probes,
        advertised: AdvertisedCerts,
        events: EventLog,
        now: datetime,
        *,
        certificates: Mapping[str, SiteCertificate],
    ) -> bool:
        """Advance every site's phase; returns whether the trusted sites changed.
        ``certificates``: the known ones, whose expiry each GridSite's status reports."""
        trusted: set[str] = set()
        tls = inputs.network.spec.tls
        revoked = frozenset(tls.revoked_certificates) if tls else frozenset()
        for name in set(self._status) - set(inputs.sites):
            del self._status[name]
            self._settled.pop(name, None)
        for name, site in sorted(inputs.sites.items()):
            status = self._status.get(name)
            egress = site_egress(inputs, state, name)
            if name == self._site:
                # Its own certificate: what a plaintext egress of this site is pinned by
                # (it has no TLS to present one), as a peer's is by the one it advertises.
                verdict = advertised.check(name, inputs.cert_pem, now)
            else:
                verdict = advertised.verdict(name, state, now)
            probe = probes.get(name)
            presented = verdict.fingerprint if verdict is not None else None
            if name == self._site:
                member = MemberState.ALIVE if inputs.membership_running else None
            else:
                member = members.state_of(name)
            observation = SiteObservation(
                member=member,
                egress_address=None if egress is None else egress.address,
                probe=None if probe is None else probe.observation(presented),
                revoked=revoked,
            )
            resolution = inputs.egress_resolution if name == self._site else None
            certificate = certificates.get(name)
            made_from = (site, observation, verdict, probe, egress, resolution, certificate)
            alive = members.is_alive(name)
            if status is not None and same_inputs(self._settled.get(name), made_from):
                if alive and status.last_seen_alive != now:
                    status = status.model_copy(update={"last_seen_alive": now})
                    self._status[name] = status
                if name != self._site and status.phase is GridSitePhase.ACTIVE:
                    trusted.add(name)
                continue
            outcome = evaluate_site(site.model_copy(update={"status": status}), observation, now)
            if outcome.transitions:
                self._settled.pop(name, None)
            else:
                self._settled[name] = made_from
            events.record(SITE_KIND, name, outcome.events, now)
            conditions = outcome.conditions
            if name != self._site:
                conditions = advertised_condition(conditions, site, verdict, now)
            conditions = egress_condition(conditions, site, resolution, now)
            alive_since = status.last_seen_alive if status is not None else None
            if alive:
                alive_since = now
            observed_fingerprint = None
            if probe is not None and probe.result.fingerprint is not None:
                observed_fingerprint = probe.result.fingerprint
            elif probe is not None and probe.tls_mode is EgressTlsMode.PLAINTEXT and verdict:
                observed_fingerprint = verdict.fingerprint
            self._status[name] = GridSiteStatus(
                phase=outcome.phase,
                phase_transition_time=outcome.phase_transition_time,
                observed_generation=site.metadata.generation,
                conditions=conditions,
                last_probe=None if probe is None else probe.status(),
                observed_fingerprint=observed_fingerprint,
                matched_pin=site.spec.trust.match(observed_fingerprint),
                egress_address=None if egress is None else egress.address,
                last_seen_alive=alive_since,
                certificate_not_after=None if certificate is None else certificate.not_after,
            )
            if name != self._site and outcome.phase is GridSitePhase.ACTIVE:
                trusted.add(name)
        if frozenset(trusted) == self.trusted:
            return False
        self.trusted = frozenset(trusted)
        return True


def egress_condition(
    conditions: list[Condition],
    site: GridSite,
    resolution: EgressResolution | None,
    now: datetime,
) -> list[Condition]:
    """``conditions`` with ``EgressResolved`` set from ``resolution`` (this site's reading
    of ``spec.egress.from``), or without it where the GridSite reads from nothing."""
    if resolution is None:
        return [c for c in conditions if c.type != EGRESS_RESOLVED]
    return with_condition(
        conditions,
        EGRESS_RESOLVED,
        resolution.resolved,
        resolution.reason,
        resolution.message,
        site.metadata.generation,
        now,
    )
