"""This site's egress address read from a Service or a Gateway (``spec.egress.from``): what
each object gives (:func:`grid.engine.egress.resolve`), and the engine announcing it,
reporting it on the GridSite and probing it."""

from __future__ import annotations

from typing import Any

import pytest

from grid.crdt.records import GatewayRecord
from grid.crdt.state import GridState
from grid.engine import SourceRead
from grid.engine.egress import (
    EGRESS_RESOLVED,
    GATEWAY_API_MISSING,
    INVALID_ADDRESS,
    LISTENER_NOT_FOUND,
    NO_ADDRESS,
    NOT_A_LOAD_BALANCER,
    NOT_FOUND,
    PENDING,
    PORT_NOT_FOUND,
    READ_FAILED,
    RESOLVED,
    SERVER_NAME_REQUIRED,
    EgressResolution,
    resolve,
)
from grid.models.conditions import ConditionStatus, find_condition
from grid.models.egress_source import EgressSource
from grid.models.site import Egress, GridSite
from test_engine import SITES, T0, engine, site
from test_engine_rooms_publishing import deliver

SERVICE = {"namespace": "edge", "name": "gateway"}
GATEWAY = {"namespace": "edge", "name": "gateway"}


def egress(source: dict[str, Any], **fields: Any) -> Egress:
    return Egress.model_validate({"from": source, **fields})


def service(
    *ports: dict[str, Any], ingress: list[dict[str, Any]] | None = None, kind: str = "LoadBalancer"
) -> dict[str, Any]:
    """A Service as the API serves it; a cloud controller wrote ``ingress``."""
    return {
        "metadata": {"name": "gateway", "namespace": "edge"},
        "spec": {"type": kind, "ports": list(ports) or [{"name": "tls", "port": 443}]},
        "status": {"loadBalancer": {"ingress": ingress or []}},
    }


def gateway(listeners: list[dict[str, Any]], addresses: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "gateway", "namespace": "edge"},
        "spec": {"gatewayClassName": "cloud", "listeners": listeners},
        "status": {"addresses": addresses},
    }


def resolved(
    spec: Egress,
    found: dict[str, Any] | None,
    previous: EgressResolution | None = None,
    **read: Any,
) -> EgressResolution:
    assert spec.from_ is not None
    return resolve(spec, SourceRead(spec.from_, found, **read), previous)


HOSTNAME = [{"hostname": "gw.example"}]


# --- a Service of type LoadBalancer ------------------------------------------------------


def test_a_load_balancer_hostname_and_the_only_port() -> None:
    found = resolved(egress({"service": SERVICE}), service(ingress=HOSTNAME))
    assert (found.address, found.reason) == ("gw.example:443", RESOLVED)
    assert found.message == "gw.example:443 from Service edge/gateway"


def test_a_load_balancer_ip_needs_a_server_name_unless_plaintext() -> None:
    ip = service(ingress=[{"ip": "203.0.113.7"}])
    refused = resolved(egress({"service": SERVICE}), ip)
    assert (refused.address, refused.reason) == (None, SERVER_NAME_REQUIRED)
    assert "203.0.113.7:443" in refused.message and "serverName" in refused.message
    named = resolved(egress({"service": SERVICE}, serverName="gw.example"), ip)
    assert named.address == "203.0.113.7:443"
    plain = resolved(egress({"service": SERVICE}, tlsMode="plaintext"), ip)
    assert plain.address == "203.0.113.7:443"


def test_an_ipv6_load_balancer_is_bracketed_and_the_first_entry_wins() -> None:
    ingress = [{"ip": "2001:db8::7"}, {"hostname": "second.example"}]
    found = resolved(
        egress({"service": SERVICE}, serverName="gw.example"), service(ingress=ingress)
    )
    assert found.address == "[2001:db8::7]:443"


def test_a_port_by_name_or_number_among_several() -> None:
    ports = ({"name": "https", "port": 443}, {"name": "grid", "port": 8443})
    by_name = egress({"service": {**SERVICE, "portName": "grid"}})
    assert resolved(by_name, service(*ports, ingress=HOSTNAME)).address == "gw.example:8443"
    by_number = egress({"service": {**SERVICE, "port": 8443}})
    assert resolved(by_number, service(*ports, ingress=HOSTNAME)).address == "gw.example:8443"
    either = resolved(egress({"service": SERVICE}), service(*ports, ingress=HOSTNAME))
    assert (either.address, either.reason) == (None, PORT_NOT_FOUND)
    assert either.message == "Service edge/gateway has 2 TCP ports: set port or portName"


@pytest.mark.parametrize(
    ("source", "ports", "message"),
    [
        ({"portName": "grid"}, [{"name": "tls", "port": 443}], "has no TCP port named grid"),
        ({"port": 8443}, [{"name": "tls", "port": 443}], "has no TCP port 8443"),
        # A UDP port is no TLS endpoint: it is not a candidate.
        ({}, [{"name": "dns", "port": 53, "protocol": "UDP"}], "has no TCP port"),
        ({"port": 53}, [{"name": "dns", "port": 53, "protocol": "UDP"}], "has no TCP port 53"),
    ],
)
def test_a_port_the_service_does_not_have(
    source: dict[str, Any], ports: list[dict[str, Any]], message: str
) -> None:
    found = resolved(egress({"service": {**SERVICE, **source}}), service(*ports, ingress=HOSTNAME))
    assert (found.address, found.reason) == (None, PORT_NOT_FOUND)
    assert found.message == f"Service edge/gateway {message}"


def test_a_service_that_is_missing_not_a_load_balancer_or_without_an_address() -> None:
    spec = egress({"service": SERVICE})
    missing = resolved(spec, None)
    assert (missing.reason, missing.message) == (NOT_FOUND, "Service edge/gateway not found")
    cluster_ip = resolved(spec, service(kind="ClusterIP", ingress=HOSTNAME))
    assert (cluster_ip.address, cluster_ip.reason) == (None, NOT_A_LOAD_BALANCER)
    assert "of type ClusterIP" in cluster_ip.message
    waiting = resolved(spec, service())
    assert (waiting.address, waiting.reason) == (None, NO_ADDRESS)
    assert "status.loadBalancer.ingress" in waiting.message
    empty = resolved(spec, service(ingress=[{"ip": ""}, {"ports": [{"port": 443}]}]))
    assert empty.reason == NO_ADDRESS


def test_an_address_that_is_no_host_is_refused() -> None:
    found = resolved(egress({"service": SERVICE}), service(ingress=[{"hostname": "not a host"}]))
    assert (found.address, found.reason) == (None, INVALID_ADDRESS)
    assert "'not a host:443'" in found.message


# --- a Gateway ---------------------------------------------------------------------------


def test_a_gateway_address_and_listener() -> None:
    listeners = [{"name": "https", "port": 443}, {"name": "grid", "port": 8443}]
    addresses = [{"type": "NamedAddress", "value": "internal"}, {"value": "gw.example"}]
    # An address without a type is an IPAddress to the Gateway API; a hostname is read
    # as what it is (the models tell the two apart), and a NamedAddress is skipped.
    spec = egress({"gateway": {**GATEWAY, "listener": "grid"}})
    found = resolved(spec, gateway(listeners, addresses))
    assert (found.address, found.reason) == ("gw.example:8443", RESOLVED)
    assert found.message == "gw.example:8443 from Gateway edge/gateway"
    only = gateway([{"name": "grid", "port": 9443}], [{"type": "Hostname", "value": "gw.example"}])
    assert resolved(egress({"gateway": GATEWAY}), only).address == "gw.example:9443"


def test_a_gateway_listener_that_is_missing_or_ambiguous() -> None:
    listeners = [{"name": "https", "port": 443}, {"name": "grid", "port": 8443}]
    addresses = [{"type": "Hostname", "value": "gw.example"}]
    either = resolved(egress({"gateway": GATEWAY}), gateway(listeners, addresses))
    assert (either.address, either.reason) == (None, LISTENER_NOT_FOUND)
    assert either.message == "Gateway edge/gateway has 2 listeners: set listener"
    named = egress({"gateway": {**GATEWAY, "listener": "mesh"}})
    missing = resolved(named, gateway(listeners, addresses))
    assert missing.message == "Gateway edge/gateway has no listener named mesh"


def test_a_gateway_without_an_address_or_the_gateway_api() -> None:
    spec = egress({"gateway": GATEWAY})
    listeners = [{"name": "grid", "port": 8443}]
    waiting = resolved(spec, gateway(listeners, [{"type": "NamedAddress", "value": "x"}]))
    assert (waiting.address, waiting.reason) == (None, NO_ADDRESS)
    assert resolved(spec, None).reason == NOT_FOUND
    absent = resolved(spec, None, api_served=False)
    assert absent.reason == GATEWAY_API_MISSING
    assert "gateway.networking.k8s.io/v1" in absent.message


# --- failed reads ------------------------------------------------------------------------


def test_a_failed_read_keeps_the_address_read_before_from_the_same_source() -> None:
    spec = egress({"service": SERVICE})
    good = resolved(spec, service(ingress=HOSTNAME))
    failed = resolved(spec, None, good, error="cannot read services edge/gateway: 403 Forbidden")
    assert (failed.address, failed.reason, failed.resolved) == (
        "gw.example:443",
        READ_FAILED,
        False,
    )
    assert failed.message == (
        "cannot read services edge/gateway: 403 Forbidden; the address read before "
        "(gw.example:443) is kept"
    )
    other = egress({"service": {**SERVICE, "name": "other"}})
    assert resolved(other, None, good, error="cannot read").address is None


# --- in the engine -----------------------------------------------------------------------


def reading_from(source: dict[str, Any], **fields: Any) -> list[GridSite]:
    """The sites, site-a's GridSite reading its egress from ``source``."""
    local = site("site-a").model_copy(deep=True)
    local.spec.egress = egress(source, **fields)
    return [local, *SITES[1:]]


def egress_condition(statuses: dict[tuple[str, str], Any]) -> Any:
    return find_condition(statuses[("GridSite", "site-a")].conditions, EGRESS_RESOLVED)


def test_the_engine_reads_announces_and_reports_the_address() -> None:
    e = engine("site-a", [], sites=reading_from({"service": SERVICE}))
    target = e.egress_source_target()
    assert target is not None and target.source == EgressSource.model_validate({"service": SERVICE})
    assert target.interval_s == 10.0
    e.refresh(T0)
    pending = egress_condition(e.statuses())
    assert (pending.status, pending.reason) == (ConditionStatus.FALSE, PENDING)
    assert e.state.gateway("site-a") is None
    e.observe_egress_source("site-a", SourceRead(target.source, service(ingress=HOSTNAME)), T0)
    assert [p.site for p in e.take_due_probes(T0) if p.site == "site-a"] == ["site-a"]
    e.refresh(T0)
    condition = egress_condition(e.statuses())
    assert (condition.status, condition.reason) == (ConditionStatus.TRUE, RESOLVED)
    assert e.statuses()[("GridSite", "site-a")].egress_address == "gw.example:443"
    announced = e.state.gateway("site-a")
    assert announced is not None and announced.address == "gw.example:443"
    # The load balancer moves: the new address is announced under a newer version.
    moved = service(ingress=[{"hostname": "gw2.example"}])
    e.observe_egress_source("site-a", SourceRead(target.source, moved), T0)
    e.refresh(T0)
    announced = e.state.gateway("site-a")
    assert announced is not None and announced.address == "gw2.example:443"


def test_an_object_without_an_address_announces_nothing_new() -> None:
    e = engine("site-a", [], sites=reading_from({"service": SERVICE}))
    target = e.egress_source_target()
    assert target is not None
    e.observe_egress_source("site-a", SourceRead(target.source, service(ingress=HOSTNAME)), T0)
    e.refresh(T0)
    e.observe_egress_source("site-a", SourceRead(target.source, None), T0)
    e.refresh(T0)
    condition = egress_condition(e.statuses())
    assert (condition.status, condition.reason) == (ConditionStatus.FALSE, NOT_FOUND)
    assert e.statuses()[("GridSite", "site-a")].egress_address is None
    # Peers keep the address announced last: the site never announces an empty one.
    announced = e.state.gateway("site-a")
    assert announced is not None and announced.address == "gw.example:443"


def test_a_reading_of_a_source_no_longer_named_is_dropped() -> None:
    e = engine("site-a", [], sites=reading_from({"service": SERVICE}))
    old = EgressSource.model_validate({"service": SERVICE})
    e.set_resources(e.network, reading_from({"gateway": GATEWAY}), [])
    e.observe_egress_source("site-a", SourceRead(old, service(ingress=HOSTNAME)), T0)
    e.refresh(T0)
    assert egress_condition(e.statuses()).reason == PENDING
    e.set_resources(e.network, SITES, [])
    assert e.egress_source_target() is None
    e.refresh(T0)
    assert egress_condition(e.statuses()) is None


def test_another_site_reading_its_egress_from_its_cluster_is_reached_where_it_announces() -> None:
    remote = site("site-b").model_copy(deep=True)
    remote.spec.egress = egress({"service": SERVICE})
    e = engine("site-a", [], sites=[SITES[0], remote, SITES[2]])
    assert e.egress_source_target() is None  # site-b's object is not in this cluster
    published = GridState("site-b")
    published.set_gateway(GatewayRecord("gw-b.example:443", "mutual_tls", None), T0.timestamp())
    deliver(published, e.state, T0)
    e.refresh(T0)
    assert e.statuses()[("GridSite", "site-b")].egress_address == "gw-b.example:443"
