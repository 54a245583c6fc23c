"""Where a site's egress address is read from, when it is not typed into the GridSite:
``spec.egress.from`` names a Service of type LoadBalancer or a Gateway API Gateway of the
site's own cluster, and the operator of that site reads the address the cloud gave it.

A cloud load balancer's address changes (a re-created Service, a new IP); read from the
object, the new one reaches every site's overlay without anyone editing a cluster."""

from __future__ import annotations

from typing import Self

from pydantic import ConfigDict, Field, model_validator

from grid.models.common import GridModel
from grid.models.fields import DnsLabel, DnsSubdomain
from grid.models.validation_rules import Reason, ValidationRule, present, validations

SERVICE_PORT_OR_NAME = ValidationRule(
    f"!({present('port')} && {present('portName')})",
    "set port or portName, not both",
    field_path=".portName",
    reason=Reason.FORBIDDEN,
)
SERVICE_OR_GATEWAY = ValidationRule(
    f"({present('service')}) != ({present('gateway')})",
    "egress.from names either a service or a gateway, not both",
)


class EgressServiceSource(GridModel):
    """A Service of type LoadBalancer: its address is the first entry of
    ``status.loadBalancer.ingress`` (an IP or a hostname), its port one of the Service's."""

    model_config = ConfigDict(json_schema_extra=validations(SERVICE_PORT_OR_NAME))

    namespace: DnsLabel = Field(description="Namespace of the Service.")
    name: DnsLabel = Field(description="Name of the Service.")
    port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="The Service port (spec.ports[].port) peers connect to; default the "
        "Service's only TCP port.",
    )
    port_name: DnsLabel | None = Field(
        None, description="The Service port by name (spec.ports[].name), instead of port."
    )

    @model_validator(mode="after")
    def _one_port(self) -> Self:
        if self.port is not None and self.port_name is not None:
            raise ValueError(SERVICE_PORT_OR_NAME.message)
        return self

    def __str__(self) -> str:
        return f"Service {self.namespace}/{self.name}"


class EgressGatewaySource(GridModel):
    """A Gateway API Gateway (``gateway.networking.k8s.io/v1``): its address is the first
    entry of ``status.addresses`` of type IPAddress or Hostname, its port a listener's."""

    namespace: DnsLabel = Field(description="Namespace of the Gateway.")
    name: DnsSubdomain = Field(description="Name of the Gateway.")
    listener: DnsSubdomain | None = Field(
        None,
        description="The listener (spec.listeners[].name) whose port peers connect to; "
        "default the Gateway's only listener.",
    )

    def __str__(self) -> str:
        return f"Gateway {self.namespace}/{self.name}"


class EgressSource(GridModel):
    """The object of this site's cluster that holds the egress address: read by the
    operator of the site the GridSite describes; other sites learn it through SWIM."""

    model_config = ConfigDict(json_schema_extra=validations(SERVICE_OR_GATEWAY))

    service: EgressServiceSource | None = None
    gateway: EgressGatewaySource | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.service is None) == (self.gateway is None):
            raise ValueError(SERVICE_OR_GATEWAY.message)
        return self

    @property
    def described(self) -> str:
        """The object named, as messages name it (``Service ns/name``)."""
        return str(self.service if self.service is not None else self.gateway)
