"""The HTML report (``viewer.report``): show's numbers, every section, names escaped, the diff, the
CLI's refusals and finalize's ``formats=("html",)``. The browser test is ``test_report_browser``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from proton_ik import viewer
from proton_ik.cli import BAD_INPUT, BAD_USAGE, main
from proton_ik.demo import bundled_capture
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer.diff import DiffOptions, diff_sessions
from proton_ik.viewer.report import SECTIONS, write_report
from proton_ik.viewer.report.figures import TIME_BINS, binned_max, coverage

DATA = Path(__file__).parents[1] / "data"
DEMO = bundled_capture()
_spec = importlib.util.spec_from_file_location("report_html", Path(__file__).with_name("report_html.py"))
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
ReportPage = _module.ReportPage


def show_rows(summary: viewer.Summary) -> list[dict[str, str]]:
    """Each scope's numbers as ``proton-ik show`` prints them."""
    return [
        {
            "scope": row.scope,
            "count": str(row.count),
            "mean ns": f"{row.mean_ns:,.0f}",
            "median ns": f"{row.median_ns:,.0f}",
            "p90 ns": f"{row.p90_ns:,.0f}",
            "mean cyc": f"{row.mean_cycles:,.0f}",
            "median cyc": f"{row.median_cycles:,.0f}",
            "p90 cyc": f"{row.p90_cycles:,.0f}",
            "share": f"{row.share:.1%}",
        }
        for row in summary.scopes.itertuples()
    ]


@pytest.mark.parametrize("session", [DEMO, DATA / "add.pik", DATA / "ring.pik"], ids=lambda p: p.stem)
def test_the_numbers_are_shows(session, tmp_path, capsys):
    out = write_report(session, tmp_path / "r.html")
    page = ReportPage(out.read_text())
    summary = viewer.load(session).summary()
    expected = show_rows(summary)
    tables = range(len(page.sections["scopes"]))
    shown = [{key: row[key] for key in expected[0]} for table in tables for row in page.rows("scopes", table)]
    assert shown == expected
    main(["show", str(session)])
    printed = capsys.readouterr().out
    for row in show_rows(summary):  # the very strings show prints
        assert all(value in printed for value in row.values())
    kernel = summary.kernels.iloc[0]
    launches = page.rows("kernels")
    assert sum(int(row["records"].replace(",", "")) for row in launches) == kernel.records
    assert sum(int(row["overwritten"].replace(",", "")) for row in launches) == kernel.overwritten


def test_every_section_has_its_anchor_and_the_trace_is_linked(tmp_path):
    session = tmp_path / "run.pik"
    session.write_bytes(DEMO.read_bytes())
    (tmp_path / "run.pftrace").write_bytes(b"\n")
    text = write_report(session, tmp_path / "run.html", diff_with=DEMO).read_text()
    assert set(ReportPage(text).sections) == set(SECTIONS)
    assert '<a href="run.pftrace">run.pftrace</a>' in text and "ui.perfetto.dev" in text
    assert "http://" not in text and "https://" not in text.replace("https://ui.perfetto.dev", "")
    assert "<link" not in text and "src=" not in text  # nothing fetched: figures are inline data


def test_a_report_without_a_trace_says_how_to_make_one(tmp_path):
    text = write_report(DEMO, tmp_path / "r.html").read_text()
    assert "No Perfetto trace was written" in text and "proton-ik convert demo.pik --to perfetto" in text


def test_hostile_names_are_escaped(tmp_path, busy_launch):
    kernel, scope = "<script>alert(1)</script>", "<img src=x onerror=alert(2)>&"
    capture = busy_launch(num_ctas=3)
    capture.meta["kernel"] = kernel
    capture.meta["profile"]["scopes"][1]["name"] = scope
    path = tmp_path / "h.pik"
    with SessionWriter(path, {"name": "</title><script>x()</script>", "time_shift_cycles": 20}) as writer:
        writer.add_launch(capture.meta, capture.buffer)
    text = write_report(path, tmp_path / "h.html").read_text()
    assert "<script>alert" not in text and "<img src=x" not in text and "</title><script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=alert(2)&gt;&amp;" in text
    assert text.count("<script>") == 1  # ours
    page = ReportPage(text)
    assert {row["scope"] for row in page.rows("scopes")} >= {scope}


def test_the_diff_section_gives_diffs_verdicts(tmp_path):
    out = write_report(DATA / "diff_b.pik", tmp_path / "d.html", diff_with=DATA / "diff_a.pik")
    frame = diff_sessions(DATA / "diff_a.pik", DATA / "diff_b.pik", DiffOptions())
    rows = ReportPage(out.read_text()).rows("diff")
    assert [(r["scope"], r["verdict"]) for r in rows] == list(
        zip(frame["scope"], frame["verdict"], strict=True)
    )
    assert {"slower", "faster"} & {r["verdict"] for r in rows}


def test_events_are_shows(tmp_path):
    out = write_report(DATA / "events.pik", tmp_path / "e.html")
    stats = viewer.load(DATA / "events.pik").summary().events
    rows = ReportPage(out.read_text()).rows("events")
    assert [(r["event"], r["count"], r["median ns"]) for r in rows] == [
        (row.event, f"{row.count:,}", f"{row.median_ns:,.0f}") for row in stats.itertuples()
    ]


def test_coverage_integrates_intervals_exactly():
    # Rows 0 and 1: [0.5, 2.25) and [1, 1.5); row 1 also [TIME_BINS - 0.5, past the end).
    covered = coverage(
        np.array([0, 1, 1]), np.array([0.5, 1.0, TIME_BINS - 0.5]), np.array([2.25, 1.5, TIME_BINS + 9]), 2
    )
    assert covered[0, :3].tolist() == [0.5, 1.0, 0.25] and covered[0, 3:].sum() == 0
    assert covered[1, 1] == 0.5 and covered[1, -1] == 0.5 and covered[1].sum() == 1.0


def test_ctas_are_binned_by_their_maximum():
    values = np.array([[1.0, 5.0, 2.0, np.nan, np.nan]])
    assert binned_max(values, 2).tolist()[0][:2] == [5.0, 2.0] and np.isnan(binned_max(values, 2)[0, 2])


def test_the_cli_writes_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(DEMO), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    out.write_text("mine")
    assert main(["report", str(DEMO), "-o", str(out)]) == BAD_USAGE
    assert "exists; pass --force" in capsys.readouterr().err and out.read_text() == "mine"
    assert (
        main(["report", str(DEMO), "-o", str(out), "--force"]) == 0 and "<!DOCTYPE html>" in out.read_text()
    )
    copy = tmp_path / "c.pik"
    copy.write_bytes(DEMO.read_bytes())
    assert main(["report", str(copy), "-o", str(copy), "--force"]) == BAD_USAGE
    assert "is an input file" in capsys.readouterr().err
    (tmp_path / "empty.pik").write_bytes(b"")
    assert main(["report", str(tmp_path / "empty.pik"), "-o", str(tmp_path / "e.html")]) == BAD_INPUT
    error = capsys.readouterr().err
    assert error.startswith("proton-ik report: ") and "is empty" in error and len(error.splitlines()) == 1
    assert main(["report", str(tmp_path / "none.pik")]) == BAD_INPUT
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("formats", [("html",), ("pftrace", "html")])
def test_finalize_writes_the_report_beside_the_session(tmp_path, formats, drained_session):
    result = drained_session(tmp_path, "run", formats).finalize()
    assert result.paths["html"] == str(tmp_path / "run.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run.pik", *(f"run.{f}" for f in formats)])
    text = (tmp_path / "run.html").read_text()
    assert ('<a href="run.pftrace">' in text) == ("pftrace" in formats)
    assert result.records == viewer.load(tmp_path / "run.pik").record_count > 0


def test_kernels_interleaved_in_host_scopes_keep_shows_numbers(tmp_path, busy_launch):
    path = tmp_path / "k.pik"
    with SessionWriter(path, {"name": "k", "time_shift_cycles": 20}) as writer:
        for i in range(7):
            capture = busy_launch(launch=i, num_ctas=1 + i % 4, iterations=3 + i % 3)
            capture.meta["host_scope"] = ["step", "fwd" if i % 3 else "bwd"]
            writer.add_launch(capture.meta, capture.buffer)
    summary = viewer.load(path).summary()
    assert summary.kernels["host_scope"].nunique() == 2 and summary.kernels["kernel"].nunique() == 2
    page = ReportPage(write_report(path, tmp_path / "k.html").read_text())
    expected = show_rows(summary)
    tables = range(len(page.sections["scopes"]))
    shown = [{key: row[key] for key in expected[0]} for table in tables for row in page.rows("scopes", table)]
    assert shown == expected
    assert sum(len(page.rows("kernels", t)) for t in range(len(page.sections["kernels"]))) == 7


def test_a_session_of_no_launches_reports_so(tmp_path):
    path = tmp_path / "none.pik"
    with SessionWriter(path, {"name": "none", "time_shift_cycles": 0}):
        pass
    page = ReportPage(write_report(path, tmp_path / "n.html").read_text())
    assert set(page.sections) == set(SECTIONS) - {"diff"}


def test_the_overview_says_which_launch_path_recorded_the_session(tmp_path, busy_launch):
    capture = busy_launch(num_ctas=2)
    path = tmp_path / "p.pik"
    info = {"name": "p", "time_shift_cycles": 20, "launch_path": "Python (PROTON_IK_COMPILED=0)"}
    with SessionWriter(path, info) as writer:
        writer.add_launch(capture.meta, capture.buffer)
    table = ReportPage(write_report(path, tmp_path / "p.html").read_text()).sections["overview"][0]
    facts = {cells[0]: cells[1] for cells in table[1:]}  # two columns with no headers
    assert facts["launch path"] == "Python (PROTON_IK_COMPILED=0)"
