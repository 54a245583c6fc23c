"""A real headless Chromium for page tests, driven through chromedriver (Selenium).

The browser is Debian's ``chromium`` with its ``chromium-driver`` (``.ci/run`` installs
both). Without them a test skips with the reason, except under ``CI=true``, where it fails:
CI must run the page tests, not skip them.

- :func:`browser`: a fresh headless Chromium with the console log captured; ``with``.
- :func:`console_errors`: the console messages at level SEVERE since the last call.
- :func:`save_screenshot`: a PNG of the page into the artifacts directory
  (``GRID_TEST_ARTIFACTS``, default ``test-artifacts/`` at the project root).
- :func:`wait_for`: poll a condition on the page until it holds or a deadline passes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
DRIVER_CANDIDATES = ("chromedriver",)
WINDOW = (1400, 1000)


def _find(candidates: tuple[str, ...]) -> str | None:
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI installs chromium and chromium-driver (.ci/run)")
    pytest.skip(f"{reason} (apt-get install chromium chromium-driver)")


def artifacts_dir() -> Path:
    """Where page tests write screenshots, created on demand."""
    path = Path(os.environ.get("GRID_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def browser() -> Iterator[WebDriver]:
    """A headless Chromium; skips (fails under CI) where none is installed."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed")
        raise  # unreachable: skip/fail raise
    binary = _find(CHROMIUM_CANDIDATES)
    driver_path = _find(DRIVER_CANDIDATES)
    if binary is None or driver_path is None:
        _unavailable("no headless Chromium with chromedriver on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = str(binary)
    for flag in (
        "--headless=new",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(flag)
    # Chromium's sandbox needs an unprivileged user; tests run as root in CI containers.
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(driver_path)))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: WebDriver) -> list[str]:
    """Console messages at level SEVERE (uncaught errors, failed loads) since the last call."""
    entries = driver.get_log("browser")
    return [entry["message"] for entry in entries if entry.get("level") == "SEVERE"]


def save_screenshot(driver: WebDriver, name: str) -> Path:
    """A PNG screenshot of the current page in the artifacts directory."""
    path = artifacts_dir() / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float = 20.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """``condition()``'s first truthy value, polled until ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = condition()
        except Exception as error:  # the page may be mid-update: retry until the deadline
            last_error = error
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(interval)
