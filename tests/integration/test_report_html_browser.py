"""The HTML report in a real browser (headless Chromium): the matrix in the DOM after the page's script ran,
the filter driven from the URL fragment, no script from the data ran, and a screenshot kept under tests/output/.

Needs Debian's `chromium` package (skipped with the reason when it is missing). GPUFLEET_CHROMIUM names another
binary. Runs as root too (--no-sandbox), with a fresh profile and no background networking.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html as report_html
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "tests" / "fixtures" / "reports"
OUTPUT = REPO / "tests" / "output"  # git-ignored: test artifacts
WINDOW = "1400,1000"
CHROMIUM_TIMEOUT = 60  # seconds; a run takes 1-3 s


def _find_chromium():
    override = os.environ.get("GPUFLEET_CHROMIUM")
    if override:
        return shutil.which(override) or (override if os.access(override, os.X_OK) else None)
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


CHROMIUM = _find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or not sys.platform.startswith("linux"),
    reason="headless Chromium not found: install Debian's `chromium` package (apt-get install chromium) "
    "or set GPUFLEET_CHROMIUM to a Chromium binary",
)


def _run(args, tmp_path, name):
    profile = tmp_path / f"profile-{name}"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={WINDOW}",
        *args,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        # A page that opens a dialog (alert) never finishes loading in headless mode: for the hostile report that
        # means a payload ran.
        pytest.fail(f"chromium did not finish within {CHROMIUM_TIMEOUT} s: the page hung, e.g. on an alert() "
                    f"dialog opened by a script from the report's data ({' '.join(args)})")
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout


def dump_dom(page: Path, tmp_path, fragment=""):
    """The DOM after the page's scripts ran, serialized."""
    dom = _run(["--dump-dom", page.as_uri() + fragment], tmp_path, "dom")
    assert "<html" in dom, "empty DOM dump"
    return dom


def screenshot(page: Path, tmp_path, out: Path):
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    _run([f"--screenshot={out}", page.as_uri()], tmp_path, "shot")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert len(data) > 20_000, "suspiciously small screenshot (blank page?)"
    return out


def _render(name, tmp_path):
    report = json.loads((REPORTS / name).read_text(encoding="utf-8"))
    page = tmp_path / "report.html"
    page.write_text(report_html.render_html(report), encoding="utf-8")
    return report, page


def _matrix(dom):
    table = re.search(r'<table id="matrix".*?</table>', dom, re.S)
    assert table, "no matrix table in the DOM"
    return table.group(0)


def _rows(dom):
    """Matrix rows as {host name (attribute-escaped): hidden?}."""
    rows = re.findall(r'<tr id="row-host-\d+" data-host="([^"]*)"[^>]*?(hidden="")?>', _matrix(dom))
    return {host: bool(hidden) for host, hidden in rows}


def test_matrix_in_the_dom_and_screenshot(tmp_path):
    report, page = _render("sample-v1.json", tmp_path)
    dom = dump_dom(page, tmp_path)
    assert 'data-filters-ready="1"' in dom  # our script ran (the CSP hash matches it)
    matrix = _matrix(dom)
    head = re.search(r"<thead>.*?</thead>", matrix, re.S).group(0)
    assert re.findall(r'<th scope="col" data-area="([a-z]+)"', head) == list(schema.AREAS)
    rows = _rows(dom)
    assert list(rows) == sorted(report["hosts"])
    assert not any(rows.values())  # no filter: every row shown
    for host in report["hosts"]:
        row = re.search(rf'<tr id="row-host-\d+" data-host="{re.escape(host)}".*?</tr>', matrix, re.S).group(0)
        assert len(re.findall(r'<td class="cell-[a-z]+[^"]*" data-area="', row)) == len(schema.AREAS), host
    assert re.search(r'<form id="filters" role="search"', dom)  # the filter bar is shown once the script ran
    assert "4 of 4 hosts, 11 findings shown" in dom

    shot = screenshot(page, tmp_path, OUTPUT / "report-sample.png")
    assert shot.stat().st_size > 20_000


def test_filter_from_the_url_fragment(tmp_path):
    _, page = _render("sample-v1.json", tmp_path)
    dom = dump_dom(page, tmp_path, "#host=h100")
    assert _rows(dom) == {"fra-a100-02": True, "iad-h100-03": False, "sg-a100-01": True, "sg-l40s-03": True}
    assert "1 of 4 hosts, 0 findings shown" in dom

    dom = dump_dom(page, tmp_path, "#severity=critical&only=findings")
    # hosts with a critical finding, plus the hosts that could not be audited (always shown: they are problems)
    assert _rows(dom) == {"fra-a100-02": False, "iad-h100-03": True, "sg-a100-01": False, "sg-l40s-03": False}
    assert "3 of 4 hosts, 3 findings shown" in dom
    section = re.search(r'<section class="host status-ok" id="host-3" data-host="sg-a100-01".*?</section>', dom,
                        re.S).group(0)
    shown = re.findall(r'<tr class="finding status-(\w+)" data-severity="(\w+)"[^>]*?data-status="\w+">', section)
    assert shown == [("fail", "critical")] * 3

    dom = dump_dom(page, tmp_path, "#area=power,software")
    hidden = re.findall(r'<th scope="col" data-area="([a-z]+)" hidden="">', _matrix(dom))
    assert hidden == ["memory", "cpu", "network", "health"]


def test_no_script_from_the_data_runs(tmp_path):
    report, page = _render("hostile-v1.json", tmp_path)
    dom = dump_dom(page, tmp_path)
    assert 'data-filters-ready="1"' in dom  # scripts do run in this page: ours did
    title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    assert title.startswith("gpufleet audit") and "PWNED" != title  # no payload set document.title
    assert "<pwned-element" not in dom  # no payload created an element
    assert not re.search(r"<body[^>]*data-pwned", dom)  # no onerror handler ran
    assert dom.count("<script") == 1 and "<img" not in dom  # the payloads stayed text
    assert "&lt;script&gt;document.title='PWNED'" in dom
    # hostile host names are still one matrix row each
    assert len(_rows(dom)) == len(report["hosts"])
    screenshot(page, tmp_path, OUTPUT / "report-hostile.png")
