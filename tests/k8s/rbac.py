"""Check API calls against RBAC manifests: which requests that the emulator served would a
real API server have refused to a given ServiceAccount?

This proves least privilege from the other side: the rules in ``deploy/`` must allow every
call the operator actually makes (and tests show they allow little else). The same check
reads a real API server's requests (:class:`ServedRequest`, from its audit log), where the
server also enforces the rules itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kmock

Manifest = Mapping[str, Any]
ALL_NAMESPACES = "*"


@dataclass(frozen=True)
class Access:
    """One API call as RBAC sees it."""

    verb: str
    group: str
    resource: str  # "plural" or "plural/subresource"
    namespace: str | None  # None: cluster-scoped or across all namespaces
    name: str | None

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named}{where}"


@dataclass(frozen=True)
class _Rule:
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]

    def allows(self, access: Access) -> bool:
        return (
            access.group in self.groups
            and access.resource in self.resources
            and access.verb in self.verbs
            and (not self.names or access.name in self.names)
        )


@dataclass(frozen=True)
class ServedRequest:
    """One request as the API server saw it: kmock's request log or a real server's audit
    log (:mod:`k8s.audit`)."""

    access: Access | None  # None: discovery and other non-resource paths
    user_agent: str
    status: int | None  # the answer's code; None where unknown (kmock logs requests only)


_VERBS_BY_METHOD = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def access_of(request: kmock.Request) -> Access | None:
    """How RBAC names a request; None for discovery and other non-resource paths, which
    every authenticated client may read."""
    resource = request.resource
    if resource is None or resource.plural is None:
        return None
    if request.action == kmock.action.WATCH:
        verb = "watch"
    elif request.method == kmock.method.GET:
        verb = "get" if request.name else "list"
    else:
        verb = _VERBS_BY_METHOD.get(request.method.value, request.method.value.lower())
    plural = f"{resource.plural}/{request.subresource}" if request.subresource else resource.plural
    return Access(verb, resource.group or "", plural, request.namespace, request.name)


@dataclass(frozen=True)
class Permissions:
    """What one ServiceAccount may do, from Roles, ClusterRoles and their bindings."""

    cluster_wide: tuple[_Rule, ...]
    namespaced: Mapping[str, tuple[_Rule, ...]]

    @classmethod
    def of(cls, manifests: Iterable[Manifest], namespace: str, name: str) -> Permissions:
        objects = list(manifests)
        cluster_roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
        roles = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): o
            for o in objects
            if o["kind"] == "Role"
        }
        cluster_wide: list[_Rule] = []
        namespaced: dict[str, list[_Rule]] = {}
        for binding in objects:
            if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            if not any(
                subject.get("kind") == "ServiceAccount"
                and subject.get("name") == name
                and subject.get("namespace") == namespace
                for subject in binding.get("subjects") or []
            ):
                continue
            ref = binding["roleRef"]
            if ref["kind"] == "ClusterRole":
                role = cluster_roles[ref["name"]]
            else:
                role = roles[(binding["metadata"]["namespace"], ref["name"])]
            rules = [_rule(rule) for rule in role.get("rules") or []]
            if binding["kind"] == "ClusterRoleBinding":
                cluster_wide.extend(rules)
            else:
                namespaced.setdefault(binding["metadata"]["namespace"], []).extend(rules)
        return cls(tuple(cluster_wide), {ns: tuple(rules) for ns, rules in namespaced.items()})

    def allows(self, access: Access) -> bool:
        if any(rule.allows(access) for rule in self.cluster_wide):
            return True
        if access.namespace is None:
            return False  # namespaced grants never cover cluster-wide calls
        return any(rule.allows(access) for rule in self.namespaced.get(access.namespace, ()))

    def denied(self, requests: Iterable[kmock.Request | ServedRequest]) -> list[str]:
        """The calls among ``requests`` that these permissions would have refused."""
        refused = []
        for request in requests:
            access = request.access if isinstance(request, ServedRequest) else access_of(request)
            if access is not None and not self.allows(access):
                refused.append(str(access))
        return sorted(set(refused))


def _rule(rule: Mapping[str, Any]) -> _Rule:
    if rule.get("nonResourceURLs"):
        raise ValueError("nonResourceURLs rules are not audited")
    return _Rule(
        groups=frozenset(rule.get("apiGroups") or ()),
        resources=frozenset(rule.get("resources") or ()),
        verbs=frozenset(rule.get("verbs") or ()),
        names=frozenset(rule.get("resourceNames") or ()),
    )


def served_requests(emulator: kmock.KubernetesEmulator) -> list[kmock.Request]:
    """Every request the emulator received, in order."""
    return [item for item in emulator if isinstance(item, kmock.Request)]


def as_served(request: kmock.Request) -> ServedRequest:
    """A request of kmock's log as :class:`ServedRequest` names it."""
    return ServedRequest(access_of(request), request.headers.get("User-Agent", ""), None)
