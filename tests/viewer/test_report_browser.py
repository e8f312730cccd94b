"""The HTML report in a real browser: Debian's chromium, headless. It loads with no console error
and no script error, its script runs, the DOM shows ``show``'s numbers, and each section is
screenshot into ``$PIK_TEST_ARTIFACTS`` (else the test's tmp_path) for a person to look at."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from proton_ik import viewer
from proton_ik.demo import bundled_capture
from proton_ik.viewer.report import SECTIONS, write_report

CHROMIUM = Path("/usr/bin/chromium")
DEMO = bundled_capture()
DATA = Path(__file__).parents[1] / "data"
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (/usr/bin/chromium)")
_spec = importlib.util.spec_from_file_location("report_html", Path(__file__).with_name("report_html.py"))
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
ReportPage = _module.ReportPage


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless chromium with nothing that reaches the network, its log on stderr."""
    command = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "Uncaught" in line or "CONSOLE" in line]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    return write_report(DATA / "diff_b.pik", folder / "report.html", diff_with=DATA / "diff_a.pik")


def test_the_page_runs_without_errors_and_shows_shows_numbers(report, tmp_path):
    run = chromium(tmp_path / "profile", "--dump-dom", report.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    assert console_errors(run.stderr) == []
    dom = run.stdout
    assert 'data-ready="1"' in dom and "data-error" not in dom
    assert '<div id="js-error" hidden=""></div>' in dom  # the banner stayed hidden and empty
    page = ReportPage(dom)
    assert set(page.sections) == set(SECTIONS)
    summary = viewer.load(DATA / "diff_b.pik").summary()
    rows = page.rows("scopes")
    assert [(r["scope"], r["count"], r["median ns"], r["p90 cyc"], r["share"]) for r in rows] == [
        (s.scope, str(s.count), f"{s.median_ns:,.0f}", f"{s.p90_cycles:,.0f}", f"{s.share:.1%}")
        for s in summary.scopes.itertuples()
    ]


def test_a_script_error_would_show(tmp_path):
    """The check above can fail: a page whose script throws is marked so in the DOM."""
    broken = tmp_path / "broken.html"
    text = write_report(DEMO, tmp_path / "ok.html").read_text()
    broken.write_text(text.replace("</body>", "<script>undefinedFunction()</script></body>"))
    run = chromium(tmp_path / "profile", "--dump-dom", broken.as_uri())
    assert 'data-error="1"' in run.stdout and console_errors(run.stderr)


@pytest.mark.parametrize("section", SECTIONS)
def test_each_section_is_screenshot(report, tmp_path, section):
    folder = Path(os.environ.get("PIK_TEST_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    shot = folder / f"report-{section}.png"
    shot.unlink(missing_ok=True)
    run = chromium(
        tmp_path / "profile",
        f"--screenshot={shot}",
        "--window-size=1400,1000",
        f"{report.as_uri()}#{section}",
    )
    assert run.returncode == 0 and console_errors(run.stderr) == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5000
