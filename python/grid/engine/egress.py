"""This site's egress address read from an object of its cluster (``spec.egress.from``): a
LoadBalancer Service's ``status.loadBalancer.ingress``, or a Gateway's ``status.addresses``,
with the port of a Service port or of a listener.

The shell reads the object (:class:`SourceRead`: what the API served, or why it could not)
and the engine makes it an :class:`EgressResolution` here. An object that is missing, has
no address yet, or names no port peers can use gives no address and a reason
(``EgressResolved=False``): the site never announces an empty or unusable address. A read
that failed keeps the address last read, since the object most likely still holds it.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from grid.models.egress_source import EgressGatewaySource, EgressServiceSource, EgressSource
from grid.models.fields import HostPort, join_host_port
from grid.models.site import Egress, needs_server_name

EGRESS_RESOLVED = "EgressResolved"
"""The GridSite condition saying whether ``spec.egress.from`` gave an address."""

RESOLVED = "Resolved"
PENDING = "Pending"
NOT_FOUND = "NotFound"
NOT_A_LOAD_BALANCER = "NotALoadBalancer"
NO_ADDRESS = "NoAddress"
PORT_NOT_FOUND = "PortNotFound"
LISTENER_NOT_FOUND = "ListenerNotFound"
GATEWAY_API_MISSING = "GatewayApiMissing"
INVALID_ADDRESS = "InvalidAddress"
SERVER_NAME_REQUIRED = "ServerNameRequired"
READ_FAILED = "ReadFailed"

_HOST_PORT: TypeAdapter[str] = TypeAdapter(HostPort)
_GATEWAY_ADDRESS_TYPES = frozenset({"IPAddress", "Hostname"})


@dataclass(frozen=True, slots=True)
class SourceRead:
    """What the shell read of the object ``source`` names: the object as the API served it
    (``None``: there is none), or ``error`` (why it could not be read; the message names the
    call and the object, never a body). ``api_served`` is False where the cluster does not
    serve the object's API at all (a Gateway without the Gateway API installed)."""

    source: EgressSource
    found: Mapping[str, Any] | None = None
    error: str | None = None
    api_served: bool = True
    latency_s: float = 0.0


@dataclass(frozen=True, slots=True)
class EgressResolution:
    """The address ``source`` gave (``None``: none usable), and why, as the
    ``EgressResolved`` condition says it."""

    source: EgressSource
    address: str | None
    reason: str
    message: str

    @property
    def resolved(self) -> bool:
        return self.reason == RESOLVED


def pending(source: EgressSource) -> EgressResolution:
    """Before the first read of ``source``."""
    return EgressResolution(source, None, PENDING, f"{source.described} not read yet")


def resolve(
    egress: Egress, read: SourceRead, previous: EgressResolution | None
) -> EgressResolution:
    """The address ``read`` gives for ``egress`` (whose ``from`` is ``read.source``).
    ``previous`` is the resolution of the read before, kept (with its address) when this
    read failed."""
    source = read.source
    if read.error is not None:
        kept = previous.address if previous is not None and previous.source == source else None
        keeping = f"; the address read before ({kept}) is kept" if kept is not None else ""
        return EgressResolution(source, kept, READ_FAILED, f"{read.error}{keeping}")
    if source.service is not None:
        found = _from_service(source.service, read.found)
    else:
        assert source.gateway is not None
        found = _from_gateway(source.gateway, read.found, read.api_served)
    if isinstance(found, tuple):
        return EgressResolution(source, None, *found)
    try:
        address = _HOST_PORT.validate_python(found)
    except ValidationError:
        return EgressResolution(
            source, None, INVALID_ADDRESS, f"{source.described} gives {found!r}: not a host:port"
        )
    if needs_server_name(egress, address):
        return EgressResolution(
            source,
            None,
            SERVER_NAME_REQUIRED,
            f"{source.described} gives the IP address {address}: TLS needs "
            "spec.egress.serverName, the DNS name the egress certificate carries",
        )
    return EgressResolution(source, address, RESOLVED, f"{address} from {source.described}")


def _from_service(
    source: EgressServiceSource, service: Mapping[str, Any] | None
) -> str | tuple[str, str]:
    """``host:port``, or (reason, message)."""
    if service is None:
        return NOT_FOUND, f"{source} not found"
    spec = _mapping(service.get("spec"))
    kind = spec.get("type") or "ClusterIP"
    if kind != "LoadBalancer":
        return NOT_A_LOAD_BALANCER, (
            f"{source} is of type {kind}: only a LoadBalancer Service has an address the "
            "other sites reach"
        )
    ports = [
        port
        for port in _mappings(spec.get("ports"))
        if (port.get("protocol") or "TCP") == "TCP" and isinstance(port.get("port"), int)
    ]
    port = _pick(
        ports, str(source), "TCP port", "set port or portName", source.port_name, source.port
    )
    if isinstance(port, str):
        return PORT_NOT_FOUND, port
    ingress = _mappings(
        _mapping(_mapping(service.get("status")).get("loadBalancer")).get("ingress")
    )
    for entry in ingress:
        host = entry.get("ip") or entry.get("hostname")
        if isinstance(host, str) and host:
            return join_host_port(host, port["port"])
    return NO_ADDRESS, f"{source} has no load balancer address yet (status.loadBalancer.ingress)"


def _from_gateway(
    source: EgressGatewaySource, gateway: Mapping[str, Any] | None, api_served: bool
) -> str | tuple[str, str]:
    """``host:port``, or (reason, message)."""
    if not api_served:
        return GATEWAY_API_MISSING, (
            f"{source}: this cluster does not serve the Gateway API (gateway.networking.k8s.io/v1)"
        )
    if gateway is None:
        return NOT_FOUND, f"{source} not found"
    listeners = [
        listener
        for listener in _mappings(_mapping(gateway.get("spec")).get("listeners"))
        if isinstance(listener.get("port"), int)
    ]
    listener = _pick(listeners, str(source), "listener", "set listener", source.listener)
    if isinstance(listener, str):
        return LISTENER_NOT_FOUND, listener
    for entry in _mappings(_mapping(gateway.get("status")).get("addresses")):
        value = entry.get("value")
        kind = entry.get("type", "IPAddress")
        if kind in _GATEWAY_ADDRESS_TYPES and isinstance(value, str) and value:
            return join_host_port(value, listener["port"])
    return NO_ADDRESS, f"{source} has no address yet (status.addresses)"


def _pick(  # noqa: PLR0917 - a port is picked by name, by number, or as the only one
    entries: Sequence[Mapping[str, Any]],
    owner: str,
    what: str,
    hint: str,
    name: str | None,
    number: int | None = None,
) -> Mapping[str, Any] | str:
    """The entry named ``name`` (``name``) or numbered ``number`` (``port``), else the only
    one; or the message saying why there is none."""
    if name is not None:
        chosen = [entry for entry in entries if entry.get("name") == name]
        missing = f"{owner} has no {what} named {name}"
    elif number is not None:
        chosen = [entry for entry in entries if entry.get("port") == number]
        missing = f"{owner} has no {what} {number}"
    elif len(entries) > 1:
        return f"{owner} has {len(entries)} {what}s: {hint}"
    else:
        chosen, missing = list(entries), f"{owner} has no {what}"
    return chosen[0] if chosen else missing


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _mappings(value: object) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [entry for entry in value if isinstance(entry, Mapping)]
