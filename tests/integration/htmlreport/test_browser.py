"""The HTML report in a real browser: Debian's headless Chromium, driven by selenium through
/usr/bin/chromedriver (``scripts/install-chromium``; nothing downloads a browser).

Three reports, made as a user makes them (``shardtrain ...`` in a subprocess):

* a classifier, demo-like: quest logs sharded, trained briefly, published as the served
  model, then ``shardtrain evaluate --slice-by`` against it (the report it writes);
* a regression: a linear label trained briefly, ``shardtrain report --model-dir``;
* a dataset of 500 columns: ``shardtrain report --against`` itself, timed until the page
  says it is ready.

Each page must open with no console message at level SEVERE (an error or a failed load)
and hold every expected chart, each drawn (an ``<svg>`` of some size). Screenshots are
saved as PNG under the directory printed at the start (``SHARDTRAIN_SCREENSHOTS`` names
another), for a person to look at.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import DETERMINISTIC_TF, run_cli
from shardtrain.kubeflow.steps import publish_export
from shardtrain.train.export import latest_export

pytestmark = [pytest.mark.slow]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: What the closed network here needs besides headless (Chromium's background services
#: otherwise try to reach Google and log errors).
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)
#: The bound on opening a 500-column report (measured: see the module's test).
LOAD_BOUND_S = 10.0

CLASSIFIER_CHARTS = (
    "chart-training-curve",
    "chart-roc",
    "chart-pr",
    "chart-confusion",
    "chart-calibration",
    "chart-slice-difficulty",
    "chart-label-balance",
    "chart-rejects",
)
REGRESSION_CHARTS = (
    "chart-training-curve",
    "chart-predicted-vs-actual",
    "chart-residuals",
    "chart-label-balance",
    "chart-rejects",
)


@pytest.fixture(scope="module")
def screenshots() -> Path:
    where = Path(os.environ.get("SHARDTRAIN_SCREENSHOTS") or tempfile.mkdtemp(prefix="report-"))
    where.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots of the HTML reports: {where}")
    return where


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail("no Chromium: run scripts/install-chromium (make test does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in CHROMIUM_ARGS:
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def _open(browser, path: Path) -> tuple[float, list[dict]]:
    """Open the report; returns the seconds until its script marked the page ready, and the
    console's messages (the log is emptied by reading it)."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get_log("browser")  # what an earlier page left
    start = time.perf_counter()
    browser.get(path.resolve().as_uri())
    WebDriverWait(browser, 60).until(
        lambda d: d.execute_script("return document.body.dataset.ready === 'true'")
    )
    return time.perf_counter() - start, browser.get_log("browser")


def _errors(log: list[dict]) -> list[str]:
    return [m["message"] for m in log if m["level"] == "SEVERE"]


def _drawn(browser, chart_id: str) -> bool:
    """The chart is in the page with an SVG that has been laid out with some size."""
    return bool(
        browser.execute_script(
            "var f = document.getElementById(arguments[0]);"
            "var s = f && f.querySelector('svg');"
            "if (!s) { return false; }"
            "var r = s.getBoundingClientRect(); return r.width > 100 && r.height > 50;",
            chart_id,
        )
    )


def _shot(browser, where: Path, name: str, height: int | None = None) -> Path:
    """A PNG of the whole page (or its first ``height`` pixels)."""
    full = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(height or full, 12000))
    path = where / f"{name}.png"
    assert browser.save_screenshot(str(path))
    browser.set_window_size(1400, 1000)
    assert path.stat().st_size > 10_000
    return path


def _train(data: Path, model_dir: Path, steps: int = 60) -> None:
    run_cli(
        "train",
        "--data",
        str(data),
        "--model-dir",
        str(model_dir),
        "--train-steps",
        str(steps),
        "--batch-size",
        "64",
        "--checkpoint-every",
        str(steps // 3),
        "--eval-every",
        str(steps // 3),
        env=DETERMINISTIC_TF,
        check=True,
    )


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    """The demo's flow in small: quest logs with a few bad rows, sharded, trained, published
    (the served model), and evaluated against it with slices: ``eval/report.html``."""
    root = tmp_path_factory.mktemp("classifier")
    run_cli(
        "gen-data", "quest", "--rows", "4000", "--bad-fraction", "0.005", "--seed", "5",
        "-o", str(root / "quest.csv"), check=True,
    )  # fmt: skip
    run_cli(
        "shard", str(root / "quest.csv"), "-o", str(root / "ds"), "--label", "cleared",
        "--key", "attempt_id", "--max-bad-fraction", "0.05", check=True,
    )  # fmt: skip
    _train(root / "ds", root / "model")
    publish_export(latest_export(str(root / "model"))["uri"], str(root / "serving"))
    proc = run_cli(
        "evaluate", "--model-dir", str(root / "model"), "--data", str(root / "ds"),
        "--serving-uri", str(root / "serving"), "--slice-by", "difficulty",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = re.search(r"^report: (.+)$", proc.stdout, re.M)
    assert printed, proc.stdout
    assert Path(printed.group(1)) == root / "model" / "eval" / "report.html"
    return Path(printed.group(1))


@pytest.fixture(scope="module")
def regression(tmp_path_factory) -> Path:
    """A linear label (regression by --task auto), trained briefly; ``shardtrain report``."""
    root = tmp_path_factory.mktemp("regression")
    rng = np.random.default_rng(11)
    with open(root / "linear.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "x1", "x2", "grade", "y"])
        for i in range(3000):
            x1, x2 = rng.normal(0, 1, 2)
            grade = str(rng.choice(["a", "b", "c"]))
            y = 3 * x1 - 2 * x2 + {"a": 0, "b": 1.5, "c": -1}[grade] + rng.normal(0, 0.5)
            out.writerow([i, f"{x1:.4f}", f"{x2:.4f}", grade, f"{y:.4f}"])
    run_cli(
        "shard", str(root / "linear.csv"), "-o", str(root / "ds"), "--label", "y", "--key", "id",
        check=True,
    )  # fmt: skip
    _train(root / "ds", root / "model")
    proc = run_cli(
        "report", str(root / "ds"), "--model-dir", str(root / "model"),
        "-o", str(root / "regression.html"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(root / "regression.html")
    return root / "regression.html"


def _check(browser, report: Path, charts: tuple[str, ...], screenshots: Path, name: str):
    seconds, log = _open(browser, report)
    assert not _errors(log), _errors(log)
    missing = [c for c in charts if not _drawn(browser, c)]
    assert not missing, f"charts not drawn: {missing}"
    columns = browser.execute_script("return document.querySelectorAll('#column-grid svg').length")
    assert columns > 0
    _shot(browser, screenshots, name)
    return seconds


def test_the_classifier_report_renders_every_chart_without_console_errors(
    browser, classifier, screenshots
):
    _check(browser, classifier, CLASSIFIER_CHARTS, screenshots, "classifier")
    text = classifier.read_text()
    assert "Data checks passed" in text  # against the served model's training data
    # The served model's training data is overlaid on the columns.
    assert browser.execute_script(
        "return document.querySelectorAll('#column-grid figure.ok').length"
    ) == browser.execute_script("return document.querySelectorAll('#column-grid figure').length")


def test_the_regression_report_renders_its_charts_without_console_errors(
    browser, regression, screenshots
):
    _check(browser, regression, REGRESSION_CHARTS, screenshots, "regression")
    assert not browser.find_elements("id", "chart-roc")


def test_a_500_column_report_loads_within_the_bound_and_pages(browser, tmp_path, screenshots):
    run_cli(
        "gen-data", "quest", "--rows", "2000", "--numeric", "450", "--categorical", "50",
        "-o", str(tmp_path / "wide.csv"), check=True,
    )  # fmt: skip
    run_cli(
        "shard", str(tmp_path / "wide.csv"), "-o", str(tmp_path / "ds"), "--label", "cleared",
        "--key", "attempt_id", check=True,
    )  # fmt: skip
    start = time.perf_counter()
    proc = run_cli("report", str(tmp_path / "ds"), "--against", str(tmp_path / "ds"),
                   "-o", str(tmp_path / "wide.html"))  # fmt: skip
    made = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = tmp_path / "wide.html"
    seconds, log = _open(browser, report)
    assert not _errors(log), _errors(log)
    total = browser.execute_script(
        "return document.querySelectorAll('#column-templates template').length"
    )
    shown = browser.execute_script("return document.querySelectorAll('#column-grid figure').length")
    info = browser.find_element("id", "column-page-info").text
    print(
        f"\n500-column report: {total} column charts, {report.stat().st_size / 1e6:.1f} MB, "
        f"made in {made:.1f} s, ready in the browser in {seconds:.2f} s"
    )
    assert total >= 500 and shown == 24 and info.startswith(f"{total} of {total} columns")
    assert seconds < LOAD_BOUND_S
    _shot(browser, screenshots, "wide-first-page", height=1600)

    # The picker: a name filter, then the next page.
    box = browser.find_element("id", "column-filter")
    box.send_keys("stat_1")
    matching = browser.execute_script(
        "return Array.prototype.filter.call(document.querySelectorAll('#column-templates "
        "template'), function (t) { return t.dataset.name.indexOf('stat_1') >= 0; }).length"
    )
    names = browser.execute_script(
        "return Array.prototype.map.call(document.querySelectorAll('#column-grid figure'),"
        " function (f) { return f.id; })"
    )
    assert 0 < len(names) <= 24 and matching > 24
    assert browser.find_element("id", "column-page-info").text.startswith(f"{matching} of")
    browser.find_element("id", "column-next").click()
    assert "page 2 of" in browser.find_element("id", "column-page-info").text
    assert _drawn(browser, browser.execute_script(
        "return document.querySelector('#column-grid figure').id"))  # fmt: skip
    assert not _errors(browser.get_log("browser"))
    shutil.copy(report, screenshots / "wide.html")


def test_drift_from_the_served_data_is_drawn_and_picked(browser, classifier, screenshots):
    """New data whose ``gold`` moved (tripled, +500) against the served model: the column is
    flagged drifted, the picker's "drifted" kind shows it, both distributions drawn."""
    root = classifier.parents[2]
    with open(root / "quest.csv", newline="") as f:
        rows = list(csv.reader(f))
    gold = rows[0].index("gold")
    with open(root / "moved.csv", "w", newline="") as f:
        out = csv.writer(f)
        for i, row in enumerate(rows):
            if i and len(row) == len(rows[0]) and re.fullmatch(r"[\d.]+", row[gold]):
                row[gold] = str(float(row[gold]) * 3 + 500)
            out.writerow(row)
    run_cli(
        "shard", str(root / "moved.csv"), "-o", str(root / "moved"), "--label", "cleared",
        "--key", "attempt_id", "--max-bad-fraction", "0.05", check=True,
    )  # fmt: skip
    report = root / "moved.html"
    proc = run_cli("report", str(root / "moved"), "--against", str(root / "serving"),
                   "-o", str(report))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, log = _open(browser, report)
    assert not _errors(log), _errors(log)
    assert "Data checks FAILED" in browser.find_element("id", "data-checks").text
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "column-kind")).select_by_value("drifted")
    shown = browser.execute_script(
        "return Array.prototype.map.call(document.querySelectorAll('#column-grid figure'),"
        " function (f) { return f.querySelector('text') && f.className; })"
    )
    assert shown and all("drifted" in c for c in shown)
    figure = browser.find_element("css selector", "#column-grid figure.drifted")
    assert "gold" in figure.text or "gold" in figure.get_attribute("innerHTML")
    assert "DRIFTED" in figure.text and _drawn(browser, figure.get_attribute("id"))
    assert not _errors(browser.get_log("browser"))
    _shot(browser, screenshots, "drift", height=1400)
