"""Probing sites' egress with the material from the network's Secrets: a TLS handshake whose
leaf certificate the engine compares with the pin (mutual TLS with this site's certificate
when the network has one), or a TCP connect for ``plaintext`` egress."""

from __future__ import annotations

import ssl

from grid.agent.probes import tcp_probe
from grid.engine import ProbeTarget
from grid.models.site import EgressTlsMode
from grid.operator.secrets import TrustMaterial, pem_paths
from grid.trust.probe import build_client_context, probe_site
from grid.trust.site import ProbeResult

DEFAULT_TIMEOUT_S = 5.0


class SiteProber:
    """Probes sites; the TLS contexts are built once from ``material`` (the private key
    stays inside the context, it is not kept anywhere else)."""

    def __init__(self, material: TrustMaterial | None, *, timeout_s: float = DEFAULT_TIMEOUT_S):
        ca_pem = material.ca_pem if material is not None else None
        self._server_only = build_client_context(ca_pem=ca_pem)
        self._mutual: ssl.SSLContext = self._server_only
        if material is not None and material.certificate_pem and material.private_key_pem:
            with pem_paths(material.certificate_pem, material.private_key_pem) as (cert, key):
                self._mutual = build_client_context(ca_pem=ca_pem, client_cert=cert, client_key=key)
        self._timeout_s = timeout_s

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
