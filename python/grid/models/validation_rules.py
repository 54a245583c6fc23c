"""Checks the API server makes at admission: CEL rules for a CRD's ``x-kubernetes-validations``.

Kubernetes refuses at ``kubectl apply`` what can never be valid. The OpenAPI keywords of the
generated CRDs (types, enums, patterns, lengths, ranges, required fields, list keys) carry
the checks of single values; a :class:`ValidationRule` carries one the keywords cannot
express (a relation between fields, a value range of a duration, a header name the gateway
keeps for itself). Each rule is declared next to the check it mirrors, with that check's
message, and lands in the schema of every node of that model or type:
:mod:`grid.models.crd` carries it over from the models' JSON schema. The twin is a check of
the models, or one of the CRD's patterns as ``SpecValid`` reads it (Python's ``re``, where
the API server reads it with RE2: they differ on whitespace), and then the rule's message
says in words what the pattern means.

A rule refuses only what its twin refuses, so the API server and ``SpecValid`` agree on
every object alone; what needs more than one object is reported after, by the operator
(see ``docs/resources.md``). The rules keep within the API server's CEL cost limits: each
works on values the schema bounds (``maxLength``, ``maxItems``), or on a map's keys cheaply
enough, so the server can estimate it.

Pure: data only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

VALIDATIONS = "x-kubernetes-validations"


class Reason(StrEnum):
    """What the API server reports a broken rule as (``kubectl`` prints it with the field)."""

    INVALID = "FieldValueInvalid"
    REQUIRED = "FieldValueRequired"
    FORBIDDEN = "FieldValueForbidden"


@dataclass(frozen=True, slots=True)
class ValidationRule:
    """One CEL rule over ``self`` (the node it sits on) and the message the API server
    refuses an object with when the rule is false: the message of the model's twin check.

    ``field_path`` points the refusal at a field below the node (``.serverName``), where the
    fix goes. ``message_expression`` words the message from the object where the model's
    message names a value (an operator, a header): it must give the model's message, and
    ``message`` stands in for it should the expression fail."""

    rule: str
    message: str
    field_path: str = ""
    reason: Reason = Reason.INVALID
    message_expression: str = ""

    def manifest(self) -> dict[str, str]:
        """The rule as an entry of ``x-kubernetes-validations``."""
        entry = {"rule": self.rule, "message": self.message}
        if self.message_expression:
            entry["messageExpression"] = self.message_expression
        if self.field_path:
            entry["fieldPath"] = self.field_path
        if self.reason is not Reason.INVALID:
            entry["reason"] = self.reason.value
        return entry


def validations(*rules: ValidationRule) -> dict[str, Any]:
    """JSON-schema extras that put ``rules`` on a model or a field:
    ``model_config = ConfigDict(json_schema_extra=validations(RULE))``."""
    return {VALIDATIONS: [rule.manifest() for rule in rules]}


def cel_string(text: str) -> str:
    """``text`` as a CEL string literal (single-quoted, backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def present(field: str) -> str:
    """CEL: the optional field ``field`` of ``self`` is set (neither absent nor null)."""
    return f"has(self.{field})"
