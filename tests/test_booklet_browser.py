"""The booklet's chapters in a real headless Chromium, opened from file:// and served by
``grid booklet --serve``: each loads with no console error, and its controls change what
is drawn the way Grid's own code says they should."""

from __future__ import annotations

import re
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from grid.booklet import scoring, swim
from grid.booklet.site import build_site, write_site
from support.browser import browser, console_errors, save_screenshot, wait_for
from test_booklet import explain_with_cli

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

MODES = ("file", "served")


@pytest.fixture(scope="module")
def file_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("booklet")
    write_site(build_site(), out)
    return out.as_uri() + "/"


@pytest.fixture(scope="module")
def served_url() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "grid.cli", "booklet", "--serve", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while "serving the booklet at" not in line:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([process.stdout], [], [], max(left, 0))
            if not ready or process.poll() is not None:
                raise AssertionError(f"grid booklet --serve did not start: {line!r}")
            line = process.stdout.readline()
        found = re.search(r"(http://\S+/booklet/)", line)
        assert found, line
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    with browser() as chromium:
        yield chromium


def base_url(mode: str, file_url: str, served_url: str) -> str:
    return file_url if mode == "file" else served_url


def find(driver: WebDriver, selector: str) -> WebElement:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def find_all(driver: WebDriver, selector: str) -> list[WebElement]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def no_console_errors(driver: WebDriver) -> None:
    errors = console_errors(driver)
    assert not errors, errors


def set_range(driver: WebDriver, element: WebElement, value: float) -> None:
    """Moves a range input as a drag would: its value changes, then an input event."""
    driver.execute_script(
        "arguments[0].value = arguments[1];"
        "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));",
        element,
        str(value),
    )


# --- SWIM -----------------------------------------------------------------------------


def frame_after(trace: dict[str, Any], seconds: float) -> int:
    """The first frame at or after ``seconds`` into the run."""
    return next(index for index, t in enumerate(trace["times"]) if t >= seconds)


def shows_frame(figure: WebElement, frame: int) -> Callable[[], bool]:
    return lambda: figure.get_attribute("data-frame") == str(frame)


@pytest.mark.parametrize("mode", MODES)
def test_swim_chapter_replays_the_recorded_run(
    driver: WebDriver, mode: str, file_url: str, served_url: str
) -> None:
    driver.get(base_url(mode, file_url, served_url) + "swim.html")
    figure = find(driver, "#swim-figure")
    wait_for(lambda: figure.get_attribute("data-run") == "n8-loss5-crash", what="the run")
    assert len(find_all(driver, "#swim-figure g.node")) == 9
    no_console_errors(driver)

    find(driver, "#swim-step").click()
    wait_for(lambda: figure.get_attribute("data-frame") == "1", what="a step")
    find(driver, "#swim-play").click()
    wait_for(lambda: int(figure.get_attribute("data-frame") or 0) >= 4, what="play")
    find(driver, "#swim-play").click()

    # Stepping past the crash: the frames show the recorded messages, and the first one
    # with an indirect probe of the crashed node shows it as an arrow to that node that
    # was not delivered, sent by an intermediary a ping-req asked.
    trace = swim.record_trace(8, 0.05, True)
    start = trace["start"]
    crashed = swim.CRASHED_NODE
    kinds = trace["message_kinds"]
    indirect_frame = next(
        index
        for index, frame in enumerate(trace["messages"])
        if any(kinds[m[3]] == "indirect-ping" and m[2] == crashed for m in frame)
    )
    time_slider = find(driver, "#swim-time")
    crash_frame = frame_after(trace, swim.CRASH_AFTER)
    set_range(driver, time_slider, crash_frame)
    wait_for(lambda: figure.get_attribute("data-frame") == str(crash_frame), what="the crash")
    for frame in range(crash_frame + 1, indirect_frame + 1):
        find(driver, "#swim-step").click()
        wait_for(shows_frame(figure, frame), what="a step")
        arrows = find_all(driver, "#swim-figure g.msg")
        assert len(arrows) == sum(1 for m in trace["messages"][frame] if m[2] is not None)
    indirect = find_all(
        driver, f'#swim-figure g.msg[data-kind="indirect-ping"][data-to="{crashed}"]'
    )
    assert indirect
    assert {arrow.get_attribute("data-fate") for arrow in indirect} == {"undeliverable"}
    intermediaries = {
        str(m[2])
        for frame in trace["messages"][crash_frame : indirect_frame + 1]
        for m in frame
        if kinds[m[3]] == "ping-req" and len(m) > 5 and m[5] == crashed
    }
    assert {arrow.get_attribute("data-from") for arrow in indirect} <= intermediaries
    listed = find_all(driver, f'#swim-messages li[data-kind="indirect-ping"][data-to="{crashed}"]')
    assert listed and "not delivered" in listed[0].text
    node = find(driver, f'#swim-figure g.node[data-node="{crashed}"]')
    assert node.get_attribute("data-state") == "crashed"
    assert node.get_attribute("data-declared") == "no"

    # Then the suspicion and the down declaration, in the timeline at their times.
    suspected_at, target, _, by, _ = trace["suspicions"][0]
    assert target == crashed
    set_range(driver, time_slider, frame_after(trace, suspected_at - start))
    suspicion_log = find(driver, f'#swim-log li[data-kind="suspect"][data-node="{crashed}"]')
    wait_for(suspicion_log.is_displayed, what="the suspicion in the timeline")
    assert f"node {by} suspects node {target}" in suspicion_log.text
    declared_at, declared_by, declared, _ = trace["declarations"][0]
    assert declared == crashed
    down_log = find(driver, f'#swim-log li[data-kind="down"][data-node="{crashed}"]')
    assert not down_log.is_displayed()
    set_range(driver, time_slider, frame_after(trace, declared_at - start))
    wait_for(down_log.is_displayed, what="the declaration in the timeline")
    assert f"node {declared_by} declares node {declared} down" in down_log.text
    node = find(driver, f'#swim-figure g.node[data-node="{crashed}"]')
    assert node.get_attribute("data-declared") == "yes"
    find(driver, "#swim-end").click()
    last = trace["known"][-1]
    for index, known in enumerate(last):
        shown = find(driver, f'#swim-figure g.node[data-node="{index}"]')
        assert shown.get_attribute("data-known") == str(known)
    learned = find_all(driver, '#swim-log li[data-kind="learned-down"]')
    assert len(learned) == trace["down_learned"]["observers"]
    save_screenshot(driver, f"booklet-swim-{mode}")

    # Other controls load and draw other recorded runs.
    from selenium.webdriver.support.select import Select

    Select(find(driver, "#swim-n")).select_by_value("12")
    wait_for(lambda: figure.get_attribute("data-run") == "n12-loss5-crash", what="N=12")
    assert len(find_all(driver, "#swim-figure g.node")) == 13
    Select(find(driver, "#swim-loss")).select_by_value("0.2")
    wait_for(lambda: figure.get_attribute("data-run") == "n12-loss20-crash", what="20 % loss")
    find(driver, "#swim-crash").click()
    wait_for(lambda: figure.get_attribute("data-run") == "n12-loss20-nocrash", what="no crash")
    find(driver, "#swim-end").click()
    refutations = find(driver, '#swim-stats td[data-stat="refutations so far"]')
    wait_for(lambda: int(refutations.text) > 0, what="refutations at 20 % loss")
    # Who refuted, and whose suspicion it answered, as the simulator recorded it.
    lossy = swim.record_trace(12, 0.2, False)
    _, refuter, incarnation, suspector = lossy["refutations"][0]
    first = find_all(driver, '#swim-log li[data-kind="refute"]')[0]
    assert first.get_attribute("data-node") == str(refuter)
    assert f"node {refuter} refutes: incarnation {incarnation}" in first.text
    assert f"answering node {suspector}'s suspicion" in first.text
    no_console_errors(driver)


# --- CRDT -----------------------------------------------------------------------------


def crdt_click(driver: WebDriver, selector: str) -> None:
    find(driver, selector).click()


def replica_texts(driver: WebDriver) -> list[str]:
    return [element.text for element in find_all(driver, ".replica .state")]


ORDER_ONE = (
    '[data-op="A-add-llama"]',
    '[data-merge="B<A"]',
    '[data-op="B-remove-llama"]',
    '[data-op="C-add-llama"]',
    '[data-op="A-write"]',
    '[data-op="B-write"]',
    '[data-op="C-write"]',
    '[data-op="A-inc"]',
    '[data-op="B-inc"]',
    '[data-op="C-inc"]',
    '[data-op="B-add-qwen"]',
)


@pytest.mark.parametrize("mode", MODES)
def test_crdt_chapter_converges_whatever_the_merge_order(
    driver: WebDriver, mode: str, file_url: str, served_url: str
) -> None:
    driver.get(base_url(mode, file_url, served_url) + "crdt.html")
    badge = wait_for(lambda: find(driver, "#crdt-converged"), what="the page")
    no_console_errors(driver)
    finals = []
    for merges in (
        ('[data-merge="A<B"]', '[data-merge="A<C"]', '[data-merge="B<A"]', '[data-merge="C<A"]'),
        (
            '[data-merge="C<B"]',
            '[data-merge="B<C"]',
            '[data-merge="C<A"]',
            '[data-merge="A<C"]',
            '[data-merge="B<C"]',
        ),
    ):
        crdt_click(driver, "#crdt-reset")
        for selector in ORDER_ONE:
            crdt_click(driver, selector)
        assert badge.get_attribute("data-converged") == "no"
        assert find(driver, '[data-op="A-add-llama"]').get_attribute("disabled") is not None
        for selector in merges:
            crdt_click(driver, selector)
        assert badge.get_attribute("data-converged") == "yes"
        texts = replica_texts(driver)
        assert texts[0] == texts[1] == texts[2]
        finals.append(texts[0])
    assert finals[0] == finals[1]
    # Add wins: B's remove only cancelled the add it had seen; C's concurrent add stays.
    elements = [
        (
            e.get_attribute("data-element"),
            [d.text for d in e.find_elements("css selector", ".dotchip")],
        )
        for e in find_all(driver, '.replica[data-replica="A"] .element')
    ]
    assert elements == [("llama", ["C1"]), ("qwen", ["B1"])]
    assert "route west" in finals[0] and "requests 6" in finals[0]
    save_screenshot(driver, f"booklet-crdt-{mode}")
    no_console_errors(driver)


# --- Scoring --------------------------------------------------------------------------


def shown_table(driver: WebDriver) -> list[dict[str, str]]:
    rows = []
    for row in find_all(driver, "#scoring-table tbody tr"):
        cells = {
            cell.get_attribute("data-col"): cell.text
            for cell in row.find_elements("css selector", "td[data-col]")
        }
        rows.append({"rank": row.get_attribute("data-rank"), **cells})
    return rows


def expected_table(document: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for candidate in document["candidates"]:
        breakdown = candidate["score_breakdown"]
        rows.append(
            {
                "rank": str(candidate["rank"]),
                "provider": candidate["provider"],
                "site": candidate["site"],
                "admission": candidate["admission"],
                "group": candidate["group"],
                "tier": candidate["tier"],
                "fresh": "yes" if candidate["fresh"] else "no",
                "score": f"{candidate['score']:.6f}",
                **{name: f"{breakdown[name]:.6f}" for name in breakdown},
            }
        )
    return rows


@pytest.mark.parametrize("mode", MODES)
def test_scoring_chapter_matches_grid_explain(
    driver: WebDriver, mode: str, file_url: str, served_url: str, tmp_path: Path
) -> None:
    driver.get(base_url(mode, file_url, served_url) + "scoring.html")
    table = find(driver, "#scoring-table")
    wait_for(lambda: table.get_attribute("data-ready") == "yes", what="the table")
    no_console_errors(driver)
    base = explain_with_cli(tmp_path / "base", scoring.base_inputs())
    assert shown_table(driver) == expected_table(base)
    assert base["candidates"][0]["provider"] == "vllm-hub-a"
    note = find(driver, "#scoring-mode").text
    assert ("Served:" in note) == (mode == "served")

    # Past the admission threshold (54.4 requests): any value when served, the
    # precomputed stop 56 from a file.
    depth = 60 if mode == "served" else 56
    inputs = scoring.base_inputs().changed("vllm-hub-a.queueDepth", depth)
    expected = expected_table(explain_with_cli(tmp_path / "loaded", inputs))
    slider = find(driver, 'input[data-key="vllm-hub-a.queueDepth"]')
    set_range(driver, slider, depth)
    wait_for(lambda: shown_table(driver) == expected, what="the reordered table")
    providers = [row["provider"] for row in shown_table(driver)]
    assert providers[-1] == "vllm-hub-a"
    assert find(driver, 'tr[data-provider="vllm-hub-a"] [data-col="admission"]').text == (
        "existing_only"
    )
    why = find_all(driver, "#scoring-why li")[-1]
    assert why.get_attribute("data-decided-by") == "admission"
    save_screenshot(driver, f"booklet-scoring-{mode}")

    if mode == "served":
        # Served, sliders combine: a weight on top of the loaded queue.
        both = inputs.changed("weight.locality", 0.5)
        expected = expected_table(explain_with_cli(tmp_path / "both", both))
        set_range(driver, find(driver, 'input[data-key="weight.locality"]'), 0.5)
        wait_for(lambda: shown_table(driver) == expected, what="the combined table")
    else:
        # From a file, one slider at a time: moving another puts this one back.
        weight = scoring.base_inputs().changed("weight.locality", 0)
        expected = expected_table(explain_with_cli(tmp_path / "weight", weight))
        set_range(driver, find(driver, 'input[data-key="weight.locality"]'), 0)
        wait_for(lambda: shown_table(driver) == expected, what="the weight's table")
        assert slider.get_attribute("value") == "6"
    no_console_errors(driver)
