"""The HTML report as a browser shows it: headless Chromium renders the page, dumps its DOM, screenshots it.

Set FINSERVE_REPORT_SCREENSHOT=docs/report.png to keep the screenshot (that is how
the one in docs/ is made).
"""
from __future__ import annotations

import os
import re
import shutil
import struct
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import matplotlib.image
import numpy as np
import pytest

from ledger.reports import render_report
from ledger.reports.charts import DATE_FORMAT, class_style
from tests.ledger.browser import find_or_install_chromium, run_chromium
from tests.ledger.report_data import DAY_SINCE, DAY_UNTIL, build_day_report


@pytest.fixture(scope="session")
def chromium() -> str:
    path, why = find_or_install_chromium()
    if path is None:
        pytest.skip(f"no headless browser: {why}")
    return path


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    work = tmp_path_factory.mktemp("browser")
    report = build_day_report(work / "ledger.db")
    path = work / "report.html"
    path.write_text(render_report(report, "html"))
    return path, report


def test_without_chromium_and_root_the_reason_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert find_or_install_chromium() == (
        None, "chromium is not installed and the tests do not run as root to install it: apt-get install chromium")


class PageText(HTMLParser):
    """The page's visible text, and the text inside each <figure id=...> (the charts' SVG labels)."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.figures: dict[str, list[str]] = {}
        self._figure: str | None = None
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "figure":
            self._figure = dict(attrs).get("id") or ""
            self.figures[self._figure] = []
        self._skip += tag in ("style", "title")

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._figure = None
        self._skip -= tag in ("style", "title")

    def handle_data(self, data: str) -> None:
        if self._skip or not data.strip():
            return
        (self.figures[self._figure] if self._figure is not None else self.text).append(data.strip())


def test_the_rendered_page_shows_the_figures(chromium: str, page: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, report = page
    dom = run_chromium(chromium, tmp_path, path, "--dump-dom").stdout
    parsed = PageText()
    parsed.feed(dom)
    text = " ".join(parsed.text)
    assert "Window 2025-03-03 09:00:00 UTC → 2025-03-04 09:00:00 UTC" in text
    summary = text[text.index("Error budgets"):text.index("Charts")]
    for name in ("bulk_extraction", "document_qa", "realtime_risk"):
        assert name in summary
    bulk = report["classes"]["bulk_extraction"]
    # bulk: 325 of 400 met; the last hour missed 75 of 100 against a 95% goal -> 15x; the last 5 min 8 of 8 -> 20x.
    assert bulk["slo"]["attainment"] == 325 / 400 and "81.250%" in summary and "100.000%" in summary
    assert "15.00×" in summary and "20.00×" in summary and "3.75×" in summary
    assert re.search(r"bulk_extraction 400 95\.00% 81\.250% below goal -275\.0% \(-55\.00 req\.\)", summary)
    assert "page" in summary and "ok" in summary
    assert "Per tenant" in text and "globex" in text
    assert "too few requests" in text  # document_qa's p99 over 60 requests
    assert "active time" in text


def chart_dates(labels: list[str]) -> list[datetime]:
    return [datetime.strptime(t, DATE_FORMAT).replace(tzinfo=UTC)
            for t in labels if re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", t)]


def test_the_charts_date_labels_lie_within_the_window(chromium: str, page: tuple[Path, dict[str, Any]],
                                                     tmp_path: Path) -> None:
    path, _ = page
    parsed = PageText()
    parsed.feed(run_chromium(chromium, tmp_path, path, "--dump-dom").stdout)
    for figure in ("attainment-chart", "burn-down-chart"):
        dates = chart_dates(parsed.figures[figure])
        assert len(dates) >= 4, parsed.figures[figure]
        assert all(DAY_SINCE <= d <= DAY_UNTIL for d in dates), dates
        assert max(dates) - min(dates) >= (DAY_UNTIL - DAY_SINCE) / 2  # labels spread over the window
    for name in ("bulk_extraction", "document_qa", "realtime_risk"):
        assert name in parsed.figures["attainment-chart"]  # the legend names every class


def test_screenshot_shows_the_charts(chromium: str, page: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = page
    shot = tmp_path / "report.png"
    run_chromium(chromium, tmp_path, path, f"--screenshot={shot}", "--window-size=1280,2000")
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (1280, 2000)
    pixels = matplotlib.image.imread(shot)[:, :, :3]  # [H, W, RGB] floats in 0..1
    inked = np.any(pixels < 0.9, axis=2).mean()
    assert inked > 0.05  # text, tables and charts, not a blank page
    for i in range(3):  # each class's line colour is on screen
        rgb = np.array([int(class_style(i).color[k:k + 2], 16) / 255 for k in (1, 3, 5)])
        assert (np.abs(pixels - rgb).max(axis=2) < 0.05).sum() > 200, class_style(i).color
    keep = os.environ.get("FINSERVE_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
