"""Pieces every Grid resource shares: the API group, object metadata, and references to
Secrets (Grid only ever holds a reference to a secret, never its bytes)."""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator, ConfigDict, Field

from grid.models.common import GridModel
from grid.models.fields import DnsLabel, DnsSubdomain, SecretKey
from grid.models.validation_rules import ValidationRule, cel_string, validations

GROUP = "grid.praxis-proxy.io"
VERSION = "v1alpha1"
API_VERSION: Final = "grid.praxis-proxy.io/v1alpha1"

_LABEL_NAME_PATTERN = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_PREFIX_PATTERN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_NAME = re.compile(_LABEL_NAME_PATTERN)
_LABEL_PREFIX = re.compile(_LABEL_PREFIX_PATTERN)


def label_key_rules(key: str) -> tuple[ValidationRule, ValidationRule]:
    """The CEL rules of a label key, the text of the expression ``key`` (``self`` for a
    key field, a comprehension's variable for a map's keys): its prefix, then its name."""
    slash = f"{key}.lastIndexOf('/')"
    name = f"{key}.substring({slash} + 1)"
    # A prefix and its slash, if any, then no other slash (the name's characters are the
    # other rule's): one regex and one search, cheap enough for every key of a map.
    prefixed = "^(" + _LABEL_PREFIX_PATTERN + "/)?[^/]*$"
    return (
        ValidationRule(
            f"{key}.matches({cel_string(prefixed)}) && {slash} <= 253",
            "label key prefix must be a DNS subdomain (e.g. grid.praxis-proxy.io/region)",
        ),
        ValidationRule(
            f"size({name}) <= 63 && {name}.matches({cel_string('^' + _LABEL_NAME_PATTERN + '$')})",
            "label key name must be 1-63 letters, digits, '-', '_' or '.', starting and "
            "ending alphanumeric",
        ),
    )


LABEL_KEY_PREFIX, LABEL_KEY_NAME = label_key_rules("self")


def check_label_key(key: str) -> str:
    """``key`` if it is a valid label key (``[prefix/]name``), else :class:`ValueError`."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _LABEL_PREFIX.fullmatch(prefix)):
        raise ValueError(LABEL_KEY_PREFIX.message)
    if not (len(name) <= 63 and _LABEL_NAME.fullmatch(name)):
        raise ValueError(LABEL_KEY_NAME.message)
    return key


def check_label_value(value: str) -> str:
    """``value`` if it is a valid label value, else :class:`ValueError`."""
    if not (len(value) <= 63 and re.fullmatch(LABEL_VALUE_PATTERN, value)):
        raise ValueError(
            "label value must be at most 63 letters, digits, '-', '_' or '.', starting and "
            "ending alphanumeric"
        )
    return value


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        check_label_key(key)
        check_label_value(value)
    return labels


LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
_LABEL_VALUE_SCHEMA = {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN}

LabelValue = Annotated[
    str, AfterValidator(check_label_value), Field(json_schema_extra=_LABEL_VALUE_SCHEMA)
]
"""A label value: at most 63 characters."""

# A map's keys have no schema (OpenAPI has no propertyNames): rules check them.
LABEL_MAP_KEYS = tuple(
    ValidationRule(f"self.all(key, {rule.rule})", rule.message) for rule in label_key_rules("key")
)

Labels = Annotated[
    dict[str, str],
    AfterValidator(_check_labels),
    Field(
        json_schema_extra={
            "additionalProperties": _LABEL_VALUE_SCHEMA,
            **validations(*LABEL_MAP_KEYS),
        }
    ),
]
"""Kubernetes labels: keys ``[prefix/]name``, values of at most 63 characters."""


class ObjectMeta(GridModel):
    """The part of Kubernetes object metadata Grid reads. Lenient: the API server adds
    fields (creationTimestamp, managedFields, finalizers, ...) that pass through."""

    model_config = ConfigDict(extra="allow")

    name: DnsSubdomain
    labels: Labels = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    generation: int | None = Field(None, ge=0)
    resource_version: str | None = None


class SecretKeyRef(GridModel):
    """One entry of a Secret: where a key or token is, never the value itself."""

    name: DnsSubdomain = Field(description="Name of the Secret.")
    namespace: DnsLabel = Field(description="Namespace of the Secret.")
    key: SecretKey = Field(description="Key of the entry in the Secret's data.")


class SecretObjectRef(GridModel):
    """A whole Secret (e.g. a ``kubernetes.io/tls`` Secret with ``tls.crt`` and ``tls.key``)."""

    name: DnsSubdomain = Field(description="Name of the Secret.")
    namespace: DnsLabel = Field(description="Namespace of the Secret.")
