"""The certificates this site knows: its own and the one each peer advertises, each with its
fingerprint, when it expires and what vouches for it, for the metrics, ``/status``, the
live view and each GridSite's ``status.certificateNotAfter``. Pure: time comes in as
``now``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType

from grid.crdt.state import GridState
from grid.engine.advertised import AdvertisedCert, AdvertisedCerts
from grid.engine.inputs import SiteInputs
from grid.models.site import GridSite


class CertificateAnchor(StrEnum):
    """What vouches for a site's certificate, in the order the SWIM node asks."""

    CA = "ca"
    """It chains to the network CA (and matches the site's pins, where it has some)."""
    PIN = "pin"
    """Only a pin of the site's GridSite does (a self-signed certificate, one of another
    issuer, or a site where no CA is known)."""


@dataclass(frozen=True, slots=True)
class SiteCertificate:
    """One site's leaf certificate as this site knows it."""

    site: str
    fingerprint: str
    not_after: datetime
    anchor: CertificateAnchor | None
    """None: nothing vouches for it now (no pin matches, no known CA signed it, or it is
    outside its validity)."""
    problem: str | None
    """Why peers discard it (expired, not yet valid), if they do."""


def site_certificate(
    site: str, verdict: AdvertisedCert | None, resource: GridSite | None
) -> SiteCertificate | None:
    """What ``verdict`` says of ``site``'s certificate, pinned by ``resource`` (its
    GridSite, if there is one); None when there is no readable certificate."""
    leaf = None if verdict is None else verdict.leaf
    if verdict is None or leaf is None:
        return None
    trust = None if resource is None else resource.spec.trust
    pinned = trust is not None and trust.match(leaf.fingerprint) is not None
    pins_allow = pinned or trust is None or not trust.pins
    anchor = None
    if verdict.problem is None and verdict.ca_signed and pins_allow:
        anchor = CertificateAnchor.CA
    elif verdict.problem is None and pinned:
        anchor = CertificateAnchor.PIN
    return SiteCertificate(site, leaf.fingerprint, leaf.not_after, anchor, verdict.problem)


class KnownCertificates:
    """The certificates of this site and of every peer whose certificate the replicated
    state holds, as of the last :meth:`refresh`."""

    def __init__(self, site: str) -> None:
        self._site = site
        self._known: dict[str, SiteCertificate] = {}

    @property
    def view(self) -> Mapping[str, SiteCertificate]:
        """By site name, this site's included."""
        return MappingProxyType(self._known)

    def refresh(
        self, inputs: SiteInputs, state: GridState, advertised: AdvertisedCerts, now: datetime
    ) -> None:
        known = {}
        own = site_certificate(
            self._site, advertised.check(self._site, inputs.cert_pem, now), inputs.local_site
        )
        if own is not None:
            known[self._site] = own
        for name in state.sites():
            if name == self._site:
                continue
            peer = site_certificate(
                name, advertised.verdict(name, state, now), inputs.sites.get(name)
            )
            if peer is not None:
                known[name] = peer
        self._known = known

    def forget(self, site: str) -> None:
        """``site``'s records are gone: so is what it advertised."""
        self._known.pop(site, None)
