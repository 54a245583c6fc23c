"""Probing a site's egress: a TLS handshake whose leaf certificate the engine compares with
the pin (mutual when this site has a certificate), or a TCP connect for ``plaintext``
egress (pinned by the certificate the site advertises)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from grid.engine import ProbeTarget
from grid.errors import TrustConfigError
from grid.models.site import EgressTlsMode
from grid.trust.probe import build_client_context, parse_address, probe_site
from grid.trust.site import ProbeResult

DEFAULT_TIMEOUT_S = 5.0


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


class Prober:
    """Probes sites with this site's TLS material (contexts are built once)."""

    def __init__(self, tls: SiteTls, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        ca_pem = None
        if tls.ca is not None:
            try:
                ca_pem = tls.ca.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError):
                raise TrustConfigError(f"the CA certificate {tls.ca} is unreadable") from None
        self._server_only = build_client_context(ca_pem=ca_pem)
        self._mutual = build_client_context(
            ca_pem=ca_pem, client_cert=tls.certificate, client_key=tls.private_key
        )
        self._timeout_s = timeout_s

    async def probe(self, target: ProbeTarget) -> ProbeResult:
        """Never raises: every failure is a result with a reason."""
        if target.tls_mode is EgressTlsMode.PLAINTEXT:
            return await tcp_probe(target.address, self._timeout_s)
        context = self._mutual if target.tls_mode is EgressTlsMode.MUTUAL_TLS else self._server_only
        return await probe_site(
            target.address,
            ssl_context=context,
            server_hostname=target.server_name,
            timeout=self._timeout_s,
        )


async def tcp_probe(address: str, timeout_s: float) -> ProbeResult:
    """Whether a TCP connection to ``address`` opens within ``timeout_s``."""
    started = time.perf_counter()
    try:
        host, port = parse_address(address)
    except TrustConfigError as error:
        return ProbeResult(False, None, str(error), 0.0)
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return ProbeResult(False, None, f"TCP connect timed out after {timeout_s:g}s", timeout_s)
    except ConnectionRefusedError:
        return ProbeResult(False, None, "connection refused", time.perf_counter() - started)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        return ProbeResult(False, None, f"cannot connect: {reason}", time.perf_counter() - started)
    latency = time.perf_counter() - started
    writer.close()
    writer.transport.abort()
    return ProbeResult(True, None, None, latency)
