"""Terminal rendering: the fixed-width matrix, failing findings with observed -> expected, totals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.terminal import CELL_WIDTH, clean, render_terminal

REPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "reports"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load(name):
    return json.loads((REPORTS / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def sample():
    return load("sample-v1.json")


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
    assert [r.split()[0] for r in rows] == ["fra-a100-02", "iad-h100-03", "sg-a100-01", "sg-l40s-03"]
    a100 = rows[2]
    cells = [a100[c : c + CELL_WIDTH].strip() for c in columns]
    assert cells == ["CRIT (4)", "ok", "ok", "HIGH (3)", "CRIT (3)", "warn/med"]
    assert [rows[1][c : c + CELL_WIDTH].strip() for c in columns] == ["ok"] * 6
    assert rows[3].split()[1] == "unreachable" and rows[0].split()[1] == "failed"
    assert [rows[3][c : c + CELL_WIDTH].strip() for c in columns] == ["--"] * 6
    assert [rows[0][c : c + CELL_WIDTH].strip() for c in columns] == ["--"] * 6


def test_warn_only_cell():
    report = {
        "hosts": {
            "h": {
                "status": "ok",
                "findings": [
                    {"rule": "A-1", "area": "cpu", "status": "warn", "severity": "medium"},
                    {"rule": "A-2", "area": "cpu", "status": "warn", "severity": "low"},
                    {"rule": "A-3", "area": "memory", "status": "skip", "severity": "low"},
                    {"rule": "A-4", "area": "health", "status": "error", "severity": "low"},
                ],
            }
        }
    }
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
    assert '{"driver": "535.104.05", "fabricmanager": "535.86.10"} \u2192 equal' in block
    assert "60 \u2192 <= 10" in block
    assert "fix: role gpu_runtime, tag GPU-PWR-002" in block
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


def test_long_values_are_cut():
    finding = {
        "rule": "A-1",
        "area": "cpu",
        "status": "fail",
        "severity": "high",
        "observed": "x" * 500,
        "expected": list(range(200)),
    }
    out = render_terminal({"hosts": {"h": {"status": "ok", "findings": [finding]}}})
    line = next(line for line in out.splitlines() if "\u2192" in line)
    assert len(line) < 13 + 2 * 100 + 3 + 1
    assert "\u2026" in line


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
