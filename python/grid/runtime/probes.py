"""Probing peer sites' egress: a TLS handshake whose leaf certificate the engine compares
with the pin (mutual TLS with this site's certificate when it has one), or a TCP connect
for ``plaintext`` egress (pinned by the certificate the site advertises).

The prober takes ready TLS contexts, or PEM text (:meth:`SiteProber.from_pem`), so it does
not care whether the material came from files or from Secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from grid.engine import ProbeTarget
from grid.errors import TrustConfigError
from grid.models.site import EgressTlsMode
from grid.trust.probe import build_client_context, parse_address, probe_site
from grid.trust.site import ProbeResult

DEFAULT_TIMEOUT_S = 5.0


class SiteProber:
    """Probes sites with this site's TLS contexts: ``server_only`` for ``tls`` egress,
    ``mutual`` (presenting this site's certificate) for ``mutualTLS``."""

    def __init__(
        self,
        server_only: ssl.SSLContext,
        mutual: ssl.SSLContext | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._server_only = server_only
        self._mutual = server_only if mutual is None else mutual
        self._timeout_s = timeout_s

    @classmethod
    def from_pem(
        cls,
        ca_pem: str | None = None,
        certificate_pem: str | None = None,
        private_key_pem: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> SiteProber:
        """A prober from PEM text: the CA that verifies peers (none: the pin decides) and
        this site's certificate and key (both, or no mutual TLS). The private key ends up
        inside the context only. Raises :class:`~grid.errors.TrustConfigError`."""
        server_only = build_client_context(ca_pem=ca_pem)
        mutual = None
        if certificate_pem and private_key_pem:
            with pem_paths(certificate_pem, private_key_pem) as (cert, key):
                mutual = build_client_context(ca_pem=ca_pem, client_cert=cert, client_key=key)
        return cls(server_only, mutual, timeout_s=timeout_s)

    def __repr__(self) -> str:
        return f"SiteProber(mutual={self._mutual is not self._server_only})"

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


@contextlib.contextmanager
def pem_paths(*pems: str) -> Iterator[tuple[Path, ...]]:
    """Paths that ``ssl`` can load ``pems`` from, gone when the block ends. On Linux they
    are anonymous in-memory files (nothing touches a disk); elsewhere files in a private
    temporary directory."""
    if hasattr(os, "memfd_create"):
        descriptors: list[int] = []
        try:
            for pem in pems:
                descriptor = os.memfd_create("grid-pem", os.MFD_CLOEXEC)
                descriptors.append(descriptor)
                _write_all(descriptor, pem.encode("ascii"))
            yield tuple(Path(f"/proc/self/fd/{descriptor}") for descriptor in descriptors)
        finally:
            for descriptor in descriptors:
                os.close(descriptor)
        return
    with tempfile.TemporaryDirectory(prefix="grid-pem-") as directory:
        paths = []
        for index, pem in enumerate(pems):
            path = Path(directory) / f"{index}.pem"
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _write_all(descriptor, pem.encode("ascii"))
            finally:
                os.close(descriptor)
            paths.append(path)
        yield tuple(paths)


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(descriptor, view)
        view = view[written:]
