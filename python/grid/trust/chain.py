"""Whether the network CA vouches for a site's certificate, as SWIM judges it
(``rust/grid-core/src/identity/auth.rs``): the chain verifies up to a CA certificate, every
certificate of it is valid at ``now``, and the leaf names the site as a DNS subject
alternative name and allows server authentication. Pure: time comes in as ``now``.

It tells which anchor a certificate rests on (the CA, or only a pin) for reporting; the
decisions stay where they are made (the SWIM node, the pin checks of the site engine).
"""

from __future__ import annotations

from datetime import datetime

from cryptography import x509
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from grid.errors import CertificateRejected, TrustConfigError
from grid.trust.pem import certificate_ders

# The Web PKI profile, but a leaf may lack the authority key identifier, as the SWIM node
# (rustls-webpki) lets it: a certificate SWIM accepts is not reported as unvouched for.
_LEAF_POLICY = ExtensionPolicy.webpki_defaults_ee().may_be_present(
    x509.AuthorityKeyIdentifier, Criticality.AGNOSTIC, None
)


class NetworkCa:
    """The network's CA certificates (none: no CA is known here, and it vouches for
    nothing)."""

    def __init__(self, anchors: tuple[bytes, ...] = ()) -> None:
        """``anchors``: DER CA certificates. Raises
        :class:`~grid.errors.TrustConfigError` for one that is not a certificate."""
        try:
            self._certificates = tuple(x509.load_der_x509_certificate(der) for der in anchors)
        except ValueError:
            raise TrustConfigError("a CA certificate is not a DER X.509 certificate") from None
        self.anchors = anchors

    def __repr__(self) -> str:
        return f"NetworkCa(certificates={len(self._certificates)})"

    def vouches_for(self, pem: str, site: str, now: datetime) -> bool:
        """Whether the chain in ``pem`` (leaf first) is ``site``'s by this CA at ``now``."""
        if not self._certificates:
            return False
        try:
            chain = [x509.load_der_x509_certificate(der) for der in certificate_ders(pem)]
            leaf, *intermediates = chain
            verifier = (
                PolicyBuilder()
                .store(Store(list(self._certificates)))
                .time(now)
                .extension_policies(
                    ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=_LEAF_POLICY
                )
                .build_server_verifier(x509.DNSName(site))
            )
            verifier.verify(leaf, intermediates)
        except (VerificationError, ValueError, CertificateRejected):
            return False
        return True
