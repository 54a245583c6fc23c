"""The values sites replicate: provider records, gateway addresses, site metadata.

Immutable, checked when built, each with one canonical wire form. Ratios, latencies and
prices are fixed-point integers so that equal values encode to equal bytes everywhere.
Nothing here can hold a credential: a provider names the Secret its token lives in, and
its endpoint URL may carry no user info, query or fragment.

Error messages name the field and the rule, never the value.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from urllib.parse import urlsplit

from grid.crdt.codec import (
    Json,
    fail,
    read_bool,
    read_int,
    read_list,
    read_object,
    read_str,
)
from grid.errors import CrdtValueError

# The spec's vocabularies (the values of grid.models.common's enums; this module may import
# only the standard library).
BACKEND_KINDS = frozenset({"local", "remote", "cloud_managed", "api_provider"})
PROVIDER_KINDS = frozenset({"open_ai", "anthropic", "bedrock", "vertex", "self_hosted"})
AUTH_STRATEGIES = frozenset(
    {"ApiKey", "BearerToken", "MtlsOnly", "Oauth2", "ServiceAccount", "Sigv4", "Custom"}
)
PHASES = ("Pending", "Available", "Degraded", "Unavailable")
SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_OPERATORS_WITH_VALUES = frozenset({"In", "NotIn"})

MAX_RATIO_PPM = 1_000_000
MAX_AMOUNT = 10**12
"""Bound of fixed-point amounts: queue depth in thousandths, latency in microseconds,
prices in micro-USD per million tokens."""
MAX_CONTEXT_WINDOW = 10**9

_SITE = re.compile(r"[A-Za-z0-9._-]+")
_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._:-]*[A-Za-z0-9])?")
_TOPOLOGY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_CATALOG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9.]*[A-Za-z0-9])?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SECRET_KEY = re.compile(r"[-._A-Za-z0-9]+")
_TLS_MODE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _check_pattern(value: object, what: str, pattern: re.Pattern[str], max_len: int) -> str:
    if not isinstance(value, str):
        raise CrdtValueError(f"{what} must be a string")
    if not value or len(value) > max_len or not pattern.fullmatch(value):
        raise CrdtValueError(f"{what} must be 1 to {max_len} characters of {pattern.pattern}")
    return value


def check_site_id(value: object, what: str = "site id") -> str:
    """A site's id as the membership layer names sites: 1 to 63 letters, digits, ``._-``."""
    return _check_pattern(value, what, _SITE, 63)


def check_provider_name(value: object, what: str = "provider name") -> str:
    """A provider's name: a Kubernetes resource name (DNS subdomain)."""
    return _check_pattern(value, what, _DNS_SUBDOMAIN, 253)


def check_tenant(value: object, what: str = "tenant") -> str:
    """A budget tenant: letters, digits and ``._:-``, at most 253 characters."""
    return _check_pattern(value, what, _TOKEN, 253)


def check_window(value: object, what: str = "budget window") -> str:
    """A budget window label (for example ``2025-06``): at most 63 characters."""
    return _check_pattern(value, what, _TOKEN, 63)


def check_catalog_name(value: object, what: str, max_len: int = 128) -> str:
    """A capability, tool, agent or upstream cluster name."""
    return _check_pattern(value, what, _CATALOG_NAME, max_len)


def check_model_name(value: object, what: str = "model name") -> str:
    """A model name as requests spell it: 1 to 256 UTF-8 bytes, printable, no whitespace."""
    if not isinstance(value, str):
        raise CrdtValueError(f"{what} must be a string")
    if not value.isprintable() or any(char.isspace() for char in value):
        raise CrdtValueError(f"{what} must be printable, without whitespace")
    if not 0 < len(value.encode()) <= 256:
        raise CrdtValueError(f"{what} must be 1 to 256 UTF-8 bytes")
    return value


def _check_label_key(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise CrdtValueError(f"{what} must be a string")
    prefix, slash, name = value.rpartition("/")
    if slash:
        _check_pattern(prefix, f"{what} prefix", _DNS_SUBDOMAIN, 253)
    _check_pattern(name, f"{what} name", _LABEL_NAME, 63)
    return value


def _check_label_value(value: object, what: str) -> str:
    if value == "":
        return ""
    return _check_pattern(value, what, _LABEL_NAME, 63)


def _check_labels(labels: Mapping[str, str], what: str) -> Mapping[str, str]:
    if not isinstance(labels, Mapping):
        raise CrdtValueError(f"{what} must map label keys to values")
    for key, value in labels.items():
        _check_label_key(key, f"{what} key")
        _check_label_value(value, f"{what} value")
    return MappingProxyType(dict(sorted(labels.items())))


def _check_int(value: object, what: str, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CrdtValueError(f"{what} must be an integer")
    if not low <= value <= high:
        raise CrdtValueError(f"{what} must be between {low} and {high}")


def _check_optional_int(value: object, what: str, high: int) -> None:
    if value is not None:
        _check_int(value, what, 0, high)


def _strings(values: Iterable[str], what: str) -> list[str]:
    if isinstance(values, str):
        raise CrdtValueError(f"{what}s must be a collection of strings, not one string")
    strings = list(values)
    if not all(isinstance(value, str) for value in strings):
        raise CrdtValueError(f"{what}s must be strings")
    return strings


def _sorted_unique(values: Iterable[str], what: str) -> tuple[str, ...]:
    names = tuple(sorted(set(_strings(values, what))))
    for name in names:
        check_catalog_name(name, what)
    return names


def micro_usd(amount: Decimal | int | str | float) -> int:
    """An amount in USD as whole micro-USD (rounding half to even).

    Floats go through their shortest decimal form, so ``0.15`` becomes 150000, not a binary
    approximation of it.
    """
    if isinstance(amount, bool):
        raise CrdtValueError("an amount must be a number")
    try:
        value = Decimal(str(amount)) if isinstance(amount, float) else Decimal(amount)
    except (InvalidOperation, TypeError, ValueError):
        raise CrdtValueError("an amount must be a decimal number") from None
    if not value.is_finite() or value < 0:
        raise CrdtValueError("an amount must be finite and >= 0")
    if value.scaleb(6) > MAX_AMOUNT:
        raise CrdtValueError(f"an amount may be at most {MAX_AMOUNT} micro-USD")
    return int(value.scaleb(6).to_integral_value())


@dataclass(frozen=True, slots=True)
class TokenCost:
    """List price per million input and output tokens, in micro-USD."""

    input_micro_usd: int
    output_micro_usd: int

    def __post_init__(self) -> None:
        _check_int(self.input_micro_usd, "input cost", 0, MAX_AMOUNT)
        _check_int(self.output_micro_usd, "output cost", 0, MAX_AMOUNT)

    @classmethod
    def from_usd(
        cls,
        input_per_million: Decimal | int | str | float,
        output_per_million: Decimal | int | str | float,
    ) -> TokenCost:
        """A cost from USD per million tokens."""
        return cls(micro_usd(input_per_million), micro_usd(output_per_million))

    @property
    def input_per_million(self) -> Decimal:
        """USD per million input tokens."""
        return Decimal(self.input_micro_usd).scaleb(-6)

    @property
    def output_per_million(self) -> Decimal:
        """USD per million output tokens."""
        return Decimal(self.output_micro_usd).scaleb(-6)

    def to_wire(self) -> Json:
        return [self.input_micro_usd, self.output_micro_usd]

    @classmethod
    def from_wire(cls, value: object, where: str) -> TokenCost:
        entries = read_list(value, where, 2)
        return cls(
            read_int(entries[0], f"{where}[0]", 0, MAX_AMOUNT),
            read_int(entries[1], f"{where}[1]", 0, MAX_AMOUNT),
        )


@dataclass(frozen=True, slots=True)
class CredentialRef:
    """How the gateway authenticates to a provider and, for strategies that need one, which
    key of which Kubernetes Secret holds the credential (all three of ``secret_name``,
    ``namespace`` and ``key``, or none). Only this reference travels; token bytes never
    leave the Secret."""

    strategy: str
    secret_name: str | None = None
    namespace: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if self.strategy not in AUTH_STRATEGIES:
            raise CrdtValueError(
                f"credential strategy must be one of {', '.join(sorted(AUTH_STRATEGIES))}"
            )
        secret = (self.secret_name, self.namespace, self.key)
        if secret == (None, None, None):
            return
        if None in secret:
            raise CrdtValueError("a credential names a Secret by name, namespace and key")
        _check_pattern(self.secret_name, "credential secret name", _DNS_SUBDOMAIN, 253)
        _check_pattern(self.namespace, "credential namespace", _DNS_LABEL, 63)
        _check_pattern(self.key, "credential secret key", _SECRET_KEY, 253)

    def to_wire(self) -> Json:
        wire: dict[str, Json] = {"strategy": self.strategy}
        if self.secret_name is not None:
            wire.update(key=self.key, name=self.secret_name, namespace=self.namespace)
        return wire

    @classmethod
    def from_wire(cls, value: object, where: str) -> CredentialRef:
        fields = read_object(value, where, ("strategy",), ("key", "name", "namespace"))

        def text(name: str) -> str | None:
            raw = fields.get(name)
            return None if raw is None else read_str(raw, f"{where}.{name}")

        return cls(
            strategy=read_str(fields["strategy"], f"{where}.strategy"),
            secret_name=text("name"),
            namespace=text("namespace"),
            key=text("key"),
        )


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One ``matchExpressions`` entry. ``In``/``NotIn`` need values, ``Exists`` and
    ``DoesNotExist`` take none; values are kept sorted and unique."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_label_key(self.key, "selector requirement key")
        if self.operator not in SELECTOR_OPERATORS:
            raise CrdtValueError(
                f"selector operator must be one of {', '.join(sorted(SELECTOR_OPERATORS))}"
            )
        values = tuple(sorted(set(_strings(self.values, "selector value"))))
        for value in values:
            _check_label_value(value, "selector value")
        if (self.operator in _OPERATORS_WITH_VALUES) != bool(values):
            raise CrdtValueError("selector In/NotIn need values; Exists/DoesNotExist take none")
        object.__setattr__(self, "values", values)

    def to_wire(self) -> Json:
        return [self.key, self.operator, list(self.values)]

    @classmethod
    def from_wire(cls, value: object, where: str) -> SelectorRequirement:
        key, operator, values = read_list(value, where, 3)
        return cls(
            read_str(key, f"{where}.key"),
            read_str(operator, f"{where}.operator"),
            _read_strings(values, f"{where}.values"),
        )


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """An access policy: which sites (by their labels) may consume a provider. Remote sites
    evaluate it; the empty selector admits every site."""

    match_labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "match_labels", _check_labels(self.match_labels, "selector matchLabels")
        )
        expressions = tuple(self.match_expressions)
        if not all(isinstance(entry, SelectorRequirement) for entry in expressions):
            raise CrdtValueError("selector matchExpressions must be SelectorRequirements")
        # Requirements are a conjunction, so their order means nothing: keep one order.
        unique = {_requirement_order(entry): entry for entry in expressions}
        object.__setattr__(self, "match_expressions", tuple(unique[k] for k in sorted(unique)))

    def __hash__(self) -> int:
        # The labels are a read-only mapping, which does not hash; rankings key caches by
        # selector, and a provider spec holding one must hash too.
        return hash((tuple(sorted(self.match_labels.items())), self.match_expressions))

    def as_kubernetes(self) -> dict[str, object]:
        """The selector in its Kubernetes form (``matchLabels``/``matchExpressions``)."""
        return {
            "matchLabels": dict(self.match_labels),
            "matchExpressions": [
                {"key": entry.key, "operator": entry.operator, "values": list(entry.values)}
                for entry in self.match_expressions
            ],
        }

    def to_wire(self) -> Json:
        wire: dict[str, Json] = {}
        if self.match_labels:
            wire["labels"] = dict(self.match_labels)
        if self.match_expressions:
            wire["exprs"] = [entry.to_wire() for entry in self.match_expressions]
        return wire

    @classmethod
    def from_wire(cls, value: object, where: str) -> LabelSelector:
        fields = read_object(value, where, (), ("labels", "exprs"))
        expressions = read_list(fields.get("exprs", []), f"{where}.exprs")
        return cls(
            match_labels=_read_string_map(fields.get("labels", {}), f"{where}.labels"),
            match_expressions=tuple(
                SelectorRequirement.from_wire(entry, f"{where}.exprs[{index}]")
                for index, entry in enumerate(expressions)
            ),
        )


def _requirement_order(entry: SelectorRequirement) -> tuple[str, str, tuple[str, ...]]:
    return (entry.key, entry.operator, entry.values)


def _check_endpoint(url: object) -> str:
    if not isinstance(url, str):
        raise CrdtValueError("endpoint must be a string")
    if not url or len(url) > 512 or not all("!" <= char <= "~" for char in url):
        raise CrdtValueError("endpoint must be 1 to 512 printable ASCII characters, no spaces")
    if any(char in url for char in "?#@"):
        # A query, a fragment or user info could carry a credential; none may travel.
        raise CrdtValueError("endpoint may carry no user info, query or fragment")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise CrdtValueError("endpoint must be a well-formed URL with a valid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CrdtValueError("endpoint must be an http or https URL with a host")
    return url


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """What a provider declares about itself; changes rarely, replicated as one register."""

    backend_kind: str
    provider_kind: str
    upstream: str
    """The gateway cluster that reaches the provider."""
    endpoint: str
    cost: TokenCost | None = None
    credential: CredentialRef | None = None
    access_policy: LabelSelector | None = None
    """Which sites may consume the provider; None admits every site."""

    def __post_init__(self) -> None:
        if self.backend_kind not in BACKEND_KINDS:
            raise CrdtValueError(f"backend kind must be one of {', '.join(sorted(BACKEND_KINDS))}")
        if self.provider_kind not in PROVIDER_KINDS:
            raise CrdtValueError(
                f"provider kind must be one of {', '.join(sorted(PROVIDER_KINDS))}"
            )
        check_catalog_name(self.upstream, "upstream cluster", 253)
        _check_endpoint(self.endpoint)
        for value, kind, what in (
            (self.cost, TokenCost, "cost"),
            (self.credential, CredentialRef, "credential"),
            (self.access_policy, LabelSelector, "access policy"),
        ):
            if value is not None and not isinstance(value, kind):
                raise CrdtValueError(f"{what} must be a {kind.__name__} or None")

    def to_wire(self) -> Json:
        wire: dict[str, Json] = {
            "backend": self.backend_kind,
            "endpoint": self.endpoint,
            "kind": self.provider_kind,
            "upstream": self.upstream,
        }
        if self.cost is not None:
            wire["cost"] = self.cost.to_wire()
        if self.credential is not None:
            wire["cred"] = self.credential.to_wire()
        if self.access_policy is not None:
            wire["access"] = self.access_policy.to_wire()
        return wire

    @classmethod
    def from_wire(cls, value: object, where: str) -> ProviderSpec:
        fields = read_object(
            value, where, ("backend", "endpoint", "kind", "upstream"), ("cost", "cred", "access")
        )
        cost, cred, access = fields.get("cost"), fields.get("cred"), fields.get("access")
        return cls(
            backend_kind=read_str(fields["backend"], f"{where}.backend"),
            provider_kind=read_str(fields["kind"], f"{where}.kind"),
            upstream=read_str(fields["upstream"], f"{where}.upstream"),
            endpoint=read_str(fields["endpoint"], f"{where}.endpoint"),
            cost=None if cost is None else TokenCost.from_wire(cost, f"{where}.cost"),
            credential=None if cred is None else CredentialRef.from_wire(cred, f"{where}.cred"),
            access_policy=(
                None if access is None else LabelSelector.from_wire(access, f"{where}.access")
            ),
        )


@dataclass(frozen=True, slots=True)
class ProviderMetrics:
    """A provider's health and load signals, fixed-point; None means not reported.

    Build from measured floats with :meth:`from_measurements`; read them back as floats
    through the properties.
    """

    healthy: bool | None = None
    queue_depth_milli: int | None = None
    """Requests waiting, in thousandths (a mean may be fractional)."""
    kv_cache_utilization_ppm: int | None = None
    """Share of the KV cache in use, in parts per million."""
    prefix_cache_hit_ppm: int | None = None
    """Share of prompt tokens served from the prefix cache, in parts per million."""
    p99_latency_us: int | None = None
    """99th percentile request latency, in microseconds."""

    def __post_init__(self) -> None:
        if self.healthy is not None and not isinstance(self.healthy, bool):
            raise CrdtValueError("healthy must be true, false or None")
        _check_optional_int(self.queue_depth_milli, "queue depth", MAX_AMOUNT)
        _check_optional_int(self.kv_cache_utilization_ppm, "KV-cache utilization", MAX_RATIO_PPM)
        _check_optional_int(self.prefix_cache_hit_ppm, "prefix-cache hit ratio", MAX_RATIO_PPM)
        _check_optional_int(self.p99_latency_us, "P99 latency", MAX_AMOUNT)

    @classmethod
    def from_measurements(
        cls,
        *,
        healthy: bool | None = None,
        queue_depth: float | None = None,
        kv_cache_utilization: float | None = None,
        prefix_cache_hit_ratio: float | None = None,
        p99_latency_ms: float | None = None,
    ) -> ProviderMetrics:
        """Metrics from measured values: ratios in 0..1, latency in milliseconds."""
        return cls(
            healthy=healthy,
            queue_depth_milli=_fixed(queue_depth, 1_000, "queue depth"),
            kv_cache_utilization_ppm=_fixed(
                kv_cache_utilization, MAX_RATIO_PPM, "KV-cache utilization"
            ),
            prefix_cache_hit_ppm=_fixed(
                prefix_cache_hit_ratio, MAX_RATIO_PPM, "prefix-cache hit ratio"
            ),
            p99_latency_us=_fixed(p99_latency_ms, 1_000, "P99 latency"),
        )

    @classmethod
    def from_checked(
        cls,
        healthy: bool | None,
        queue_depth_milli: int | None,
        kv_cache_utilization_ppm: int | None,
        prefix_cache_hit_ppm: int | None,
        p99_latency_us: int | None,
    ) -> ProviderMetrics:
        """Metrics from values the caller has already bounded (the signals reader checks
        each while parsing); built without checking them again, since this is done for
        every received signals item."""
        metrics = object.__new__(cls)
        set_field = object.__setattr__
        set_field(metrics, "healthy", healthy)
        set_field(metrics, "queue_depth_milli", queue_depth_milli)
        set_field(metrics, "kv_cache_utilization_ppm", kv_cache_utilization_ppm)
        set_field(metrics, "prefix_cache_hit_ppm", prefix_cache_hit_ppm)
        set_field(metrics, "p99_latency_us", p99_latency_us)
        return metrics

    @property
    def queue_depth(self) -> float | None:
        return None if self.queue_depth_milli is None else self.queue_depth_milli / 1_000

    @property
    def kv_cache_utilization(self) -> float | None:
        ppm = self.kv_cache_utilization_ppm
        return None if ppm is None else ppm / MAX_RATIO_PPM

    @property
    def prefix_cache_hit_ratio(self) -> float | None:
        ppm = self.prefix_cache_hit_ppm
        return None if ppm is None else ppm / MAX_RATIO_PPM

    @property
    def p99_latency_ms(self) -> float | None:
        return None if self.p99_latency_us is None else self.p99_latency_us / 1_000

    def to_wire(self) -> Json:
        wire: dict[str, Json] = {}
        for name, value in (
            ("healthy", self.healthy),
            ("queue", self.queue_depth_milli),
            ("kv", self.kv_cache_utilization_ppm),
            ("prefix", self.prefix_cache_hit_ppm),
            ("p99", self.p99_latency_us),
        ):
            if value is not None:
                wire[name] = value
        return wire

    @classmethod
    def from_wire(cls, value: object, where: str) -> ProviderMetrics:
        fields = read_object(value, where, (), ("healthy", "queue", "kv", "prefix", "p99"))

        def number(name: str, high: int) -> int | None:
            raw = fields.get(name)
            return None if raw is None else read_int(raw, f"{where}.{name}", 0, high)

        healthy = fields.get("healthy")
        return cls(
            healthy=None if healthy is None else read_bool(healthy, f"{where}.healthy"),
            queue_depth_milli=number("queue", MAX_AMOUNT),
            kv_cache_utilization_ppm=number("kv", MAX_RATIO_PPM),
            prefix_cache_hit_ppm=number("prefix", MAX_RATIO_PPM),
            p99_latency_us=number("p99", MAX_AMOUNT),
        )


def _fixed(value: float | None, scale: int, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CrdtValueError(f"{what} must be a number")
    if not math.isfinite(value) or value < 0:
        raise CrdtValueError(f"{what} must be finite and >= 0")
    fixed = round(value * scale)
    if fixed > MAX_AMOUNT:
        raise CrdtValueError(f"{what} is too large")
    return fixed


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model a provider serves: its name, capabilities (sorted, unique) and context
    window in tokens (None if not declared)."""

    name: str
    capabilities: tuple[str, ...] = ()
    context_window: int | None = None

    def __post_init__(self) -> None:
        check_model_name(self.name)
        object.__setattr__(
            self, "capabilities", _sorted_unique(self.capabilities, "model capability")
        )
        if self.context_window is not None:
            _check_int(self.context_window, "context window", 1, MAX_CONTEXT_WINDOW)

    def to_wire(self) -> Json:
        return [self.name, list(self.capabilities), self.context_window]

    @classmethod
    def from_wire(cls, value: object, where: str) -> ModelEntry:
        name, capabilities, context_window = read_list(value, where, 3)
        return cls(
            read_str(name, f"{where}.name"),
            _read_strings(capabilities, f"{where}.capabilities"),
            None
            if context_window is None
            else read_int(context_window, f"{where}.context", 1, MAX_CONTEXT_WINDOW),
        )


@dataclass(frozen=True, slots=True)
class ProviderRecord:
    """Everything a site says about one of its providers.

    Models are kept sorted by name (names must be unique); tools and agents sorted and
    unique. ``phase`` is the provider's lifecycle phase (one of :data:`PHASES`).
    """

    name: str
    spec: ProviderSpec
    phase: str = "Pending"
    metrics: ProviderMetrics = field(default_factory=ProviderMetrics)
    models: tuple[ModelEntry, ...] = ()
    tools: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_provider_name(self.name)
        if not isinstance(self.spec, ProviderSpec):
            raise CrdtValueError("provider spec must be a ProviderSpec")
        if self.phase not in PHASES:
            raise CrdtValueError(f"provider phase must be one of {', '.join(PHASES)}")
        if not isinstance(self.metrics, ProviderMetrics):
            raise CrdtValueError("provider metrics must be ProviderMetrics")
        if not all(isinstance(entry, ModelEntry) for entry in self.models):
            raise CrdtValueError("provider models must be ModelEntry values")
        models = tuple(sorted(self.models, key=lambda entry: entry.name))
        if len({entry.name for entry in models}) != len(models):
            raise CrdtValueError("provider models must have distinct names")
        object.__setattr__(self, "models", models)
        object.__setattr__(self, "tools", _sorted_unique(self.tools, "tool name"))
        object.__setattr__(self, "agents", _sorted_unique(self.agents, "agent name"))

    def with_signals(self, phase: str, metrics: ProviderMetrics) -> ProviderRecord:
        """This provider with another phase and metrics, checked as the constructor checks
        them; the catalogue part was checked when this record was built. What a reader
        makes of each new signals item: a large mesh reads thousands a minute."""
        if phase not in PHASES:
            raise CrdtValueError(f"provider phase must be one of {', '.join(PHASES)}")
        if not isinstance(metrics, ProviderMetrics):
            raise CrdtValueError("provider metrics must be ProviderMetrics")
        record = object.__new__(ProviderRecord)
        for name, value in (
            ("name", self.name),
            ("spec", self.spec),
            ("phase", phase),
            ("metrics", metrics),
            ("models", self.models),
            ("tools", self.tools),
            ("agents", self.agents),
        ):
            object.__setattr__(record, name, value)
        return record


def _check_address(address: object) -> str:
    if not isinstance(address, str):
        raise CrdtValueError("gateway address must be a string")
    if not address.isascii() or len(address) > 261:
        raise CrdtValueError("gateway address must be ASCII host:port, at most 261 characters")
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit() or len(port) > 5 or not 1 <= int(port) <= 65535:
        raise CrdtValueError("gateway address must end in :port, port 1 to 65535")
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise CrdtValueError("gateway address has a malformed IPv6 host") from None
    elif len(host) > 253 or not _HOSTNAME.fullmatch(host):
        raise CrdtValueError("gateway address host must be a DNS name, IPv4 or [IPv6] address")
    return address


@dataclass(frozen=True, slots=True)
class GatewayRecord:
    """Where other sites reach this site's gateway: ``host:port``, the TLS mode and the TLS
    server name when it is not the address's host."""

    address: str
    tls_mode: str
    server_name: str | None = None

    def __post_init__(self) -> None:
        _check_address(self.address)
        _check_pattern(self.tls_mode, "gateway TLS mode", _TLS_MODE, 32)
        if self.server_name is not None:
            _check_pattern(self.server_name, "gateway server name", _DNS_SUBDOMAIN, 253)

    def to_wire(self) -> Json:
        wire: dict[str, Json] = {"address": self.address, "tls": self.tls_mode}
        if self.server_name is not None:
            wire["sni"] = self.server_name
        return wire

    @classmethod
    def from_wire(cls, value: object, where: str) -> GatewayRecord:
        fields = read_object(value, where, ("address", "tls"), ("sni",))
        sni = fields.get("sni")
        return cls(
            read_str(fields["address"], f"{where}.address"),
            read_str(fields["tls"], f"{where}.tls"),
            None if sni is None else read_str(sni, f"{where}.sni"),
        )


@dataclass(frozen=True, slots=True)
class SiteMetadata:
    """Where a site is and what it is called: geography, sovereignty zone, labels (which
    access policies are evaluated against) and the grid it belongs to."""

    region: str | None = None
    zone: str | None = None
    sovereignty_zone: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    grid_id: str | None = None

    def __post_init__(self) -> None:
        for value, what in (
            (self.region, "region"),
            (self.zone, "zone"),
            (self.sovereignty_zone, "sovereignty zone"),
            (self.grid_id, "grid id"),
        ):
            if value is not None:
                _check_pattern(value, what, _TOPOLOGY, 63)
        object.__setattr__(self, "labels", _check_labels(self.labels, "site labels"))

    def to_wire(self) -> Json:
        wire: dict[str, Json] = {}
        for name, value in (
            ("region", self.region),
            ("zone", self.zone),
            ("sovereignty", self.sovereignty_zone),
            ("gridId", self.grid_id),
        ):
            if value is not None:
                wire[name] = value
        if self.labels:
            wire["labels"] = dict(self.labels)
        return wire

    @classmethod
    def from_wire(cls, value: object, where: str) -> SiteMetadata:
        fields = read_object(
            value, where, (), ("region", "zone", "sovereignty", "gridId", "labels")
        )

        def text(name: str) -> str | None:
            raw = fields.get(name)
            return None if raw is None else read_str(raw, f"{where}.{name}")

        return cls(
            region=text("region"),
            zone=text("zone"),
            sovereignty_zone=text("sovereignty"),
            labels=_read_string_map(fields.get("labels", {}), f"{where}.labels"),
            grid_id=text("gridId"),
        )


def _read_strings(value: object, where: str) -> tuple[str, ...]:
    return tuple(
        read_str(entry, f"{where}[{index}]") for index, entry in enumerate(read_list(value, where))
    )


def _read_string_map(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        fail(where, "must be an object")
    return {key: read_str(entry, f"{where} value") for key, entry in value.items()}
