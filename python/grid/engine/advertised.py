"""The certificates sites advertise on the cert lane: the verdict on each, checked again
only when the certificate changes or time alone may change it, and the
``CertificateAdvertised`` condition it gives the site. Pure: time comes in as ``now``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from grid.crdt.state import GridState
from grid.engine.events import with_condition
from grid.errors import CertificateRejected, TrustConfigError
from grid.models.conditions import Condition
from grid.models.site import GridSite
from grid.trust.pem import check_public_cert_pem

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


class AdvertisedCerts:
    """The verdict per site on what it advertises."""

    def __init__(self, recheck_after: timedelta) -> None:
        self._recheck_after = recheck_after
        self._verdicts: dict[str, AdvertisedCert] = {}

    def forget(self, site: str) -> None:
        self._verdicts.pop(site, None)

    def clear(self) -> None:
        self._verdicts.clear()

    def verdict(self, site: str, state: GridState, now: datetime) -> AdvertisedCert | None:
        """The verdict on ``site``'s advertised certificate: checked again only when the
        certificate changes or when time alone may change the verdict, not on every pass
        (a busy peer's items arrive all the time; its certificate seldom changes)."""
        pem = state.cert_pem(site)
        if pem is None:
            self._verdicts.pop(site, None)
            return None
        known = self._verdicts.get(site)
        if known is not None and known.pem == pem and known.checked_at <= now < known.recheck_at:
            return known
        recheck_at = now + self._recheck_after
        try:
            info = check_public_cert_pem(pem, now)
        except (CertificateRejected, TrustConfigError) as error:
            problem = f"the advertised certificate was discarded: {error}"
            known = AdvertisedCert(pem, None, problem, now, recheck_at)
        else:
            # Valid up to and including notAfter: the first moment it is not is just after.
            expired_at = info.not_after + timedelta(microseconds=1)
            known = AdvertisedCert(pem, info.fingerprint, None, now, min(recheck_at, expired_at))
        self._verdicts[site] = known
        return known


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
