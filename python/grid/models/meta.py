"""Pieces every Grid resource shares: the API group, object metadata, and references to
Secrets (Grid only ever holds a reference to a secret, never its bytes)."""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator, ConfigDict, Field

from grid.models.common import GridModel
from grid.models.fields import DnsLabel, DnsSubdomain, SecretKey

GROUP = "grid.praxis-proxy.io"
VERSION = "v1alpha1"
API_VERSION: Final = "grid.praxis-proxy.io/v1alpha1"

_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_label_key(key: str) -> str:
    """``key`` if it is a valid label key (``[prefix/]name``), else :class:`ValueError`."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _LABEL_PREFIX.fullmatch(prefix)):
        raise ValueError(
            "label key prefix must be a DNS subdomain (e.g. grid.praxis-proxy.io/region)"
        )
    if not (len(name) <= 63 and _LABEL_NAME.fullmatch(name)):
        raise ValueError(
            "label key name must be 1-63 letters, digits, '-', '_' or '.', starting and "
            "ending alphanumeric"
        )
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

Labels = Annotated[
    dict[str, str],
    AfterValidator(_check_labels),
    # Values can be checked by the schema too; keys only by the model (no propertyNames).
    Field(
        json_schema_extra={
            "additionalProperties": {
                "type": "string",
                "maxLength": 63,
                "pattern": LABEL_VALUE_PATTERN,
            }
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
