"""The certificates sites advertise on the cert lane (and this site's own): the verdict on
each, checked again only when the certificate changes or time alone may change it, and the
``CertificateAdvertised`` condition it gives the site. Pure: time comes in as ``now``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from grid.crdt.state import GridState
from grid.engine.events import with_condition
from grid.errors import CertificateRejected
from grid.models.conditions import Condition
from grid.models.site import GridSite
from grid.trust.chain import NetworkCa
from grid.trust.pem import CertificateInfo, check_validity, read_public_cert_pem

CONDITION = "CertificateAdvertised"


@dataclass(frozen=True, slots=True)
class AdvertisedCert:
    """The verdict on a site's advertised certificate, for as long as it holds."""

    pem: str
    fingerprint: str | None
    problem: str | None
    checked_at: datetime
    recheck_at: datetime
    """When the verdict may change with time alone: the leaf's expiry, or a probe interval
    after the check (a certificate of the chain expiring, one not yet valid becoming
    valid)."""
    leaf: CertificateInfo | None = None
    """The leaf as it describes itself, also when it is discarded for its dates (so that
    an expired certificate still says when it expired); None when it cannot be read."""
    ca_signed: bool = False
    """Whether the network CA vouches for it at ``checked_at`` (:class:`NetworkCa`)."""


class AdvertisedCerts:
    """The verdict per site on what it advertises."""

    def __init__(self, recheck_after: timedelta) -> None:
        self._recheck_after = recheck_after
        self._verdicts: dict[str, AdvertisedCert] = {}
        self._ca = NetworkCa()

    @property
    def ca(self) -> NetworkCa:
        return self._ca

    @ca.setter
    def ca(self, ca: NetworkCa) -> None:
        """A new network CA: every verdict is made again, the CA's among them."""
        if ca.anchors != self._ca.anchors:
            self._ca = ca
            self._verdicts.clear()

    def forget(self, site: str) -> None:
        self._verdicts.pop(site, None)

    def clear(self) -> None:
        self._verdicts.clear()

    def verdict(self, site: str, state: GridState, now: datetime) -> AdvertisedCert | None:
        """The verdict on ``site``'s advertised certificate: checked again only when the
        certificate changes or when time alone may change the verdict, not on every pass
        (a busy peer's items arrive all the time; its certificate seldom changes)."""
        return self.check(site, state.cert_pem(site), now)

    def check(self, site: str, pem: str | None, now: datetime) -> AdvertisedCert | None:
        """The verdict on ``pem`` as ``site``'s certificate (None: it has none), held as
        :meth:`verdict` holds it."""
        if pem is None:
            self._verdicts.pop(site, None)
            return None
        known = self._verdicts.get(site)
        if known is not None and known.pem == pem and known.checked_at <= now < known.recheck_at:
            return known
        known = self._verdicts[site] = self._judge(site, pem, now)
        return known

    def _judge(self, site: str, pem: str, now: datetime) -> AdvertisedCert:
        recheck_at = now + self._recheck_after
        try:
            chain = read_public_cert_pem(pem)
        except CertificateRejected as error:
            return AdvertisedCert(pem, None, _discarded(error), now, recheck_at)
        leaf = chain[0]
        try:
            check_validity(chain, now)
        except CertificateRejected as error:
            return AdvertisedCert(pem, None, _discarded(error), now, recheck_at, leaf)
        # Valid up to and including notAfter: the first moment it is not is just after.
        expired_at = leaf.not_after + timedelta(microseconds=1)
        signed = self._ca.vouches_for(pem, site, now)
        return AdvertisedCert(
            pem, leaf.fingerprint, None, now, min(recheck_at, expired_at), leaf, signed
        )


def _discarded(error: CertificateRejected) -> str:
    return f"the advertised certificate was discarded: {error}"


def advertised_condition(
    conditions: list[Condition],
    site: GridSite,
    advertised: AdvertisedCert | None,
    now: datetime,
) -> list[Condition]:
    """``conditions`` with ``CertificateAdvertised`` set from the verdict on what ``site``
    advertises: unknown when nothing is, false when it was discarded or matches no pin."""
    generation = site.metadata.generation
    if advertised is None:
        return with_condition(
            conditions,
            CONDITION,
            None,
            "NotAdvertised",
            "no certificate received on the cert lane",
            generation,
            now,
        )
    if advertised.problem is not None:
        return with_condition(
            conditions,
            CONDITION,
            False,
            "CertificateDiscarded",
            advertised.problem,
            generation,
            now,
        )
    pinned = site.spec.trust.match(advertised.fingerprint) is not None
    message = (
        "the advertised certificate matches a pinned fingerprint"
        if pinned
        else f"the advertised certificate (SHA-256 {advertised.fingerprint}) matches no pin"
    )
    return with_condition(
        conditions,
        CONDITION,
        pinned,
        "AdvertisedPinned" if pinned else "AdvertisedNotPinned",
        message,
        generation,
        now,
    )
