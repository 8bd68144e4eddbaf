"""The terminal report of a 60-host fleet (issue 29 point 5): a per-rule rollup before the hosts, host cards worst
first in the matrix's order, a rule's text and sources once, values in words, and every line within COLUMNS."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import fleetview
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.terminal import render_summary, render_terminal
from report_fixtures import load

URL = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceCommands.html#group__nvmlDeviceCommands_1g_power"
CATALOG = [
    {
        "id": "GPU-PWR-002",
        "area": "power",
        "severity": "high",
        "title": "Power limit below policy",
        "rationale": "A capped GPU runs slower.",
        "references": [{"title": "NVML API reference: device commands", "url": URL}],
        "fix": {"role": "gpu_runtime", "tag": "GPU-PWR-002", "manual": None},
    },
    {
        "id": "SW-KMOD-001",
        "area": "software",
        "severity": "critical",
        "title": "Kernel module and driver versions differ",
        "rationale": "x",
        "fix": {"role": "nvidia_driver", "tag": "SW-KMOD-001", "manual": None},
    },
    {"id": "HOST-MEM-002", "area": "memory", "severity": "medium", "title": "vm.swappiness too high", "rationale": "x"},
]


def _finding(rule, status, severity, area, message="", observed=None, expected=None, items=None):
    entry = next(e for e in CATALOG if e["id"] == rule)
    return {
        "rule": rule,
        "status": status,
        "severity": severity,
        "area": area,
        "title": entry["title"],
        "message": message,
        "observed": observed,
        "expected": expected,
        "items": items or [],
        "fix": entry.get("fix") or {"role": None, "tag": None, "manual": None},
    }


def fleet60() -> dict:
    """60 hosts: GPU-PWR-002 fails on 8 (gpu-011..gpu-018), SW-KMOD-001 on gpu-050 (critical), swappiness warns on
    gpu-020 and gpu-021, gpu-059 unreachable, the rest pass."""
    hosts = {}
    for i in range(1, 61):
        name = f"gpu-{i:03d}"
        findings = [
            _finding("GPU-PWR-002", "pass", "high", "power"),
            _finding("SW-KMOD-001", "pass", "critical", "software"),
            _finding("HOST-MEM-002", "pass", "medium", "memory"),
        ]
        if 11 <= i <= 18:
            findings[0] = _finding(
                "GPU-PWR-002",
                "fail",
                "high",
                "power",
                "GPU(s) [2, 3]: power limit below 100.0% of the default",
                {str(g): {"limit_w": 450.0 if g in (2, 3) else 700.0, "default_limit_w": 700.0} for g in range(8)},
                ">= 100.0% of the default limit",
                [{"gpu": 2, "limit_w": 450.0}, {"gpu": 3, "limit_w": 450.0}],
            )
        if i == 50:
            findings[1] = _finding(
                "SW-KMOD-001",
                "fail",
                "critical",
                "software",
                "CUDA toolkit(s) ['12.4.1', '12.5.0'] too new",
                {"driver": "535.104.05", "kernel_module": "535.86.10"},
                "equal",
            )
        if i in (20, 21):
            findings[2] = _finding("HOST-MEM-002", "warn", "medium", "memory", "vm.swappiness is 30", 30, "<= 10")
        hosts[name] = {"status": "ok", "site": "eu", "message": None, "facts": {}, "findings": findings}
    hosts["gpu-059"] = {"status": "unreachable", "message": "ssh: connection timed out", "findings": []}
    return {"run": {"id": "r1", "complete": True}, "catalog": CATALOG, "hosts": hosts}


@pytest.fixture(scope="module")
def text():
    return render_terminal(fleet60())


def _matrix_names(text):
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    end = lines.index("", start)
    return [line.split()[0] for line in lines[start + 2 : end]]


def test_a_rule_rollup_names_the_hosts_before_the_cards(text):
    lines = text.splitlines()
    pwr = next(line for line in lines if "GPU-PWR-002" in line and "fails on" in line)
    assert re.fullmatch(r"HIGH GPU-PWR-002  fails on 8 of 59 hosts: gpu-011, gpu-012, .*, \+\d", pwr), pwr
    assert "MED  HOST-MEM-002 warns on 2 of 59 hosts: gpu-020, gpu-021" in lines
    rules = [line.split()[1] for line in lines if re.match(r"(CRIT|HIGH|MED|LOW|INFO) +\S+ +(fails|warns) on", line)]
    assert rules == ["SW-KMOD-001", "GPU-PWR-002", "HOST-MEM-002"]  # worst first
    first_card = lines.index(next(line for line in lines if line.startswith("gpu-011  (")))
    assert lines.index(pwr) < first_card


def test_rule_text_and_sources_once_per_rule_not_per_host(text):
    assert text.count("Power limit below policy") == 1
    assert text.count("NVML API reference: device commands") == 1
    assert text.count(URL) == 1
    assert text.count("fix: role gpu_runtime, tag GPU-PWR-002") == 1
    assert text.count("GPU-PWR-002") == 2 + 8  # the rollup (its line, its fix) and each failing host's card


def test_cards_come_worst_first_in_the_matrix_order(text):
    hosts = fleet60()["hosts"]
    matrix = _matrix_names(text)
    assert matrix[:2] == ["gpu-059", "gpu-050"]  # not audited, then the critical failure
    assert matrix[2:10] == [f"gpu-{i:03d}" for i in range(11, 19)]
    assert matrix[10:12] == ["gpu-020", "gpu-021"] and matrix[-1] == "gpu-060"
    cards = [line.split()[0] for line in text.splitlines() if line.split()[:1] and line.split()[0] in hosts]
    cards = cards[len(matrix) :]  # the lines after the matrix rows: the cards' headings
    assert cards == [n for n in matrix if n in cards] and len(cards) == 12
    assert fleetview.host_order(hosts) == matrix


def test_values_and_messages_are_words_not_json_or_python_lists(text):
    card = text[text.index("\ngpu-011  (") :]
    card = card[: card.index("\n\n")]
    assert "GPU(s) 2\u20133: power limit below" in card
    assert "GPUs 2\u20133: limit_w 450, default_limit_w 700" in card
    kmod = text[text.index("\ngpu-050  (") :]
    assert "CUDA toolkit(s) 12.4.1, 12.5.0 too new" in kmod
    assert "driver 535.104.05, kernel_module 535.86.10 \u2192 equal" in kmod
    cards = text[text.index("\ngpu-059\n") :]
    assert not re.search(r"[{}\[\]\"']", cards), re.search(r".*[{}\[\]\"'].*", cards).group(0)


def test_value_text():
    assert fleetview.value_text({"a": [1, 2], "b": {"c": None}, "d": 2.0}) == "a (1, 2), b (c none), d 2"
    assert fleetview.value_text([{"a": 1}, {"a": 2}]) == "(a 1); (a 2)"
    assert fleetview.value_text([]) == "none" and fleetview.value_text(True) == "true"
    runs = fleetview.value_text({"gpus_full": [0, 1, 2, 3, 5], "n": [2, 1, 0]})
    assert runs == "gpus_full (0\u20133, 5), n (2, 1, 0)"
    assert fleetview.value_text([0, 1, 2, 3]) == "0, 1, 2, 3"  # alone: a list, not a range (0 to 3)
    assert fleetview.value_text({"gpus": [1, 2]}) == "gpus (1, 2)"
    lines = fleetview.value_lines({"gpus_full": [0, 1, 2, 3], "pct": 98.0, "x": {"a": [1]}})
    assert lines == ["gpus_full: 0\u20133", "pct: 98", "x: a 1"] and fleetview.value_lines([1]) == ["1"]
    assert fleetview.message_text("GPU(s) [0, 1, 2, 5] and ['x', \"y\"]") == "GPU(s) 0\u20132, 5 and x, y"


@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("report", ["fleet60", "sample-v1.json", "statuses-v1.json"])
def test_every_line_fits_the_terminal(report, columns):
    """Matrix, header, rule texts, messages and values wrap or shorten to COLUMNS; a URL alone on its line is
    never broken (it would not open)."""
    doc = fleet60() if report == "fleet60" else load(report)
    out = render_terminal(doc, width=columns)
    long = [line for line in out.splitlines() if len(line) > columns and not line.strip().startswith("https://")]
    assert not long, long
    assert URL in out or report != "fleet60"
    assert "HOST" in out and "MEMORY" in out and "SOFTWARE" in out


def test_a_narrow_matrix_keeps_every_column():
    out = render_terminal(load("sample-v1.json"), width=80)
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("HOST "))
    assert header.split() == ["HOST", "STATUS", "MEMORY", "CPU", "NETWORK", "POWER", "SOFTWARE", "HEALTH"]
    row = next(line for line in lines if line.startswith("sg-a100-01 "))
    assert row.split()[2:] == ["CRIT", "4", "ok", "ok", "HIGH", "3", "CRIT", "3", "w/med"]


def test_summary_alone():
    assert render_summary(load("sample-v1.json")).splitlines() == [
        "hosts: 4 (2 ok, 1 failed, 1 unreachable)",
        "findings: 11 (3 critical, 5 high, 3 medium, 0 low, 0 info)",
        "checks: 54 pass, 10 fail, 1 warn, 1 skip, 0 error",
    ]


def test_a_long_status_or_rule_from_a_host_does_not_widen_the_matrix():
    doc = fleet60()
    doc["hosts"]["gpu-001"]["status"] = "s" * 300
    doc["hosts"]["gpu-002"]["findings"].append(
        {"rule": "R-" + "X" * 200, "status": "fail", "severity": "bogus", "area": "cpu", "observed": 1, "expected": 2}
    )
    for width in (None, 80):
        lines = render_terminal(doc, color=True, width=width).splitlines()
        header = next(line for line in lines if line.startswith("HOST "))
        assert len(header) <= 9 + 11 + 2 + 6 * 14
        assert any(line.startswith("BOGUS R-" + "X" * 200 + " fails on 1 of 1 host: gpu-002") for line in lines)
