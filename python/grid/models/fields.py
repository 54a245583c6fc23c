"""Field types shared by the resource models: durations, addresses, fingerprints, prices
and Kubernetes names.

Each type validates with a message a person can act on, never quoting the rejected value,
and declares the OpenAPI schema that the generated CRDs carry for it. The patterns are
written to mean the same in Python's ``re`` and in the API server's RE2.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from grid.models.validation_rules import ValidationRule, cel_string, validations

# --- durations ---------------------------------------------------------------------------

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``5s``, ``500ms``, ``1m``, ``2h`` or ``1h30m``.

    Raises :class:`ValueError` naming the accepted form when ``text`` is not one.
    """
    if not isinstance(text, str) or not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(
            "must be a duration: a number with a unit ms, s, m or h (e.g. 500ms, 5s, 1m, 2h, 1h30m)"
        )
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))


def format_seconds(seconds: float) -> str:
    """The shortest duration text for ``seconds`` (``300`` -> ``5m``, ``0.5`` -> ``500ms``)."""
    millis = round(seconds * 1000)
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis and millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


class Duration:
    """A span of time written the Kubernetes way (``5s``); ``seconds`` is its length.

    On the wire it stays the text the user wrote, so a resource round-trips unchanged.
    (Deliberately not a dataclass: pydantic would then publish defaults as objects.)
    """

    __slots__ = ("seconds", "text")

    def __init__(self, text: str, seconds: float) -> None:
        self.text = text
        self.seconds = seconds

    @classmethod
    def parse(cls, text: str) -> Duration:
        return cls(text, parse_duration(text))

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Duration({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and self.seconds == other.seconds

    def __hash__(self) -> int:
        return hash(self.seconds)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls._coerce,
            serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="always"),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "pattern": DURATION_PATTERN}

    @classmethod
    def _coerce(cls, value: object) -> Duration:
        if isinstance(value, Duration):
            return value
        if not isinstance(value, str):
            raise ValueError("must be a duration string such as 5s or 500ms, not a number")
        return cls.parse(value)


@dataclass(frozen=True, slots=True)
class DurationBounds:
    """Inclusive range a :class:`Duration` field accepts, in seconds: checked by the model
    and, as a CEL rule of the field, by the API server."""

    minimum: float
    maximum: float

    @property
    def rule(self) -> ValidationRule:
        # CEL's duration() reads Go durations, of which the CRD's pattern is a subset.
        low, high = (cel_string(format_seconds(bound)) for bound in (self.minimum, self.maximum))
        return ValidationRule(
            f"duration(self) >= duration({low}) && duration(self) <= duration({high})",
            f"must be between {format_seconds(self.minimum)} and {format_seconds(self.maximum)}",
        )

    def check(self, value: Duration) -> Duration:
        if not self.minimum <= value.seconds <= self.maximum:
            raise ValueError(self.rule.message)
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), **validations(self.rule)}


def within(minimum: float, maximum: float) -> DurationBounds:
    """Limits a :class:`Duration` field to ``[minimum, maximum]`` seconds:
    ``Annotated[Duration, within(0.1, 300)]``."""
    return DurationBounds(minimum, maximum)


TIMEOUT_WITHIN_INTERVAL = ValidationRule(
    "duration(self.timeout) < duration(self.interval)",
    "timeout must be shorter than interval",
    field_path=".timeout",
)
"""The rule of a model with a ``timeout`` and the ``interval`` it must be shorter than."""


# --- addresses ---------------------------------------------------------------------------

PORT_PATTERN = (
    r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
)
_HOSTNAME = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*"
HOST_PATTERN = rf"({_HOSTNAME}|\[[0-9A-Fa-f:.]+\])"
"""A DNS name, an IPv4 address (which reads as one) or a bracketed IPv6 address."""
HOST_PORT_PATTERN = rf"^{HOST_PATTERN}:{PORT_PATTERN}$"
_HOST_PORT_HELP = "host:port, e.g. site.example.com:7946, 10.0.0.5:7946 or [fd00::5]:7946"


def is_ip_address(host: str) -> bool:
    """Whether ``host`` (IPv6 without brackets) is an IP literal rather than a DNS name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def split_host_port(address: str) -> tuple[str, int]:
    """Host (IPv6 without brackets) and port of a ``host:port`` address.

    Raises :class:`ValueError` with the accepted forms when ``address`` is not one.
    """
    if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"must be {_HOST_PORT_HELP}")
    host, _, port_text = address.rpartition(":")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port must be a number from 1 to 65535 ({_HOST_PORT_HELP})")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"is not a valid bracketed IPv6 address ({_HOST_PORT_HELP})") from None
    elif ":" in host:
        raise ValueError(f"an IPv6 host must be in brackets ({_HOST_PORT_HELP})")
    elif not re.fullmatch(_HOSTNAME, host) or len(host) > 253:
        raise ValueError(f"host is not a valid DNS name or IPv4 address ({_HOST_PORT_HELP})")
    return host, int(port_text)


def join_host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets: the form :func:`split_host_port` reads."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_host_port(address: str) -> str:
    split_host_port(address)
    return address


def cel_bracketed_ipv6(address: str) -> str:
    """CEL: a host in brackets at the start of the text of the expression ``address`` (a
    ``host:port``, a URL's authority) is an IPv6 address, as far as the API server can
    tell. Its ``isIP`` refuses IPv4-mapped addresses (``::ffff:10.0.0.5``) that the models
    accept, so a host that may be one (it holds ``ffff`` or a dotted quad) is left to the
    models."""
    host = f"{address}.substring(1, {address}.indexOf(']'))"
    return (
        f"!{address}.startsWith('[') || !{address}.contains(']') || ({host}.contains(':') && "
        f"(isIP({host}) || {host}.contains('.') || {host}.lowerAscii().contains('ffff')))"
    )


HOST_PORT_IPV6 = ValidationRule(
    cel_bracketed_ipv6("self"), f"is not a valid bracketed IPv6 address ({_HOST_PORT_HELP})"
)
HOST_PORT_NAME_LENGTH = ValidationRule(
    # The pattern checks the name's characters; its length (what precedes the port's
    # colon) only a rule can.
    "self.startsWith('[') || self.lastIndexOf(':') <= 253",
    f"host is not a valid DNS name or IPv4 address ({_HOST_PORT_HELP})",
)

HostPort = Annotated[
    str,
    AfterValidator(_check_host_port),
    Field(
        json_schema_extra={
            "pattern": HOST_PORT_PATTERN,
            "maxLength": 261,
            **validations(HOST_PORT_IPV6, HOST_PORT_NAME_LENGTH),
        }
    ),
]
"""A ``host:port`` address (IPv6 in brackets)."""


# --- text ----------------------------------------------------------------------------------

# For the patterns that refuse whitespace ([^\s]): RE2, the API server's engine, reads \s as
# [\t\n\f\r ], where Python's re, the models', also takes \v, \x1c-\x1f, \x85 and the
# Unicode spaces: exactly this class.
_PYTHON_WHITESPACE = r"[\t-\r\x1c-\x1f\x{85}\p{Z}]"
NO_WHITESPACE = ValidationRule(
    f"!self.matches({cel_string(_PYTHON_WHITESPACE)})", "must not contain whitespace"
)


# --- certificate fingerprints ------------------------------------------------------------

FINGERPRINT_PATTERN = r"^([0-9a-fA-F]{64}|([0-9a-fA-F]{2}:){31}[0-9a-fA-F]{2})$"


def normalize_fingerprint(value: str) -> str:
    """The 64 lowercase hex digits of a SHA-256 fingerprint written either as plain hex
    (any case) or as colon-separated pairs (``AB:CD:...``, as ``openssl x509 -fingerprint``
    prints it)."""
    if not isinstance(value, str) or not re.fullmatch(FINGERPRINT_PATTERN, value):
        raise ValueError(
            "must be a SHA-256 certificate fingerprint: 64 hex digits, or 32 colon-separated "
            "hex pairs (openssl x509 -noout -fingerprint -sha256)"
        )
    return value.replace(":", "").lower()


Fingerprint = Annotated[
    str,
    AfterValidator(normalize_fingerprint),
    Field(json_schema_extra={"pattern": FINGERPRINT_PATTERN}),
]
"""A SHA-256 fingerprint, stored as 64 lowercase hex digits whatever form was written."""

HEX64_PATTERN = r"^[0-9a-f]{64}$"


# --- prices ------------------------------------------------------------------------------

DECIMAL_PATTERN = r"^[0-9]+(\.[0-9]+)?$"
MAX_PRICE = Decimal(1_000_000)
PRICE_RANGE = ValidationRule(
    # The schema's minimum and maximum hold for whole numbers only, not for decimal strings.
    f"type(self) != string || double(self) <= {MAX_PRICE}.0",
    f"must be between 0 and {MAX_PRICE}",
)


def _coerce_price(value: object) -> Decimal:
    if isinstance(value, bool):
        raise ValueError("must be a price, not true/false")
    if isinstance(value, float):
        raise ValueError(
            'write a fractional price as a quoted decimal string such as "0.25" (the '
            "Kubernetes API accepts whole numbers or strings here)"
        )
    if isinstance(value, Decimal):
        amount = value
    elif isinstance(value, int) or (
        isinstance(value, str) and re.fullmatch(DECIMAL_PATTERN, value)
    ):
        amount = Decimal(value)
    else:
        raise ValueError('must be a non-negative decimal such as 3 or "0.25"')
    if not amount.is_finite() or amount < 0 or amount > MAX_PRICE:
        raise ValueError(PRICE_RANGE.message)
    return amount


def _serialize_price(value: Decimal) -> int | str:
    return int(value) if value == value.to_integral_value() else str(value)


class _PriceSchema:
    """Pydantic hooks for :data:`Price`: Kubernetes' int-or-string, never a float."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _coerce_price,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _serialize_price, when_used="always"
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": DECIMAL_PATTERN,
            "minimum": 0,
            "maximum": int(MAX_PRICE),
            **validations(PRICE_RANGE),
        }


Price = Annotated[Decimal, _PriceSchema]
"""A non-negative price: a whole number or a decimal string (``3``, ``"0.25"``)."""


# --- names -------------------------------------------------------------------------------

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
TOPOLOGY_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
TOKEN_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.:]*[A-Za-z0-9])?$"


def _pattern_checker(pattern: str, what: str, max_length: int) -> AfterValidator:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if len(value) > max_length:
            raise ValueError(f"must be at most {max_length} characters ({what})")
        if not compiled.fullmatch(value):
            raise ValueError(f"must be {what}")
        return value

    return AfterValidator(check)


def _string_schema(pattern: str, max_length: int, min_length: int = 1) -> Any:
    return Field(
        json_schema_extra={"pattern": pattern, "maxLength": max_length, "minLength": min_length}
    )


_DNS_LABEL_HELP = "a DNS label: lowercase letters, digits and '-', starting and ending alphanumeric"
_DNS_SUBDOMAIN_HELP = (
    "a DNS subdomain: lowercase letters, digits, '-' and '.', starting and ending alphanumeric"
)
_LABEL_VALUE_HELP = (
    "a label value: letters, digits, '-', '_' and '.', starting and ending alphanumeric"
)
_TOKEN_HELP = (
    "a name made of letters, digits, '-', '_', '.' and ':', starting and ending alphanumeric"
)

DnsLabel = Annotated[
    str,
    _pattern_checker(DNS_LABEL_PATTERN, _DNS_LABEL_HELP, 63),
    _string_schema(DNS_LABEL_PATTERN, 63),
]
"""A namespace-style name (RFC 1123 label, at most 63 characters)."""

DnsSubdomain = Annotated[
    str,
    _pattern_checker(DNS_SUBDOMAIN_PATTERN, _DNS_SUBDOMAIN_HELP, 253),
    _string_schema(DNS_SUBDOMAIN_PATTERN, 253),
]
"""An object name (RFC 1123 subdomain, at most 253 characters)."""

Topology = Annotated[
    str,
    _pattern_checker(TOPOLOGY_PATTERN, "a non-empty " + _LABEL_VALUE_HELP.removeprefix("a "), 63),
    _string_schema(TOPOLOGY_PATTERN, 63),
]
"""A region, zone or sovereignty zone name: a non-empty label value, so it can be used in
label selectors too."""

SecretKey = Annotated[
    str,
    _pattern_checker(SECRET_KEY_PATTERN, "a Secret data key: letters, digits, '-', '_', '.'", 253),
    _string_schema(SECRET_KEY_PATTERN, 253),
]
"""The key of one entry in a Secret's data."""

Token = Annotated[
    str,
    _pattern_checker(TOKEN_PATTERN, _TOKEN_HELP, 253),
    _string_schema(TOKEN_PATTERN, 253),
]
"""A free-form identifier (tenant, upstream cluster) without spaces or punctuation at the ends."""


# --- lists -------------------------------------------------------------------------------


def unique_by(*keys: str) -> AfterValidator:
    """Validator rejecting a list of models in which two items share the same ``keys``
    (the model twin of the CRD's ``x-kubernetes-list-type: map``)."""

    def check(items: list[Any]) -> list[Any]:
        seen: dict[tuple[object, ...], int] = {}
        for index, item in enumerate(items):
            identity = tuple(getattr(item, key) for key in keys)
            if identity in seen:
                raise ValueError(
                    f"items {seen[identity]} and {index} have the same {'/'.join(keys)}; "
                    "each must be unique"
                )
            seen[identity] = index
        return items

    return AfterValidator(check)


def unique_values(items: list[Any]) -> list[Any]:
    """``items`` if no value repeats (the model twin of ``x-kubernetes-list-type: set``)."""
    for index, item in enumerate(items):
        if item in items[:index]:
            raise ValueError(f"item {index} repeats an earlier item; each must be unique")
    return items


def list_map(*keys: str) -> Any:
    """Schema markers for a list whose items are identified by ``keys``."""
    return Field(
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": list(keys),
        }
    )


LIST_SET: Any = Field(json_schema_extra={"x-kubernetes-list-type": "set"})
"""Schema marker for a list of unique scalars."""
