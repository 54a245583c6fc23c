"""Kubernetes label selectors (``matchLabels`` + ``matchExpressions``) and their meaning,
as a pure function over a label mapping."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Annotated, Self, TypeVar

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from grid.models.common import GridModel
from grid.models.meta import (
    LABEL_KEY_NAME,
    LABEL_KEY_PREFIX,
    Labels,
    LabelValue,
    check_label_key,
)
from grid.models.validation_rules import Reason, ValidationRule, cel_string, validations


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


_WITH_VALUES = (SelectorOperator.IN, SelectorOperator.NOT_IN)
_HAS_VALUES = "has(self.values) && size(self.values) > 0"
_OPERATOR_WITH_VALUES = f"self.operator in [{', '.join(cel_string(op) for op in _WITH_VALUES)}]"
VALUES_NEEDED = ValidationRule(
    f"!({_OPERATOR_WITH_VALUES}) || ({_HAS_VALUES})",
    "operator In or NotIn needs at least one value",
    field_path=".values",
    reason=Reason.REQUIRED,
    message_expression="'operator ' + self.operator + ' needs at least one value'",
)
VALUES_FORBIDDEN = ValidationRule(
    f"{_OPERATOR_WITH_VALUES} || !({_HAS_VALUES})",
    "operator Exists or DoesNotExist takes no values",
    field_path=".values",
    reason=Reason.FORBIDDEN,
    message_expression="'operator ' + self.operator + ' takes no values'",
)


class LabelSelectorRequirement(GridModel):
    """One expression: ``key`` compared with ``values`` by ``operator``."""

    model_config = ConfigDict(json_schema_extra=validations(VALUES_NEEDED, VALUES_FORBIDDEN))

    key: Annotated[
        str,
        AfterValidator(check_label_key),
        Field(json_schema_extra=validations(LABEL_KEY_PREFIX, LABEL_KEY_NAME)),
    ] = Field(max_length=317, min_length=1)
    operator: SelectorOperator
    values: list[LabelValue] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> Self:
        needs_values = self.operator in _WITH_VALUES
        if needs_values and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if not needs_values and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(GridModel):
    """Selects objects by their labels; every term must hold. An empty selector selects
    everything."""

    match_labels: Labels = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=64)


def requirement_matches(requirement: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy one expression (Kubernetes semantics: ``NotIn`` also
    holds when the key is absent)."""
    present = requirement.key in labels
    match requirement.operator:
        case SelectorOperator.IN:
            return present and labels[requirement.key] in requirement.values
        case SelectorOperator.NOT_IN:
            return not present or labels[requirement.key] not in requirement.values
        case SelectorOperator.EXISTS:
            return present
        case SelectorOperator.DOES_NOT_EXIST:
            return not present


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether an object with ``labels`` is selected: all ``matchLabels`` equal and every
    expression holds."""
    return all(labels.get(key) == value for key, value in selector.match_labels.items()) and all(
        requirement_matches(requirement, labels) for requirement in selector.match_expressions
    )


T = TypeVar("T")


def select(
    selector: LabelSelector, items: Iterable[T], labels_of: Callable[[T], Mapping[str, str]]
) -> list[T]:
    """The items whose labels ``selector`` matches, in their original order."""
    return [item for item in items if selector_matches(selector, labels_of(item))]
