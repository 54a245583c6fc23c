"""A model of how the Praxis AI gateway routes a request with a configuration Grid renders,
written from the gateway's documentation (its ``headers``, ``intelligent_route``,
``credential_inject``, ``credential_injection`` and ``load_balancer`` filters and its
configuration checks).

It is a judge of Grid's output in tests that cannot run the gateway itself: a
configuration the gateway would refuse raises :class:`Refused`; a request gets the status,
cluster and upstream headers the gateway would give it. Filters do not edit a request's
headers one after the other: each queues removals, sets and additions, and the gateway
applies all removals, then all sets, then all additions. The real gateway remains the
reference (see docs/overlay.md for how Grid's output was run through it).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grid.render.validate import ExpectedScope, validate_overlay

_DNS_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$"
)
_STATIC_CANDIDATE_FIELDS = {"kind", "name", "site", "cluster", "fresh", "credential"}
_STRATEGIES = {"bearer_token", "apikey"}
_HEADER_RULES = {
    "request_add",
    "request_remove",
    "request_set",
    "response_add",
    "response_remove",
    "response_set",
}


class Refused(Exception):
    """The gateway would refuse to start with this configuration."""


@dataclass(frozen=True)
class Upstream:
    """What one request became."""

    status: int
    cluster: str | None = None
    candidate: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    """Headers the upstream request carries of those the client sent and those the gateway
    sets (names lowercase); secret values appear as ``<file:path>``."""


@dataclass
class _Mutations:
    """A request's queued header mutations, applied remove -> set -> add."""

    remove: list[str] = field(default_factory=list)
    set: list[tuple[str, str]] = field(default_factory=list)
    add: list[tuple[str, str]] = field(default_factory=list)

    def apply(self, headers: Mapping[str, str]) -> dict[str, str]:
        result = dict(headers)
        for name in self.remove:
            result.pop(name, None)
        for name, value in self.set:
            result[name] = value
        for name, value in self.add:
            result[name] = value
        return result


def _sensitive(host: str) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        lower = host.lower()
        return (
            lower == "localhost"
            or lower.endswith((".internal", ".local"))
            or lower.startswith("metadata.")
        )
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_link_local


def _host_of(address: str) -> str:
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    return address.rsplit(":", 1)[0]


class GatewayModel:
    """One gateway process: its configuration, its current overlay snapshot and its session
    bindings."""

    def __init__(self, config: Mapping[str, Any], files: Mapping[str, str]) -> None:
        """``files`` maps paths inside the gateway (the mounted overlay) to their text."""
        chains = config["filter_chains"]
        if len(chains) != 1:
            raise Refused("the model knows one filter chain")
        filters = chains[0]["filters"]
        by_name: dict[str, Mapping[str, Any]] = {}
        for entry in filters:
            by_name[entry["filter"]] = entry
        order = [entry["filter"] for entry in filters]
        if order[-1] != "load_balancer":
            raise Refused("load_balancer must close the chain")
        allow_private = bool(
            config.get("insecure_options", {}).get("allow_private_endpoints", False)
        )
        self.clusters: dict[str, Mapping[str, Any]] = {}
        for cluster in by_name["load_balancer"]["clusters"]:
            name = cluster["name"]
            if name in self.clusters:
                raise Refused(f"duplicate cluster {name}")
            for endpoint in cluster["endpoints"]:
                if _sensitive(_host_of(endpoint)) and not allow_private:
                    raise Refused(f"cluster '{name}': endpoint '{endpoint}' is sensitive")
            tls = cluster.get("tls")
            if tls is not None:
                sni = tls.get("sni")
                if sni is None and tls.get("verify", True):
                    raise Refused(f"cluster '{name}': TLS with verification needs sni")
                if sni is not None and (not _DNS_NAME.match(sni) or _is_ip(sni)):
                    raise Refused(f"cluster '{name}': sni must be a valid DNS hostname: {sni}")
            self.clusters[name] = cluster
        self.route = self._route_filter(filters)
        self.model_header = self.route.get("model_header", "X-Model")
        self.credentials: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for entry in filters:
            if entry["filter"] in ("credential_inject", "grid_credential_inject"):
                for credential in entry["credentials"]:
                    strategy = credential.get("strategy", "bearer_token")
                    if strategy not in _STRATEGIES:
                        raise Refused(f"credential_inject: unsupported strategy '{strategy}'")
                    if (strategy == "apikey") != ("header" in credential):
                        raise Refused("credential_inject: header goes with apikey only")
                    key = (credential["namespace"], credential["name"], credential["key"])
                    self.credentials[key] = credential
        self.header_rules: list[Mapping[str, Any]] = []
        for entry in filters:
            if entry["filter"] == "headers":
                unknown = set(entry) - {"filter", *_HEADER_RULES}
                if unknown:
                    raise Refused(f"headers: unknown field {sorted(unknown)[0]}")
                self.header_rules.append(entry)
        self.host_headers: dict[str, tuple[str, str]] = {}
        if "credential_injection" in by_name:
            for rule in by_name["credential_injection"]["clusters"]:
                self.host_headers[rule["name"]] = (rule["header"].lower(), rule["value"])
        self.expected_scope: ExpectedScope | None = None
        self.snapshot: list[Mapping[str, Any]]
        self.revision: str | None = None
        self.bindings: dict[str, str] = {}
        self.affinity = self.route.get("session_affinity")
        if "overlay_file" in self.route:
            if "candidates" in self.route:
                raise Refused("cannot set both overlay_file and candidates")
            scope = self.route.get("expected_overlay_scope") or {}
            self.expected_scope = ExpectedScope(**scope)
            self.overlay_path = self.route["overlay_file"]
            text = files.get(self.overlay_path)
            if text is None:
                raise Refused(f"failed to read overlay file {self.overlay_path}")
            if not self.reload(text):
                raise Refused("the overlay at start is invalid")
        else:
            for candidate in self.route["candidates"]:
                unknown = set(candidate) - _STATIC_CANDIDATE_FIELDS
                if unknown:
                    raise Refused(f"unknown candidate field {sorted(unknown)[0]}")
            if "local_site" not in self.route:
                raise Refused("local_site is required when candidates is set")
            self.snapshot = [
                {**candidate, "admission_state": "new_and_existing"}
                for candidate in self.route["candidates"]
            ]

    @staticmethod
    def _route_filter(filters: list[Mapping[str, Any]]) -> Mapping[str, Any]:
        routes = [entry for entry in filters if "overlay_file" in entry or "candidates" in entry]
        if len(routes) != 1:
            raise Refused("exactly one routing filter expected")
        return routes[0]

    @classmethod
    def from_files(cls, config_path: Path, mounts: Mapping[str, Path]) -> GatewayModel:
        """A gateway started from files on disk; ``mounts`` maps gateway paths to files."""
        import yaml

        config = yaml.safe_load(config_path.read_text())
        return cls(config, {path: file.read_text() for path, file in mounts.items()})

    def reload(self, text: str) -> bool:
        """A new overlay file; kept only when it is valid (the last good one stays)."""
        verdict = validate_overlay(text, self.expected_scope)
        if not verdict.accepted:
            return False
        document = json.loads(text)
        payload = document.get("overlay", document)
        self.snapshot = list(payload["candidates"])
        self.revision = document.get("revision", {}).get("value")
        return True

    def request(
        self,
        model: str,
        *,
        session: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Upstream:
        """Route one request for ``model``, with the session key when the client sends one
        and the client's own ``headers``."""
        client = {name.lower(): value for name, value in (headers or {}).items()}
        mutations = _Mutations()
        for rules in self.header_rules:
            mutations.remove += [name.lower() for name in rules.get("request_remove", ())]
            mutations.set += [
                (pair["name"].lower(), pair["value"]) for pair in rules.get("request_set", ())
            ]
            for pair in rules.get("request_add", ()):
                name = pair["name"].lower()
                # An addition to a header the client sent is queued as a set of both values.
                if name in client:
                    mutations.set.append((name, f"{client[name]},{pair['value']}"))
                else:
                    mutations.add.append((name, pair["value"]))
        key = session if self.affinity and self.affinity.get("enabled") else None
        matching = [
            c for c in self.snapshot if c.get("kind") == "inference_model" and c["name"] == model
        ]
        chosen: Mapping[str, Any] | None = None
        if key is not None and key in self.bindings:
            bound = [c for c in matching if _stable_id(c) == self.bindings[key]]
            if bound and bound[0].get("admission_state", "new_and_existing") != "none":
                chosen = bound[0]
        if chosen is None:
            admitted = [
                c
                for c in matching
                if c.get("admission_state", "new_and_existing") == "new_and_existing"
            ]
            if not admitted:
                return Upstream(404)
            chosen = admitted[0]
            if key is not None:
                self.bindings[key] = _stable_id(chosen)
        cluster = chosen["cluster"]
        if cluster not in self.clusters:
            return Upstream(500, cluster, chosen)
        credential = chosen.get("credential")
        if credential is not None:
            ref = credential["secretRef"]
            entry = self.credentials.get((ref["namespace"], ref["name"], ref["key"]))
            if entry is None or entry.get("strategy", "bearer_token") != credential["strategy"]:
                return Upstream(503, cluster, chosen)
            secret = f"<file:{entry['file']}>"
            if credential["strategy"] == "apikey":
                mutations.set.append((credential["header"].lower(), secret))
            else:
                mutations.remove.append("authorization")
                mutations.set.append(("authorization", f"Bearer {secret}"))
        host = self.host_headers.get(cluster)
        if host is not None:
            mutations.add.append(host)
        return Upstream(200, cluster, chosen, mutations.apply(client))


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _stable_id(candidate: Mapping[str, Any]) -> str:
    return str(
        candidate.get("stable_id") or (candidate["name"], candidate["site"], candidate["cluster"])
    )
