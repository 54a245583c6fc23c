"""Prometheus counters read as increases (``grid.observe.counters``): the series one reading
takes from an exposition, and what each grew by since the previous reading, with resets,
series that vanish and come back, the first reading and the bound on series."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

import grid.observe.counters
from grid.observe.counters import SeriesKey, advance, read_counter

METRIC = "litellm_total_tokens_metric_total"
ACME: SeriesKey = (("model", "gpt"), ("team", "acme"))
GLOBEX: SeriesKey = (("model", "gpt"), ("team", "globex"))


def exposition(series: Mapping[SeriesKey, float | str], metric: str = METRIC) -> str:
    lines = [f"# TYPE {metric.removesuffix('_total')} counter"]
    for key, value in series.items():
        labels = ",".join(f'{name}="{text}"' for name, text in key)
        lines.append(f"{metric}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


# -- reading ------------------------------------------------------------------------------


def test_a_reading_takes_the_series_of_the_metric_that_carry_the_matchers() -> None:
    text = exposition({ACME: 10, GLOBEX: 20, (("model", "llama"), ("team", "acme")): 30})
    text += exposition({ACME: 99}, metric="litellm_input_tokens_metric_total")
    reading = read_counter(text, METRIC, {"model": "gpt"})
    assert reading.error is None
    assert dict(reading.series) == {ACME: 10.0, GLOBEX: 20.0}
    assert dict(read_counter(text, METRIC, {"team": "acme", "model": "llama"}).series) == {
        (("model", "llama"), ("team", "acme")): 30.0
    }
    assert dict(read_counter(text, METRIC, {"team": "initech"}).series) == {}


def test_a_series_that_is_no_count_is_left_out_and_said() -> None:
    reading = read_counter(exposition({ACME: "NaN", GLOBEX: "-3", (): "+Inf"}), METRIC, {})
    assert dict(reading.series) == {}
    assert len(reading.skipped) == 3 and all("not a count" in why for why in reading.skipped)


def test_garbled_text_is_an_error_and_no_series() -> None:
    reading = read_counter("this is { not prometheus\n", METRIC, {})
    assert reading.error is not None and "not valid Prometheus" in reading.error
    assert dict(reading.series) == {}


def test_a_reading_of_more_series_than_the_bound_is_refused(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(grid.observe.counters, "MAX_SERIES", 2)
    reading = read_counter(exposition({ACME: 1, GLOBEX: 2, (): 3}), METRIC, {})
    assert reading.error is not None and "more than 2" in reading.error
    assert dict(reading.series) == {}


# -- increases ----------------------------------------------------------------------------


def test_the_first_reading_only_sets_the_baseline() -> None:
    baseline, increases = advance(None, {ACME: 1_000_000.0})
    assert baseline == {ACME: 1_000_000.0}
    assert increases == {}


def test_an_increase_is_the_difference_and_a_still_counter_counts_nothing() -> None:
    baseline, increases = advance({ACME: 100.0, GLOBEX: 5.0}, {ACME: 250.0, GLOBEX: 5.0})
    assert increases == {ACME: 150.0}
    assert baseline == {ACME: 250.0, GLOBEX: 5.0}


def test_a_lower_value_is_a_reset_and_the_new_value_is_the_increase() -> None:
    _, increases = advance({ACME: 250.0}, {ACME: 40.0})
    assert increases == {ACME: 40.0}
    _, increases = advance({ACME: 250.0}, {ACME: 0.0})
    assert increases == {}


def test_a_series_born_after_the_baseline_counts_from_zero() -> None:
    _, increases = advance({ACME: 10.0}, {ACME: 10.0, GLOBEX: 7.0})
    assert increases == {GLOBEX: 7.0}


def test_a_series_that_vanishes_and_comes_back_counts_only_what_it_grew() -> None:
    baseline, increases = advance({ACME: 100.0, GLOBEX: 50.0}, {GLOBEX: 60.0})
    assert increases == {GLOBEX: 10.0}
    assert baseline == {ACME: 100.0, GLOBEX: 60.0}  # remembered while away
    baseline, increases = advance(baseline, {ACME: 130.0, GLOBEX: 60.0})
    assert increases == {ACME: 30.0}
    # Back after a restart of the exporter: lower than when it went, so counted from zero.
    _, increases = advance({ACME: 130.0}, {ACME: 12.0})
    assert increases == {ACME: 12.0}


def test_past_the_bound_the_series_gone_longest_are_forgotten(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(grid.observe.counters, "MAX_SERIES", 3)
    first, second, third, fourth = ((("n", str(i)),) for i in range(4))
    baseline, _ = advance(None, {first: 1.0, second: 1.0})
    baseline, _ = advance(baseline, {third: 1.0})  # first and second go, in that order
    baseline, _ = advance(baseline, {fourth: 1.0})
    assert list(baseline) == [second, third, fourth]


# -- what a reader counts over a counter's history ----------------------------------------

_NAMES = ("a", "b", "c", "d")
# Between two scrapes each series either grows by a number of tokens, or its exporter
# restarts and counts again from zero, to a share of what it held, and is seen so (a
# restart that climbs back past the last value seen before anyone reads it is invisible to
# any reader, Prometheus' too).
_EVENT = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 10_000)),
    st.tuples(st.just("restart"), st.floats(0, 0.99)),
)
_INTERVAL = st.tuples(
    st.dictionaries(st.sampled_from(_NAMES), _EVENT, max_size=4),
    st.frozensets(st.sampled_from(_NAMES)),  # series the next scrape does not see
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(_NAMES), st.integers(0, 10**9), max_size=4),
    st.lists(_INTERVAL, max_size=25),
)
def test_what_is_counted_is_exactly_what_the_counters_grew_after_the_first_reading(
    history: dict[str, int], intervals: list[tuple[dict[str, tuple[str, float]], frozenset[str]]]
) -> None:
    """Counters with a history before the first reading, that rise, restart and vanish
    from scrapes, and new ones: the increases sum to the tokens counted after the first
    reading, whatever the order."""
    values = {name: float(value) for name, value in history.items()}
    baseline, increases = advance(None, {(("s", n),): v for n, v in values.items()})
    counted, spent = sum(increases.values()), 0.0
    seen_last = dict(values)  # what the previous scrape showed of each series
    for events, hidden in [*intervals, ({}, frozenset())]:
        restarted = set()
        for name, (kind, amount) in events.items():
            if kind == "restart" and seen_last.get(name, 0) >= 1:
                # The exporter restarted right after the previous scrape saw the series, and
                # the next scrape sees it before it climbs back.
                values[name] = float(int(seen_last[name] * amount))
                spent += values[name]
                restarted.add(name)
            elif kind == "add":
                values[name] = values.get(name, 0.0) + amount
                spent += amount
        seen_last = {n: v for n, v in values.items() if n not in hidden - restarted}
        baseline, increases = advance(baseline, {(("s", n),): v for n, v in seen_last.items()})
        counted += sum(increases.values())
    assert counted == spent
