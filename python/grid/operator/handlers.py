"""kopf's handlers for Grid's resources: thin translations to :class:`Operator` calls.

* every watch event of the three kinds updates the operator's view (``on.event``);
* a daemon per GridNetwork runs its SWIM node and site engine for as long as it exists;
* a spec update deletes the ConfigMaps of gatewayRefs that were removed (kopf keeps the last
  handled spec, so changes made while the operator was down are seen too);
* deleting a GridNetwork (behind Grid's finalizer) leaves its mesh and deletes what Grid
  wrote for it.

kopf keeps its bookkeeping in annotations under Grid's prefix, never in ``status`` (which
the CRDs' schemas describe and Grid owns).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, cast

import kopf

from grid.errors import OperatorConfigError
from grid.models.meta import GROUP, VERSION
from grid.models.phases import EventType
from grid.operator.operator import Operator
from grid.operator.options import OperatorOptions

_log = logging.getLogger("grid.operator")

FINALIZER = "grid.praxis-proxy.io/finalizer"
ANNOTATION_PREFIX = "grid.praxis-proxy.io"
PLURALS = ("gridnetworks", "gridsites", "inferenceproviders")
# A daemon gets this long to leave its mesh gracefully, then this long once cancelled.
LEAVE_TIMEOUT_S = 5.0
CANCEL_TIMEOUT_S = 2.0
DELETE_RETRY_S = 5.0


def configure(settings: kopf.OperatorSettings, options: OperatorOptions) -> None:
    """kopf settings the operator needs whatever runs it (the command or a test)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # The shipped RBAC gives no access to CRDs or namespaces: Grid's resources are
    # cluster-scoped and known in advance, so there is nothing to scan.
    settings.scanning.disabled = True
    # A daemon leaves its mesh within moments of being told to stop: wait for that rather
    # than re-checking after the whole leave timeout (which would delay every deletion).
    settings.background.instant_exit_timeout = LEAVE_TIMEOUT_S
    settings.posting.reporting_component = "grid-operator"
    if options.pod_name:
        settings.posting.reporting_instance = options.pod_name


def post_event(reference: Mapping[str, Any], type_: EventType, reason: str, message: str) -> None:
    """Post a Kubernetes Event through kopf (from a handler's or daemon's context)."""
    try:
        kopf.event(
            kopf.Body(cast(kopf.RawBody, dict(reference))),
            type=str(type_),
            reason=reason,
            message=message,
        )
    except LookupError:
        name = (reference.get("metadata") or {}).get("name")
        _log.warning("event %s about %s not posted: no kopf context", reason, name)


def connection_info(namespace: str, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's credentials, found as the official client finds them (in-cluster, else the
    kubeconfig), with Events about cluster-scoped objects going to ``namespace``: kopf would
    post them to ``default``, where the operator may not create Events."""
    info = kopf.login_via_client(**kwargs)
    if info is None:
        return None
    return dataclasses.replace(info, default_namespace=namespace)


def build_registry(operator: Operator, *, login: bool = False) -> kopf.OperatorRegistry:
    """The handlers of one operator. With ``login``, kopf authenticates as the official
    client does (in-cluster, else kubeconfig) and posts Events about Grid's cluster-scoped
    resources to the operator's namespace, the only one where it may create Events."""
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, operator.options)
        try:
            await operator.start()
        except OperatorConfigError as error:
            # Retrying would not free a port: stop, and say why.
            raise kopf.PermanentError(str(error)) from None

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        await operator.stop()

    if login:

        @kopf.on.login(registry=registry)
        def authenticate(**kwargs: Any) -> kopf.ConnectionInfo | None:
            return connection_info(operator.options.namespace, **kwargs)

    # Every handler is a coroutine, so that kopf runs it on its event loop, where all of the
    # operator lives (kopf would run a plain function in a thread).
    for plural in PLURALS:

        @kopf.on.event(GROUP, VERSION, plural, registry=registry)
        async def watched(type: str | None, body: kopf.Body, **_: Any) -> None:
            operator.resource_event(type, body)

    @kopf.daemon(
        GROUP,
        VERSION,
        "gridnetworks",
        registry=registry,
        cancellation_backoff=LEAVE_TIMEOUT_S,
        cancellation_timeout=CANCEL_TIMEOUT_S,
    )
    async def serve(name: str, stopped: kopf.DaemonStopped, **_: Any) -> None:
        await operator.serve_network(name, stopped)

    @kopf.on.update(GROUP, VERSION, "gridnetworks", registry=registry)
    async def spec_changed(name: str, old: Any, new: Any, **_: Any) -> None:
        failed = await operator.gateways_changed(name, _spec(old), _spec(new))
        if failed:
            raise kopf.TemporaryError(
                f"ConfigMaps not deleted yet: {', '.join(failed)}", delay=DELETE_RETRY_S
            )

    @kopf.on.delete(GROUP, VERSION, "gridnetworks", registry=registry)
    async def deleted(name: str, body: kopf.Body, **_: Any) -> None:
        failed = await operator.network_deleted(name, body)
        if failed:
            raise kopf.TemporaryError(
                f"ConfigMaps not deleted yet: {', '.join(failed)}", delay=DELETE_RETRY_S
            )

    return registry


def _spec(document: Any) -> Mapping[str, Any] | None:
    spec = document.get("spec") if isinstance(document, Mapping) else None
    return spec if isinstance(spec, Mapping) else None
