"""GridSite: one participating cluster, created by hand or discovered through SWIM, and
trusted only once its certificate matches a pinned SHA-256 fingerprint."""

from __future__ import annotations

import hmac
from enum import StrEnum
from typing import Literal, Self

from pydantic import AwareDatetime, ConfigDict, Field, model_validator

from grid.models.common import GridModel
from grid.models.conditions import Conditions
from grid.models.egress_source import EgressSource
from grid.models.fields import (
    HEX64_PATTERN,
    DnsSubdomain,
    Fingerprint,
    HostPort,
    Topology,
    is_ip_address,
    normalize_fingerprint,
    split_host_port,
)
from grid.models.meta import API_VERSION, ObjectMeta
from grid.models.validation_rules import Reason, ValidationRule, present, validations

AUTO_DISCOVER_LABEL = "grid.praxis-proxy.io/auto-discover"
"""Label (value ``"true"``) marking a GridSite that follows SWIM: it is Discovered only once
its peer is seen alive. The operator sets it on the sites it creates from membership."""


class EgressTlsMode(StrEnum):
    """How peers connect to a site's egress endpoint."""

    MUTUAL_TLS = "mutual_tls"
    """TLS with client certificates on both sides (the default, and the only mode a
    production mesh should use)."""
    TLS = "tls"
    """Server-authenticated TLS only."""
    PLAINTEXT = "plaintext"
    """No TLS: for a lab on one host. The site is still pinned by the certificate it
    announces through SWIM, but its traffic is readable on the wire."""


# The host of an address the pattern accepts: bracketed (IPv6), or before the port's colon.
_IP_HOST = "self.address.startsWith('[') || isIP(self.address.split(':')[0])"
EGRESS_IP_NEEDS_SERVER_NAME = ValidationRule(
    f"self.tlsMode == 'plaintext' || ({present('serverName')}) || !({present('address')}) || "
    f"!({_IP_HOST})",
    "address is an IP address: TLS needs serverName, the DNS name the egress certificate "
    "carries (gateways send only DNS names as SNI)",
    field_path=".serverName",
    reason=Reason.REQUIRED,
)
ADDRESS_OR_FROM = ValidationRule(
    f"({present('address')}) != ({present('from')})",
    "egress needs exactly one of address, or from (to read the address from a Service or a "
    "Gateway)",
)


class Egress(GridModel):
    """Where other sites send this site's traffic: an address typed here, or read from a
    Service or a Gateway of the site's cluster (``from``)."""

    model_config = ConfigDict(
        json_schema_extra=validations(ADDRESS_OR_FROM, EGRESS_IP_NEEDS_SERVER_NAME)
    )

    address: HostPort | None = Field(None, description="host:port of the site's egress gateway.")
    from_: EgressSource | None = Field(
        None,
        alias="from",
        description="Read the address from a LoadBalancer Service or a Gateway of this "
        "site's cluster instead (resolved by this site's operator into status.egressAddress "
        "and announced to the other sites).",
    )
    tls_mode: EgressTlsMode = EgressTlsMode.MUTUAL_TLS
    server_name: DnsSubdomain | None = Field(
        None,
        description="TLS server name (SNI) and Host; default the host of address. Required "
        "when the address is an IP address and tlsMode is not plaintext (for an address "
        "read through from, a missing one is reported on the EgressResolved condition).",
    )

    @model_validator(mode="after")
    def _address_and_server_name(self) -> Self:
        if (self.address is None) == (self.from_ is None):
            raise ValueError(ADDRESS_OR_FROM.message)
        if self.address is None or not needs_server_name(self, self.address):
            return self
        raise ValueError(EGRESS_IP_NEEDS_SERVER_NAME.message)


def needs_server_name(egress: Egress, address: str) -> bool:
    """Whether ``address`` (typed, or read through ``from``) cannot serve as ``egress``'s
    endpoint for want of a serverName: an IP address, with TLS, and no serverName set."""
    if egress.tls_mode is EgressTlsMode.PLAINTEXT or egress.server_name is not None:
        return False
    host, _ = split_host_port(address)
    return is_ip_address(host)


class TrustPin(StrEnum):
    """Which configured fingerprint a certificate matched."""

    CURRENT = "current"
    PREVIOUS = "previous"


PREVIOUS_PIN_NEEDS_CURRENT = ValidationRule(
    f"!({present('previousCertFingerprint')}) || ({present('certFingerprint')})",
    "previousCertFingerprint needs certFingerprint to be set too",
    field_path=".certFingerprint",
    reason=Reason.REQUIRED,
)
# Both forms of a fingerprint (plain hex in any case, colon-separated pairs) compared as one.
_PIN = "self.{}.replace(':', '').lowerAscii()"
PREVIOUS_PIN_DIFFERS = ValidationRule(
    f"!({present('previousCertFingerprint')} && {present('certFingerprint')}) || "
    f"{_PIN.format('previousCertFingerprint')} != {_PIN.format('certFingerprint')}",
    "previousCertFingerprint equals certFingerprint; remove it or set the old certificate's "
    "fingerprint",
    field_path=".previousCertFingerprint",
)


class SiteTrust(GridModel):
    """Pinned SHA-256 fingerprints of the site's certificate. During a rotation both the new
    (``certFingerprint``) and the old (``previousCertFingerprint``) are accepted."""

    model_config = ConfigDict(
        json_schema_extra=validations(PREVIOUS_PIN_NEEDS_CURRENT, PREVIOUS_PIN_DIFFERS)
    )

    cert_fingerprint: Fingerprint | None = Field(
        None, description="SHA-256 of the site certificate (hex, or AB:CD:.. pairs)."
    )
    previous_cert_fingerprint: Fingerprint | None = Field(
        None, description="Second pin, accepted during a certificate rotation."
    )

    @model_validator(mode="after")
    def _previous_needs_current(self) -> Self:
        if self.previous_cert_fingerprint is not None:
            if self.cert_fingerprint is None:
                raise ValueError(PREVIOUS_PIN_NEEDS_CURRENT.message)
            if self.previous_cert_fingerprint == self.cert_fingerprint:
                raise ValueError(PREVIOUS_PIN_DIFFERS.message)
        return self

    @property
    def pins(self) -> tuple[str, ...]:
        """The fingerprints set: the current one first, then the one of a rotation."""
        return tuple(
            fingerprint
            for fingerprint in (self.cert_fingerprint, self.previous_cert_fingerprint)
            if fingerprint is not None
        )

    def match(self, observed: str | None) -> TrustPin | None:
        """Which pin ``observed`` (a fingerprint in either accepted form) matches, if any."""
        if observed is None:
            return None
        try:
            normalized = normalize_fingerprint(observed)
        except ValueError:
            return None
        for pin, expected in (
            (TrustPin.CURRENT, self.cert_fingerprint),
            (TrustPin.PREVIOUS, self.previous_cert_fingerprint),
        ):
            if expected is not None and hmac.compare_digest(expected, normalized):
                return pin
        return None


class GridSiteSpec(GridModel):
    """Desired state of a GridSite."""

    grid_network_ref: DnsSubdomain = Field(description="Name of the parent GridNetwork.")
    egress: Egress | None = Field(
        None, description="Egress endpoint; learned through SWIM when left out."
    )
    region: Topology | None = None
    zone: Topology | None = None
    sovereignty_zone: Topology | None = Field(
        None, description="Jurisdiction the site's data stays in."
    )
    trust: SiteTrust = Field(default_factory=SiteTrust)


class GridSitePhase(StrEnum):
    PENDING = "Pending"
    DISCOVERED = "Discovered"
    CONNECTING = "Connecting"
    ACTIVE = "Active"
    UNREACHABLE = "Unreachable"
    LEFT = "Left"


class ProbeStatus(GridModel):
    """The last TCP/TLS probe of the site's egress endpoint."""

    at: AwareDatetime
    reachable: bool
    latency_ms: float | None = Field(None, ge=0)
    message: str = Field("", max_length=4096)


class GridSiteStatus(GridModel):
    """Observed state of a GridSite, written by Grid."""

    phase: GridSitePhase = GridSitePhase.PENDING
    phase_transition_time: AwareDatetime | None = None
    observed_generation: int | None = Field(None, ge=0)
    conditions: Conditions = Field(default_factory=list)
    last_probe: ProbeStatus | None = None
    observed_fingerprint: str | None = Field(
        None, pattern=HEX64_PATTERN, description="SHA-256 of the certificate last presented."
    )
    matched_pin: TrustPin | None = None
    egress_address: HostPort | None = Field(
        None,
        description="Egress address in use (from spec, read through spec.egress.from, or "
        "learned through SWIM).",
    )
    last_seen_alive: AwareDatetime | None = None
    certificate_not_after: AwareDatetime | None = Field(
        None,
        description="When the site's certificate expires (its notAfter): the one this site "
        "holds for its own GridSite, the one the site advertises for the others.",
    )


class GridSite(GridModel):
    """A participating cluster, created by hand or discovered through SWIM. It becomes
    Active only after its certificate matches a pinned SHA-256 fingerprint."""

    api_version: Literal["grid.praxis-proxy.io/v1alpha1"] = API_VERSION
    kind: Literal["GridSite"] = "GridSite"
    metadata: ObjectMeta
    spec: GridSiteSpec
    status: GridSiteStatus | None = None

    @property
    def auto_discover(self) -> bool:
        """Whether the site carries the auto-discover label."""
        return self.metadata.labels.get(AUTO_DISCOVER_LABEL) == "true"
