"""One emulated cluster as a test sees it: the API server and an official client bound to it.

The official ``kubernetes`` client is synchronous, while the emulator serves HTTP from the
test's own event loop: a blocking call made on that loop would wait for a response the
loop can never produce (a deadlock). Every client call therefore goes through
:meth:`Cluster.call`, which runs it in a worker thread with ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import kmock
from kubernetes import client as k8s

from .emulator import GridKubernetesEmulator, register_builtin_resources, register_grid_resources

P = ParamSpec("P")
R = TypeVar("R")
JsonObject = dict[str, Any]


@dataclass(frozen=True)
class Cluster:
    """An emulated API server on 127.0.0.1 and an ``ApiClient`` configured for it."""

    name: str
    emulator: GridKubernetesEmulator
    api: k8s.ApiClient

    @property
    def url(self) -> str:
        return str(self.emulator.url).rstrip("/")

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)

    async def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run a blocking client call off the event loop (see the module docstring)."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    # Custom resources, through the official client as any user or controller would.

    async def create(
        self, resource: kmock.resource, body: JsonObject, namespace: str | None = None
    ) -> JsonObject:
        group, version, plural = _coordinates(resource)
        if namespace is None:
            created = await self.call(
                self.custom.create_cluster_custom_object, group, version, plural, body
            )
        else:
            created = await self.call(
                self.custom.create_namespaced_custom_object, group, version, namespace, plural, body
            )
        return _object(created)

    async def get(
        self, resource: kmock.resource, name: str, namespace: str | None = None
    ) -> JsonObject:
        group, version, plural = _coordinates(resource)
        if namespace is None:
            found = await self.call(
                self.custom.get_cluster_custom_object, group, version, plural, name
            )
        else:
            found = await self.call(
                self.custom.get_namespaced_custom_object, group, version, namespace, plural, name
            )
        return _object(found)

    async def patch(
        self,
        resource: kmock.resource,
        name: str,
        patch: JsonObject,
        namespace: str | None = None,
        *,
        status: bool = False,
    ) -> JsonObject:
        """Merge-patch an object, or its ``/status`` when ``status`` is set."""
        group, version, plural = _coordinates(resource)
        custom = self.custom
        if namespace is None and status:
            patched = await self.call(
                custom.patch_cluster_custom_object_status, group, version, plural, name, patch
            )
        elif namespace is None:
            patched = await self.call(
                custom.patch_cluster_custom_object, group, version, plural, name, patch
            )
        elif status:
            patched = await self.call(
                custom.patch_namespaced_custom_object_status,
                group,
                version,
                namespace,
                plural,
                name,
                patch,
            )
        else:
            patched = await self.call(
                custom.patch_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                name,
                patch,
            )
        return _object(patched)

    async def delete(
        self, resource: kmock.resource, name: str, namespace: str | None = None
    ) -> JsonObject:
        group, version, plural = _coordinates(resource)
        if namespace is None:
            deleted = await self.call(
                self.custom.delete_cluster_custom_object, group, version, plural, name
            )
        else:
            deleted = await self.call(
                self.custom.delete_namespaced_custom_object, group, version, namespace, plural, name
            )
        return _object(deleted)

    async def exists(
        self, resource: kmock.resource, name: str, namespace: str | None = None
    ) -> bool:
        try:
            await self.get(resource, name, namespace)
        except k8s.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    async def events_about(self, name: str, namespace: str = "default") -> list[k8s.CoreV1Event]:
        """The Events whose involvedObject is ``name`` (cluster-scoped objects' events are
        posted to ``default``), oldest first."""
        events = await self.call(
            self.core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.name={name}",
        )
        return list(events.items)


def _object(answer: object) -> JsonObject:
    """The custom objects API answers with plain JSON objects (typed ``object``)."""
    if not isinstance(answer, dict):
        raise TypeError(f"expected a JSON object from the API, got {type(answer).__name__}")
    return answer


def _coordinates(resource: kmock.resource) -> tuple[str, str, str]:
    if resource.group is None or resource.version is None or resource.plural is None:
        raise ValueError(f"{resource!r} must name a group, a version and a plural")
    return resource.group, resource.version, resource.plural


def prepare_cluster(emulator: GridKubernetesEmulator) -> None:
    """Serve the built-in kinds and Grid's custom resources, as a cluster where Grid's CRDs
    are installed would."""
    register_builtin_resources(emulator)
    register_grid_resources(emulator)


@contextlib.asynccontextmanager
async def client_for(name: str, emulator: GridKubernetesEmulator) -> AsyncIterator[Cluster]:
    """Bind an official ``ApiClient`` to a running emulator."""
    configuration = k8s.Configuration(host=str(emulator.url).rstrip("/"))
    with k8s.ApiClient(configuration) as api:
        yield Cluster(name=name, emulator=emulator, api=api)


@contextlib.asynccontextmanager
async def serve_cluster(name: str) -> AsyncIterator[Cluster]:
    """Start another emulated cluster on its own random 127.0.0.1 port."""
    async with (
        GridKubernetesEmulator() as emulator,
        kmock.Server(emulator),
        client_for(name, emulator) as cluster,
    ):
        prepare_cluster(emulator)
        yield cluster
