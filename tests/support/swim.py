"""SWIM credentials for tests: one CA per test session, a certificate per site, made on
demand and cached (EC key generation is cheap, but thousands of nodes add up)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime

from grid.membership import SwimCredentials
from grid.runtime.credentials import swim_credentials
from grid.trust import CertificateAuthority, IssuedCertificate


@functools.cache
def test_ca() -> CertificateAuthority:
    """The network CA every test node trusts."""
    return CertificateAuthority.generate("Grid SWIM Test CA", now=datetime.now(UTC))


@functools.cache
def site_certificate(site: str) -> IssuedCertificate:
    """The certificate (and key) of ``site``, issued by :func:`test_ca`."""
    return test_ca().issue(site, now=datetime.now(UTC), dns_names=("localhost",))


def credentials(site: str, *, pins: dict[str, list[str]] | None = None) -> SwimCredentials:
    """What a node of ``site`` signs with, trusting :func:`test_ca`."""
    issued = site_certificate(site)
    return swim_credentials(
        issued.certificate_pem,
        issued.private_key_pem().decode("ascii"),
        test_ca().certificate_pem,
        pins,
    )
