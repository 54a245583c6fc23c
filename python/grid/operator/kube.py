"""The few Kubernetes API calls the operator makes itself (kopf makes the others: watches,
finalizers, Events): read Secrets, write and delete ConfigMaps, patch the status of Grid's
resources and create auto-discovered GridSites.

An asyncio client on aiohttp, configured from a ``kubernetes.client.Configuration`` (which
the official library fills in-cluster or from a kubeconfig, and refreshes the service
account token of). Patches are JSON merge patches: the API serves them for custom resources
and built-ins alike. Error messages name the operation and the object and never carry a
response body, because a Secret's body holds its values.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

import aiohttp

from grid.errors import KubernetesApiError
from grid.models.meta import GROUP, VERSION

JsonObject = dict[str, Any]

MERGE_PATCH: Final = "application/merge-patch+json"
DEFAULT_TIMEOUT_S = 10.0
GRID_PLURALS: Final = {
    "GridNetwork": "gridnetworks",
    "GridSite": "gridsites",
    "InferenceProvider": "inferenceproviders",
}


class KubeApi:
    """An authenticated HTTP client of one API server. ``await start()`` before use,
    ``await close()`` after."""

    def __init__(
        self,
        configuration: Any,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        user_agent: str = "grid-operator",
    ) -> None:
        self._configuration = configuration
        self._server = str(configuration.host).rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"KubeApi(server={self._server!r})"

    @property
    def server(self) -> str:
        return self._server

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(ssl=_ssl_context(self._configuration)),
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- Secrets (read-only) --------------------------------------------------------------

    async def read_secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The Secret's ``data`` (base64 text per key), or None when it does not exist. The
        caller decodes what it needs and drops the rest."""
        found = await self._call(
            "GET", f"/api/v1/namespaces/{_seg(namespace)}/secrets/{_seg(name)}", what="read"
        )
        if found is None:
            return None
        data = found.get("data")
        return dict(data) if isinstance(data, Mapping) else {}

    # -- ConfigMaps -----------------------------------------------------------------------

    async def read_configmap(self, namespace: str, name: str) -> JsonObject | None:
        return await self._call("GET", _configmap_path(namespace, name), what="read")

    async def create_configmap(self, namespace: str, body: JsonObject) -> JsonObject:
        created = await self._call(
            "POST", f"/api/v1/namespaces/{_seg(namespace)}/configmaps", body=body, what="create"
        )
        return _present(created, "create", f"configmap {namespace}/{body['metadata']['name']}")

    async def patch_configmap(self, namespace: str, name: str, patch: JsonObject) -> JsonObject:
        patched = await self._call(
            "PATCH", _configmap_path(namespace, name), body=patch, what="patch"
        )
        return _present(patched, "patch", f"configmap {namespace}/{name}")

    async def delete_configmap(
        self, namespace: str, name: str, *, resource_version: str | None = None
    ) -> bool:
        """Delete, only if it still is at ``resource_version`` when given; False when it
        was already gone."""
        options: JsonObject = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if resource_version is not None:
            options["preconditions"] = {"resourceVersion": resource_version}
        gone = await self._call(
            "DELETE", _configmap_path(namespace, name), body=options, what="delete"
        )
        return gone is not None

    async def list_configmaps(self, namespace: str, label_selector: str) -> list[JsonObject]:
        found = await self._call(
            "GET",
            f"/api/v1/namespaces/{_seg(namespace)}/configmaps",
            params={"labelSelector": label_selector},
            what="list",
        )
        items = (found or {}).get("items") or []
        return [item for item in items if isinstance(item, dict)]

    # -- Grid's resources -----------------------------------------------------------------

    async def patch_status(self, kind: str, name: str, patch: JsonObject) -> JsonObject | None:
        """Merge-patch the ``/status`` of a Grid resource; None when it no longer exists."""
        path = f"/apis/{GROUP}/{VERSION}/{GRID_PLURALS[kind]}/{_seg(name)}/status"
        return await self._call("PATCH", path, body={"status": patch}, what="patch status of")

    async def create_site(self, body: JsonObject) -> JsonObject | None:
        """Create a GridSite; None when one of that name exists already."""
        path = f"/apis/{GROUP}/{VERSION}/gridsites"
        try:
            return await self._call("POST", path, body=body, what="create")
        except KubernetesApiError as error:
            if error.status == 409:
                return None
            raise

    # -- the transport --------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        body: JsonObject | None = None,
        params: Mapping[str, str] | None = None,
    ) -> JsonObject | None:
        """The decoded answer, or None for 404. Raises :class:`KubernetesApiError`."""
        if self._session is None:
            raise KubernetesApiError(f"the Kubernetes client is not started ({what} {path})")
        headers = self._headers(method)
        data = None if body is None else json.dumps(body).encode()
        subject = _subject(path)
        try:
            async with self._session.request(
                method,
                self._server + path,
                data=data,
                params=params,
                headers=headers,
            ) as response:
                if response.status == 404:
                    return None
                if response.status >= 400:
                    reason = await _reason(response)
                    raise KubernetesApiError(
                        f"cannot {what} {subject}: {response.status} {reason}", response.status
                    )
                answer = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise KubernetesApiError(
                f"cannot {what} {subject}: {type(error).__name__}: the API server did not answer"
            ) from None
        return answer if isinstance(answer, dict) else {}

    def _headers(self, method: str) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent}
        if method == "PATCH":
            headers["Content-Type"] = MERGE_PATCH
        elif method in ("POST", "PUT", "DELETE"):
            headers["Content-Type"] = "application/json"
        # The official configuration refreshes a rotated service account token here.
        for setting in self._configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        if getattr(self._configuration, "username", None):
            basic = self._configuration.get_basic_auth_token()
            if basic:
                headers["Authorization"] = basic
        return headers


def _seg(value: str) -> str:
    return quote(value, safe="")


def _configmap_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{_seg(namespace)}/configmaps/{_seg(name)}"


def _subject(path: str) -> str:
    """``configmaps grid-system/overlay`` or ``gridnetworks mesh/status``, from an API
    path (never a query or a body)."""
    parts = [part for part in path.split("/") if part]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, plural, *names = rest[1:]
        return f"{plural} {namespace}/{'/'.join(names)}" if names else f"{plural} in {namespace}"
    if not rest:
        return path
    plural, *names = rest
    return f"{plural} {'/'.join(names)}" if names else plural


async def _reason(response: aiohttp.ClientResponse) -> str:
    """The ``reason`` of a Kubernetes ``Status`` answer (a fixed word such as Forbidden or
    Conflict), never its message: the operation is named by the caller."""
    try:
        document = await response.json(content_type=None)
    except (aiohttp.ClientError, ValueError):
        return response.reason or ""
    reason = document.get("reason") if isinstance(document, dict) else None
    return str(reason) if isinstance(reason, str) else (response.reason or "")


def _present(answer: JsonObject | None, what: str, subject: str) -> JsonObject:
    if answer is None:
        raise KubernetesApiError(f"cannot {what} {subject}: 404 NotFound", 404)
    return answer


def _ssl_context(configuration: Any) -> ssl.SSLContext | bool:
    """TLS as the configuration says: its CA, client certificate and verification flag."""
    if not str(configuration.host).startswith("https://"):
        return False
    if not configuration.verify_ssl:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        return insecure
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file and configuration.key_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


def configuration_from_environment() -> Any:
    """The official client's configuration: in-cluster (the pod's service account) when
    running in a pod, else the current kubeconfig context. Raises
    :class:`~grid.errors.KubernetesApiError` when neither is available."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        try:
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as error:
            raise KubernetesApiError(
                f"no Kubernetes credentials: not in a pod, and no usable kubeconfig ({error})"
            ) from None
    return configuration
