"""The pure parts of the benchmarks (bench/benchlib): the one table printer, iperf3's JSON as the measurements read
it (from samples recorded with iperf3 3.12 on loopback in a namespace: bench/fixtures/), the reports printed from
every results file kept under bench/results/, and the command line of bench/wan.py. No network, no root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
FIXTURES = BENCH / "fixtures"
sys.path.insert(0, str(BENCH))

from benchlib import ansible_link, coexist, goodput, iperf3  # noqa: E402
from benchlib.tables import fmt, fmt_count, fmt_ratio, markdown_table, pct  # noqa: E402


def results(benchmark: str) -> list[Path]:
    found = []
    for path in sorted((BENCH / "results").glob("*.json")):
        data = json.loads(path.read_text())
        if data.get("benchmark", "audit_scale" if "sizes" in data else None) == benchmark:
            found.append(path)
    assert found, f"no {benchmark} results under bench/results"
    return found


def tables_in(text: str) -> list[list[str]]:
    """The Markdown tables in a text: runs of lines that start with '|'."""
    out: list[list[str]] = []
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            out.append(block)
            block = []
    return out


def assert_well_formed(table: list[str]) -> None:
    cols = table[0].count(" | ") + 1
    assert set(table[1].replace("|", "").replace("---:", "").replace("---", "")) == set(), table[1]
    assert table[1].count("|") == cols + 1
    for row in table[2:]:
        assert row.startswith("| ") and row.endswith(" |")
        assert row.count(" | ") + 1 == cols, row


# ------------------------------------------------------------------------------------------- the table printer
def test_markdown_table_layout():
    text = markdown_table(["config", "0 % loss"], "lr", [["stock", "12.5"], ["gpufleet", 900]])
    assert text.splitlines() == [
        "| config | 0 % loss |",
        "|---|---:|",
        "| stock | 12.5 |",
        "| gpufleet | 900 |",
    ]


def test_markdown_table_without_rows_is_header_only():
    assert markdown_table(["a", "b", "c"], "lrl", []) == "| a | b | c |\n|---|---:|---|"


@pytest.mark.parametrize(
    ("header", "align", "rows"),
    [
        (["a", "b"], "l", []),  # one alignment letter short
        (["a", "b"], "lc", []),  # no such alignment
        (["a", "b"], "lr", [["1"]]),  # a row one cell short
        (["a", "b"], "lr", [["1", "2", "3"]]),  # a row one cell long
    ],
)
def test_markdown_table_refuses_a_misaligned_table(header, align, rows):
    with pytest.raises(ValueError):
        markdown_table(header, align, rows)


def test_cell_formats():
    assert [fmt(v) for v in (None, 0.123, 4.56, 956.4, 1234.5)] == ["–", "0.12", "4.6", "956", "1234"]
    assert [fmt_ratio(v) for v in (None, 1.25, 47.4)] == ["–", "1.2×", "47×"]
    assert [fmt_count(v) for v in (None, 26698, 3.6)] == ["–", "26,698", "4"]
    assert [pct(x) for x in (0, 0.001, 0.01)] == ["0 %", "0.1 %", "1 %"]


# --------------------------------------------------------------------------------------------- iperf3's JSON
def test_iperf3_parse_reads_the_client_summary():
    res = iperf3.parse((FIXTURES / "iperf3-client-P1.json").read_text())
    assert res["mbps"] == pytest.approx(8535.505, abs=0.001)  # the receiver's sum_received, not the sender's
    assert res["sent_mbps"] == pytest.approx(8538.846, abs=0.001)
    assert res["retransmits"] == 12
    assert res["cc"] == "bbr"
    assert res["seconds"] == pytest.approx(2.001083)
    assert res["sent_mbps_per_s"] == pytest.approx([13355.370, 3706.859], abs=0.001)


def test_iperf3_parse_reports_iperf3s_own_error():
    res = iperf3.parse((FIXTURES / "iperf3-client-refused.json").read_text(), "ignored")
    assert res == {"error": "unable to connect to server: Connection refused"}


def test_iperf3_parse_without_json_keeps_the_end_of_what_was_printed():
    assert iperf3.parse("", "Cannot open network namespace: No such file") == {
        "error": "Cannot open network namespace: No such file"
    }
    assert iperf3.parse("x" * 600)["error"] == "x" * 500
    assert iperf3.parse("") == {"error": "no output"}


def test_second_half_is_the_mean_of_the_later_intervals():
    assert iperf3.second_half([100.0, 10.0, 20.0, 30.0]) == 25.0
    assert iperf3.second_half([100.0, 10.0, 40.0]) == 25.0  # odd count: the middle interval belongs to the 2nd
    assert iperf3.second_half([]) is None
    assert iperf3.second_half(None) is None


# ------------------------------------------------------------------- reports from the results kept in bench/
@pytest.mark.parametrize(
    ("benchmark", "report", "columns"),
    [("wan", goodput.report, None), ("wan-ansible", ansible_link.report, 9), ("wan-coexist", coexist.report, 11)],
)
def test_every_results_file_prints_well_formed_tables(benchmark, report, columns):
    for path in results(benchmark):
        result = json.loads(path.read_text())
        text = report(result)
        tables = tables_in(text)
        assert len(tables) == 1, path
        for table in tables:
            assert_well_formed(table)
            if columns:
                assert table[0].count(" | ") + 1 == columns
        if benchmark == "wan":  # a row per config and per ratio, a column per loss rate after the config's
            assert len(tables[0]) == 2 + len(result["medians_mbps"]) + len(result["ratios"])
            assert tables[0][0].count(" | ") == len(result["params"]["losses"])
        if benchmark == "wan-coexist":
            assert len(tables[0]) == 2 + len(result["medians"])
        assert report({}) == ""


def test_coexist_table_matches_docs_benchmarks():
    """docs/benchmarks.md quotes this table for wan-coexist-2026-12-01.json: the printer must give the same rows."""
    path = BENCH / "results" / "wan-coexist-2026-12-01.json"
    rows = tables_in(coexist.readme_table(json.loads(path.read_text())))[0]
    doc = (REPO / "docs" / "benchmarks.md").read_text()
    for row in rows:
        assert row in doc, row


def test_audit_scale_table_from_its_results():
    import audit_scale

    for path in results("audit_scale"):
        text = audit_scale.table(json.loads(path.read_text()))
        tables = tables_in(text)
        data = json.loads(path.read_text())
        # + controller CPU per host (from --profile) and the report build (issue 18), when the results have them
        extra = [
            *(
                ["| N | controller CPU per host | ms | goal |"]
                if any("controller_cpu_per_host_s" in s for s in data["sizes"].values())
                else []
            ),
            *(["| N | build s | render+write s | ms/host |"] if data.get("report_build") else []),
        ]
        assert len(tables) == 2 + len(extra), path
        for table in tables:
            assert_well_formed(table)
        assert tables[0][0].startswith("| N | contender | runs | wall s |")
        assert tables[1][0] == "| N | ratio | wall | CPU | target |"
        for table, head in zip(tables[2:], extra, strict=True):
            assert table[0].startswith(head), path


# --------------------------------------------------------------------------------------- bench/wan.py's CLI
OPTIONS = {
    "iperf": ["--rtt-ms", "--rate-mbit", "--buffer-ms", "--runs", "--emu-rt", "--out", "--duration", "--losses"]
    + ["--streams", "--configs", "--path-mtu", "--role-var"],
    "ansible": ["--rtt-ms", "--runs", "--out", "--loss", "--sample-seconds", "--workloads"]
    + ["--discover-interpreter", "--no-rtt0"],
    "coexist": ["--rtt-ms", "--buffer-ms", "--runs", "--out", "--duration", "--losses", "--cases", "--local-mbit"],
}


@pytest.mark.parametrize("cwd", [REPO, BENCH])
def test_wan_py_command_line_from_the_repo_and_from_bench(cwd):
    script = "bench/wan.py" if cwd == REPO else "wan.py"
    top = subprocess.run([sys.executable, script, "--help"], cwd=cwd, capture_output=True, text=True, check=True)
    assert "{iperf,ansible,coexist}" in top.stdout
    helps = {}
    for cmd, options in OPTIONS.items():
        out = subprocess.run([sys.executable, script, cmd, "--help"], cwd=cwd, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        helps[cmd] = " ".join(out.stdout.split())
        for option in options:
            assert option in helps[cmd], (cmd, option)
    assert "default stock,tuned,gpufleet" in helps["iperf"]
    assert "default audit,ping,tune-check" in helps["ansible"]
    assert "default B-alone,A-alone,both-cubic,host-wide" in helps["coexist"] and "also A+B," in helps["coexist"]


def test_coexist_table_prints_a_results_file():
    path = BENCH / "results" / "wan-coexist-2026-12-01-two-flows.json"
    out = subprocess.run(
        [sys.executable, "bench/coexist_table.py", str(path)], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith(f"### {path}\n\n`bench/wan.py coexist --cases")
    assert_well_formed(tables_in(out.stdout)[0])


@pytest.mark.parametrize(
    "arg, says",
    [
        ("no-such-results.json", "no-such-results.json: not a readable results file"),
        ("bench/results/wan-2026-11-30.json", "its benchmark is not wan-coexist"),
        ("--help", "usage: coexist_table.py"),
    ],
)
def test_coexist_table_bad_input_is_a_usage_message(arg, says):
    out = subprocess.run([sys.executable, "bench/coexist_table.py", arg], cwd=REPO, capture_output=True, text=True)
    assert "Traceback" not in out.stderr, out.stderr
    assert says in out.stdout + out.stderr
    assert out.returncode == (0 if arg == "--help" else 2)
