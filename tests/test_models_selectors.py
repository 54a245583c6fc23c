"""Label selectors follow Kubernetes semantics."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from grid.models import LabelSelector, select, selector_matches
from grid.models.selectors import LabelSelectorRequirement

LABELS = {"topology.kubernetes.io/region": "us-east", "tier": "edge", "gpu": ""}


def selector(**fields: Any) -> LabelSelector:
    return LabelSelector.model_validate(fields)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, True),
        ({"matchLabels": {"tier": "edge"}}, True),
        ({"matchLabels": {"tier": "core"}}, False),
        ({"matchLabels": {"tier": "edge", "topology.kubernetes.io/region": "us-west"}}, False),
        ({"matchLabels": {"missing": ""}}, False),
        ({"matchLabels": {"gpu": ""}}, True),
        (
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["edge", "core"]}]},
            True,
        ),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["core"]}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "In", "values": ["x"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["core"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["edge"]}]}, False),
        # NotIn holds when the key is absent.
        ({"matchExpressions": [{"key": "absent", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "absent", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "absent", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        (
            {
                "matchLabels": {"tier": "edge"},
                "matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}],
            },
            False,
        ),
    ],
)
def test_selector_semantics(fields: dict[str, Any], expected: bool) -> None:
    assert selector_matches(selector(**fields), LABELS) is expected


@pytest.mark.parametrize(
    ("requirement", "complaint"),
    [
        ({"key": "a", "operator": "In", "values": []}, "needs at least one value"),
        ({"key": "a", "operator": "NotIn"}, "needs at least one value"),
        ({"key": "a", "operator": "Exists", "values": ["x"]}, "takes no values"),
        ({"key": "a", "operator": "Equals", "values": ["x"]}, "'In', 'NotIn', 'Exists'"),
        ({"key": "bad key", "operator": "Exists"}, "label key name"),
        ({"key": "a", "operator": "In", "values": ["bad value!"]}, "label value"),
    ],
)
def test_malformed_requirements(requirement: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        LabelSelectorRequirement.model_validate(requirement)


def test_select_keeps_order() -> None:
    items = [("a", {"tier": "edge"}), ("b", {"tier": "core"}), ("c", {"tier": "edge"})]
    chosen = select(selector(matchLabels={"tier": "edge"}), items, lambda item: item[1])
    assert [name for name, _ in chosen] == ["a", "c"]


_values = st.sampled_from(["a", "b", "c"])
_label_sets = st.dictionaries(st.sampled_from(["k1", "k2", "k3"]), _values, max_size=3)


@given(_label_sets, st.sampled_from(["k1", "k2"]), st.lists(_values, min_size=1, max_size=3))
def test_in_and_notin_are_complements_when_the_key_is_present(
    labels: dict[str, str], key: str, values: list[str]
) -> None:
    inside = selector(matchExpressions=[{"key": key, "operator": "In", "values": values}])
    outside = selector(matchExpressions=[{"key": key, "operator": "NotIn", "values": values}])
    if key in labels:
        assert selector_matches(inside, labels) != selector_matches(outside, labels)
    else:
        assert not selector_matches(inside, labels) and selector_matches(outside, labels)


@given(_label_sets, _label_sets)
def test_match_labels_means_subset(labels: dict[str, str], wanted: dict[str, str]) -> None:
    expected = all(labels.get(key) == value for key, value in wanted.items())
    assert selector_matches(selector(matchLabels=wanted), labels) is expected
