"""Reading the Service or Gateway a site's ``spec.egress.from`` names, for the engine (which
makes an address of it: :mod:`grid.engine.egress`).

Only ``get`` on the one object named: the operator's ClusterRole for namespaces
(``grid-operator-namespaced``) grants ``get`` on Services and Gateways, bound in the
namespace the object lives in, and nothing lists or watches them. The object is read again
once per probe interval, so a load balancer's new address reaches the mesh within one.
"""

from __future__ import annotations

import time

from grid.engine import SourceRead
from grid.errors import KubernetesApiError
from grid.models.egress_source import EgressSource
from grid.operator.kube import GATEWAY_API, KubeApi

_FORBIDDEN_HINT = (
    "; bind the ClusterRole grid-operator-namespaced to the operator's ServiceAccount in "
    "namespace {namespace} (docs/install.md)"
)


async def read_egress_source(kube: KubeApi, source: EgressSource) -> SourceRead:
    """The object ``source`` names, as the API serves it. Never raises: a failed call is
    the reading's ``error`` (with what to do about a 403)."""
    started = time.monotonic()
    service, gateway = source.service, source.gateway
    namespace = service.namespace if service is not None else gateway.namespace if gateway else ""
    try:
        if service is not None:
            found = await kube.read_service(service.namespace, service.name)
            return SourceRead(source, found, latency_s=time.monotonic() - started)
        assert gateway is not None
        found = await kube.read_gateway(gateway.namespace, gateway.name)
        served = found is not None or await kube.serves(*GATEWAY_API)
        return SourceRead(source, found, api_served=served, latency_s=time.monotonic() - started)
    except KubernetesApiError as error:
        message = str(error)
        if error.status == 403:
            message += _FORBIDDEN_HINT.format(namespace=namespace)
        return SourceRead(source, error=message, latency_s=time.monotonic() - started)
