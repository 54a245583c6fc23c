"""The few Kubernetes API calls the operator makes itself (kopf makes the others: watches,
finalizers, Events): read Secrets, write and delete ConfigMaps, read the Service or Gateway
a site's egress address comes from, patch the status of Grid's resources, create
auto-discovered GridSites, and ask for the ServiceAccount tokens of providers that use one.

The client is ``kubernetes_asyncio``, the maintained asyncio port of the official client
(same generated API, models and authentication): the operator lives on kopf's event loop,
where the synchronous official client would need a thread for every call in flight. It is
configured from the official client's ``Configuration`` (which kopf's login uses too, and
whose in-cluster and kubeconfig loaders refresh a rotated service account token).

Every call is bounded and retried (see :class:`RetryPolicy`): a per-attempt timeout, and
after a 429 (its ``Retry-After`` honoured), a 5xx, a dropped connection or a timeout,
another attempt after an exponential backoff with jitter, within a bounded number of
attempts and a bounded total time. Every call here may be repeated safely: reads; JSON merge
patches (applying one twice gives the same object); deletes (a retry answered 404 means the
earlier attempt deleted it); creates with a fixed name (a retry answered 409 means the
earlier attempt created it, which is read back). Any other 4xx is final. Grid's client
never watches; kopf watches (and resumes from resourceVersion, relisting after 410 Gone).

The client also knows whether the API server answers (:class:`Reachability`), which the
operator's ``/healthz`` reports. Error messages name the operation and the object and never
carry a response body, because a Secret's body holds its values.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import aiohttp

from grid.errors import KubernetesApiError
from grid.models.meta import GROUP, VERSION
from grid.operator.retries import Reachability, RetryPolicy

_log = logging.getLogger("grid.operator")

JsonObject = dict[str, Any]
T = TypeVar("T")

MERGE_PATCH: Final = "application/merge-patch+json"
USER_AGENT: Final = "grid-operator"
GRID_PLURALS: Final = {
    "GridNetwork": "gridnetworks",
    "GridSite": "gridsites",
    "InferenceProvider": "inferenceproviders",
}
GATEWAY_API: Final = ("gateway.networking.k8s.io", "v1")
_RETRIED_STATUSES: Final = frozenset({429, 500, 502, 503, 504})


async def _created_before() -> JsonObject:
    return {}


class _NoBodies(logging.Filter):
    """Drops the generated client's ``response body: ...`` debug lines: a Secret's body
    holds its values, and no log level may reveal them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("response body")


def _silence_bodies() -> None:
    rest = logging.getLogger("kubernetes_asyncio.client.rest")
    if not any(isinstance(existing, _NoBodies) for existing in rest.filters):
        rest.addFilter(_NoBodies())


@dataclass(slots=True)
class _Attempts:
    """What one call went through (for the error message and the counters)."""

    count: int = 0
    waits: list[float] = field(default_factory=list)


class _Retryable(Exception):
    """An attempt failed for a reason worth another attempt."""

    def __init__(self, cause: str, status: int, reason: str, retry_after: float | None = None):
        super().__init__(cause)
        self.cause = cause
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class KubeApi:
    """An authenticated client of one API server. ``await start()`` before use,
    ``await close()`` after."""

    def __init__(
        self,
        configuration: Any,
        *,
        retry: RetryPolicy | None = None,
        user_agent: str = USER_AGENT,
        rng: random.Random | None = None,
    ) -> None:
        self._source = configuration
        self._server = str(configuration.host).rstrip("/")
        self.retry = retry or RetryPolicy()
        self._user_agent = user_agent
        self._rng = rng or random.Random()  # jitter, not a secret
        self._api: Any = None
        self.reachability = Reachability()
        self.retries: collections.Counter[str] = collections.Counter()
        """Retries made so far, by cause (``429``, ``5xx``, ``timeout``, ``connection``)."""
        self.recent_waits: collections.deque[float] = collections.deque(maxlen=64)
        """The latest backoff waits, in seconds."""

    def __repr__(self) -> str:
        return f"KubeApi(server={self._server!r})"

    @property
    def server(self) -> str:
        return self._server

    async def start(self) -> None:
        if self._api is None:
            from kubernetes_asyncio import client

            _silence_bodies()
            api = client.ApiClient(asyncio_configuration(self._source))
            api.user_agent = self._user_agent
            self._api = api

    async def close(self) -> None:
        if self._api is not None:
            api, self._api = self._api, None
            await api.close()

    # -- Secrets (read; written only for the tokens Grid mints) -----------------------------

    async def read_secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The Secret's ``data`` (base64 text per key), or None when it does not exist. The
        caller decodes what it needs and drops the rest."""
        core = self._core()
        found = await self._call(
            "read",
            f"secrets {namespace}/{name}",
            lambda timeout: core.read_namespaced_secret(name, namespace, _request_timeout=timeout),
        )
        if found is None:
            return None
        data = found.get("data")
        return dict(data) if isinstance(data, Mapping) else {}

    async def put_owned_secret(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        data: Mapping[str, str],
        *,
        drop: Callable[[str], bool] = lambda key: False,
    ) -> None:
        """Create the Secret with ``labels`` and ``data`` (base64 text per key), or, when it
        exists and carries ``labels``, set those keys and remove the other keys it has for
        which ``drop`` is true (in one merge patch). A Secret of that name without them is
        someone else's: it is left as it is, and :class:`KubernetesApiError` says so."""
        core = self._core()
        subject = f"secret {namespace}/{name}"
        found = await self._call(
            "read",
            subject,
            lambda timeout: core.read_namespaced_secret(name, namespace, _request_timeout=timeout),
        )
        if found is None:
            body: JsonObject = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
                "data": dict(data),
            }
            await self._call(
                "create",
                subject,
                lambda timeout: core.create_namespaced_secret(
                    namespace, body, _request_timeout=timeout
                ),
                # A retried create that conflicts: the first attempt created it.
                on_retried_conflict=_created_before,
            )
            return
        present = (found.get("metadata") or {}).get("labels") or {}
        held = found.get("data")
        dropped = [key for key in (held or {}) if key not in data and drop(key)]
        del found, held  # its data is the previous value
        if any(present.get(label) != value for label, value in labels.items()):
            raise KubernetesApiError(
                f"{subject} exists and is not Grid's (it lacks Grid's labels): not overwritten",
                409,
            )
        await self._call(
            "patch",
            subject,
            lambda timeout: core.patch_namespaced_secret(
                name,
                namespace,
                {"data": {**dict.fromkeys(dropped), **data}},  # null removes a key
                _content_type=MERGE_PATCH,
                _request_timeout=timeout,
            ),
        )

    # -- ServiceAccount tokens (for the providers that authenticate with one) -------------

    async def request_token(
        self, namespace: str, name: str, audience: str, expiration_s: int
    ) -> JsonObject | None:
        """A token of the ServiceAccount for ``audience`` (the TokenRequest API), as the
        answer holds it (``status.token``, ``status.expirationTimestamp``), or None when the
        ServiceAccount does not exist. A retried request just issues another token."""
        core = self._core()
        body: JsonObject = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [audience], "expirationSeconds": expiration_s},
        }
        return await self._call(
            "create",
            f"serviceaccounts/token {namespace}/{name}",
            lambda timeout: core.create_namespaced_service_account_token(
                name, namespace, body, _request_timeout=timeout
            ),
        )

    # -- ConfigMaps -----------------------------------------------------------------------

    async def read_configmap(self, namespace: str, name: str) -> JsonObject | None:
        core = self._core()
        return await self._call(
            "read",
            f"configmaps {namespace}/{name}",
            lambda timeout: core.read_namespaced_config_map(
                name, namespace, _request_timeout=timeout
            ),
        )

    async def create_configmap(self, namespace: str, body: JsonObject) -> JsonObject:
        """Create; a 409 is an error, unless the call was retried (then the earlier attempt
        created it, and the ConfigMap is read back)."""
        core = self._core()
        name = body["metadata"]["name"]
        subject = f"configmap {namespace}/{name}"
        created = await self._call(
            "create",
            subject,
            lambda timeout: core.create_namespaced_config_map(
                namespace, body, _request_timeout=timeout
            ),
            on_retried_conflict=lambda: self.read_configmap(namespace, name),
        )
        return _present(created, "create", subject)

    async def patch_configmap(self, namespace: str, name: str, patch: JsonObject) -> JsonObject:
        core = self._core()
        patched = await self._call(
            "patch",
            f"configmaps {namespace}/{name}",
            lambda timeout: core.patch_namespaced_config_map(
                name, namespace, patch, _content_type=MERGE_PATCH, _request_timeout=timeout
            ),
        )
        return _present(patched, "patch", f"configmap {namespace}/{name}")

    async def delete_configmap(
        self, namespace: str, name: str, *, resource_version: str | None = None
    ) -> bool:
        """Delete, only if it still is at ``resource_version`` when given; False when it
        was already gone (a retry that finds it gone counts as deleted)."""
        core = self._core()
        options: JsonObject = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if resource_version is not None:
            options["preconditions"] = {"resourceVersion": resource_version}
        attempts = _Attempts()
        gone = await self._call(
            "delete",
            f"configmaps {namespace}/{name}",
            lambda timeout: core.delete_namespaced_config_map(
                name, namespace, body=options, _request_timeout=timeout
            ),
            attempts=attempts,
        )
        return gone is not None or attempts.count > 1

    async def list_configmaps(self, namespace: str, label_selector: str) -> list[JsonObject]:
        core = self._core()
        found = await self._call(
            "list",
            f"configmaps in {namespace}",
            lambda timeout: core.list_namespaced_config_map(
                namespace, label_selector=label_selector, _request_timeout=timeout
            ),
        )
        items = (found or {}).get("items") or []
        return [item for item in items if isinstance(item, dict)]

    # -- what an egress address is read from (read-only) ----------------------------------

    async def read_service(self, namespace: str, name: str) -> JsonObject | None:
        """A Service as served, or None when it does not exist."""
        core = self._core()
        return await self._call(
            "read",
            f"services {namespace}/{name}",
            lambda timeout: core.read_namespaced_service(name, namespace, _request_timeout=timeout),
        )

    async def read_gateway(self, namespace: str, name: str) -> JsonObject | None:
        """A Gateway API Gateway as served, or None when there is none (or no Gateway API:
        :meth:`serves` tells the two apart)."""
        custom = self._custom()
        return await self._call(
            "read",
            f"gateways.{GATEWAY_API[0]} {namespace}/{name}",
            lambda timeout: custom.get_namespaced_custom_object(
                *GATEWAY_API, namespace, "gateways", name, _request_timeout=timeout
            ),
        )

    async def serves(self, group: str, version: str) -> bool:
        """Whether the API server serves ``group/version`` (discovery, open to every
        authenticated client)."""
        custom = self._custom()
        found = await self._call(
            "discover",
            f"{group}/{version}",
            lambda timeout: custom.get_api_resources(group, version, _request_timeout=timeout),
        )
        return found is not None

    # -- Grid's resources -----------------------------------------------------------------

    async def patch_status(self, kind: str, name: str, patch: JsonObject) -> JsonObject | None:
        """Merge-patch the ``/status`` of a Grid resource; None when it no longer exists."""
        custom = self._custom()
        plural = GRID_PLURALS[kind]
        return await self._call(
            "patch status of",
            f"{plural} {name}/status",
            lambda timeout: custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                plural,
                name,
                {"status": patch},
                _content_type=MERGE_PATCH,
                _request_timeout=timeout,
            ),
        )

    async def create_site(self, body: JsonObject) -> JsonObject | None:
        """Create a GridSite; None when one of that name existed already."""
        custom = self._custom()
        name = body["metadata"]["name"]

        async def read_back() -> JsonObject | None:
            return await self._call(
                "read",
                f"gridsites {name}",
                lambda timeout: custom.get_cluster_custom_object(
                    GROUP, VERSION, "gridsites", name, _request_timeout=timeout
                ),
            )

        try:
            return await self._call(
                "create",
                f"gridsites {name}",
                lambda timeout: custom.create_cluster_custom_object(
                    GROUP, VERSION, "gridsites", body, _request_timeout=timeout
                ),
                on_retried_conflict=read_back,
            )
        except KubernetesApiError as error:
            if error.status == 409:
                return None
            raise

    # -- the API server's health ----------------------------------------------------------

    async def probe(self, timeout_s: float | None = None) -> bool:
        """Ask the API server for its version, once (no retry): whether it answered. The
        answer updates :attr:`reachability`, which is what the probe is for."""
        from kubernetes_asyncio import client

        if self._api is None:
            return False
        version = client.VersionApi(self._api)
        limit = timeout_s or self.retry.timeout_s
        try:
            await self._attempt(lambda timeout: version.get_code(_request_timeout=timeout), limit)
        except (_Retryable, KubernetesApiError):
            # A 4xx is an answer; a refused certificate is not.
            return self.reachability.failing_since is None
        return True

    def answered_within(self, seconds: float) -> bool:
        last = self.reachability.last_answer
        return last is not None and time.monotonic() - last < seconds

    # -- the transport --------------------------------------------------------------------

    def _core(self) -> Any:
        from kubernetes_asyncio import client

        return client.CoreV1Api(self._require())

    def _custom(self) -> Any:
        from kubernetes_asyncio import client

        return client.CustomObjectsApi(self._require())

    def _require(self) -> Any:
        if self._api is None:
            raise KubernetesApiError("the Kubernetes client is not started")
        return self._api

    async def _call(
        self,
        what: str,
        subject: str,
        operation: Callable[[aiohttp.ClientTimeout], Awaitable[Any]],
        *,
        on_retried_conflict: Callable[[], Awaitable[JsonObject | None]] | None = None,
        attempts: _Attempts | None = None,
    ) -> JsonObject | None:
        """The decoded answer, or None for 404, after retries (see :class:`RetryPolicy`).
        Raises :class:`KubernetesApiError`."""
        policy = self.retry
        tried = attempts if attempts is not None else _Attempts()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + policy.budget_s
        while True:
            tried.count += 1
            remaining = deadline - loop.time()
            try:
                return await self._attempt(operation, min(policy.timeout_s, max(remaining, 0.01)))
            except KubernetesApiError as error:
                if error.status == 409 and tried.count > 1 and on_retried_conflict is not None:
                    return await on_retried_conflict()
                raise KubernetesApiError(
                    f"cannot {what} {subject}: {error}", error.status
                ) from None
            except _Retryable as failure:
                wait = policy.backoff(tried.count, self._rng)
                retry_after = failure.retry_after
                if retry_after is not None:
                    wait = max(wait, retry_after)
                give_up = (
                    tried.count >= policy.attempts
                    or (retry_after is not None and retry_after > policy.retry_after_cap_s)
                    or loop.time() + wait >= deadline
                )
                if give_up:
                    raise KubernetesApiError(
                        f"cannot {what} {subject}: {_failure_text(failure)} "
                        f"({_tries(tried.count)})",
                        failure.status,
                    ) from None
                self.retries[failure.cause] += 1
                self.recent_waits.append(wait)
                tried.waits.append(wait)
                _log.debug(
                    "%s %s: %s, attempt %d again in %.2fs",
                    what,
                    subject,
                    _failure_text(failure),
                    tried.count + 1,
                    wait,
                )
                await asyncio.sleep(wait)

    async def _attempt(
        self, operation: Callable[[aiohttp.ClientTimeout], Awaitable[Any]], timeout_s: float
    ) -> JsonObject | None:
        """One request: its answer as JSON, None for 404. Raises :class:`_Retryable` or
        :class:`KubernetesApiError` (with the status and reason only)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        reachability = self.reachability
        try:
            answer = await operation(aiohttp.ClientTimeout(total=timeout_s))
        except ApiException as error:
            status = int(error.status or 0)
            reason = _reason(error)
            if status >= 500:
                reachability.failed(time.monotonic(), f"{status} {reason}")
            else:
                reachability.answered(time.monotonic())
            if status in _RETRIED_STATUSES:
                cause = "429" if status == 429 else "5xx"
                raise _Retryable(cause, status, reason, _retry_after(error)) from None
            if status == 404:
                return None
            raise KubernetesApiError(f"{status} {reason}".rstrip(), status) from None
        except aiohttp.ClientConnectorCertificateError as error:
            # A certificate the configuration does not trust: another attempt would not help.
            reachability.failed(time.monotonic(), "TLS handshake refused")
            raise KubernetesApiError(
                f"{type(error).__name__}: the API server's TLS handshake failed "
                "(check the cluster CA and the server name)"
            ) from None
        except (TimeoutError, aiohttp.ServerTimeoutError):
            reachability.failed(time.monotonic(), f"no answer within {timeout_s:g}s")
            raise _Retryable("timeout", 0, f"no answer within {timeout_s:g}s") from None
        except (aiohttp.ClientError, ConnectionError) as error:
            problem = f"{type(error).__name__}: the API server did not answer"
            reachability.failed(time.monotonic(), problem)
            raise _Retryable("connection", 0, problem) from None
        except ValueError as error:  # an answer that is not JSON
            reachability.answered(time.monotonic())
            raise KubernetesApiError(f"unreadable answer ({type(error).__name__})") from None
        reachability.answered(time.monotonic())
        return self._plain(answer)

    def _plain(self, answer: Any) -> JsonObject:
        """A model of the generated client (or the JSON of a custom resource) as the API
        serves it: camelCase keys, unset fields left out."""
        if isinstance(answer, dict):
            return answer
        plain = self._require().sanitize_for_serialization(answer)
        return plain if isinstance(plain, dict) else {}


def asyncio_configuration(source: Any) -> Any:
    """A ``kubernetes_asyncio`` configuration with the server, credentials and TLS settings
    of ``source`` (the official client's configuration, or one of ``kubernetes_asyncio``
    already). A token refresh hook of ``source`` (in-cluster: the rotated service account
    token) keeps running before each request."""
    from kubernetes_asyncio import client

    if isinstance(source, client.Configuration):
        return source
    target = client.Configuration(host=str(source.host).rstrip("/"))
    _copy_credentials(source, target)
    for name in ("username", "password", "ssl_ca_cert", "cert_file", "key_file", "proxy"):
        setattr(target, name, getattr(source, name, None))
    target.verify_ssl = bool(getattr(source, "verify_ssl", True))
    target.tls_server_name = getattr(source, "tls_server_name", None)
    hook = getattr(source, "refresh_api_key_hook", None)
    if hook is not None:

        def refresh(configuration: Any) -> None:
            hook(source)
            _copy_credentials(source, configuration)

        target.refresh_api_key_hook = refresh
    return target


def _copy_credentials(source: Any, target: Any) -> None:
    target.api_key = _bearer_token_entry(getattr(source, "api_key", None))
    target.api_key_prefix = _bearer_token_entry(getattr(source, "api_key_prefix", None))


def _bearer_token_entry(settings: Mapping[str, str] | None) -> dict[str, str]:
    """``settings`` with a token under ``authorization`` moved to ``BearerToken``: the official
    client reads either (its README sets ``authorization``), ``kubernetes_asyncio`` only the
    latter, and would send no token at all (an anonymous request, answered 403)."""
    entries = dict(settings or {})
    if "authorization" in entries and "BearerToken" not in entries:
        entries["BearerToken"] = entries.pop("authorization")
    return entries


def _reason(error: Any) -> str:
    """The ``reason`` of a Kubernetes ``Status`` answer (a fixed word such as Forbidden or
    Conflict), never its message: the operation is named by the caller."""
    body = error.body
    try:
        document = json.loads(body) if isinstance(body, str | bytes) and body else None
    except ValueError:
        document = None
    reason = document.get("reason") if isinstance(document, dict) else None
    if isinstance(reason, str) and reason:
        return reason
    return str(error.reason or "")


def _retry_after(error: Any) -> float | None:
    """The answer's ``Retry-After`` in seconds (delta-seconds or an HTTP date)."""
    headers = error.headers or {}
    text = headers.get("Retry-After")
    if not text:
        return None
    text = str(text).strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _failure_text(failure: _Retryable) -> str:
    if failure.status:
        text = f"{failure.status} {failure.reason}".rstrip()
        if failure.retry_after is not None:
            text += f" (Retry-After {failure.retry_after:g}s)"
        return text
    return failure.reason


def _tries(count: int) -> str:
    return "1 attempt" if count == 1 else f"{count} attempts"


def _present(answer: JsonObject | None, what: str, subject: str) -> JsonObject:
    if answer is None:
        raise KubernetesApiError(f"cannot {what} {subject}: 404 NotFound", 404)
    return answer


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
