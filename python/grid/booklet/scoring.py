"""The scoring chapter: a small mesh (``scenario/mesh.yaml``), signal values and weights
from the reader's sliders, and the explanation ``grid explain --json`` prints for them.

Everything here runs the real pipeline: the what-if candidates of the scenario's resources
with a metrics report made of the slider values, ranked by :func:`rank_candidates` under
the scenario network's scoring settings with the slider weights, and described by
:func:`explain_document`. The page only shows the documents this module returns.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from grid.errors import ConfigError
from grid.models.common import ScoringWeights
from grid.models.network import GridNetwork
from grid.models.resources import LoadedResources, load_resources_from_dir
from grid.render.overlay import rfc3339, select_candidates
from grid.render.whatif import build_what_if, check_target, parse_metrics_report
from grid.scoring.explain import explain_document
from grid.scoring.ranking import rank_candidates

SCENARIO_DIR = Path(__file__).resolve().parent / "scenario"
SITE = "hub"
GATEWAY = "edge-gateway"
NOW = datetime(2026, 7, 29, 12, 0, tzinfo=UTC)

WEIGHT_NAMES: tuple[str, ...] = (
    "locality",
    "queue_depth",
    "kv_cache",
    "prefix_cache",
    "latency",
    "cost",
)
"""The six weights, as ``scoring.weights`` names them (snake case in Python)."""


@dataclass(frozen=True, slots=True)
class Slider:
    """One slider: its range, its step and, for the static booklet, the values precomputed
    (each one with every other slider at the scenario's value)."""

    low: float
    high: float
    step: float
    stops: tuple[float, ...]

    def check(self, name: str, value: float) -> None:
        if not math.isfinite(value) or not self.low <= value <= self.high:
            raise BookletQueryError(
                f"{name} must be a number from {_number(self.low)} to {_number(self.high)}, "
                f"got {_number(value) if math.isfinite(value) else value}"
            )


SIGNAL_SLIDERS: Mapping[str, Slider] = MappingProxyType(
    {
        # The admission threshold is 0.85 of the queue capacity (64): 54.4 requests.
        "queueDepth": Slider(0, 128, 1, (0, 8, 16, 32, 48, 56, 64, 96)),
        "kvCacheUtilization": Slider(0, 1, 0.01, (0, 0.25, 0.5, 0.75, 0.95)),
        "prefixCacheHitRatio": Slider(0, 1, 0.01, (0, 0.25, 0.5, 0.75, 1)),
        "p99LatencyMs": Slider(0, 12_000, 50, (200, 500, 1000, 2000, 5000, 10_000)),
    }
)
"""The signals a metrics file reports (locality and cost follow from placement and price)."""

WEIGHT_SLIDER = Slider(0, 10, 0.5, (0, 1, 2, 3, 5, 10))

BASE_SIGNALS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "vllm-hub-a": {
            "queueDepth": 6,
            "kvCacheUtilization": 0.45,
            "prefixCacheHitRatio": 0.55,
            "p99LatencyMs": 900,
        },
        "vllm-hub-b": {
            "queueDepth": 12,
            "kvCacheUtilization": 0.3,
            "prefixCacheHitRatio": 0.4,
            "p99LatencyMs": 700,
        },
        "vllm-east": {
            "queueDepth": 4,
            "kvCacheUtilization": 0.2,
            "prefixCacheHitRatio": 0.3,
            "p99LatencyMs": 1100,
        },
        "vllm-west": {
            "queueDepth": 2,
            "kvCacheUtilization": 0.1,
            "prefixCacheHitRatio": 0.2,
            "p99LatencyMs": 1400,
        },
        # A managed model reports no queue or cache: those signals score a neutral 0.5.
        "bedrock-llama": {"p99LatencyMs": 1800},
    }
)


class BookletQueryError(ValueError):
    """A scoring request the chapter cannot answer; the message says why."""


@dataclass(frozen=True, slots=True)
class ScoringInputs:
    """Slider values: the six weights and each provider's reported signals."""

    weights: Mapping[str, float]
    signals: Mapping[str, Mapping[str, float]]

    def metrics_document(self) -> dict[str, Any]:
        """The ``--metrics`` file of these values, as ``grid explain`` reads it."""
        return {
            "providers": {
                provider: {name: values[name] for name in sorted(values)}
                for provider, values in sorted(self.signals.items())
            }
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "weights": dict(self.weights),
            "signals": {provider: dict(values) for provider, values in self.signals.items()},
        }

    def changed(self, key: str, value: float) -> ScoringInputs:
        """These inputs with one slider (a query key) set to ``value``."""
        return _apply(self, {key: value})


def base_inputs() -> ScoringInputs:
    weights = ScoringWeights()
    return ScoringInputs(
        weights={name: float(getattr(weights, name)) for name in WEIGHT_NAMES},
        signals={provider: dict(values) for provider, values in BASE_SIGNALS.items()},
    )


def slider_keys() -> list[str]:
    """Every slider as a query key: ``weight.<name>`` and ``<provider>.<signal>``."""
    keys = [f"weight.{name}" for name in WEIGHT_NAMES]
    for provider, values in BASE_SIGNALS.items():
        keys.extend(f"{provider}.{signal}" for signal in values)
    return keys


def slider_for(key: str) -> Slider:
    if key.startswith("weight."):
        return WEIGHT_SLIDER
    return SIGNAL_SLIDERS[key.rsplit(".", 1)[1]]


def parse_query(query: Mapping[str, str]) -> ScoringInputs:
    """The inputs a request asks for: the scenario's values with the query's changes.
    Raises :class:`BookletQueryError` naming the first bad key or value."""
    changes: dict[str, float] = {}
    for key, text in query.items():
        _check_key(key)
        try:
            value = float(text)
        except ValueError:
            raise BookletQueryError(f"{key} must be a number, got {text[:40]!r}") from None
        slider_for(key).check(key, value)
        changes[key] = value
    return _apply(base_inputs(), changes)


def _check_key(key: str) -> None:
    if key.startswith("weight."):
        name = key.removeprefix("weight.")
        if name not in WEIGHT_NAMES:
            raise BookletQueryError(
                f"unknown weight {name[:40]!r} (weights: {', '.join(WEIGHT_NAMES)})"
            )
        return
    provider, _, signal = key.rpartition(".")
    if not provider:
        raise BookletQueryError(
            f"unknown parameter {key[:40]!r}: use weight.<name> or <provider>.<signal>"
        )
    if provider not in BASE_SIGNALS:
        raise BookletQueryError(
            f"unknown provider {provider[:40]!r} (providers: {', '.join(BASE_SIGNALS)})"
        )
    if signal not in SIGNAL_SLIDERS:
        raise BookletQueryError(
            f"unknown signal {signal[:40]!r} (signals: {', '.join(SIGNAL_SLIDERS)})"
        )


def _apply(inputs: ScoringInputs, changes: Mapping[str, float]) -> ScoringInputs:
    weights = dict(inputs.weights)
    signals = {provider: dict(values) for provider, values in inputs.signals.items()}
    for key, value in changes.items():
        if key.startswith("weight."):
            weights[key.removeprefix("weight.")] = value
        else:
            provider, _, signal = key.rpartition(".")
            signals.setdefault(provider, {})[signal] = value
    return ScoringInputs(weights=weights, signals=signals)


@functools.cache
def scenario_resources() -> LoadedResources:
    resources = load_resources_from_dir(SCENARIO_DIR)
    if resources.errors:
        raise ConfigError(f"the booklet's scenario is invalid: {resources.errors[0]}")
    check_target(resources, site=SITE, gateway=GATEWAY)
    return resources


def _with_weights(resources: LoadedResources, weights: ScoringWeights) -> LoadedResources:
    def reweighted(network: GridNetwork) -> GridNetwork:
        scoring = network.spec.scoring.model_copy(update={"weights": weights})
        spec = network.spec.model_copy(update={"scoring": scoring})
        return network.model_copy(update={"spec": spec})

    return dataclasses.replace(
        resources,
        resources=tuple(
            reweighted(entry) if isinstance(entry, GridNetwork) else entry
            for entry in resources.resources
        ),
    )


def explain_inputs(inputs: ScoringInputs) -> dict[str, Any]:
    """``grid explain --json`` for the scenario under ``inputs`` (the scenario's network
    with these weights, a metrics file of these signals, ``--now`` :data:`NOW`)."""
    try:
        weights = ScoringWeights(**inputs.weights)
    except ValidationError as error:
        raise BookletQueryError(f"weights: {error.errors()[0]['msg']}") from None
    resources = _with_weights(scenario_resources(), weights)
    what_if = build_what_if(
        resources,
        site=SITE,
        gateway=GATEWAY,
        metrics=parse_metrics_report(inputs.metrics_document()),
    )
    network = what_if.network.spec
    ranking = rank_candidates(
        what_if.candidates,
        what_if.consumer,
        network.scoring,
        NOW,
        stale_after_seconds=network.stale_candidate_ttl_seconds,
    )
    published, cut = select_candidates(ranking.candidates)
    return explain_document(
        ranking,
        published=published,
        extra_left_out=cut,
        not_offered=what_if.not_offered,
        scope=dataclasses.asdict(what_if.scope),
        now=rfc3339(NOW),
    )


def answer(inputs: ScoringInputs) -> dict[str, Any]:
    """What the page shows for ``inputs``: the explanation, the inputs and the admission
    threshold they are judged against."""
    return {"inputs": inputs.as_json(), "explain": explain_inputs(inputs), **thresholds()}


def precomputed_tables() -> dict[str, Any]:
    """The static booklet's scoring data: the sliders (range, step, scenario value, stops)
    and the explanation at the scenario's values and at every stop of every slider, one
    slider moved at a time. Explanations are stored once and referred to by index."""
    base = base_inputs()
    documents: list[dict[str, Any]] = []
    index_of: dict[str, int] = {}

    def stored(inputs: ScoringInputs) -> int:
        document = explain_inputs(inputs)
        key = json.dumps(document, sort_keys=True)
        if key not in index_of:
            index_of[key] = len(documents)
            documents.append(_trimmed(document))
        return index_of[key]

    base_document = stored(base)
    sliders = {}
    for key in slider_keys():
        slider = slider_for(key)
        current = _value_of(base, key)
        stops = sorted({*slider.stops, current})
        sliders[key] = {
            "low": slider.low,
            "high": slider.high,
            "step": slider.step,
            "value": current,
            "stops": stops,
            "documents": [stored(base.changed(key, value)) for value in stops],
        }
    first = explain_inputs(base)
    return {
        "scope": first["scope"],
        "now": first["now"],
        "site": first["site"],
        **thresholds(),
        "sliders": sliders,
        "base": base_document,
        "documents": documents,
    }


def thresholds() -> dict[str, float]:
    """Where admission stops offering new sessions: the queue depth (requests) and the KV
    cache utilization above which a provider takes existing sessions only."""
    scoring = scenario_resources().networks[0].spec.scoring
    return {
        "queue_threshold": scoring.admission.queue_depth * scoring.scales.queue_capacity,
        "kv_threshold": scoring.admission.kv_utilization,
    }


def _value_of(inputs: ScoringInputs, key: str) -> float:
    if key.startswith("weight."):
        return inputs.weights[key.removeprefix("weight.")]
    provider, _, signal = key.rpartition(".")
    return inputs.signals[provider][signal]


_CONSTANT_KEYS = ("schema_version", "scope", "now", "site")


def _trimmed(document: dict[str, Any]) -> dict[str, Any]:
    """A document without the keys every table shares (stored once beside them)."""
    return {key: value for key, value in document.items() if key not in _CONSTANT_KEYS}


def _number(value: float) -> str:
    return f"{value:g}"
