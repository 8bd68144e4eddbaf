"""Hostile host strings through every file gpufleet writes (issue 26, point 5).

A host says many things the reports carry: GPU names, process names (15 bytes a job user sets, ESC included),
kernel-log lines, os-release text, rule ids and severities of its own making; the inventory may name hosts with
unicode and bidi characters. The reports are built by the real builder (``fleet.build_report``) from such results,
then written in every format: HTML (full and lazy), JUnit, the Prometheus textfile, the terminal report, report diff
and report merge (the functions and the ``gpufleet report`` commands). Each output must hold:

- no control sequence (ESC, C0/C1 controls a format does not allow) and no bidi control a reader would see acting;
- no markup from the data (``<script``, ``<img``) and no line, series or XML node that the data made up;
- the value still there, escaped, so that nothing is lost to the reader.

The gres.conf fragment is the topology helper's (its key whitelist, issue 26): not tested here.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html import unescape
from html.parser import HTMLParser

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import (
    diff,
    html,
    junit,
    merge,
    prometheus,
    schema,
    terminal,
    writer,
)
from test_report_prometheus import parse, promtool_check

from gpufleet import cli, exits

# ------------------------------------------------------------------------------------------- the hostile strings

CLEAR = "\x1b[2J"  # clears a terminal
TITLE = "\x1b]0;owned\x07"  # retitles a terminal window (OSC ... BEL)
RLO = "\u202e"  # right-to-left override: what follows reads backwards
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
HOSTS = ("gpu-" + RLO + "10-upg.example", "узел-01.пример", "gpu\u200f-\u2067ok\u2069-03")  # legal inventory names
GPU_NAME = "NVIDIA H100<script>" + CLEAR + RLO
PROCESS = CLEAR + "pwn1\nFORGED"  # 15 bytes, as the kernel keeps a process name
assert len(PROCESS.encode()) == 15
KERNEL = (
    "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus\nFORGED line"
    + TITLE
    + ' </script><script>pwn()</script> ]]> <![CDATA[x]]> "} 1\nfake_metric 2\x85\x9b2J\x00\x0b'
)
OS_RELEASE = "Debian GNU/Linux 12" + RLO + " (bookworm)" + CLEAR + '<img src=x onerror="pwn()">\nFORGED'
RULE_IDS = (
    'X"} 1\nfake_metric 2',
    "GPU-<script>pwn()</script>",
    "R]]>" + CLEAR + RLO + "\nFORGED",
    "GPU-PWR-9" + TITLE,
)
SITE = "eu" + RLO + CLEAR + "<marquee>west</marquee>"
VISIBLE = ("NVRM: Xid", "GPU has fallen off the bus", "</script><script>pwn()</script>", "pwn1")


def _finding(rule, status="fail", severity=None, area=None, text=KERNEL):
    entry = rules.BY_ID.get(rule)
    return {
        "rule": rule,
        "status": status,
        "severity": severity or (entry.severity if entry else "high"),
        "area": area or (entry.area if entry else "health"),
        "title": "title " + text,
        "message": text,
        "observed": {"line": text, "process": PROCESS, "os": OS_RELEASE},
        "expected": "no " + text,
        "fix": {"role": None, "tag": None, "manual": "read " + text},
        "items": [{"gpu": 0, "process": PROCESS, "line": text, "<th>" + CLEAR: OS_RELEASE}],
    }


def _result(extra=(), digest=None):
    """A host's audit result: catalog rules that fail with hostile text, plus ``extra`` findings."""
    findings = [
        _finding("GPU-HLT-001"),
        _finding("GPU-PWR-001", status="warn", text=PROCESS),
        _finding("HOST-CPU-002", text=OS_RELEASE),
        _finding("GPU-ECC-001", status="pass", text=GPU_NAME),
        *extra,
    ]
    facts = {
        "gpu": {
            "nvml": {"available": True},
            "gpus": [{"index": 0, "name": GPU_NAME}, {"index": 1, "name": GPU_NAME}],
            "driver": {"version": "535.104.05" + CLEAR},
        },
        "host": {"os": {"pretty_name": OS_RELEASE}},
    }
    out = {"changed": False, "findings": findings, "facts": facts, "links": {"source": "none", "peers": []}}
    out["links"]["site"] = SITE
    if digest:
        out["policy_digest"] = digest
    return out


def _hostile_ids():
    """Findings with rule ids, areas and severities of the host's own making."""
    out = [_finding(rule) for rule in RULE_IDS]
    out.append(_finding("GPU-PWR-002", area="urgent\n" + CLEAR))  # a catalog rule with an area of its own
    out.append(_finding("GPU-HLT-002", severity="urgent\n"))
    return out


def hostile_report(extra=(), down=True, digest=None):
    results = {name: _result(extra, digest) for name in HOSTS}
    if down:
        results["down-" + RLO + "01"] = {"unreachable": True, "msg": "ssh: " + KERNEL}
    rep = fleet.build_report(results, started_at="2026-12-03T10:00:00+00:00")
    for host in rep["hosts"].values():  # the builder sets ``extra`` aside (test_the_builder_sets_aside_...): put it
        if host["status"] == "ok":  # back, as in a report written elsewhere that the outputs must still hold against
            host["findings"] += [f for f in extra if f not in host["findings"]]
    return rep


def test_the_builder_sets_aside_what_the_catalog_does_not_know():
    """A host's rule ids, areas and severities of its own making never reach the report: the row keeps the host's
    catalog findings, the message says how many were set aside and why (cleaned where shown), the report is valid
    (so that report diff and merge read gpufleet's own report)."""
    rep = fleet.build_report({"gpu01": _result(_hostile_ids())}, started_at="2026-12-03T10:00:00+00:00")
    assert schema.validate(rep) == []
    host = rep["hosts"]["gpu01"]
    assert [f["rule"] for f in host["findings"]] == ["GPU-HLT-001", "GPU-PWR-001", "HOST-CPU-002", "GPU-ECC-001"]
    assert host["message"].startswith(f"{len(_hostile_ids())} result(s) set aside, not known to this controller: ")
    assert "is not in the catalog" in host["message"]
    shown = terminal.render_terminal(rep, color=False)
    assert "NOTE: 6 result(s) set aside" in shown
    no_controls(shown, "terminal note")
    no_forged_lines(shown, "terminal note")


@pytest.fixture(scope="module")
def report():
    """Hostile strings everywhere a host can put them, rule ids included (not a valid report: see valid)."""
    return hostile_report(_hostile_ids())


@pytest.fixture(scope="module")
def valid():
    """Hostile strings in a report that schema.validate accepts (catalog rules only): what diff and merge read."""
    rep = hostile_report()
    assert schema.validate(rep) == []
    return rep


# ------------------------------------------------------------------------------------------------ what must hold

_C0 = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and newline (and the formats' own CR, none here)
_BIDI = re.compile(f"[{BIDI}]")


def no_controls(text, what):
    assert "\x1b" not in text, f"{what}: ESC"
    assert not _C0.findall(text), f"{what}: control characters {sorted(set(_C0.findall(text)))!r}"
    assert not _BIDI.findall(text), f"{what}: bidi controls {sorted(set(_BIDI.findall(text)))!r}"


def no_forged_lines(text, what):
    forged = [line for line in text.splitlines() if line.lstrip().startswith(("FORGED", "fake_metric", "<script"))]
    assert not forged, f"{what}: lines made up by the data: {forged[:3]}"


def terminal_text(text, what):
    """A text for a terminal: one line per thing, controls escaped (visible), the values still there."""
    no_controls(text, what)
    no_forged_lines(text, what)
    for shown in ("\\x1b[2J", "\\u202e", "\\nFORGED"):
        assert shown in text, f"{what}: {shown!r} not shown"


class _Markup(HTMLParser):
    """The elements of a page and the text of each <script>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.scripts, self._in = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in = [dict(attrs), ""]
            self.scripts.append(self._in)

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            self._in[1] += data


def html_page(page, what):
    no_controls(page, what)
    parser = _Markup()
    parser.feed(page)
    names = {tag for tag, _ in parser.tags}
    assert not names & {"img", "marquee"}, f"{what}: markup from the data"
    assert not [a for _, attrs in parser.tags for a in attrs if a.startswith("on")], f"{what}: event handler"
    for attrs, text in parser.scripts:
        if attrs.get("type") == "application/json":
            assert "<" not in text, f"{what}: '<' inside the data block"
            json.loads(text)
        else:
            assert attrs == {} and "pwn" not in text, f"{what}: a script from the data"
    assert len([1 for attrs, _ in parser.scripts if not attrs]) == 1  # the page's own, pinned by its CSP hash
    return parser


def _data_block(page):
    return json.loads(re.search(r'<script type="application/json" id="host-data">(.*?)</script>', page, re.S)[1])


def _strings(value):
    """Every string (keys too) inside a JSON value, one per line."""
    if isinstance(value, dict):
        return "\n".join(f"{k}\n{_strings(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "\n".join(_strings(v) for v in value)
    return str(value)


# --------------------------------------------------------------------------------------------------------- HTML


@pytest.mark.parametrize("lazy", [False, True], ids=["full", "lazy"])
def test_html(report, lazy):
    page = html.render_html(report, lazy=lazy)
    html_page(page, "html")
    text = unescape(page)
    for host in HOSTS:  # the names, bidi controls replaced
        assert _BIDI.sub("\ufffd", host) in text
    assert "NVIDIA H100<script>\ufffd[2J\ufffd" in text  # the GPU name, escaped; its controls marked, not lost
    assert "Debian GNU/Linux 12\ufffd (bookworm)" in text  # os-release in a finding's value
    shown = text if not lazy else _strings(_data_block(page))
    for value in (*VISIBLE, "GPU-<script>pwn()</script>", 'X"} 1\nfake_metric 2'):
        assert value in shown, value


# -------------------------------------------------------------------------------------------------------- JUnit


def test_junit(report):
    text = junit.render_junit(report)
    no_controls(text, "junit.xml")
    root = ET.fromstring(text.encode("utf-8"))  # expat: well-formed XML 1.0
    suites = root.findall("testsuite")
    assert len(suites) == len(report["hosts"])  # no suite made up by the data
    assert {s.get("name") for s in suites} == {_BIDI.sub("\ufffd", n) for n in report["hosts"]}
    allowed = {f"{s.get('name')}.{a}" for s in suites for a in (*schema.AREAS, "unknown")} | {
        s.get("name") for s in suites
    }
    classnames = {c.get("classname") for c in root.iter("testcase")}
    assert classnames <= allowed, classnames - allowed  # an area of a host's making does not name a class
    cases = [c.get("name") for c in root.iter("testcase")]
    assert any(name.startswith("GPU-<script>pwn()</script> ") for name in cases)
    assert any(name.startswith('X"} 1\nfake_metric 2 ') for name in cases)
    bodies = " ".join(e.text or "" for e in root.iter() if e.tag in ("failure", "error", "system-out"))
    for value in VISIBLE:
        assert value in bodies, value
    assert "]]>" in bodies and "<![CDATA[x]]>" in bodies  # as text, not as XML


# ---------------------------------------------------------------------------------------------------- Prometheus


def test_prometheus(report):
    text = prometheus.render_prometheus(report)
    promtool_check(text)  # promtool check metrics, when installed
    m = parse(text)  # strict: every line a HELP, a TYPE or one sample of its family
    assert "\x1b" not in text and not _C0.findall(text)
    assert len(text.splitlines()) == 2 * len(m) + sum(len(f["samples"]) for f in m.values())
    no_forged_lines(text, "gpufleet.prom")
    hosts = {labels["host"] for f in m.values() for labels, _ in f["samples"] if "host" in labels}
    assert hosts == set(report["hosts"])  # the inventory's names, exactly: a host's result adds none
    catalog = rules.BY_ID
    for labels, _ in m["gpufleet_finding"]["samples"]:
        assert labels["rule"] in catalog and labels["area"] == catalog[labels["rule"]].area
        assert labels["severity"] in schema.SEVERITIES and labels["status"] in ("fail", "warn")
    unknown = {labels["host"]: v for labels, v in m["gpufleet_unknown_findings"]["samples"]}
    assert unknown == dict.fromkeys(HOSTS, float(len(RULE_IDS) + 1))  # the ids and the unknown severity


# ------------------------------------------------------------------------------------------------------ terminal


def test_terminal(report):
    text = terminal.render_terminal(report)
    terminal_text(text, "terminal")
    assert "NVIDIA H100<script>\\x1b[2J\\u202e" in text
    colored = terminal.render_terminal(report, color=True)
    assert not re.findall(r"\x1b(?!\[[0-9;]*m)", colored), "an escape sequence other than a colour"
    no_forged_lines(colored, "terminal (colour)")


# ----------------------------------------------------------------------------------------------------- diff, merge


def _fixed(rep):
    """The report of a later run: the kernel-log rule passes, the rest as before."""
    later = json.loads(json.dumps(rep))
    later["run"]["id"] = "later"
    for host in later["hosts"].values():
        for f in host["findings"]:
            if f["rule"] == "GPU-HLT-001":
                f["status"] = "pass"
    later["summary"] = schema.summarize(later["hosts"])
    return later


def test_diff(report):
    text = diff.render_diff(diff.diff_reports(report, _fixed(report)))
    terminal_text(text, "report diff")
    assert 'X"} 1\\nfake_metric 2' in text


def test_report_diff_command(valid, tmp_path, capsys):
    old = writer.write_all(valid, tmp_path / "old", stamp="20261203T100000Z")["json"]
    new = writer.write_all(_fixed(valid), tmp_path / "new", stamp="20261203T110000Z")["json"]
    assert cli.main(["report", "diff", str(old), str(new)]) == exits.EXIT_OK
    out = capsys.readouterr().out
    no_controls(out, "gpufleet report diff")
    no_forged_lines(out, "gpufleet report diff")
    assert "\\u202e" in out and "fixed" in out


def test_merge_and_its_files(valid, tmp_path):
    a = dict(valid, run=dict(valid["run"], id="slice-a"))
    b = _fixed(dict(valid, run=dict(valid["run"], id="slice-b", finished_at="2026-12-03T11:00:00+00:00")))
    merged = merge.merge_reports([("a/report.json", a), ("b/report.json", b)])
    assert set(merged["hosts"]) == set(valid["hosts"])
    lines = merge.describe(merged)
    for line in lines:
        no_controls(line, "merge.describe")
    assert any("\\u202e" in line for line in lines)  # the duplicated hosts, named with their bidi control shown
    texts = writer.render_all(merged)
    html_page(texts["html"], "merged report.html")
    no_controls(texts["junit"], "merged junit.xml")
    ET.fromstring(texts["junit"].encode("utf-8"))
    promtool_check(texts["prometheus"])
    parse(texts["prometheus"])
    assert json.loads(texts["json"])["hosts"] == merged["hosts"]  # report.json keeps every value exactly


def test_report_merge_command(valid, tmp_path, capsys):
    a = writer.write_all(dict(valid, run=dict(valid["run"], id="a")), tmp_path / "a", stamp="20261203T100000Z")
    b = writer.write_all(_fixed(valid), tmp_path / "b", stamp="20261203T110000Z")
    out = tmp_path / "out"
    code = cli.main(["report", "merge", str(a["json"]), str(b["json"]), "-o", str(out)])
    assert code == exits.EXIT_HOSTS  # the unreachable host
    captured = capsys.readouterr()
    for stream in (captured.out, captured.err):
        no_controls(stream, "gpufleet report merge")
        no_forged_lines(stream, "gpufleet report merge")
    assert "\\u202e" in captured.out
    latest = out / writer.LATEST
    html_page((latest / writer.FILES["html"]).read_text(encoding="utf-8"), "merged report.html")
    junit_xml = (latest / writer.FILES["junit"]).read_text(encoding="utf-8")
    no_controls(junit_xml, "merged junit.xml")
    ET.fromstring(junit_xml.encode("utf-8"))
    prom = (latest / writer.FILES["prometheus"]).read_text(encoding="utf-8")
    promtool_check(prom)
    assert {labels["host"] for labels, _ in parse(prom)["gpufleet_host_up"]["samples"]} == set(valid["hosts"])


def test_merge_refusals_name_hosts_and_digests_escaped():
    """A host's policy digest is the host's to say: a refusal that quotes it (and the host) prints it escaped."""
    a = hostile_report(down=False, digest="sha256:aa" + CLEAR + "\nFORGED")
    b = hostile_report(down=False, digest="sha256:bb" + RLO)
    b["run"]["id"] = "other"
    with pytest.raises(merge.MergeError) as err:
        merge.merge_reports([("a", a), ("b", b)])
    message = str(err.value)
    no_controls(message, "merge refusal")
    assert "\n" not in message
    assert "\\x1b[2J\\nFORGED" in message and "\\u202e" in message
