"""A Kubernetes API server for tests: kmock's emulator with the server-side semantics
an operator relies on.

kmock serves the Kubernetes REST API (discovery, CRUD, list, watch) from memory, but treats
objects as plain JSON documents. :class:`GridKubernetesEmulator` keeps kmock's HTTP layer,
discovery and ``objects`` store and replaces the state handling with what a real API server
does:

* every object carries ``uid``, ``creationTimestamp``, ``generation`` and a ``resourceVersion``
  from one increasing counter; ``generation`` moves only when the object's desired state
  changes, never on metadata-only or ``/status`` writes;
* JSON patches (a failed ``test`` op is 422, which is how kopf's finalizer patches detect
  conflicts), JSON merge patches, ``resourceVersion`` preconditions (409) and PUT;
* status isolation: a ``/status`` write changes only ``.status``, a write to the main resource
  never changes it, and ``.status`` is dropped on create;
* deletion waits for finalizers (``deletionTimestamp`` is set, no new finalizers may be added)
  and then garbage-collects dependents through their ``ownerReferences``;
* ``generateName``, name validation, namespaces that must exist, ``dryRun=All``;
* list/watch consistency: lists report the current ``resourceVersion`` and a watch started
  from it replays exactly the changes after it, so an operator's list-then-watch neither
  misses nor duplicates events; label and field selectors; ``timeoutSeconds``;
* creating a ``CustomResourceDefinition`` serves its resource, as a real server does.

Known differences: no schema validation or defaulting of custom resources, no
strategic-merge semantics for lists (strategic merge patches of built-ins are applied as
merge patches), no server-side apply, no ``limit``/``continue`` paging (every list is
complete, which the API allows), no admission control or RBAC enforcement (``rbac.py``
audits the request log instead), and deleting a namespace removes its contents at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import datetime
import re
import secrets
import uuid
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import attrs
import jsonpatch
import jsonpointer
import kmock
from kmock._internal.rendering import Response  # kmock does not re-export it in __all__

from .selectors import ObjectPredicate, SelectorError, parse_field_selector, parse_label_selector

JsonObject = dict[str, Any]

GRID_GROUP: Final = "grid.praxis-proxy.io"
GRID_VERSION: Final = "v1alpha1"
GRID_API_VERSION: Final = f"{GRID_GROUP}/{GRID_VERSION}"
GRID_NETWORKS: Final = kmock.resource(GRID_GROUP, GRID_VERSION, "gridnetworks")
GRID_SITES: Final = kmock.resource(GRID_GROUP, GRID_VERSION, "gridsites")
INFERENCE_PROVIDERS: Final = kmock.resource(GRID_GROUP, GRID_VERSION, "inferenceproviders")

NAMESPACES: Final = kmock.resource("", "v1", "namespaces")
CONFIGMAPS: Final = kmock.resource("", "v1", "configmaps")
SECRETS: Final = kmock.resource("", "v1", "secrets")
EVENTS: Final = kmock.resource("", "v1", "events")
CRDS: Final = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")

# The namespaces a fresh cluster has.
STANDARD_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")

_CUSTOM_RESOURCE_VERBS: Final = frozenset(
    {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
)
_GRID_KINDS: Final = {
    GRID_NETWORKS: ("GridNetwork", "gridnetwork"),
    GRID_SITES: ("GridSite", "gridsite"),
    INFERENCE_PROVIDERS: ("InferenceProvider", "inferenceprovider"),
}

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The alphabet and length the API server uses for generateName suffixes.
_NAME_SUFFIX_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_NAME_SUFFIX_LENGTH: Final = 5

# Keys of an object that are not part of its desired state: changing them leaves
# metadata.generation alone.
_NON_SPEC_KEYS: Final = frozenset({"apiVersion", "kind", "metadata"})
# Metadata the server owns: whatever a client sends for these is replaced.
_SERVER_OWNED_METADATA: Final = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)

# How often an idle watch stream checks whether its client is still there.
_WATCH_POLL: Final = 0.1

_JSON_PATCH: Final = "application/json-patch+json"
_MERGE_PATCH: Final = "application/merge-patch+json"
_STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
_APPLY_PATCH: Final = "application/apply-patch+yaml"


def _api_error(status: int, reason: str, message: str, **details: Any) -> kmock.KubernetesError:
    """A ``Status`` failure as the API server sends it (kopf and the official client map the
    HTTP code to their own exception types)."""
    return kmock.KubernetesError(
        status=status, reason=reason, message=message, details=details or {"causes": []}
    )


def _client_gone(request: kmock.Request) -> bool:
    """Whether the client of a streaming request has hung up. aiohttp does not cancel a
    handler when its client disconnects, so an idle watch stream checks for itself (kmock
    keeps aiohttp's request in a private field)."""
    raw = request._raw_request
    transport = raw.transport if raw is not None else None
    return transport is None or transport.is_closing()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch: ``null`` deletes a key, objects merge
    recursively, anything else (lists included) replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: JsonObject = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _desired_state(obj: Mapping[str, Any], has_status_subresource: bool) -> JsonObject:
    ignored = _NON_SPEC_KEYS | ({"status"} if has_status_subresource else set())
    return {key: value for key, value in obj.items() if key not in ignored}


@dataclass(frozen=True)
class Change:
    """One entry of the server's change log: what a watch stream replays."""

    revision: int
    resource: kmock.resource
    namespace: str | None
    kind: str  # ADDED, MODIFIED or DELETED
    obj: JsonObject
    previous: JsonObject | None


@dataclass(frozen=True)
class _Outcome:
    status: int
    body: JsonObject


@attrs.define(kw_only=True)
class GridKubernetesEmulator(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator with real API-server semantics for writes, lists and
    watches (see the module docstring). State changes are plain synchronous code on the
    server's event loop, so each request is applied atomically without locks."""

    _revision: int = attrs.field(default=0, init=False)
    _changes: list[Change] = attrs.field(factory=list, init=False)
    _wakeup: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)
    _outcomes: dict[kmock.Request, _Outcome] = attrs.field(factory=dict, init=False)
    _open_watches: collections.Counter[kmock.resource] = attrs.field(
        factory=collections.Counter, init=False
    )
    _custom_resources: set[kmock.resource] = attrs.field(factory=set, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # kmock guesses no Kubernetes action for PUT; serve replacements like other writes.
        self.fallback[kmock.method.PUT] << self._serve_outcome

    # -- public helpers -----------------------------------------------------------------

    @property
    def revision(self) -> int:
        """The latest resourceVersion handed out."""
        return self._revision

    def watch_count(self, resource: kmock.resource) -> int:
        """How many watch streams on ``resource`` are open right now."""
        return self._open_watches[resource]

    def register_custom_resource(
        self,
        resource: kmock.resource,
        *,
        kind: str,
        singular: str,
        namespaced: bool,
        subresources: Iterable[str] = ("status",),
        shortnames: Iterable[str] = (),
        categories: Iterable[str] = (),
    ) -> None:
        """Serve a custom resource, as installing its CRD would."""
        self.resources[resource] = kmock.ResourceInfo(
            kind=kind,
            singular=singular,
            namespaced=namespaced,
            verbs=_CUSTOM_RESOURCE_VERBS,
            subresources=set(subresources),
            shortnames=set(shortnames),
            categories=set(categories),
        )
        self._custom_resources.add(resource)

    def install_crd(self, crd: Mapping[str, Any]) -> None:
        """Serve every served version of a CustomResourceDefinition manifest and store the
        CRD object itself, as ``kubectl apply -f crd.yaml`` does on a cluster."""
        self.create_object(CRDS, crd)

    def create_object(
        self, resource: kmock.resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> JsonObject:
        """Create an object without going through HTTP (same rules, same watch events)."""
        if resource not in self.resources:
            raise KeyError(f"{resource} is not served: register it first")
        ns = namespace or body.get("metadata", {}).get("namespace")
        return self._commit_create(resource, ns, self._prepare_create(resource, ns, body))

    def get_object(
        self, resource: kmock.resource, name: str, namespace: str | None = None
    ) -> JsonObject | None:
        """The stored object (a copy), or None when it does not exist."""
        current = self._current(resource, namespace, name) if resource in self.resources else None
        return copy.deepcopy(current)

    # -- request handling ---------------------------------------------------------------

    async def _handle(self, request: kmock.Request) -> Any:
        """Apply writes to the stored state, then let kmock route the request to a response.

        kmock's own emulator mutates state in this method too; its simplistic version is
        skipped on purpose (``super(KubernetesEmulator, ...)``) and replaced by ours.
        """
        base_handle = super(kmock.KubernetesEmulator, self)._handle
        resource = request.resource
        if resource is None or resource.plural is None:
            return await base_handle(request)  # discovery and non-Kubernetes paths
        try:
            if request.action in (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE):
                self._outcomes[request] = self._apply_write(request)
            elif request.method == kmock.method.PUT and request.name is not None:
                self._outcomes[request] = self._replace(request)
            elif request.action is None:
                raise _api_error(
                    405,
                    "MethodNotAllowed",
                    f"{request.method} {request.url.path} is not supported by the emulator",
                )
        except kmock.KubernetesError as error:
            # A refused request is a normal answer of the API, not a failure of the server.
            return await self._render_error(error)
        try:
            return await base_handle(request)
        finally:
            self._outcomes.pop(request, None)

    async def _serve_outcome(self, request: kmock.Request) -> Response:
        outcome = self._outcomes[request]
        return Response(status=outcome.status, payload=outcome.body)

    async def _serve_create(self, request: kmock.Request) -> Response:
        return await self._serve_outcome(request)

    async def _serve_update(self, request: kmock.Request) -> Response:
        return await self._serve_outcome(request)

    async def _serve_delete(self, request: kmock.Request) -> Response:
        return await self._serve_outcome(request)

    async def _serve_fetch(self, request: kmock.Request) -> JsonObject:
        resource = self._served_resource(request)
        if request.subresource not in (None, "status"):
            raise self._not_found(resource, request.name)
        current = self._current(resource, request.namespace, request.name)
        if current is None:
            raise self._not_found(resource, request.name)
        return copy.deepcopy(current)

    async def _serve_list(self, request: kmock.Request) -> JsonObject:
        resource = self._served_resource(request)
        matches = self._selection(request, resource)
        info = self.resources[resource]
        items = [
            copy.deepcopy(obj)
            for (res, namespace, _), stored in self.objects.items()
            if res == resource and not stored.deleted
            for obj in [stored.raw]
            if request.namespace in (None, namespace) and matches(obj)
        ]
        return {
            "apiVersion": self._api_version(resource),
            "kind": f"{info.kind}List",
            "metadata": {"resourceVersion": str(self._revision)},
            "items": items,
        }

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[JsonObject | bytes]:
        # Everything up to the first yield runs before the response starts, so errors here
        # still become proper HTTP error statuses.
        resource = self._served_resource(request)
        matches = self._selection(request, resource)
        since, initial = self._watch_start(request, resource, matches)
        timeout = request.params.get("timeoutSeconds")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(timeout) if timeout else None
        position = self._first_change_after(since)

        self._open_watches[resource] += 1
        try:
            yield b""  # send the headers: the stream is open
            for event in initial:
                yield event
            while True:
                while position < len(self._changes):
                    change = self._changes[position]
                    position += 1
                    replayed = self._watch_event(request, resource, matches, change)
                    if replayed is not None:
                        yield replayed
                wakeup = self._wakeup
                remaining = _WATCH_POLL if deadline is None else deadline - loop.time()
                if remaining <= 0 or _client_gone(request):
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wakeup.wait(), min(remaining, _WATCH_POLL))
        finally:
            self._open_watches[resource] -= 1

    # -- reads --------------------------------------------------------------------------

    def _served_resource(self, request: kmock.Request) -> kmock.resource:
        resource = request.resource
        if resource is None or resource not in self.resources:
            raise _api_error(404, "NotFound", "the server could not find the requested resource")
        return resource

    def _selection(self, request: kmock.Request, resource: kmock.resource) -> ObjectPredicate:
        try:
            labels = parse_label_selector(request.params.get("labelSelector"))
            fields = parse_field_selector(
                request.params.get("fieldSelector"), self.resources[resource].kind
            )
        except SelectorError as error:
            raise _api_error(400, "BadRequest", str(error)) from None
        return lambda obj: labels(obj) and fields(obj)

    def _watch_start(
        self, request: kmock.Request, resource: kmock.resource, matches: ObjectPredicate
    ) -> tuple[int, list[JsonObject]]:
        """Where a watch starts in the change log, and the synthetic events it opens with."""
        requested = request.params.get("resourceVersion") or "0"
        if not requested.isdigit():
            raise _api_error(400, "BadRequest", f"invalid resourceVersion {requested!r}")
        send_initial = request.params.get("sendInitialEvents") == "true"
        if requested != "0" and not send_initial:
            return int(requested), []
        # No version (or "0"): the current state as ADDED events, then changes from now on.
        initial: list[JsonObject] = [
            {"type": "ADDED", "object": copy.deepcopy(stored.raw)}
            for (res, namespace, _), stored in self.objects.items()
            if res == resource and not stored.deleted
            if request.namespace in (None, namespace) and matches(stored.raw)
        ]
        if send_initial:
            # The end of the initial events is announced by an annotated bookmark.
            bookmark = {
                "apiVersion": self._api_version(resource),
                "kind": self.resources[resource].kind,
                "metadata": {
                    "resourceVersion": str(self._revision),
                    "annotations": {"k8s.io/initial-events-end": "true"},
                },
            }
            initial.append({"type": "BOOKMARK", "object": bookmark})
        return self._revision, initial

    def _first_change_after(self, revision: int) -> int:
        for index in range(len(self._changes) - 1, -1, -1):
            if self._changes[index].revision <= revision:
                return index + 1
        return 0

    def _watch_event(
        self,
        request: kmock.Request,
        resource: kmock.resource,
        matches: ObjectPredicate,
        change: Change,
    ) -> JsonObject | None:
        if change.resource != resource or request.namespace not in (None, change.namespace):
            return None
        now_matching = matches(change.obj)
        was_matching = change.previous is not None and matches(change.previous)
        if change.kind == "MODIFIED" and now_matching != was_matching:
            # An object entering or leaving a selection is an addition or a removal for
            # that watch, as on a real server.
            kind = "ADDED" if now_matching else "DELETED"
            return {"type": kind, "object": copy.deepcopy(change.obj)}
        if not now_matching:
            return None
        return {"type": change.kind, "object": copy.deepcopy(change.obj)}

    # -- writes -------------------------------------------------------------------------

    def _apply_write(self, request: kmock.Request) -> _Outcome:
        resource = self._served_resource(request)
        dry_run = request.params.get("dryRun") == "All"
        if request.action == kmock.action.CREATE:
            if request.subresource is not None:
                raise _api_error(405, "MethodNotAllowed", "cannot create a subresource")
            body = self._json_object(request)
            prepared = self._prepare_create(resource, request.namespace, body)
            if dry_run:
                return _Outcome(201, prepared)
            return _Outcome(201, self._commit_create(resource, request.namespace, prepared))
        if request.action == kmock.action.UPDATE:
            return self._patch(request, resource, dry_run=dry_run)
        return self._delete(request, resource, dry_run=dry_run)

    def _json_object(self, request: kmock.Request) -> JsonObject:
        if not isinstance(request.data, Mapping):
            raise _api_error(400, "BadRequest", "the request body must be a JSON object")
        return dict(request.data)

    def _content_type(self, request: kmock.Request) -> str:
        for header, value in request.headers.items():
            if header.lower() == "content-type":
                return value.split(";", 1)[0].strip().lower()
        return ""

    def _prepare_create(
        self, resource: kmock.resource, namespace: str | None, body: Mapping[str, Any]
    ) -> JsonObject:
        info = self.resources[resource]
        obj = copy.deepcopy(dict(body))
        self._check_type(resource, obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise _api_error(400, "BadRequest", "metadata must be an object")
        if meta.get("resourceVersion"):
            raise _api_error(
                422, "Invalid", "metadata.resourceVersion: must not be set on objects to be created"
            )
        if info.namespaced:
            if namespace is None:
                raise _api_error(400, "BadRequest", "the namespace of the request is required")
            if meta.get("namespace") not in (None, namespace):
                raise _api_error(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                )
            self._check_namespace_exists(namespace)
            meta["namespace"] = namespace
        else:
            if namespace is not None:
                raise self._not_found(resource, None)
            meta.pop("namespace", None)
        meta["name"] = self._name_for(resource, meta)
        if self._current(resource, namespace, meta["name"]) is not None:
            raise _api_error(
                409,
                "AlreadyExists",
                f'{resource.plural} "{meta["name"]}" already exists',
                name=meta["name"],
                kind=resource.plural,
            )
        for key in _SERVER_OWNED_METADATA:
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        if "status" in info.subresources:
            obj.pop("status", None)  # status is written through its subresource only
        if resource == NAMESPACES:
            obj["status"] = {"phase": "Active"}
        if resource == CRDS:
            self._crd_resources(obj)  # refuse a malformed CRD before storing anything
            obj["status"] = self._crd_status(obj)
        return obj

    def _check_type(self, resource: kmock.resource, obj: JsonObject) -> None:
        expected_api_version = self._api_version(resource)
        expected_kind = self.resources[resource].kind
        if obj.get("apiVersion", expected_api_version) != expected_api_version:
            raise _api_error(
                400,
                "BadRequest",
                f"apiVersion {obj.get('apiVersion')!r} does not match the request "
                f"({expected_api_version})",
            )
        if obj.get("kind", expected_kind) != expected_kind:
            raise _api_error(
                400, "BadRequest", f"kind {obj.get('kind')!r} does not match the request"
            )
        obj["apiVersion"] = expected_api_version
        obj["kind"] = expected_kind

    def _name_for(self, resource: kmock.resource, meta: Mapping[str, Any]) -> str:
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise _api_error(422, "Invalid", "metadata.name: name or generateName is required")
            suffix = "".join(
                secrets.choice(_NAME_SUFFIX_ALPHABET) for _ in range(_NAME_SUFFIX_LENGTH)
            )
            name = f"{prefix}{suffix}"
        pattern, limit = (_DNS_LABEL, 63) if resource == NAMESPACES else (_DNS_SUBDOMAIN, 253)
        if not isinstance(name, str) or len(name) > limit or not pattern.match(name):
            raise _api_error(
                422,
                "Invalid",
                f"metadata.name: Invalid value: {name!r}: must be a lowercase RFC 1123 name",
            )
        return name

    def _check_namespace_exists(self, namespace: str) -> None:
        if NAMESPACES in self.resources and self._current(NAMESPACES, None, namespace) is None:
            raise _api_error(404, "NotFound", f'namespaces "{namespace}" not found')

    def _commit_create(
        self, resource: kmock.resource, namespace: str | None, obj: JsonObject
    ) -> JsonObject:
        key = (
            resource,
            namespace if self.resources[resource].namespaced else None,
            obj["metadata"]["name"],
        )
        self._bump(obj)
        if key in self.objects:
            self.objects[key].history.append(obj)
        else:
            self.objects[key] = obj
        if resource == CRDS:
            self._serve_crd(obj)
        self._record(resource, key[1], "ADDED", obj, None)
        return copy.deepcopy(obj)

    def _patch(
        self, request: kmock.Request, resource: kmock.resource, *, dry_run: bool
    ) -> _Outcome:
        current = self._existing(request, resource)
        self._check_subresource(request, resource)
        content_type = self._content_type(request)
        if content_type == _JSON_PATCH:
            if not isinstance(request.data, list):
                raise _api_error(400, "BadRequest", "a JSON patch must be a JSON array")
            try:
                patched = jsonpatch.apply_patch(current, request.data, in_place=False)
            except jsonpatch.JsonPatchTestFailed as error:
                raise _api_error(422, "Invalid", f"the JSON patch test failed: {error}") from None
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
                raise _api_error(
                    422, "Invalid", f"the JSON patch cannot be applied: {error}"
                ) from None
        elif content_type == _MERGE_PATCH or (
            content_type == _STRATEGIC_MERGE_PATCH and resource not in self._custom_resources
        ):
            patched = merge_patch(current, self._json_object(request))
        elif content_type == _STRATEGIC_MERGE_PATCH:
            raise _api_error(
                415,
                "UnsupportedMediaType",
                "strategic merge patches are not supported for custom resources",
            )
        elif content_type == _APPLY_PATCH:
            raise _api_error(
                415, "UnsupportedMediaType", "server-side apply is not supported by the emulator"
            )
        else:
            raise _api_error(
                415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}"
            )
        if not isinstance(patched, dict):
            raise _api_error(422, "Invalid", "the patch must leave an object")
        return self._update(request, resource, current, patched, dry_run=dry_run)

    def _replace(self, request: kmock.Request) -> _Outcome:
        resource = self._served_resource(request)
        current = self._existing(request, resource)
        self._check_subresource(request, resource)
        body = copy.deepcopy(self._json_object(request))
        meta = body.setdefault("metadata", {})
        if meta.get("name") != request.name:
            raise _api_error(400, "BadRequest", "the name of the object does not match the URL")
        if not meta.get("resourceVersion") and resource in self._custom_resources:
            raise _api_error(
                422, "Invalid", "metadata.resourceVersion: must be specified for an update"
            )
        meta.setdefault("resourceVersion", current["metadata"]["resourceVersion"])
        for key in ("uid", "namespace"):
            if key in current["metadata"]:
                meta.setdefault(key, current["metadata"][key])
        dry_run = request.params.get("dryRun") == "All"
        return self._update(request, resource, current, body, dry_run=dry_run)

    def _existing(self, request: kmock.Request, resource: kmock.resource) -> JsonObject:
        current = self._current(resource, request.namespace, request.name)
        if current is None:
            raise self._not_found(resource, request.name)
        return current

    def _check_subresource(self, request: kmock.Request, resource: kmock.resource) -> None:
        sub = request.subresource
        if sub is not None and (
            sub != "status" or sub not in self.resources[resource].subresources
        ):
            raise self._not_found(resource, request.name)

    def _update(
        self,
        request: kmock.Request,
        resource: kmock.resource,
        current: JsonObject,
        proposed: JsonObject,
        *,
        dry_run: bool,
    ) -> _Outcome:
        info = self.resources[resource]
        old_meta = current["metadata"]
        new_meta = proposed.get("metadata")
        if not isinstance(new_meta, dict):
            raise _api_error(422, "Invalid", "metadata must be an object")
        if (
            new_meta.get("resourceVersion", old_meta["resourceVersion"])
            != old_meta["resourceVersion"]
        ):
            raise _api_error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.plural} "{request.name}": the object '
                "has been modified; please apply your changes to the latest version and try again",
            )
        for field in ("name", "namespace", "uid"):
            if new_meta.get(field) != old_meta.get(field):
                raise _api_error(422, "Invalid", f"metadata.{field}: field is immutable")

        has_status = "status" in info.subresources
        if has_status and request.subresource == "status":
            result = copy.deepcopy(current)
            result.pop("status", None)
            if "status" in proposed:
                result["status"] = copy.deepcopy(proposed["status"])
        else:
            result = copy.deepcopy(proposed)
            if has_status:
                result.pop("status", None)
                if "status" in current:
                    result["status"] = copy.deepcopy(current["status"])
            for field in _SERVER_OWNED_METADATA:
                result["metadata"].pop(field, None)
                if field in old_meta:
                    result["metadata"][field] = old_meta[field]
            result["apiVersion"], result["kind"] = current["apiVersion"], current["kind"]

        if old_meta.get("deletionTimestamp"):
            added = set(result["metadata"].get("finalizers") or []) - set(
                old_meta.get("finalizers") or []
            )
            if added:
                raise _api_error(
                    422,
                    "Invalid",
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the "
                    "object is being deleted",
                )
        if result == current:
            return _Outcome(200, copy.deepcopy(current))  # a no-op writes nothing
        if _desired_state(result, has_status) != _desired_state(current, has_status):
            result["metadata"]["generation"] = old_meta.get("generation", 0) + 1
        if dry_run:
            return _Outcome(200, result)

        key = self._key(resource, request.namespace, request.name)
        self._bump(result)
        self.objects[key].history.append(result)
        self._record(resource, key[1], "MODIFIED", result, current)
        if result["metadata"].get("deletionTimestamp") and not result["metadata"].get("finalizers"):
            self._remove(resource, key)
        return _Outcome(200, copy.deepcopy(result))

    def _delete(
        self, request: kmock.Request, resource: kmock.resource, *, dry_run: bool
    ) -> _Outcome:
        if request.subresource is not None:
            raise _api_error(405, "MethodNotAllowed", "cannot delete a subresource")
        current = self._existing(request, resource)
        options = request.data if isinstance(request.data, Mapping) else {}
        preconditions = options.get("preconditions") or {}
        for field in ("uid", "resourceVersion"):
            expected = preconditions.get(field)
            if expected is not None and expected != current["metadata"].get(field):
                raise _api_error(
                    409, "Conflict", f"Precondition failed: {field} in precondition: {expected}"
                )
        orphan = options.get("propagationPolicy") == "Orphan" or options.get("orphanDependents")
        if dry_run or current["metadata"].get("deletionTimestamp"):
            return _Outcome(200, copy.deepcopy(current))
        key = self._key(resource, request.namespace, request.name)
        if current["metadata"].get("finalizers"):
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = _now()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            self._bump(marked)
            self.objects[key].history.append(marked)
            self._record(resource, key[1], "MODIFIED", marked, current)
            return _Outcome(200, copy.deepcopy(marked))
        removed = self._remove(resource, key, orphan_dependents=bool(orphan))
        if resource in self._custom_resources:
            return _Outcome(200, removed)
        details = {"name": request.name, "kind": resource.plural, "uid": current["metadata"]["uid"]}
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }
        return _Outcome(200, status)

    def _remove(
        self,
        resource: kmock.resource,
        key: tuple[kmock.resource, str | None, str],
        *,
        orphan_dependents: bool = False,
    ) -> JsonObject:
        """Delete an object for good, then what depended on it (garbage collection)."""
        final = copy.deepcopy(self.objects[key].raw)
        self._bump(final)
        self.objects[key].delete()
        self._record(resource, key[1], "DELETED", final, None)
        if resource == CRDS:
            self._unserve_crd(final)
        elif resource == NAMESPACES:
            self._remove_namespace_contents(key[2])
        self._collect_dependents(final["metadata"]["uid"], orphan=orphan_dependents)
        return final

    def _collect_dependents(self, owner_uid: str, *, orphan: bool) -> None:
        """Delete the objects whose last owner is gone; drop the dangling reference from
        those that still have another live owner (or from all, when orphaning)."""
        live_uids = {
            stored.raw["metadata"]["uid"] for stored in self.objects.values() if not stored.deleted
        }
        for (resource, namespace, name), stored in list(self.objects.items()):
            if stored.deleted:
                continue
            obj = stored.raw
            refs = obj["metadata"].get("ownerReferences") or []
            if not any(ref.get("uid") == owner_uid for ref in refs):
                continue
            remaining = [ref for ref in refs if ref.get("uid") in live_uids]
            if remaining or orphan:
                updated = copy.deepcopy(obj)
                updated["metadata"]["ownerReferences"] = [
                    r for r in refs if r.get("uid") != owner_uid
                ]
                self._bump(updated)
                stored.history.append(updated)
                self._record(resource, namespace, "MODIFIED", updated, obj)
            elif obj["metadata"].get("finalizers"):
                if not obj["metadata"].get("deletionTimestamp"):
                    marked = copy.deepcopy(obj)
                    marked["metadata"]["deletionTimestamp"] = _now()
                    marked["metadata"]["deletionGracePeriodSeconds"] = 0
                    self._bump(marked)
                    stored.history.append(marked)
                    self._record(resource, namespace, "MODIFIED", marked, obj)
            else:
                self._remove(resource, (resource, namespace, name))

    def _remove_namespace_contents(self, namespace: str) -> None:
        for (resource, ns, name), stored in list(self.objects.items()):
            if ns == namespace and not stored.deleted:
                self._remove(resource, (resource, ns, name))

    # -- CRDs ---------------------------------------------------------------------------

    def _crd_status(self, crd: Mapping[str, Any]) -> JsonObject:
        names = crd.get("spec", {}).get("names", {})
        conditions = [
            {
                "type": kind,
                "status": "True",
                "lastTransitionTime": _now(),
                "reason": reason,
                "message": "",
            }
            for kind, reason in (
                ("NamesAccepted", "NoConflicts"),
                ("Established", "InitialNamesAccepted"),
            )
        ]
        return {
            "acceptedNames": copy.deepcopy(names),
            "conditions": conditions,
            "storedVersions": [
                version["name"]
                for version in crd.get("spec", {}).get("versions", [])
                if version.get("storage")
            ],
        }

    def _crd_resources(
        self, crd: Mapping[str, Any]
    ) -> list[tuple[kmock.resource, Mapping[str, Any]]]:
        spec = crd.get("spec") or {}
        group = spec.get("group")
        plural = (spec.get("names") or {}).get("plural")
        versions = spec.get("versions") or []
        if not group or not plural or not versions:
            raise _api_error(
                422, "Invalid", "spec.group, spec.names.plural and spec.versions are required"
            )
        if crd["metadata"]["name"] != f"{plural}.{group}":
            raise _api_error(
                422, "Invalid", "metadata.name must be spec.names.plural + '.' + spec.group"
            )
        return [
            (kmock.resource(group, version["name"], plural), version)
            for version in versions
            if version.get("served", True)
        ]

    def _serve_crd(self, crd: Mapping[str, Any]) -> None:
        names = crd["spec"]["names"]
        for resource, version in self._crd_resources(crd):
            self.register_custom_resource(
                resource,
                kind=names["kind"],
                singular=names.get("singular") or names["kind"].lower(),
                namespaced=crd["spec"].get("scope") == "Namespaced",
                subresources=(version.get("subresources") or {}).keys(),
                shortnames=names.get("shortNames") or (),
                categories=names.get("categories") or (),
            )

    def _unserve_crd(self, crd: Mapping[str, Any]) -> None:
        for resource, _ in self._crd_resources(crd):
            for key, stored in list(self.objects.items()):
                if key[0] == resource and not stored.deleted:
                    self._remove(resource, key)
            del self.resources[resource]
            self._custom_resources.discard(resource)

    # -- bookkeeping --------------------------------------------------------------------

    def _api_version(self, resource: kmock.resource) -> str:
        return f"{resource.group}/{resource.version}" if resource.group else str(resource.version)

    def _key(
        self, resource: kmock.resource, namespace: str | None, name: str | None
    ) -> tuple[kmock.resource, str | None, str]:
        assert name is not None  # every caller has resolved the object by name already
        return (resource, namespace if self.resources[resource].namespaced else None, name)

    def _current(
        self, resource: kmock.resource, namespace: str | None, name: str | None
    ) -> JsonObject | None:
        if name is None:
            return None
        key = self._key(resource, namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return self.objects[key].raw

    def _not_found(self, resource: kmock.resource, name: str | None) -> kmock.KubernetesError:
        return _api_error(
            404,
            "NotFound",
            f'{resource.plural} "{name}" not found',
            name=name,
            kind=resource.plural,
        )

    def _bump(self, obj: JsonObject) -> None:
        self._revision += 1
        obj["metadata"]["resourceVersion"] = str(self._revision)

    def _record(
        self,
        resource: kmock.resource,
        namespace: str | None,
        kind: str,
        obj: JsonObject,
        previous: JsonObject | None,
    ) -> None:
        self._changes.append(
            Change(
                revision=self._revision,
                resource=resource,
                namespace=namespace,
                kind=kind,
                obj=copy.deepcopy(obj),
                previous=copy.deepcopy(previous),
            )
        )
        # Wake every waiting watch stream; the next change gets a fresh event.
        self._wakeup.set()
        self._wakeup = asyncio.Event()


def register_builtin_resources(emulator: GridKubernetesEmulator) -> None:
    """Serve the built-in kinds of a recent Kubernetes (ConfigMaps, Secrets, Events,
    Namespaces, CRDs, ...) and create the namespaces a fresh cluster has."""
    with warnings.catch_warnings():
        # kmock 0.8 reads its bundled data with a deprecated importlib API.
        warnings.filterwarnings("ignore", "read_binary is deprecated", DeprecationWarning)
        emulator.resources.load_bundled()
    for namespace in STANDARD_NAMESPACES:
        if emulator.get_object(NAMESPACES, namespace) is None:
            emulator.create_object(NAMESPACES, {"metadata": {"name": namespace}})


def register_grid_resources(emulator: GridKubernetesEmulator) -> None:
    """Serve Grid's three cluster-scoped custom resources, each with a status subresource."""
    for resource, (kind, singular) in _GRID_KINDS.items():
        emulator.register_custom_resource(
            resource, kind=kind, singular=singular, namespaced=False, subresources=("status",)
        )
