"""A test PKI: one CA and a certificate per site, written into a directory."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from grid.trust import CertificateAuthority, IssuedCertificate, PemFiles


@dataclass(frozen=True)
class SiteCredentials:
    """A site's certificate, its key, and the files they were written to."""

    name: str
    issued: IssuedCertificate
    files: PemFiles

    @property
    def fingerprint(self) -> str:
        return self.issued.fingerprint

    @property
    def certificate_pem(self) -> str:
        return self.issued.certificate_pem


@dataclass(frozen=True)
class Pki:
    """A CA (certificate at ``ca_file``) and the sites it issued certificates to."""

    directory: Path
    ca: CertificateAuthority
    ca_file: Path
    sites: dict[str, SiteCredentials]

    def __getitem__(self, site: str) -> SiteCredentials:
        return self.sites[site]

    @property
    def ca_pem(self) -> str:
        return self.ca.certificate_pem


def make_pki(
    directory: Path,
    sites: tuple[str, ...] = ("site-a", "site-b", "site-c"),
    *,
    ca_name: str = "Grid Test CA",
    now: datetime | None = None,
) -> Pki:
    """Mint a CA and one certificate per site (SANs: the site name, ``localhost`` and
    127.0.0.1), writing ``ca.crt``/``ca.key`` and ``<site>.crt``/``<site>.key``."""
    now = now or datetime.now(UTC)
    ca = CertificateAuthority.generate(ca_name, now=now)
    ca_files = ca.write(directory, "ca")
    credentials = {}
    for site in sites:
        issued = ca.issue(site, now=now, dns_names=("localhost",))
        credentials[site] = SiteCredentials(site, issued, issued.write(directory, site))
    return Pki(directory, ca, ca_files.certificate, credentials)
