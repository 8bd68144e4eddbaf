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
from report_fixtures import load, warn_skip_error

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
    rows = [r for r in matrix.iter("tr") if "data-host" in r.attrs]
    # grouped by site (sites by name, hosts without one last), by name within a site
    assert [r.attrs["data-host"] for r in rows] == ["sg-a100-01", "iad-h100-03", "fra-a100-02", "sg-l40s-03"]
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
    report = warn_skip_error()
    cells = _cells(report_html.render_html(report), "h")
    assert {"cell-warn", "sev-medium"} <= cells["cpu"].classes()
    assert "cell-skip" in cells["memory"].classes()
    assert "cell-error" in cells["health"].classes()
    assert "cell-none" in cells["power"].classes()
    assert ".cell-warn {" in report_html.render_html(report)


def test_host_details_show_values_and_fix_and_link_to_the_rule(sample_html):
    page = parse(sample_html)
    a100 = page.find("section", data_host="sg-a100-01")
    rows = [tr for tr in a100.iter("tr") if "finding" in tr.classes()]
    row = next(tr for tr in rows if "SW-FM-001" in tr.all_text())
    text = row.all_text()
    assert "Fabric manager version differs from the driver" in text  # title
    assert "NVSwitch-based systems (HGX) cannot run multi-GPU jobs" not in text  # rationale: once, in Rules
    rule = page.find("div", data_rule="SW-FM-001")
    assert row.find("a").attrs["href"] == "#" + rule.attrs["id"]
    assert "NVSwitch-based systems (HGX) cannot run multi-GPU jobs" in rule.all_text()  # from the catalog
    assert "fabricmanager: 535.86.10" in text and "equal" in text  # observed (in words), expected
    assert "nvidia_driver" in text and "SW-FM-001" in text  # fix: role and tag
    assert "8 \u00d7 NVIDIA A100-SXM4-80GB" in a100.all_text()
    assert "driver 535.104.05" in a100.all_text()
    # worst first: fails before the warning, critical before high before medium
    shown = [(tr.attrs["data-status"], tr.attrs["data-severity"]) for tr in rows if "hidden" not in tr.attrs]
    assert shown == [("fail", "critical")] * 3 + [("fail", "high")] * 5 + [("fail", "medium")] * 2 + [
        ("warn", "medium")
    ]
    # per-GPU items of GPU-PWR-002 are listed
    pwr = next(tr for tr in rows if "GPU-PWR-002" in tr.all_text())
    assert pwr.find("details").find("summary").all_text() == "8 details"
    assert [td.all_text() for td in pwr.find("details").find("tbody").iter("td")][:3] == ["400", "0", "250"]


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
    media = sample_html[sample_html.index("@media print") :]
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


# ---------------------------------------------------------------------------------- statuses, sites, devices


@pytest.fixture(scope="module")
def statuses():
    return load("statuses-v1.json")


@pytest.fixture(scope="module")
def statuses_html(statuses):
    return report_html.render_html(statuses)


def _css_rules(page_html):
    css = re.search(r"<style>(.*?)</style>", page_html, re.S).group(1)
    return {sel.strip(): body for sels, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css) for sel in sels.split(",")}


def test_every_host_status_has_its_own_styled_badge_and_legend_entry(statuses, statuses_html):
    """timeout and interrupted had no style: white text on the page's white."""
    rules = _css_rules(statuses_html)
    backgrounds = {}
    for status in schema.HOST_STATUSES:
        body = rules.get(f".chip.host-{status}")
        assert body and "background" in body, f"no badge style for host status {status}"
        backgrounds[status] = re.search(r"background:\s*([^;]+)", body).group(1).strip()
    assert len(set(backgrounds.values())) == len(schema.HOST_STATUSES), backgrounds  # each its own colour
    legend = parse(statuses_html).find("div", id="legend-status")
    entries = {n.attrs["data-legend"]: n for n in legend.iter("span") if "data-legend" in n.attrs}
    assert list(entries) == [f"host-{s}" for s in schema.HOST_STATUSES]
    for status, node in entries.items():
        assert node.find("span").classes() == {"chip", status}
    # the matrix and the host sections use the same badges
    page = parse(statuses_html)
    for name, host in statuses["hosts"].items():
        row = page.find("tr", data_host=name)
        assert f"host-{host['status']}" in row.find("span").classes()


def test_timeout_does_not_look_like_critical(statuses_html):
    rules = _css_rules(statuses_html)
    assert "--host-timeout" in rules[".cell-timeout"]
    root = rules[":root"]
    colour = dict(re.findall(r"--([a-z0-9-]+):\s*(#[0-9a-f]{6})", root))

    def rgb(h):
        return tuple(int(h[i : i + 2], 16) for i in (1, 3, 5))

    for sev in schema.SEVERITIES:
        dist = sum((a - b) ** 2 for a, b in zip(rgb(colour["host-timeout"]), rgb(colour[sev]), strict=True)) ** 0.5
        assert dist > 90, f"timeout colour {colour['host-timeout']} too close to {sev} {colour[sev]}"


def test_every_cell_state_has_a_legend_badge(statuses_html):
    legend = parse(statuses_html).find("div", id="legend-cells")
    badges = [n for n in legend.iter("span") if "badge" in n.classes()]
    states = {c.split("-", 1)[1] for b in badges for c in b.classes() if c.startswith("cell-")}
    assert states == set(schema.CELL_STATES)
    assert all(b.all_text().strip() for b in badges)  # each badge carries its text, not only a colour
    rules = _css_rules(statuses_html)
    for state in schema.CELL_STATES:
        assert any(sel.startswith(f".cell-{state}") for sel in rules), state


def test_every_cell_state_appears_in_the_statuses_fixture(statuses_html):
    page = parse(statuses_html)
    seen = {td.attrs["data-state"] for td in page.find("table", id="matrix").iter("td") if "data-state" in td.attrs}
    assert seen == set(schema.CELL_STATES)


def test_matrix_grouped_by_site_with_counts_the_site_said_once(statuses, statuses_html):
    """The site is the head row of its group, not a column repeated on every host's row (issue 29)."""
    matrix = parse(statuses_html).find("table", id="matrix")
    groups = [t for t in matrix.iter("tbody") if "site-group" in t.classes()]
    assert [g.attrs["data-site"] for g in groups] == ["ap_southeast", "eu_central", "us_east", ""]
    heads = []
    for g in groups:
        label = g.find("tr").find("th").find("span")
        assert label.find("b").all_text() == (g.attrs["data-site"] or "no site recorded")
        heads.append(" ".join((label.find("b").all_text() + " " + "".join(label.text)).split()))
    assert heads[0] == "ap_southeast · 3 hosts: 2 audited, 1 unreachable · 3 critical, 6 high, 4 medium"
    assert heads[1] == (
        "eu_central · 2 hosts: 0 audited, 1 audit failed, 1 timed out · no host audited: findings unknown"
    )
    assert heads[2] == "us_east · 2 hosts: 1 audited, 1 not audited (run interrupted) · no findings"
    assert heads[3] == "no site recorded · 1 host: 1 audited · no findings"
    for g in groups:
        for row in (r for r in g.iter("tr") if "data-host" in r.attrs):
            site = statuses["hosts"][row.attrs["data-host"]]["site"]
            assert g.attrs["data-site"] == (site or "")
            assert site is None or site not in row.all_text()
    assert [th.all_text() for th in matrix.find("thead").iter("th")][:2] == ["Host", "Status"]


def test_severity_by_site_chart(statuses_html):
    chart = parse(statuses_html).find("div", id="site-chart")
    rows = {r.attrs["data-site"]: r for r in chart.iter("tr")}
    assert list(rows) == ["ap_southeast", "eu_central", "us_east", ""]
    bar = rows["ap_southeast"].find("div")
    segments = [(s.attrs["class"], s.attrs["style"]) for s in bar.iter("span")]
    assert segments == [("sev-critical", "flex: 3"), ("sev-high", "flex: 6"), ("sev-medium", "flex: 4")]
    assert bar.attrs["style"] == "width: 100.0%"
    assert "2 of 2 hosts not audited" in rows["eu_central"].all_text()
    assert "no host audited" in rows["eu_central"].all_text()  # a down site never reads as clean
    assert list(rows["us_east"].find("div").iter("span")) == []


def test_no_site_no_grouping(sample):
    report = json.loads(json.dumps(sample))
    for host in report["hosts"].values():
        host["site"] = None
    page = report_html.render_html(report)
    assert 'id="site-chart"' not in page and 'class="site-head"' not in page
    assert 'class="site"' not in page and "no site recorded" not in page  # no column of dashes either


def _entry(li):
    return f"{li.find('mark').all_text()} {li.find('code').all_text()}"


def _vals(page_html, host, rule):
    section = parse(page_html).find("section", data_host=host)
    row = next(tr for tr in section.iter("tr") if "finding" in tr.classes() and rule in tr.all_text())
    return row.find("td", class_="vals")


def test_the_failing_gpu_of_eight_is_shown_first_and_marked(statuses_html):
    vals = _vals(statuses_html, "sg-h100-02", "GPU-PWR-002")
    first = vals.find("ul")
    assert first is not None, "the failing device is not listed before the whole value"
    items = list(first.iter("li"))
    assert len(items) == 1
    assert items[0].find("mark").all_text() == "GPU 3" and "bad" in items[0].find("mark").classes()
    assert items[0].find("code").all_text() == "default_limit_w 700, limit_w 450"  # in words, not JSON
    folded = vals.find("details")
    assert folded.find("summary").all_text() == "7 other GPUs not flagged: 0\u20132, 4\u20137"
    assert "3: default_limit_w 700, limit_w 450" in folded.all_text()  # the whole value, folded, a line per GPU


def test_the_failing_nic_is_shown_first_in_observed_and_expected(statuses_html):
    vals = _vals(statuses_html, "sg-h100-02", "NET-MTU-001")
    lists = list(vals.iter("ul"))
    assert [[_entry(li) for li in ul.iter("li")] for ul in lists] == [
        ["ens2f0np0 1500"],
        ["ens2f0np0 == 9000 (network.mtu)"],
    ]


def test_every_gpu_failing_with_the_same_value_is_one_line(sample_html):
    vals = _vals(sample_html, "sg-a100-01", "GPU-PWR-002")
    assert [_entry(li) for li in vals.find("ul").iter("li")] == [
        "GPUs 0\u20137 default_limit_w 400, limit_w 250"
    ]
    assert vals.find("details") is None  # no other GPU to fold


def test_statuses_page_is_self_contained(statuses_html):
    page = parse(statuses_html)
    for node in page.iter():
        assert node.tag not in ("link", "iframe", "object", "embed", "img", "image")
        for attr in ("src", "action", "srcset", "data"):
            assert attr not in node.attrs
    assert "url(" not in statuses_html and "@import" not in statuses_html
