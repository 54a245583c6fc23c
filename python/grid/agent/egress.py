"""A TLS listener presenting this site's certificate: what peers probe to trust the site
when no egress gateway answers at its address yet (and what ``grid demo`` runs per site).

With a CA it asks for client certificates signed by that CA and refuses clients without
one (mutual TLS). A session carries no traffic: it stays open until the client leaves or
an idle limit passes."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

from grid.errors import TrustConfigError
from grid.models.fields import join_host_port
from grid.trust.probe import parse_address

_IDLE_LIMIT_S = 10.0
_HANDSHAKE_TIMEOUT_S = 5.0


def server_context(
    certificate: Path, private_key: Path, client_ca: Path | None = None
) -> ssl.SSLContext:
    """A TLS 1.2+ server context presenting ``certificate``; with ``client_ca``, clients
    must present a certificate signed by it. Raises
    :class:`~grid.errors.TrustConfigError` for unusable files (never quoting them)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certificate, private_key)
        if client_ca is not None:
            context.load_verify_locations(client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError):
        raise TrustConfigError(
            f"the site certificate {certificate}, its key {private_key} or the CA "
            f"{client_ca} is unreadable, not PEM, or the certificate and key do not match"
        ) from None
    return context


class EgressListener:
    """A TLS endpoint on ``address`` (``host:port``; port 0 picks one)."""

    def __init__(self, address: str, context: ssl.SSLContext) -> None:
        host, _, port = address.rpartition(":")
        # Port 0 (any free port) is fine for a listener, so only the host is checked here.
        self._host, _ = parse_address(f"{host}:1")
        if not port.isdigit() or int(port) > 65535:
            raise TrustConfigError("the egress listen address has no port between 0 and 65535")
        self._port = int(port)
        self._context = context
        self._server: asyncio.Server | None = None
        self._sessions: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    @property
    def address(self) -> str:
        """The bound ``host:port``."""
        if self._server is None:
            raise RuntimeError("the egress listener is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return join_host_port(host, port)

    def reload(self, certificate: Path, private_key: Path) -> None:
        """Present a new certificate from the next handshake on (a rotation). Raises
        :class:`~grid.errors.TrustConfigError` and keeps the old one if the files are
        unusable."""
        try:
            self._context.load_cert_chain(certificate, private_key)
        except (OSError, ssl.SSLError):
            raise TrustConfigError(
                f"the site certificate {certificate} or its key {private_key} is unreadable, "
                "not PEM, or the two do not match"
            ) from None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve,
            self._host,
            self._port,
            ssl=self._context,
            ssl_handshake_timeout=_HANDSHAKE_TIMEOUT_S,
        )

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        # Closing each session ends its read; cancelling the handlers instead would make
        # asyncio log their cancellation as an error.
        for writer in self._sessions.values():
            writer.transport.abort()
        await asyncio.gather(*self._sessions, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._sessions[task] = writer
        try:
            with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
                async with asyncio.timeout(_IDLE_LIMIT_S):
                    await reader.read()
        finally:
            if task is not None:
                self._sessions.pop(task, None)
            writer.close()
