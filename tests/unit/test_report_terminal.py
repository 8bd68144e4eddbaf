"""Terminal rendering: the fixed-width matrix, failing findings with observed -> expected, totals."""

from __future__ import annotations

import json
import re

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.terminal import CELL_WIDTH, clean, render_terminal
from report_fixtures import load, one_host, warn_skip_error

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def text(sample):
    return render_terminal(sample)


def _table(text):
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    end = lines.index("", start)
    return lines[start], lines[start + 2 : end]


def test_matrix_is_fixed_width(text):
    header, rows = _table(text)
    assert header.split() == ["HOST", "STATUS"] + [a.upper() for a in schema.AREAS]
    columns = [header.index(a.upper()) for a in schema.AREAS]
    assert len({b - a for a, b in zip(columns, columns[1:], strict=False)}) == 1  # equal area columns
    # worst first: the hosts not audited (failed before unreachable), then by failing findings, the healthy last
    assert [r.split()[0] for r in rows] == ["fra-a100-02", "sg-l40s-03", "sg-a100-01", "iad-h100-03"]
    a100 = rows[2]
    cells = [a100[c : c + CELL_WIDTH].strip() for c in columns]
    assert cells == ["CRIT (4)", "ok", "ok", "HIGH (3)", "CRIT (3)", "warn/med"]
    assert [rows[3][c : c + CELL_WIDTH].strip() for c in columns] == ["ok"] * 6
    assert rows[1].split()[1] == "unreachable" and rows[0].split()[1] == "failed"
    assert [rows[1][c : c + CELL_WIDTH].strip() for c in columns] == ["--"] * 6
    assert [rows[0][c : c + CELL_WIDTH].strip() for c in columns] == ["--"] * 6


def test_warn_only_cell():
    report = warn_skip_error()
    header, rows = _table(render_terminal(report))
    assert rows[0][header.index("CPU") :].split()[:2] == ["warn/med", "(2)"]
    assert rows[0][header.index("HEALTH") :].split()[0] == "ERROR"
    assert rows[0][header.index("MEMORY") :].split()[0] == "skip"
    assert rows[0][header.index("POWER") :].split()[0] == "-"


def test_failing_findings_with_observed_and_expected(text):
    block = text[text.index("\nsg-a100-01  (") + 1 :]
    block = block[: block.index("\n\n")]
    heads = [line.split()[:3] for line in block.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert heads == [
        ["CRIT", "fail", "GPU-MEM-001"],
        ["CRIT", "fail", "SW-FM-001"],
        ["CRIT", "fail", "SW-KMOD-001"],
        ["HIGH", "fail", "GPU-PWR-001"],
        ["HIGH", "fail", "GPU-PWR-002"],
        ["HIGH", "fail", "GPU-PWR-003"],
        ["HIGH", "fail", "HOST-MEM-001"],
        ["HIGH", "fail", "SW-CUDA-001"],
        ["MED", "fail", "HOST-MEM-002"],
        ["MED", "fail", "HOST-MEM-003"],
        ["MED", "warn", "HOST-HLT-002"],
    ]  # worst first; passing rules are not listed
    assert "driver 535.104.05, fabricmanager 535.86.10 \u2192 equal" in block  # words, not JSON
    assert "60 \u2192 <= 10" in block
    assert "fix: role gpu_runtime, tag GPU-PWR-002" not in block  # said once, in the rules' part
    assert "     fix: role gpu_runtime, tag GPU-PWR-002" in text
    assert "site ap_southeast, 8 x NVIDIA A100-SXM4-80GB, driver 535.104.05" in block
    assert "iad-h100-03  (" not in text  # a healthy host has no block


def test_down_hosts_and_totals(text):
    assert "  UNREACHABLE: Failed to connect to the host via ssh" in text
    assert "  AUDIT FAILED: Timeout (12s) waiting for privilege escalation prompt:" in text
    tail = text.rstrip("\n").splitlines()[-3:]
    assert tail == [
        "hosts: 4 (2 ok, 1 failed, 1 unreachable)",
        "findings: 11 (3 critical, 5 high, 3 medium, 0 low, 0 info)",
        "checks: 54 pass, 10 fail, 1 warn, 1 skip, 0 error",
    ]


def test_no_colour_by_default_and_colour_on_request(sample, text):
    assert "\x1b" not in text
    coloured = render_terminal(sample, color=True)
    assert "\x1b[1;97;41mCRIT (4)\x1b[0m" in coloured
    assert ANSI.sub("", coloured) == text  # colour changes nothing but the escapes


def test_long_values_wrap_instead_of_being_cut():
    finding = {
        "rule": "A-1",
        "area": "cpu",
        "status": "fail",
        "severity": "high",
        "observed": "x" * 250,
        "expected": list(range(20)),
    }
    out = render_terminal(one_host(finding))
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" " * 13 + "x"))
    block = lines[start : start + 4]
    assert all(len(line) <= 13 + 100 for line in block)
    assert "".join(line.strip() for line in block[:3]) == "x" * 250  # all of it, on three lines
    assert block[3].strip() == "\u2192 " + ", ".join(str(n) for n in range(20))  # a list in words
    assert "\u2026" not in out


def test_huge_values_stop_after_a_few_lines():
    finding = {"rule": "A-1", "area": "cpu", "status": "fail", "severity": "high", "observed": "y" * 5000}
    out = render_terminal(one_host(finding))
    ys = [line for line in out.splitlines() if line.strip().startswith(("y", "\u2026"))]
    assert len(ys) == 6
    assert ys[-1].strip() == "\u2026 4500 more characters (report.json has the whole value)"


def _finding_block(out, host, rule):
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith(host + "  (")))
    i = next(i for i in range(start, len(lines)) if rule in lines[i])
    end = next((j for j in range(i + 1, len(lines)) if not lines[j].startswith(" " * 13)), len(lines))
    return lines[i + 1 : end]


def test_the_failing_gpu_of_eight_comes_first():
    """GPU 3 of eight is named on the line after the message, not cut off at the end of a long value."""
    out = render_terminal(load("statuses-v1.json"))
    assert "  HIGH fail  GPU-PWR-002  GPU(s) 3: power limit below the default" in out.splitlines()
    block = [line.strip() for line in _finding_block(out, "sg-h100-02", "GPU-PWR-002")]
    assert block[:3] == [
        "GPU 3: default_limit_w 700, limit_w 450",
        "(7 other GPUs not flagged: 0\u20132, 4\u20137)",
        "\u2192 >= 100.0% of the default limit",
    ]
    coloured = render_terminal(load("statuses-v1.json"), color=True)
    assert "\x1b[1;97;41mGPU 3\x1b[0m: " in coloured


def test_the_failing_nic_comes_first_with_its_expected_value():
    out = render_terminal(load("statuses-v1.json"))
    block = [line.strip() for line in _finding_block(out, "sg-h100-02", "NET-MTU-001")]
    assert block[0:3] == [
        "ens2f0np0: 1500",
        "(3 other NICs not flagged: ens1f0np0, ens3f0np0, ens4f0np0)",
        "\u2192 ens2f0np0: == 9000 (network.mtu)",
    ]


def test_every_gpu_failing_with_one_value_is_one_line(text):
    block = text[text.index("fail  GPU-PWR-002") :]
    assert block.splitlines()[1].strip() == "GPUs 0\u20137: default_limit_w 400, limit_w 250"


def test_incomplete_banner(sample):
    assert "INCOMPLETE RUN" in render_terminal(dict(sample, run=dict(sample["run"], complete=False)))
    assert "INCOMPLETE RUN" not in render_terminal(sample)


def test_hostile_strings_cannot_inject_escapes_or_lines():
    hostile = load("hostile-v1.json")
    for color in (False, True):
        out = render_terminal(hostile, color=color)
        stripped = ANSI.sub("", out) if color else out
        assert "\x1b" not in stripped and "\x00" not in out and "\x07" not in out
        assert "esc\\x1b[31mRED\\x1b[0m" in out
        assert not any(line.startswith("# HELP") or line.startswith("line two") for line in out.splitlines())
        assert 'evil"host\\nname{{ 7*7 }}' in out


def test_clean():
    assert clean("a\nb\tc\x1b[0m\x7f\u2028") == "a\\nb\\tc\\x1b[0m\\x7f\\u2028"
    assert clean(None) == ""


def test_host_without_driver_says_so(sample):
    report = json.loads(json.dumps(sample))
    host = report["hosts"]["sg-a100-01"]  # a host with findings gets a detail block
    host["facts"]["gpu"] = {
        "nvml": {"available": False, "error": "NVML could not be initialised: DriverNotLoaded"},
        "driver": {},
        "gpus": [],
        "gpu_count": 0,
    }
    out = render_terminal(report)
    assert (
        "sg-a100-01  (site ap_southeast, no NVIDIA driver found (NVML could not be initialised: DriverNotLoaded)" in out
    )
