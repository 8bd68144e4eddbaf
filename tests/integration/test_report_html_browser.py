"""The HTML report in a real browser (headless Chromium): the matrix in the DOM after the page's script ran,
the filter driven from the URL fragment, no script from the data ran, the contrast of every badge as rendered, the
layout of a 60-host fleet at 800 and 1400 px wide (host names, matrix columns, sites, legend), and screenshots kept
under tests/output/.

Needs Debian's `chromium` package (skipped with the reason when it is missing). GPUFLEET_CHROMIUM names another
binary. Runs as root too (--no-sandbox), with a fresh profile and no background networking.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import fleetview, schema
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html as report_html

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
        pytest.fail(
            f"chromium did not finish within {CHROMIUM_TIMEOUT} s: the page hung, e.g. on an alert() "
            f"dialog opened by a script from the report's data ({' '.join(args)})"
        )
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
    assert sorted(rows) == sorted(report["hosts"])
    assert list(rows) == ["sg-a100-01", "iad-h100-03", "fra-a100-02", "sg-l40s-03"]  # by site, no site last
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
    section = re.search(
        r'<section class="host status-ok" id="host-3" data-host="sg-a100-01".*?</section>', dom, re.S
    ).group(0)
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


# ------------------------------------------------------------------------------------- contrast of the badges

AA = 4.5  # WCAG 2.x success criterion 1.4.3 (contrast minimum), normal text: the badges are 12-13 px
BADGES = {  # what is measured: every badge a reader has to read
    "matrix-host-status": "#matrix span.chip",
    "matrix-cell": "#matrix td[data-state]",
    "legend-key": "#legend > summary .badge",
    "legend-host-status": "#legend-status .chip",
    "legend-cell": "#legend-cells .badge",
    "summary": "#summary .chip",
    "host-head": "section.host .host-head .chip",
    "failing-device": "td.vals mark.bad",
}
_COLLECT = """JSON.stringify(Object.entries(%s).flatMap(([kind, selector]) =>
  Array.from(document.querySelectorAll(selector)).map((el) => {
    const r = el.getBoundingClientRect();
    return {kind: kind, cls: el.className, state: el.getAttribute("data-state") || "", text: el.textContent.trim(),
            x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height,
            color: getComputedStyle(el).color};
  }).filter((b) => b.w > 0 && b.h > 0)))"""


class DevTools:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: commands on fd 3,
    replies on fd 4, NUL-terminated JSON). No port is opened."""

    def __init__(self, tmp_path):
        self._in_r, self._in_w = os.pipe()
        self._out_r, self._out_w = os.pipe()

        def fds():  # in the child: the pipe ends become fds 3 and 4, inheritable
            os.dup2(os.dup(self._in_r), 3)
            os.dup2(os.dup(self._out_w), 4)

        args = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={tmp_path / 'profile-cdp'}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            args, preexec_fn=fds, close_fds=False, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        os.close(self._in_r)
        os.close(self._out_w)
        self._buf = b""
        self._id = 0
        self.events = []
        self.session = None

    def _recv(self):
        while b"\0" not in self._buf:
            chunk = os.read(self._out_r, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg = json.loads(raw)
        if "method" in msg:
            self.events.append(msg)
        return msg

    def send(self, method, params=None, browser=False):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self._in_w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._recv()
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply["result"]

    def open(self, url, width=1400, height=1000):
        self.events = []  # a second page waits for its own load event
        target = self.send("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, browser=True)[
            "sessionId"
        ]
        self.send("Page.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        self.send("Page.navigate", {"url": url})
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            self._recv()

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        assert "exceptionDetails" not in result, result
        return result["result"]["value"]

    def png(self, x, y, w, h):
        clip = {"x": x, "y": y, "width": w, "height": h, "scale": 1}
        shot = self.send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})
        return base64.b64decode(shot["data"])

    def close(self):
        try:
            self.send("Browser.close", browser=True)
        except (EOFError, OSError):
            pass
        try:
            self.proc.wait(timeout=CHROMIUM_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._in_w)
        os.close(self._out_r)


def decode_png(data):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG, as Chromium writes them."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[i : i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def luminance(rgb):
    """WCAG relative luminance of an sRGB colour."""

    def lin(v):
        v /= 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b):
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _css_rgb(text):
    return tuple(int(float(v)) for v in re.findall(r"[\d.]+", text)[:3])


def backgrounds(rows, text_rgb):
    """The background colours of a badge as rendered: every colour covering at least 15 % of its pixels (two for
    a striped cell); the text colour only when nothing else is (white text on a white page)."""
    counts = Counter(px for row in rows for px in row)
    total = sum(counts.values())
    common = [c for c, n in counts.items() if n >= 0.15 * total]
    others = [c for c in common if max(abs(x - y) for x, y in zip(c, text_rgb, strict=True)) > 8]
    return others or common or [counts.most_common(1)[0][0]]


def measure_badges(devtools):
    """Each badge of the page: what it is, its text colour (computed), its background(s) (rendered) and the
    worst contrast between them."""
    out = []
    for b in json.loads(devtools.evaluate(_COLLECT % json.dumps(BADGES))):
        inset_x = min(b["h"] / 2, b["w"] / 4)  # past a pill's rounded ends and borders
        x, y = int(b["x"] + inset_x), int(b["y"] + 3)
        w, h = max(int(b["w"] - 2 * inset_x), 1), max(int(b["h"] - 6), 1)
        _, _, rows = decode_png(devtools.png(x, y, w, h))
        text = _css_rgb(b["color"])
        bgs = backgrounds(rows, text)
        b.update(text_rgb=text, backgrounds=bgs, ratio=min(contrast(text, bg) for bg in bgs))
        out.append(b)
    return out


@pytest.fixture(scope="module")
def badges(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("badges")
    _, page = _render("statuses-v1.json", tmp_path)
    devtools = DevTools(tmp_path)
    try:
        devtools.open(page.as_uri())
        assert devtools.evaluate("document.documentElement.getAttribute('data-filters-ready')") == "1"
        assert devtools.evaluate("document.getElementById('legend').open = true")  # every state, as when opened
        measured = measure_badges(devtools)
        height = int(
            devtools.evaluate(  # down to the legend below the matrix
                "Math.max(...Array.from(document.querySelectorAll('.legend'), (e) => e.getBoundingClientRect().bottom))"
            )
        )
        OUTPUT.mkdir(parents=True, exist_ok=True)
        (OUTPUT / "report-statuses.png").write_bytes(devtools.png(0, 0, 1400, height + 16))
    finally:
        devtools.close()
    return measured


def _hex(rgb):
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def test_every_badge_meets_wcag_aa_contrast(badges):
    """Rendered: text colour (computed style) against the badge's background pixels in a screenshot."""
    low = [
        f"{b['kind']} {b['cls']!r} {b['text']!r}: {_hex(b['text_rgb'])} on "
        f"{', '.join(_hex(c) for c in b['backgrounds'])} = {b['ratio']:.2f}:1"
        for b in badges
        if b["ratio"] < AA
    ]
    assert not low, f"badges below WCAG AA {AA}:1:\n" + "\n".join(low)


def test_every_host_status_and_cell_state_was_measured(badges):
    """The fixture has a host in each status and a cell in each state; each badge was found and measured."""
    for status in schema.HOST_STATUSES:
        for kind in ("matrix-host-status", "legend-host-status"):
            assert any(b["kind"] == kind and f"host-{status}" in b["cls"].split() for b in badges), (kind, status)
    cells = {b["state"] for b in badges if b["kind"] == "matrix-cell"}
    assert cells == set(schema.CELL_STATES)
    legend = {c for b in badges if b["kind"] == "legend-cell" for c in b["cls"].split() if c.startswith("cell-")}
    assert legend == {f"cell-{s}" for s in schema.CELL_STATES}
    assert any(b["kind"] == "failing-device" and b["text"] == "GPU 3" for b in badges)


def test_timeout_badge_does_not_read_as_critical(badges):
    """Rendered colours: the timed-out badge is far from every severity's colour (it was a dark red-brown)."""

    def bg(kind, cls):
        return next(b for b in badges if b["kind"] == kind and cls in b["cls"].split())["backgrounds"][0]

    timeout = bg("matrix-host-status", "host-timeout")
    for sev in schema.SEVERITIES:
        colour = bg("legend-cell", f"sev-{sev}")
        distance = sum((a - b) ** 2 for a, b in zip(timeout, colour, strict=True)) ** 0.5
        assert distance > 90, f"timeout {_hex(timeout)} reads like {sev} {_hex(colour)}"
    assert (OUTPUT / "report-statuses.png").stat().st_size > 20_000


# ------------------------------------------------------------------------------ 1,000 hosts (issue 18)

# Time to first contentful paint of the 1,000-host report (7.5 MB), from navigation start. Measured on the 2-core
# lab machine with other test runs on both cores (load average 8-30): 0.16-1.0 s in seven runs, once 6.8 s (an
# earlier 4.8 MB build of this page at load 25, the file itself taking 2.8 s to read). 15 s is twice the worst
# seen: room for a loaded CI machine, and a failure for a page whose first paint waits on a script or a resource.
# Chromium paints the top of a long page early whatever follows (the same report rendered in full, 37 MB, painted
# at 0.28 s), so what the on-demand page buys is measured against that page, in the same run: the time until the
# page is usable (DOM interactive: its script has run, the filters work) was 1.3 s against 8.1 s at load 8.
# INTERACTIVE_GAIN_MIN asks for 2x, well inside that 6x.
INTERACTIVE_GAIN_MIN = 2.0
FIRST_PAINT_MAX_MS = 15_000
_PAINT = """new Promise((done) => {
  const out = {};
  new PerformanceObserver((list) => list.getEntries().forEach((e) => { out[e.name] = e.startTime; }))
    .observe({type: "paint", buffered: true});
  setTimeout(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    out.domInteractive = nav.domInteractive;
    out.domContentLoaded = nav.domContentLoadedEventEnd;
    out.load = nav.loadEventEnd;
    done(JSON.stringify(out));
  }, 200);
})"""


def _await(devtools, expression):
    result = devtools.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
    assert "exceptionDetails" not in result, result
    return result["result"]["value"]


def _expected_count(report, severity):
    """The filter's counter for #severity=<severity>&only=findings, worked out from the report: hosts with a
    failing or warning check of that severity, plus the hosts not audited (always shown)."""
    hosts = findings = 0
    for host in report["hosts"].values():
        shown = [
            f
            for f in schema.host_findings(host)
            if f.get("status") in ("fail", "warn") and f.get("severity") == severity
        ]
        if host.get("status") != "ok" or shown:
            hosts += 1
            findings += len(shown)
    return f"{hosts} of {len(report['hosts'])} hosts, {findings} finding{'' if findings == 1 else 's'} shown"


def test_1000_hosts_first_render_and_hosts_on_demand(tmp_path):
    sys.path.insert(0, str(REPO / "tests"))
    from fleetreport import scaled_report

    report = scaled_report(1000)
    # sample-v1 predates the rules' sources: give the first rule two, a link and a repository path
    first = report["catalog"][0]
    first["references"] = [
        {"title": "NVIDIA GPU memory guide", "url": "https://docs.nvidia.com/deploy/"},
        {"title": "our measurement", "url": "bench/audit_scale.py"},
    ]
    page = tmp_path / "report.html"
    page.write_text(report_html.render_html(report), encoding="utf-8")
    size = page.stat().st_size
    devtools = DevTools(tmp_path)
    try:
        devtools.open(page.as_uri())
        timing = json.loads(_await(devtools, _PAINT))
        print(
            f"\n1,000 hosts, {size / 1e6:.1f} MB: first contentful paint {timing['first-contentful-paint']:.0f} ms, "
            f"DOM interactive {timing['domInteractive']:.0f} ms, load {timing['load']:.0f} ms"
        )
        assert timing["first-contentful-paint"] <= FIRST_PAINT_MAX_MS, timing
        assert devtools.evaluate("document.documentElement.getAttribute('data-filters-ready')") == "1"
        assert devtools.evaluate("document.querySelectorAll('#matrix tr[data-host]').length") == 1000
        # The same report with every host's checks as HTML (what the page was before issue 18), in this browser.
        full = tmp_path / "report-full.html"
        full.write_text(report_html.render_html(report, lazy=False), encoding="utf-8")
        (tmp_path / "full").mkdir()
        other = DevTools(tmp_path / "full")
        try:
            other.open(full.as_uri())
            full_timing = json.loads(_await(other, _PAINT))
        finally:
            other.close()
        print(
            f"the same rendered in full, {full.stat().st_size / 1e6:.1f} MB: first contentful paint "
            f"{full_timing['first-contentful-paint']:.0f} ms, DOM interactive {full_timing['domInteractive']:.0f} ms"
        )
        assert timing["domInteractive"] * INTERACTIVE_GAIN_MIN <= full_timing["domInteractive"], (timing, full_timing)
        assert devtools.evaluate("document.querySelectorAll('tr.finding').length") == 0  # nothing rendered yet
        by_status = report["summary"]["findings"]["by_status"]
        total = f"1000 of 1000 hosts, {by_status['fail'] + by_status['warn']} findings shown"
        assert devtools.evaluate("document.getElementById('filter-count').textContent") == total

        # A matrix link opens the host: its checks are built from the data block, as the small page shows them.
        names = sorted(report["hosts"])
        index = next(i for i, n in enumerate(names, 1) if n.startswith("sg-a100-01"))
        host = report["hosts"][names[index - 1]]
        devtools.evaluate(f"document.querySelector('#row-host-{index} th a').click() || true")
        rows = json.loads(
            devtools.evaluate(
                f"""JSON.stringify(Array.from(document.querySelectorAll('#host-{index} tr.finding'), (r) =>
                [r.getAttribute('data-status'), r.hidden, r.querySelector('p.msg') &&
                 r.querySelector('p.msg').textContent]))"""
            )
        )
        findings = sorted(schema.host_findings(host), key=schema.finding_sort_key)
        failing = [f for f in findings if f["status"] in ("fail", "warn", "error")]
        others = [f for f in findings if f["status"] not in ("fail", "warn", "error")]
        said = fleetview.message_text  # the page's messages: Python lists as words
        assert rows == [[f["status"], False, said(f["message"]) or None] for f in failing] + [
            [f["status"], True, said(f["message"]) or None] for f in others
        ]
        assert devtools.evaluate(f"document.querySelector('#host-{index} details.host-details').open") is True
        assert devtools.evaluate("document.querySelectorAll('tr.finding').length") == len(findings)  # that host only
        # A rule's text and sources are said once, in the Rules section; the host's row links there.
        link = devtools.evaluate(f"document.querySelector('#host-{index} tr.finding td.rule a').getAttribute('href')")
        assert re.fullmatch(r"#rule-\d+", link), link
        assert devtools.evaluate(f"document.querySelectorAll('#host-{index} p.why, #host-{index} p.refs').length") == 0
        why = devtools.evaluate(f"document.querySelector('{link} p.why').textContent")
        assert why.startswith("Why: ") and len(why) > 40
        steps = json.loads(  # a fix's manual steps: a link to the rule's entry that says them
            devtools.evaluate(
                f"JSON.stringify(Array.from(document.querySelectorAll('#host-{index} td.fix a'), (a) => "
                "[a.textContent, a.getAttribute('href')]))"
            )
        )
        assert steps and all(t == "manual steps: in the rule" and re.fullmatch(r"#rule-\d+", h) for t, h in steps)
        refs = devtools.evaluate(
            f"""JSON.stringify(Array.from(document.querySelectorAll('div.rule-entry'))
            .filter((r) => r.getAttribute('data-rule') === {json.dumps(first["id"])})
            .map((r) => [r.querySelector('p.refs').textContent,
                         Array.from(r.querySelectorAll('p.refs a'), (a) => a.getAttribute('href'))]))"""
        )
        assert json.loads(refs) == [
            [
                "Sources: NVIDIA GPU memory guide; our measurement (bench/audit_scale.py)",
                ["https://docs.nvidia.com/deploy/"],
            ]
        ]

        # The filters work on hosts never opened (from the data) and on the opened one (its rows).
        devtools.evaluate("location.hash = '#severity=critical&only=findings'")
        _await(devtools, "new Promise((done) => setTimeout(() => done(1), 300))")
        assert devtools.evaluate("document.getElementById('filter-count').textContent") == _expected_count(
            report, "critical"
        )
        shown = devtools.evaluate(f"document.querySelectorAll('#host-{index} tr.finding:not([hidden])').length")
        assert shown == sum(1 for f in failing if f["severity"] == "critical" and f["status"] == "fail")
        healthy = next(i for i, n in enumerate(names, 1) if n.startswith("iad-h100-03"))
        assert devtools.evaluate(f"document.getElementById('row-host-{healthy}').hidden") is True  # no critical
        assert devtools.evaluate(f"document.getElementById('row-host-{index}').hidden") is False
    finally:
        devtools.close()


def test_no_script_from_the_data_runs_when_hosts_open(tmp_path):
    report = json.loads((REPORTS / "hostile-v1.json").read_text(encoding="utf-8"))
    page = tmp_path / "report.html"
    page.write_text(report_html.render_html(report, lazy=True), encoding="utf-8")
    devtools = DevTools(tmp_path)
    try:
        devtools.open(page.as_uri())
        opened = devtools.evaluate(
            "Array.from(document.querySelectorAll('details.host-details'), (d) => { d.open = true; return 1; }).length"
        )
        assert opened > 0
        _await(devtools, "new Promise((done) => setTimeout(() => done(1), 300))")
        assert devtools.evaluate("document.querySelectorAll('details.host-details[data-rendered]').length") == opened
        dom = devtools.evaluate("document.documentElement.outerHTML")
    finally:
        devtools.close()
    assert "<pwned-element" not in dom and not re.search(r"<body[^>]*data-pwned", dom)
    assert "PWNED" != re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    assert "<img" not in dom
    assert "&lt;script&gt;document.title='PWNED'" in dom  # rendered, as text
    assert dom.count('<tr class="finding') > 0


# ------------------------------------------------------------------- 60 hosts at 800 and 1400 px (issue 29)

SITES = (("ap_southeast", "sg"), ("eu_west", "fra"), ("us_east", "iad"))
# An inventory name as some fleets spell them: longer than the host column may grow, shown cut with a tooltip.
LONG_NAME = "fra-h100-sxm5-rack12-node-0042.gpu.eu-west.example.internal"
_LAYOUT = """(() => {
  const matrix = document.getElementById("matrix");
  let box = matrix.parentElement;  // the matrix's horizontal scroll container, if any
  while (box !== document.body && !/(auto|scroll)/.test(getComputedStyle(box).overflowX)) { box = box.parentElement; }
  function lines(el) {  // text lines of an element: text boxes that do not overlap vertically
    const rects = [];
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (!n.textContent.trim()) { continue; }
      const range = document.createRange();
      range.selectNodeContents(n);
      rects.push(...Array.from(range.getClientRects()).filter((r) => r.width > 0 && r.height > 0));
    }
    rects.sort((a, b) => a.top - b.top);
    let count = 0, bottom = -Infinity, right = -Infinity;
    rects.forEach((r) => {
      if (r.top >= bottom - 1) { count += 1; bottom = r.bottom; } else { bottom = Math.max(bottom, r.bottom); }
      right = Math.max(right, r.right);
    });
    return {count: count, right: right};
  }
  function titled(el) {
    const all = [el, ...el.querySelectorAll("[title]")];
    return all.map((e) => e.getAttribute("title") || "").filter((t) => t);
  }
  const rows = Array.from(matrix.querySelectorAll("tbody tr[data-host]"));
  const names = rows.map((tr) => {
    const th = tr.querySelector("th");
    const text = lines(th);
    const r = th.getBoundingClientRect();
    const pad = parseFloat(getComputedStyle(th).paddingRight);
    return {name: tr.getAttribute("data-host"), lines: text.count, cut: text.right > r.right - pad + 1,
            titles: titled(th)};
  });
  const heads = Array.from(matrix.querySelectorAll("thead th"), (th) => th.textContent.trim());
  const last = matrix.querySelector("thead th:last-child");
  const before = {box: box.tagName, overflowX: getComputedStyle(box).overflowX, scrollWidth: box.scrollWidth,
                  clientWidth: box.clientWidth, tableRight: matrix.getBoundingClientRect().right};
  box.scrollLeft = box.scrollWidth;  // as far right as it goes
  const view = box === document.body ? {left: 0, right: window.innerWidth} : box.getBoundingClientRect();
  const lastRect = last.getBoundingClientRect();
  const stuck = rows.map((tr) => tr.querySelector("th").getBoundingClientRect()).filter((r) => r.height > 0)
    .map((r) => ({left: r.left, right: r.right}));
  box.scrollLeft = 0;
  const legends = Array.from(document.querySelectorAll(".legend"))
    .map((e) => (e.tagName === "DETAILS" && !e.open ? e.querySelector("summary") : e))  // what is shown of it
    .filter((e) => e.getBoundingClientRect().height > 0)
    .map((e) => ({id: e.id || e.parentElement.id, lines: lines(e).count, right: lines(e).right,
                  scrollWidth: e.scrollWidth, clientWidth: e.clientWidth}));
  return JSON.stringify({names: names, heads: heads, text: matrix.innerText, before: before,
    view: {left: view.left, right: Math.min(view.right, window.innerWidth)},
    last: {left: lastRect.left, right: lastRect.right}, stuck: stuck, legends: legends,
    page: {scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth}});
})()"""

_JUMP = """JSON.stringify({bar: document.getElementById("filters").getBoundingClientRect().bottom,
  head: document.querySelector("#matrix thead th").getBoundingClientRect().toJSON(),
  site: document.querySelector("#site-2 tr.site-head").getBoundingClientRect().top})"""


def _fleet_of_60():
    """60 hosts in three sites of 20 (recorded hosts: 6 not audited), one with a long inventory name."""
    sys.path.insert(0, str(REPO / "tests"))
    from fleetreport import scaled_report

    report = scaled_report(60)
    hosts = {}
    for i, (name, host) in enumerate(report["hosts"].items()):
        site, prefix = SITES[i % 3]
        host["site"] = site
        hosts[LONG_NAME if i == 40 else f"{prefix}-{name.split('-')[1]}-{i:03d}"] = host
    report["hosts"] = hosts
    report["summary"] = schema.summarize(hosts)
    return report


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """The 60-host page measured in the browser at 800 and 1400 px wide (and screenshots of its top)."""
    tmp_path = tmp_path_factory.mktemp("layout")
    page = tmp_path / "report.html"
    page.write_text(report_html.render_html(_fleet_of_60()), encoding="utf-8")
    devtools = DevTools(tmp_path)
    out = {}
    try:
        for width in (800, 1400):
            devtools.open(page.as_uri(), width=width, height=1000)
            assert devtools.evaluate("document.documentElement.getAttribute('data-filters-ready')") == "1"
            out[width] = json.loads(devtools.evaluate(_LAYOUT))
            devtools.evaluate("document.querySelector('#site-chart a[href=\"#site-2\"]').click() || 1")
            out[width]["jump"] = json.loads(devtools.evaluate(_JUMP))
            OUTPUT.mkdir(parents=True, exist_ok=True)
            (OUTPUT / f"report-60-hosts-{width}px.png").write_bytes(devtools.png(0, 0, width, 2000))
    finally:
        devtools.close()
    return out


@pytest.mark.parametrize("width", [800, 1400])
def test_host_names_on_one_line(layouts, width):
    """Each host name in the matrix on one line; a name cut short has its full text as a tooltip."""
    names = layouts[width]["names"]
    assert len(names) == 60
    broken = [n["name"] for n in names if n["lines"] != 1]
    assert not broken, f"{width} px: host names broken over lines: {broken}"
    cut = [n["name"] for n in names if n["cut"] and n["name"] not in n["titles"]]
    assert not cut, f"{width} px: host names cut without a tooltip: {cut}"
    short = [n["name"] for n in names if n["cut"] and n["name"] != LONG_NAME]
    assert not short, f"{width} px: short host names cut: {short}"


@pytest.mark.parametrize("width", [800, 1400])
def test_every_matrix_column_reachable(layouts, width):
    """The matrix scrolls sideways in its own box when it is wider than the page, and scrolled to its end its
    last column is in view, beside the host names (a sticky column), and the page itself does not scroll
    sideways."""
    m = layouts[width]
    before, view, last = m["before"], m["view"], m["last"]
    assert m["page"]["scrollWidth"] <= m["page"]["innerWidth"], f"{width} px: the page scrolls sideways: {m['page']}"
    if before["scrollWidth"] > before["clientWidth"] or before["tableRight"] > m["page"]["innerWidth"]:
        assert before["overflowX"] in ("auto", "scroll"), f"{width} px: a wide matrix that does not scroll: {before}"
    assert view["left"] - 1 <= last["left"] and last["right"] <= view["right"] + 1, (width, last, view)
    for th in m["stuck"]:  # the host names stay in view, left of the last column, not under it
        assert view["left"] - 1 <= th["left"] and th["right"] <= last["left"] + 1, (width, th, last)
    if width == 1400:
        assert before["scrollWidth"] <= before["clientWidth"], "at 1400 px the matrix fits without scrolling"


@pytest.mark.parametrize("width", [800, 1400])
def test_site_shown_once_per_group(layouts, width):
    m = layouts[width]
    assert "Site" not in m["heads"], m["heads"]
    for site, _ in SITES:
        assert m["text"].count(site) == 1, f"{site} shown {m['text'].count(site)} times in the matrix"


@pytest.mark.parametrize("width", [800, 1400])
def test_a_site_link_shows_its_group_under_the_head_row(layouts, width):
    """The summary's link to a site scrolls its head row into view: below the matrix's head row, which is below
    the sticky filter bar."""
    jump = layouts[width]["jump"]
    assert jump["head"]["top"] >= jump["bar"] - 1, f"{width} px: the matrix head row under the filter bar: {jump}"
    assert jump["site"] >= jump["head"]["bottom"] - 1, f"{width} px: the site's row under the head row: {jump}"


@pytest.mark.parametrize("width", [800, 1400])
def test_legend_on_one_line(layouts, width):
    legends = layouts[width]["legends"]
    assert legends
    for legend in legends:
        assert legend["lines"] == 1, f"{width} px: legend {legend['id']} on {legend['lines']} lines"
        assert legend["scrollWidth"] <= legend["clientWidth"] and legend["right"] <= width, (width, legend)
