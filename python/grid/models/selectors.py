"""Kubernetes label selectors (``matchLabels`` + ``matchExpressions``) and their meaning,
as a pure function over a label mapping."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Annotated, Self, TypeVar

from pydantic import AfterValidator, Field, model_validator

from grid.models.common import GridModel
from grid.models.meta import Labels, check_label_key, check_label_value


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


def _check_values(values: list[str]) -> list[str]:
    for value in values:
        check_label_value(value)
    return values


class LabelSelectorRequirement(GridModel):
    """One expression: ``key`` compared with ``values`` by ``operator``."""

    key: Annotated[str, AfterValidator(check_label_key)] = Field(max_length=317, min_length=1)
    operator: SelectorOperator
    values: Annotated[list[str], AfterValidator(_check_values)] = Field(
        default_factory=list, max_length=256
    )

    @model_validator(mode="after")
    def _values_fit_operator(self) -> Self:
        needs_values = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
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
