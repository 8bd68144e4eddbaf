"""What `gpufleet audit` prints for a finished run (issue 29 point 5): the terminal report fitting $COLUMNS,
--quiet (the totals only), --json (the report on stdout for scripts, everything else on stderr)."""

from __future__ import annotations

import argparse
import json

import pytest
from report_fixtures import load

from gpufleet import cli
from gpufleet.commands import audit

FILES = {"json": "/r/run/report.json", "html": "/r/run/report.html"}


def _show(tmp_path, capsys, **flags):
    args = argparse.Namespace(**{"quiet": False, "json": False, **flags})
    audit.show(load("sample-v1.json"), dict(FILES), args, tmp_path)
    return capsys.readouterr()


def test_the_report_fits_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = _show(tmp_path, capsys).out
    assert "HOST " in out and "RULES" in out and "report.json" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    monkeypatch.setenv("COLUMNS", "200")
    assert max(len(line) for line in _show(tmp_path, capsys).out.splitlines()) > 80  # the width is COLUMNS'


def test_quiet_prints_the_totals_only(tmp_path, capsys):
    got = _show(tmp_path, capsys, quiet=True)
    assert got.out.splitlines() == [
        "hosts: 4 (2 ok, 1 failed, 1 unreachable)",
        "findings: 11 (3 critical, 5 high, 3 medium, 0 low, 0 info)",
        "checks: 54 pass, 10 fail, 1 warn, 1 skip, 0 error",
    ]
    assert got.err == ""


def test_json_prints_the_report_alone_on_stdout(tmp_path, capsys):
    got = _show(tmp_path, capsys, json=True)
    assert json.loads(got.out) == load("sample-v1.json")
    assert "/r/run/report.json" in got.err and "latest" in got.err



@pytest.mark.parametrize("argv", [["audit", "--quiet", "--json"], ["audit", "-q", "--json"]])
def test_quiet_and_json_together_are_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 3
    assert "not allowed with argument" in capsys.readouterr().err
