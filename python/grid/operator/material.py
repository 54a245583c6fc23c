"""One network's trust material in the operator: its Secrets (SWIM keys, CA, site
certificate), read again when the spec changes or the refresh interval passes and taken
only whole, and the site certificate the engine advertises from it."""

from __future__ import annotations

import logging
from datetime import datetime

from grid.engine import SiteEngine
from grid.errors import CertificateRejected, SecretMaterialError, TrustConfigError
from grid.models.network import GridNetwork
from grid.operator.cache import Entry
from grid.operator.secrets import TrustMaterial, load_trust_material
from grid.operator.shared import Shared
from grid.runtime.notices import Notices
from grid.runtime.observers import Observers
from grid.runtime.probes import SiteProber
from grid.runtime.swim import SwimDriver
from grid.trust.chain import NetworkCa


class NetworkMaterial:
    """The material in use, what went wrong reading or advertising it, and when it was
    read."""

    def __init__(self, shared: Shared, notices: Notices) -> None:
        self._shared = shared
        self._notices = notices
        self.material: TrustMaterial | None = None
        self.network_ca = NetworkCa()
        """The CA of the material in use, for the engine to tell which certificates it
        vouches for."""
        self.error: str | None = None
        """Why the latest read was not taken (the material in use is kept)."""
        self.certificate_error: str | None = None
        """Why the site certificate is not advertised."""
        self._read_at: float | None = None
        self._generation: int | None = None
        self._advertised_pem: str | None = None

    async def refresh(
        self,
        network: GridNetwork,
        entry: Entry,
        now: datetime,
        moment: float,
        observers: Observers,
    ) -> None:
        """Read the network's Secrets again when the spec changed or the refresh interval
        passed; take the material only if all of it is usable (``observers`` then probe
        with it)."""
        due = (
            self._read_at is None
            or moment - self._read_at >= self._shared.options.secret_refresh_s
            or entry.generation != self._generation
        )
        if not due:
            return
        self._read_at, self._generation = moment, entry.generation
        metrics = self._shared.metrics
        try:
            material = await load_trust_material(self._shared.kube, network.spec.tls, now)
            prober = _prober(material) if material != self.material else None
        except (SecretMaterialError, TrustConfigError) as error:
            self.error = str(error)
            metrics.secret_reads.labels("trust", "invalid").inc()
            kept = "; the material in use is kept" if self.material is not None else ""
            self._notices.say("material", f"{error}{kept}", logging.WARNING)
            return
        metrics.secret_reads.labels("trust", "ok").inc()
        self.error = None
        if prober is None:
            return
        self.material, observers.prober = material, prober
        self.network_ca = NetworkCa(material.credentials.trust_anchors)
        self._notices.say(
            "material",
            f"trust material loaded: {len(material.keyring.keys)} SWIM key(s), CA "
            f"{'set' if material.ca_pem else 'not set'}, site certificate "
            f"{material.certificate_fingerprint or 'not set'}",
        )

    def advertise(self, engine: SiteEngine, mesh: SwimDriver, now: datetime) -> None:
        """Give the engine the network's CA and the site certificate to advertise."""
        # Set on every pass (an assignment): a new engine (this cluster is another site now)
        # and new material (a rotated CA) both have it at once.
        engine.set_network_ca(self.network_ca)
        material = self.material
        if material is not None and not mesh.signs_with(material.credentials):
            return  # the node kept its certificate (ConfigValid says why): so does the lane
        pem = material.certificate_pem if material is not None else None
        if pem == self._advertised_pem and self.certificate_error is None:
            return
        try:
            engine.set_certificate(pem, now)
        except (CertificateRejected, TrustConfigError) as error:
            self.certificate_error = f"the site certificate is not advertised: {error}"
            return
        self._advertised_pem, self.certificate_error = pem, None


def _prober(material: TrustMaterial) -> SiteProber:
    """A prober with the network's CA and site certificate (the private key stays inside
    its TLS context, it is not kept anywhere else)."""
    return SiteProber.from_pem(material.ca_pem, material.certificate_pem, material.private_key_pem)
