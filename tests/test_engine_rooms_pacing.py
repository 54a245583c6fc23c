"""The render pacing room on its own: a token bucket of RENDER_BURST renders refilled at one
per spacing, the spacing being the render interval stretched by what a pass costs (up to
MAX_RENDER_SPACING), and whether a change waits to be rendered."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from grid.engine.pacing import MAX_RENDER_SPACING, RENDER_BURST, RENDER_SHARE, RenderPacing
from test_engine import T0

INTERVAL = timedelta(milliseconds=100)


def burst(pacing: RenderPacing, renders: int = RENDER_BURST) -> None:
    """``renders`` changes rendered as soon as due, all at T0."""
    for _ in range(renders):
        pacing.pending = True
        assert pacing.due_at(T0, INTERVAL) == T0
        pacing.rendered(T0, INTERVAL)


def test_a_new_pacing_has_a_change_due_at_once() -> None:
    pacing = RenderPacing()
    assert pacing.pending
    assert pacing.due_at(T0, INTERVAL) == T0


def test_nothing_is_due_when_nothing_waits() -> None:
    pacing = RenderPacing()
    pacing.rendered(T0, INTERVAL)
    assert not pacing.pending
    assert pacing.due_at(T0, INTERVAL) is None
    assert pacing.due_at(T0 + timedelta(hours=1), INTERVAL) is None


def test_a_burst_renders_at_once_then_one_render_per_spacing() -> None:
    pacing = RenderPacing()
    burst(pacing)
    pacing.pending = True
    assert pacing.due_at(T0, INTERVAL) == T0 + INTERVAL
    assert pacing.due_at(T0 + INTERVAL / 2, INTERVAL) == T0 + INTERVAL
    assert pacing.due_at(T0 + INTERVAL, INTERVAL) == T0 + INTERVAL
    pacing.rendered(T0 + INTERVAL, INTERVAL)
    pacing.pending = True
    assert pacing.due_at(T0 + INTERVAL, INTERVAL) == T0 + 2 * INTERVAL


def test_a_flushed_render_past_the_burst_puts_the_next_one_off_too() -> None:
    pacing = RenderPacing()
    burst(pacing)
    pacing.rendered(T0, INTERVAL)  # flushed although not due: the bucket goes below empty
    pacing.pending = True
    assert pacing.due_at(T0, INTERVAL) == T0 + 2 * INTERVAL


def test_the_bucket_refills_to_a_whole_burst_and_no_more() -> None:
    pacing = RenderPacing()
    burst(pacing)
    quiet = T0 + INTERVAL * (RENDER_BURST * 10)
    for _ in range(RENDER_BURST):
        pacing.pending = True
        assert pacing.due_at(quiet, INTERVAL) == quiet
        pacing.rendered(quiet, INTERVAL)
    pacing.pending = True
    assert pacing.due_at(quiet, INTERVAL) == quiet + INTERVAL


def test_a_zero_interval_never_holds_a_render_back() -> None:
    pacing = RenderPacing()
    zero = timedelta(0)
    for _ in range(RENDER_BURST * 2):
        pacing.pending = True
        assert pacing.due_at(T0, zero) == T0
        pacing.rendered(T0, zero)
    pacing.note_cost(10.0)
    assert pacing.spacing(zero) == zero


def test_a_clock_that_went_back_holds_nothing_back() -> None:
    pacing = RenderPacing()
    burst(pacing)
    pacing.pending = True
    earlier = T0 - timedelta(seconds=1)
    assert pacing.due_at(earlier, INTERVAL) == earlier
    pacing.rendered(earlier, INTERVAL)  # counted from a full bucket again
    pacing.pending = True
    assert pacing.due_at(earlier, INTERVAL) == earlier


# --- the spacing -----------------------------------------------------------------------


def test_the_spacing_is_the_interval_until_a_cost_is_known() -> None:
    assert RenderPacing().spacing(INTERVAL) == INTERVAL


def test_a_cheap_pass_leaves_the_spacing_at_the_interval() -> None:
    pacing = RenderPacing()
    pacing.note_cost(INTERVAL.total_seconds() * RENDER_SHARE / 2)
    assert pacing.spacing(INTERVAL) == INTERVAL


def test_a_costly_pass_stretches_the_spacing_to_its_share() -> None:
    pacing = RenderPacing()
    pacing.note_cost(0.02)
    assert pacing.spacing(INTERVAL) == timedelta(seconds=0.02 / RENDER_SHARE)


def test_the_stretched_spacing_paces_renders_after_a_burst() -> None:
    pacing = RenderPacing()
    pacing.note_cost(0.02)
    burst(pacing)
    pacing.pending = True
    assert pacing.due_at(T0, INTERVAL) == T0 + timedelta(seconds=0.5)


def test_the_spacing_is_stretched_at_most_to_max_render_spacing() -> None:
    pacing = RenderPacing()
    pacing.note_cost(100.0)
    assert pacing.spacing(INTERVAL) == MAX_RENDER_SPACING


def test_an_interval_at_or_above_the_maximum_is_never_stretched() -> None:
    pacing = RenderPacing()
    pacing.note_cost(100.0)
    assert pacing.spacing(MAX_RENDER_SPACING) == MAX_RENDER_SPACING
    assert pacing.spacing(timedelta(seconds=5)) == timedelta(seconds=5)


def test_one_slow_pass_moves_the_running_cost_only_part_of_the_way() -> None:
    pacing = RenderPacing()
    pacing.note_cost(0.02)
    pacing.note_cost(0.0)
    # 0.02 + 0.3 * (0 - 0.02) = 0.014 s, spaced at 0.014 / RENDER_SHARE = 0.35 s.
    assert pacing.spacing(INTERVAL) == timedelta(seconds=0.35)


@pytest.mark.parametrize("cost", [-0.001, math.nan, math.inf])
def test_a_negative_nan_or_infinite_cost_is_refused_and_changes_nothing(cost: float) -> None:
    pacing = RenderPacing()
    pacing.note_cost(0.02)
    with pytest.raises(ValueError, match=">= 0"):
        pacing.note_cost(cost)
    assert pacing.spacing(INTERVAL) == timedelta(seconds=0.5)


def test_a_cost_of_days_stretches_the_spacing_to_the_maximum_and_pacing_goes_on() -> None:
    pacing = RenderPacing()
    pacing.note_cost(1e13)
    assert pacing.spacing(INTERVAL) == MAX_RENDER_SPACING
    pacing.rendered(T0, INTERVAL)
    pacing.pending = True
    assert pacing.due_at(T0, INTERVAL) == T0
