"""Whether the network CA vouches for a site's certificate (``grid.trust.chain``), as the
SWIM node judges it: the chain, the dates at ``now``, and the site's name."""

from __future__ import annotations

from datetime import timedelta

import pytest

from grid.errors import TrustConfigError
from grid.trust import CertificateAuthority, self_signed_certificate
from grid.trust.chain import NetworkCa
from grid.trust.pem import certificate_ders
from test_engine import T0

CA = CertificateAuthority.generate("mesh CA", now=T0)
MESH = NetworkCa(tuple(certificate_ders(CA.certificate_pem)))
SITE_A = CA.issue("site-a", now=T0)


def test_the_ca_vouches_for_a_certificate_it_issued_for_that_site() -> None:
    assert MESH.vouches_for(SITE_A.certificate_pem, "site-a", T0)


def test_not_for_another_sites_name() -> None:
    assert not MESH.vouches_for(SITE_A.certificate_pem, "site-b", T0)


def test_not_outside_the_certificates_validity() -> None:
    expiry = SITE_A.certificate.not_valid_after_utc
    assert MESH.vouches_for(SITE_A.certificate_pem, "site-a", expiry)
    assert not MESH.vouches_for(SITE_A.certificate_pem, "site-a", expiry + timedelta(seconds=1))
    assert not MESH.vouches_for(SITE_A.certificate_pem, "site-a", T0 - timedelta(hours=1))


def test_not_for_a_self_signed_certificate_or_another_cas() -> None:
    assert not MESH.vouches_for(
        self_signed_certificate("site-a", now=T0).certificate_pem, "site-a", T0
    )
    other = CertificateAuthority.generate("another CA", now=T0).issue("site-a", now=T0)
    assert not MESH.vouches_for(other.certificate_pem, "site-a", T0)


def test_no_ca_vouches_for_nothing() -> None:
    assert not NetworkCa().vouches_for(SITE_A.certificate_pem, "site-a", T0)


def test_an_anchor_that_is_no_certificate_is_refused() -> None:
    with pytest.raises(TrustConfigError, match=r"not a DER X\.509 certificate"):
        NetworkCa((b"not a certificate",))
