"""The operator's settings: what the Deployment gives it through the environment, what
``grid operator`` takes on its command line, and what tests set directly."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from grid.errors import OperatorConfigError
from grid.models.fields import join_host_port
from grid.models.network import DEFAULT_SWIM_PORT
from grid.oauth.rotation import OPERATOR_SETTLE, Settle

DEFAULT_NAMESPACE = "grid-system"
DEFAULT_METRICS_PORT = 9090
DEFAULT_HEALTH_PORT = 8080
# A pod serves on all its addresses: the kubelet probes and Prometheus scrapes its IP.
WILDCARD_V4 = "0.0.0.0"  # noqa: S104
WILDCARD_V6 = "::"
LOOPBACK = "127.0.0.1"
MAX_TOKEN_SETTLE_S = 3600
DEFAULT_SECRET_REFRESH_S = 30.0
DEFAULT_PROBE_INTERVAL_S = 10.0
MAX_INTERVAL_S = 3600


@dataclass(frozen=True, slots=True)
class OperatorOptions:
    """Everything the operator needs besides the Kubernetes API."""

    namespace: str = DEFAULT_NAMESPACE
    """The operator's own namespace: Events about Grid's (cluster-scoped) resources go
    there."""
    pod_name: str | None = None
    site: str | None = None
    """This cluster's GridSite name; found from the resources when unset."""
    swim_bind_host: str = WILDCARD_V4
    swim_advertise_host: str | None = None
    """The address peers reach this pod at (its IP); each network adds its port."""
    swim_port: int = DEFAULT_SWIM_PORT
    """The SWIM port of networks whose spec.swim.port is not set."""
    metrics_address: str | None = f"{WILDCARD_V4}:{DEFAULT_METRICS_PORT}"
    """``host:port`` of ``/metrics`` (port 0 picks one; None: not served)."""
    health_address: str | None = f"{WILDCARD_V4}:{DEFAULT_HEALTH_PORT}"
    """``host:port`` of ``/healthz`` (port 0 picks one; None: not served)."""
    tick_s: float = 1.0
    """How often each network is refreshed when nothing wakes it sooner."""
    status_interval_s: float = 10.0
    """A status whose only change is a probe or check time is written at most this often."""
    secret_refresh_s: float = DEFAULT_SECRET_REFRESH_S
    """How often the Secrets a network or provider names are read again (key rotation,
    certificate renewal, a credential created late; ``GRID_SECRET_REFRESH_SECONDS``)."""
    probe_interval_s: float = DEFAULT_PROBE_INTERVAL_S
    """How often each site's egress is probed, and this site's ``spec.egress.from`` object
    read (``GRID_PROBE_INTERVAL_SECONDS``)."""
    push_pull_factor: float = 6.0
    """Full-state SWIM syncs every this many probe intervals."""
    join_grace_s: float = 5.0
    """How long a new SWIM node may wait for a seed's answer before the status says none
    came."""
    api_probe_interval_s: float = 10.0
    """How often the API server is asked for its version when no other call was answered
    in that time (what ``/healthz`` knows of it)."""
    api_unreachable_s: float = 60.0
    """How long the API server may not answer before ``/healthz`` says unhealthy."""
    token_settle: Settle = OPERATOR_SETTLE
    """How long a minted token's new Secret key is given to reach the gateway's volume
    before the gateway configuration lists it, and that configuration to reach the gateway
    before the overlay names the key (:mod:`grid.oauth.rotation`;
    ``GRID_TOKEN_SETTLE_SECONDS`` sets both)."""

    def __post_init__(self) -> None:
        for name in (
            "tick_s",
            "status_interval_s",
            "secret_refresh_s",
            "probe_interval_s",
            "join_grace_s",
            "api_probe_interval_s",
            "api_unreachable_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0:
                raise OperatorConfigError(f"{name} must be a positive number of seconds")
        if self.push_pull_factor < 1:
            raise OperatorConfigError("push_pull_factor must be at least 1")
        if not 1 <= self.swim_port <= 65535:
            raise OperatorConfigError("the SWIM port must be from 1 to 65535")

    def swim_bind(self, port: int) -> str:
        return join_host_port(self.swim_bind_host, port)

    def swim_advertise(self, port: int) -> str | None:
        if self.swim_advertise_host is None:
            return None
        return join_host_port(self.swim_advertise_host, port)

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str],
        *,
        namespace: str | None = None,
        site: str | None = None,
    ) -> OperatorOptions:
        """Settings from the Deployment's environment (``GRID_SWIM_ADVERTISE_ADDRESS``,
        ``GRID_SWIM_PORT``, ``GRID_METRICS_PORT``, ``GRID_HEALTH_PORT``,
        ``POD_NAMESPACE``, ``POD_NAME``, optionally ``GRID_SITE_NAME``,
        ``GRID_TOKEN_SETTLE_SECONDS``, ``GRID_SECRET_REFRESH_SECONDS`` and
        ``GRID_PROBE_INTERVAL_SECONDS``); ``namespace`` and ``site`` (from the command line)
        win over the environment."""
        advertise = environ.get("GRID_SWIM_ADVERTISE_ADDRESS") or None
        if advertise is not None:
            advertise = _host(advertise, "GRID_SWIM_ADVERTISE_ADDRESS")
        # Without an address to advertise, only a loopback node is reachable as bound.
        wildcard = WILDCARD_V6 if advertise is not None and ":" in advertise else WILDCARD_V4
        bind = wildcard if advertise is not None else LOOPBACK
        return cls(
            namespace=namespace or environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE,
            pod_name=environ.get("POD_NAME") or None,
            site=site or environ.get("GRID_SITE_NAME") or None,
            swim_bind_host=bind,
            swim_advertise_host=advertise,
            swim_port=_port(environ, "GRID_SWIM_PORT", DEFAULT_SWIM_PORT),
            metrics_address=join_host_port(
                wildcard, _port(environ, "GRID_METRICS_PORT", DEFAULT_METRICS_PORT)
            ),
            health_address=join_host_port(
                wildcard, _port(environ, "GRID_HEALTH_PORT", DEFAULT_HEALTH_PORT)
            ),
            token_settle=_settle(environ, "GRID_TOKEN_SETTLE_SECONDS"),
            secret_refresh_s=_interval(
                environ, "GRID_SECRET_REFRESH_SECONDS", DEFAULT_SECRET_REFRESH_S
            ),
            probe_interval_s=_interval(
                environ, "GRID_PROBE_INTERVAL_SECONDS", DEFAULT_PROBE_INTERVAL_S
            ),
        )


def _settle(environ: Mapping[str, str], name: str) -> Settle:
    """Each of a token rotation's two waits, in whole seconds (1 to 3600)."""
    text = environ.get(name)
    if not text:
        return OPERATOR_SETTLE
    if not text.isdigit() or not 1 <= int(text) <= MAX_TOKEN_SETTLE_S:
        raise OperatorConfigError(
            f"{name} must be a whole number of seconds from 1 to {MAX_TOKEN_SETTLE_S}"
        )
    step = timedelta(seconds=int(text))
    return Settle(step, step)


def _interval(environ: Mapping[str, str], name: str, default: float) -> float:
    """A period in seconds, fractions allowed (above 0, at most an hour)."""
    text = environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_INTERVAL_S:  # NaN and infinity fail too
        raise OperatorConfigError(
            f"{name} must be a number of seconds above 0 and at most {MAX_INTERVAL_S}"
        )
    return value


def _port(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name)
    if not text:
        return default
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise OperatorConfigError(f"{name} must be a port number from 1 to 65535")
    return int(text)


def _host(text: str, name: str) -> str:
    """An IP address (the pod IP the Deployment passes), or a DNS name."""
    value = text.strip().removeprefix("[").removesuffix("]")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if not value or any(char in value for char in " /:[]"):
        raise OperatorConfigError(f"{name} must be an IP address or a host name (no port)")
    return value
