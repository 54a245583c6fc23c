"""One Kubernetes API server as a test sees it, whichever serves it: kmock's emulator
(:class:`EmulatedCluster`) or a real kube-apiserver (:class:`k8s.real_cluster.RealCluster`),
with an official client bound to it as the cluster's admin.

The official ``kubernetes`` client is synchronous, while the emulator serves HTTP from the
test's own event loop: a blocking call made on that loop would wait for a response the
loop can never produce (a deadlock). Every client call therefore goes through
:meth:`Cluster.call`, which runs it in a worker thread with ``asyncio.to_thread``.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, ParamSpec, TypeVar

import kmock
import kopf
import yaml
from kubernetes import client as k8s

from .emulator import (
    NAMESPACES,
    GridKubernetesEmulator,
    register_builtin_resources,
    register_grid_resources,
)
from .rbac import ServedRequest, as_served, served_requests

P = ParamSpec("P")
R = TypeVar("R")
JsonObject = dict[str, Any]


@dataclass(frozen=True)
class Cluster(abc.ABC):
    """An API server and an ``ApiClient`` for it as the admin; the backends differ in how
    another identity logs in and in how the server's record of requests is read."""

    backend: ClassVar[str]
    """``kmock`` or ``real``: the test id's suffix."""

    name: str
    api: k8s.ApiClient

    @property
    @abc.abstractmethod
    def url(self) -> str: ...

    @abc.abstractmethod
    async def create_namespace(self, name: str) -> None:
        """Create namespace ``name`` unless it exists."""

    @abc.abstractmethod
    async def service_account_token(self, namespace: str, name: str) -> str:
        """A bearer token of ServiceAccount ``namespace/name``."""

    @abc.abstractmethod
    def configuration(self, token: str | None = None) -> k8s.Configuration:
        """The official client's configuration for this server, logging in with ``token``
        (None: as the admin)."""

    @abc.abstractmethod
    def connection_info(self, namespace: str, token: str | None = None) -> kopf.ConnectionInfo:
        """kopf's login with ``token`` (None: as the admin); Events about cluster-scoped
        objects go to ``namespace``."""

    @abc.abstractmethod
    def write_kubeconfig(self, path: Path, token: str) -> Path:
        """A kubeconfig for this server holding ``token``, as a program outside the test
        reads it."""

    @abc.abstractmethod
    def watch_count(self, resource: kmock.resource) -> int:
        """How many watch streams on ``resource`` are open right now."""

    @abc.abstractmethod
    def requests(self) -> list[ServedRequest]:
        """The requests served to anyone since the test began, in order."""

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
        posted to ``default``), oldest first: by ``eventTime`` (microseconds), since a real
        server lists them by name, which kopf makes random."""
        events = await self.call(
            self.core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.name={name}",
        )
        return sorted(events.items, key=lambda event: event.event_time)


def _object(answer: object) -> JsonObject:
    """The custom objects API answers with plain JSON objects (typed ``object``)."""
    if not isinstance(answer, dict):
        raise TypeError(f"expected a JSON object from the API, got {type(answer).__name__}")
    return answer


def _coordinates(resource: kmock.resource) -> tuple[str, str, str]:
    if resource.group is None or resource.version is None or resource.plural is None:
        raise ValueError(f"{resource!r} must name a group, a version and a plural")
    return resource.group, resource.version, resource.plural


@dataclass(frozen=True)
class EmulatedCluster(Cluster):
    """kmock's emulator on 127.0.0.1 (plain HTTP, anyone may do anything): its internals,
    the request log and the stored objects, are the test's to read and change."""

    backend: ClassVar[str] = "kmock"

    emulator: GridKubernetesEmulator

    @property
    def url(self) -> str:
        return str(self.emulator.url).rstrip("/")

    async def create_namespace(self, name: str) -> None:
        # Told directly: kmock's HTTP API cannot route requests for namespaces themselves.
        if self.emulator.get_object(NAMESPACES, name) is None:
            self.emulator.create_object(NAMESPACES, {"metadata": {"name": name}})

    async def service_account_token(self, namespace: str, name: str) -> str:
        return f"kmock-token-of-{namespace}-{name}"  # kmock authenticates no one

    def configuration(self, token: str | None = None) -> k8s.Configuration:
        if token is None:
            return k8s.Configuration(host=self.url)
        return k8s.Configuration(
            host=self.url,
            api_key={"authorization": token},
            api_key_prefix={"authorization": "Bearer"},
        )

    def connection_info(self, namespace: str, token: str | None = None) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=self.url, token=token, default_namespace=namespace)

    def write_kubeconfig(self, path: Path, token: str) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": {"server": self.url}}],
            "users": [{"name": "grid", "user": {"token": token}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": "grid"}}],
            "current-context": self.name,
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def watch_count(self, resource: kmock.resource) -> int:
        return self.emulator.watch_count(resource)

    def requests(self) -> list[ServedRequest]:
        return [as_served(request) for request in served_requests(self.emulator)]


def prepare_cluster(emulator: GridKubernetesEmulator) -> None:
    """Serve the built-in kinds and Grid's custom resources, as a cluster where Grid's CRDs
    are installed would."""
    register_builtin_resources(emulator)
    register_grid_resources(emulator)


@contextlib.asynccontextmanager
async def client_for(name: str, emulator: GridKubernetesEmulator) -> AsyncIterator[EmulatedCluster]:
    """Bind an official ``ApiClient`` to a running emulator."""
    configuration = k8s.Configuration(host=str(emulator.url).rstrip("/"))
    with k8s.ApiClient(configuration) as api:
        yield EmulatedCluster(name=name, api=api, emulator=emulator)


@contextlib.asynccontextmanager
async def serve_cluster(name: str) -> AsyncIterator[EmulatedCluster]:
    """Start another emulated cluster on its own random 127.0.0.1 port."""
    async with (
        GridKubernetesEmulator() as emulator,
        kmock.Server(emulator),
        client_for(name, emulator) as cluster,
    ):
        prepare_cluster(emulator)
        yield cluster
