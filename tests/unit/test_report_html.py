"""The HTML report: structure of the matrix and host details, self-containment, escaping of hostile data."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html as report_html
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema

REPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "reports"
VOID = {"meta", "input", "br", "img", "link", "hr", "col", "area", "base", "wbr", "source"}


class Node:
    def __init__(self, tag, attrs, parent=None):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], []

    def iter(self, tag=None):
        for child in self.children:
            if tag is None or child.tag == tag:
                yield child
            yield from child.iter(tag)

    def find(self, tag=None, **attrs):
        for node in self.iter(tag):
            if all(node.attrs.get(k.rstrip("_").replace("_", "-")) == v for k, v in attrs.items()):
                return node
        return None

    def all_text(self):
        return "".join(self.text) + "".join(c.all_text() for c in self.children)

    def classes(self):
        return set((self.attrs.get("class") or "").split())


class TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_endtag(self, tag):
        node = self.cur
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:
            self.cur = node.parent

    def handle_data(self, data):
        self.cur.text.append(data)


def parse(text):
    builder = TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


def load(name):
    return json.loads((REPORTS / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def sample():
    return load("sample-v1.json")


@pytest.fixture(scope="module")
def sample_html(sample):
    return report_html.render_html(sample)


@pytest.fixture(scope="module")
def hostile():
    return load("hostile-v1.json")


@pytest.fixture(scope="module")
def hostile_html(hostile):
    return report_html.render_html(hostile)


def test_environment_autoescapes_and_loads_templates_next_to_the_code():
    env = report_html.environment()
    assert env.autoescape is True
    assert Path(env.loader.searchpath[0]) == Path(report_html.__file__).resolve().parent / "templates"
    assert env.from_string("{{ x }}").render(x="<b>") == "&lt;b&gt;"


def test_matrix_has_one_row_per_host_and_one_column_per_area(sample, sample_html):
    matrix = parse(sample_html).find("table", id="matrix")
    assert matrix is not None
    head = [th.attrs["data-area"] for th in matrix.find("thead").iter("th") if "data-area" in th.attrs]
    assert head == list(schema.AREAS)
    rows = list(matrix.find("tbody").iter("tr"))
    assert [r.attrs["data-host"] for r in rows] == sorted(sample["hosts"])
    for row in rows:
        assert [td.attrs["data-area"] for td in row.iter("td") if "data-area" in td.attrs] == list(schema.AREAS)


def _cells(page_html, host):
    row = parse(page_html).find("tr", data_host=host)
    return {td.attrs["data-area"]: td for td in row.iter("td") if "data-area" in td.attrs}


def test_matrix_cells_coloured_by_worst_failing_severity(sample_html):
    cells = _cells(sample_html, "sg-a100-01")
    expect = {
        "memory": ("fail", "critical"),
        "cpu": ("pass", ""),
        "network": ("pass", ""),
        "power": ("fail", "high"),
        "software": ("fail", "critical"),
        "health": ("warn", "medium"),
    }
    for area, (state, sev) in expect.items():
        td = cells[area]
        assert (td.attrs["data-state"], td.attrs["data-severity"]) == (state, sev), area
        assert f"cell-{state}" in td.classes()
        if sev:
            assert f"sev-{sev}" in td.classes()
    assert cells["memory"].all_text().strip() == "critical (4)"
    assert cells["health"].all_text().strip() == "warn \u00b7 medium"
    assert cells["cpu"].all_text().strip() == "pass"
    assert cells["software"].attrs["title"] == "software: 1 pass, 3 fail \u2013 SW-FM-001, SW-KMOD-001, SW-CUDA-001"


def test_matrix_healthy_unreachable_and_failed_hosts(sample_html):
    for host, state in (("iad-h100-03", "pass"), ("sg-l40s-03", "unreachable"), ("fra-a100-02", "failed")):
        cells = _cells(sample_html, host)
        assert {td.attrs["data-state"] for td in cells.values()} == {state}, host
        assert all(f"cell-{state}" in td.classes() for td in cells.values())


def test_warn_skip_error_and_empty_cells():
    report = {"hosts": {"h": {"status": "ok", "findings": [
        {"rule": "GPU-CPU-002", "area": "cpu", "status": "warn", "severity": "medium"},
        {"rule": "GPU-CPU-001", "area": "cpu", "status": "pass", "severity": "medium"},
        {"rule": "GPU-MEM-003", "area": "memory", "status": "skip", "severity": "low"},
        {"rule": "GPU-HLT-002", "area": "health", "status": "error", "severity": "critical"},
        {"rule": "GPU-HLT-001", "area": "health", "status": "pass", "severity": "critical"},
    ]}}}
    cells = _cells(report_html.render_html(report), "h")
    assert {"cell-warn", "sev-medium"} <= cells["cpu"].classes()
    assert "cell-skip" in cells["memory"].classes()
    assert "cell-error" in cells["health"].classes()
    assert "cell-none" in cells["power"].classes()
    assert ".cell-warn {" in report_html.render_html(report)


def test_host_details_show_rationale_values_and_fix(sample_html):
    page = parse(sample_html)
    a100 = page.find("section", data_host="sg-a100-01")
    rows = [tr for tr in a100.iter("tr") if "finding" in tr.classes()]
    row = next(tr for tr in rows if "SW-FM-001" in tr.all_text())
    text = row.all_text()
    assert "Fabric manager version differs from the driver" in text  # title
    assert "NVSwitch-based systems (HGX) cannot run multi-GPU jobs" in text  # rationale, from the catalog
    assert '"fabricmanager": "535.86.10"' in text and "equal" in text  # observed, expected
    assert "nvidia_driver" in text and "SW-FM-001" in text  # fix: role and tag
    assert "8 \u00d7 NVIDIA A100-SXM4-80GB" in a100.all_text()
    assert "driver 535.104.05" in a100.all_text()
    # worst first: fails before the warning, critical before high before medium
    shown = [(tr.attrs["data-status"], tr.attrs["data-severity"]) for tr in rows if "hidden" not in tr.attrs]
    assert shown == [("fail", "critical")] * 3 + [("fail", "high")] * 5 + [("fail", "medium")] * 2 + [
        ("warn", "medium")]
    # per-GPU items of GPU-PWR-002 are listed
    pwr = next(tr for tr in rows if "GPU-PWR-002" in tr.all_text())
    assert pwr.find("details").find("summary").all_text() == "8 details"
    assert [td.all_text() for td in pwr.find("details").find("tbody").iter("td")][:3] == ["400.0", "0", "250.0"]


def test_down_hosts_show_their_message(sample_html):
    page = parse(sample_html)
    unreachable = page.find("section", data_host="sg-l40s-03")
    assert "down" in unreachable.classes()
    assert "Unreachable:" in unreachable.all_text()
    assert "Connection timed out" in unreachable.all_text()
    failed = page.find("section", data_host="fra-a100-02")
    assert "Audit failed:" in failed.all_text()
    assert "Timeout (12s) waiting for privilege escalation prompt" in failed.all_text()


def test_healthy_host_says_so_and_keeps_passing_rows_hidden(sample_html):
    h100 = parse(sample_html).find("section", data_host="iad-h100-03")
    assert "No findings: 32 passed, 1 skipped." in h100.all_text()
    rows = [tr for tr in h100.iter("tr") if "finding" in tr.classes()]
    assert len(rows) == 33
    assert all("hidden" in tr.attrs for tr in rows)
    assert "hidden" in h100.find("table").attrs  # no empty table header without JS


def test_page_is_self_contained(sample_html):
    page = parse(sample_html)
    for node in page.iter():
        for attr in ("src", "href", "action", "srcset", "data"):
            value = node.attrs.get(attr)
            if value is not None:
                assert value.startswith("#"), f"<{node.tag} {attr}={value!r}>"
        assert node.tag not in ("link", "iframe", "object", "embed", "img")
    assert "@import" not in sample_html
    assert "url(" not in sample_html
    assert not re.search(r"https?://", sample_html)


def test_single_inline_script_allowed_by_csp_hash(sample_html):
    scripts = re.findall(r"<script>(.*?)</script>", sample_html, re.S)
    assert len(scripts) == 1 and sample_html.count("<script") == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode("utf-8")).digest()).decode()
    csp = parse(sample_html).find("meta", http_equiv="Content-Security-Policy").attrs["content"]
    assert f"script-src 'sha256-{digest}';" in csp
    assert "default-src 'none'" in csp


def test_filter_controls_and_print_styles(sample_html):
    page = parse(sample_html)
    form = page.find("form", id="filters")
    assert "hidden" in form.attrs  # shown by the script: no dead controls without JS
    boxes = [i for i in form.iter("input") if i.attrs.get("type") == "checkbox"]
    assert [b.attrs["value"] for b in boxes if b.attrs.get("name") == "severity"] == list(schema.SEVERITIES)
    assert [b.attrs["value"] for b in boxes if b.attrs.get("name") == "area"] == list(schema.AREAS)
    assert form.find("input", id="filter-host") is not None
    media = sample_html[sample_html.index("@media print"):]
    assert "#filters" in media[: media.index("</style>")]


def test_incomplete_run_is_flagged(sample, hostile_html):
    assert 'id="incomplete"' not in report_html.render_html(sample)
    assert 'id="incomplete"' in hostile_html


def test_empty_and_minimal_reports_render():
    assert "No hosts in this report." in report_html.render_html({"hosts": {}})
    minimal = {"hosts": {"x": {"status": "ok", "findings": [{"rule": "R-1", "status": "fail"}]}}}
    page = report_html.render_html(minimal)
    assert 'data-host="x"' in page


# ---------------------------------------------------------------------------------------------- hostile data


SCRIPT = "<script>document.title='PWNED'"
IMG = "<img src=x onerror="
JINJA = "{{ 7*7 }} {% if true %}jinja-ran{% endif %}"


def test_hostile_markup_is_escaped(hostile_html):
    assert SCRIPT not in hostile_html
    assert IMG not in hostile_html
    assert "&lt;script&gt;document.title=" in hostile_html
    assert "&lt;img src=x onerror=" in hostile_html
    assert hostile_html.count("<script") == 1
    assert "<th>&lt;th&gt;" in hostile_html  # an item key becomes a column header, escaped


def test_hostile_template_syntax_is_not_evaluated(hostile_html):
    assert hostile_html.count("{{ 7*7 }}") >= 5
    assert hostile_html.count("jinja-ran") == hostile_html.count("{% if true %}jinja-ran{% endif %}")
    without_csp = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", hostile_html)
    assert "49" not in without_csp


def test_hostile_attribute_values_round_trip(hostile, hostile_html):
    page = parse(hostile_html)
    sections = [s.attrs["data-host"] for s in page.iter("section") if "host" in s.classes()]
    assert sections == sorted(hostile["hosts"])  # quotes, newlines, markup survive as attribute values
    rows = [r.attrs["data-host"] for r in page.find("table", id="matrix").iter("tr") if "data-host" in r.attrs]
    assert rows == sorted(hostile["hosts"])


def test_hostile_control_characters_are_dropped(hostile_html):
    for ch in ("\x00", "\x07", "\x1b"):
        assert ch not in hostile_html
    assert "bell\ufffd nul\ufffd" in hostile_html
