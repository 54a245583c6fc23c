"""The agent's TLS material for probing peer sites: ``tls.crt``/``tls.key`` and optionally
``ca.crt`` in the TLS directory, turned into the shared :class:`~grid.runtime.probes.SiteProber`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grid.errors import TrustConfigError
from grid.runtime.probes import SiteProber
from grid.trust.probe import build_client_context


@dataclass(frozen=True, slots=True)
class SiteTls:
    """This site's TLS material: ``tls.crt``/``tls.key`` and optionally ``ca.crt``."""

    certificate: Path | None
    private_key: Path | None
    ca: Path | None

    @classmethod
    def from_dir(cls, directory: Path | None) -> SiteTls:
        """The files present in ``directory`` (``None``: no TLS material at all)."""
        if directory is None:
            return cls(None, None, None)
        certificate, key, ca = (directory / name for name in ("tls.crt", "tls.key", "ca.crt"))
        if certificate.exists() != key.exists():
            raise TrustConfigError(f"{directory} must hold both tls.crt and tls.key, or neither")
        return cls(
            certificate if certificate.exists() else None,
            key if key.exists() else None,
            ca if ca.exists() else None,
        )

    def prober(self) -> SiteProber:
        """A prober with these files (the contexts are built once, here). Raises
        :class:`~grid.errors.TrustConfigError` for unreadable or unusable files."""
        ca_pem = None
        if self.ca is not None:
            try:
                ca_pem = self.ca.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError):
                raise TrustConfigError(f"the CA certificate {self.ca} is unreadable") from None
        server_only = build_client_context(ca_pem=ca_pem)
        mutual = build_client_context(
            ca_pem=ca_pem, client_cert=self.certificate, client_key=self.private_key
        )
        return SiteProber(server_only, mutual)
