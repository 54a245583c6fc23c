"""The TLS probe of a site's egress address.

The pinned fingerprint is the trust anchor: a site may present a self-signed certificate.
So chain verification is optional. With a CA configured the probe verifies the chain and the
host name as usual; without one it accepts any chain (``CERT_NONE``) and reads the leaf
certificate for the caller to compare with the pin. That is safe because the handshake
itself proves possession of the private key: the peer must sign the handshake with the key of
the certificate it presents, so presenting someone else's pinned certificate without its key
fails the handshake, and a certificate of one's own fails the pin.

Every failure (bad address, unreadable files, refused connection, timeout, a peer that does
not speak TLS, a rejected certificate) comes back as a :class:`ProbeResult` with a clear
``error``; no exception escapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
import time
from pathlib import Path

from grid.errors import TrustConfigError
from grid.trust.site import ProbeResult

DEFAULT_PROBE_TIMEOUT_S = 5.0
# TLS 1.3 completes the client's side of the handshake before the server has checked the
# client certificate; a server that rejects it says so in an alert right after. Waiting this
# long for such an alert tells "accepted" from "refused".
DEFAULT_SETTLE_S = 0.2
_CLOSE_TIMEOUT_S = 0.1


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6) or raise
    :class:`~grid.errors.TrustConfigError`."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        has_port = rest.startswith(":")
        port_text = rest[1:]
    else:
        host, colon, port_text = address.rpartition(":")
        has_port = bool(colon) and ":" not in host
    if not host or not has_port:
        raise TrustConfigError(f"the address is not host:port ({len(address)} characters)")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise TrustConfigError("the address has no port between 1 and 65535")
    return host, int(port_text)


def build_client_context(
    *,
    ca_pem: str | None = None,
    client_cert: Path | None = None,
    client_key: Path | None = None,
) -> ssl.SSLContext:
    """A client TLS context (TLS 1.2 or newer) for probing sites.

    With ``ca_pem`` the server's chain and host name are verified against that CA; without,
    any chain is accepted and the pin decides (see the module docstring). ``client_cert`` and
    ``client_key`` (PEM files) enable mutual TLS. Raises
    :class:`~grid.errors.TrustConfigError` for unusable material.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_pem is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        try:
            context.load_verify_locations(cadata=ca_pem)
        except (ssl.SSLError, ValueError):
            raise TrustConfigError("the CA certificate PEM is not usable") from None
    if (client_cert is None) != (client_key is None):
        raise TrustConfigError("mutual TLS needs both a client certificate and its key")
    if client_cert is not None and client_key is not None:
        try:
            context.load_cert_chain(client_cert, client_key)
        except FileNotFoundError as exc:
            raise TrustConfigError(f"client TLS file not found: {exc.filename}") from None
        except (ssl.SSLError, OSError):
            raise TrustConfigError(
                f"client certificate {client_cert} or key {client_key} is unreadable, "
                "not PEM, or the two do not belong together"
            ) from None
    return context


async def probe_site(
    address: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    ca_pem: str | None = None,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    server_hostname: str | None = None,
    timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    settle_s: float = DEFAULT_SETTLE_S,
) -> ProbeResult:
    """Connect to ``address`` (``host:port``), complete a TLS handshake and report the
    SHA-256 of the leaf certificate presented.

    Pass either a ready ``ssl_context`` or the material for :func:`build_client_context`.
    ``server_hostname`` (default: the address's host) is sent as SNI and, with a CA,
    checked against the certificate. ``timeout`` bounds connect plus handshake; afterwards
    the probe waits up to ``settle_s`` for the peer to refuse the session.
    """
    try:
        host, port = parse_address(address)
        if ssl_context is not None and (ca_pem or client_cert or client_key):
            raise TrustConfigError("give either an ssl_context or CA/client files, not both")
        context = ssl_context or build_client_context(
            ca_pem=ca_pem, client_cert=client_cert, client_key=client_key
        )
    except TrustConfigError as exc:
        return ProbeResult(reachable=False, fingerprint=None, error=str(exc), latency_s=0.0)

    started = time.perf_counter()
    writer: asyncio.StreamWriter | None = None
    connected = established = False
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            connected = True
            await writer.start_tls(context, server_hostname=server_hostname or host)
            established = True
        latency = time.perf_counter() - started
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return ProbeResult(True, None, "the peer presented no certificate", latency)
        refusal = await _refusal_after_handshake(reader, settle_s)
        return ProbeResult(True, hashlib.sha256(der).hexdigest(), refusal, latency)
    except TimeoutError:
        stage = "TLS handshake" if connected else "TCP connect"
        error = f"{stage} timed out after {timeout:g}s"
        if connected:
            error += " (the peer may not speak TLS)"
    except ssl.SSLCertVerificationError as exc:
        error = f"certificate verification failed: {exc.verify_message}"
    except ssl.SSLError as exc:
        error = f"TLS handshake failed: {_ssl_reason(exc)}"
    except ConnectionRefusedError:
        error = "connection refused"
    except OSError as exc:
        stage = "during the TLS handshake" if connected else "while connecting"
        error = f"connection failed {stage}: {exc.strerror or type(exc).__name__}"
    finally:
        if writer is not None:
            await _close(writer, graceful=established)
    return ProbeResult(connected, None, error, time.perf_counter() - started)


async def _refusal_after_handshake(reader: asyncio.StreamReader, settle_s: float) -> str | None:
    if settle_s <= 0:
        return None
    try:
        data = await asyncio.wait_for(reader.read(1), settle_s)
    except TimeoutError:
        return None
    except ssl.SSLError as exc:
        return f"the peer refused the TLS session: {_ssl_reason(exc)}"
    except OSError as exc:
        cause = exc.strerror or type(exc).__name__
        return f"the peer dropped the connection after the handshake: {cause}"
    if data:
        return None
    return (
        "the peer closed the connection right after the TLS handshake "
        "(it may have refused our client certificate)"
    )


def _ssl_reason(exc: ssl.SSLError) -> str:
    reason = exc.reason or type(exc).__name__
    return reason.lower().replace("_", " ")


async def _close(writer: asyncio.StreamWriter, *, graceful: bool) -> None:
    # An established session is closed politely (close_notify), but a peer that never
    # answers must not hold the probe; a failed handshake has nothing to say goodbye to.
    # Aborting an already closed transport does nothing.
    if graceful:
        writer.close()
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), _CLOSE_TIMEOUT_S)
    writer.transport.abort()
