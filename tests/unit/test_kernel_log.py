"""Xid and PCIe AER parsing of kernel log lines (plugins/module_utils/kernel_log.py)."""

import calendar

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import kernel_log as kl
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import SEVERITIES

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "line, code, pci",
    [
        (XID_79, 79, "0000:3b:00"),
        ("[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.", 79, "0000:03:00"),
        ("[  269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff", 3, "0000:01:00"),
        (
            "May 31 09:35:42 gpu01 kernel: [ 812.1] NVRM: Xid (PCI:0000:DB:00): 48, pid='<unknown>', name=<unknown>, "
            "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6.",
            48,
            "0000:db:00",
        ),
        (
            "2024-05-31T09:35:42,123456+00:00 NVRM: Xid (PCI:0000:0b:00): 154, GPU recovery action changed "
            "from 0x0 (None) to 0x1 (GPU Reset Required)",
            154,
            "0000:0b:00",
        ),
        (
            "2024-05-31T09:35:42+0000 gpu01 kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=77, Graphics SM Warp",
            13,
            "0000:18:00",
        ),
        ("NVRM: Xid (): 62, Internal micro-controller halt", 62, None),
    ],
)
def test_parse_xid_forms(line, code, pci):
    assert kl.parse_xid(line) == {"code": code, "pci": pci}


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024",
        "NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
        "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
        "nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
    ],
)
def test_non_xid_lines_are_ignored(line):
    assert kl.parse_xid(line) is None


def test_required_codes_are_in_the_table_with_valid_severities():
    required = {13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140, 143, 154}
    assert required <= set(kl.XID_CODES)
    for code, (meaning, severity) in kl.XID_CODES.items():
        assert meaning and isinstance(meaning, str), code
        assert severity in SEVERITIES, code  # the one list (policy.py)


@pytest.mark.parametrize(
    "code, severity, word",
    [
        (48, "critical", "Double Bit"),
        (79, "critical", "fallen off the bus"),
        (95, "critical", "Uncontained"),
        (64, "high", "failure"),
        (74, "high", "NVLink"),
        (13, "low", "Graphics Engine Exception"),
        (31, "low", "page fault"),
        (43, "low", "stopped processing"),
        (45, "low", "Preemptive cleanup"),
        (94, "high", "Contained ECC"),
        (63, "medium", "row remapping"),
        (92, "medium", "single-bit ECC"),
        (119, "high", "GSP RPC Timeout"),
    ],
)
def test_xid_meaning_and_severity(code, severity, word):
    meaning, got = kl.xid_info(code)
    assert got == severity
    assert word in meaning


def test_unknown_xid_points_to_the_catalog():
    meaning, severity = kl.xid_info(9999)
    assert "9999" in meaning and "catalog" in meaning
    assert severity == kl.UNKNOWN_SEVERITY


@pytest.mark.parametrize(
    "line, expected",
    [
        ("pcieport 0000:00:03.1: AER: Corrected error received: 0000:3b:00.0", ("header", "corrected")),
        ("pcieport 0000:00:03.1: AER: Multiple Corrected error received: 0000:3b:00.0", ("header", "corrected")),
        ("pcieport 0000:00:03.1: AER: Uncorrected (Non-Fatal) error received: 0000:3b:00.0", ("header", "uncorrected")),
        ("pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error received: 0000:3b:00.0", ("header", "fatal")),
        ("pcieport 0000:00:1c.5: AER: Correctable error message received from 0000:03:00.0", ("header", "corrected")),
        (
            "pcieport 0000:00:1c.5: AER: Uncorrectable (Fatal) error message received from 0000:03:00.0",
            ("header", "fatal"),
        ),
        ("pcieport 0000:00:03.0: AER: Corrected error received: id=0018", ("header", "corrected")),
        (
            "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
            ("detail", "corrected"),
        ),
        (
            "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
            "(Requester ID)",
            ("detail", "uncorrected"),
        ),
        (
            "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
            "(Receiver ID)",
            ("detail", "fatal"),
        ),
        ("pcieport 0000:17:01.0: AER: enabled with IRQ 122", None),
        ("nvidia 0000:3b:00.0:    [ 0] RxErr", None),
    ],
)
def test_parse_aer(line, expected):
    assert kl.parse_aer(line) == expected


def test_scan_groups_xids_by_code():
    lines = [
        "kernel: something else",
        XID_79,
        "NVRM: Xid (PCI:0000:5d:00): 48, pid=9, name=train, DBE first",
        "NVRM: Xid (PCI:0000:18:00): 48, pid=9, name=train, DBE second",
        "NVRM: Xid (PCI:0000:5d:00): 48, pid=10, name=train, DBE third",
        "NVRM: Xid (PCI:0000:18:00): 9999, something new",
    ]
    found = kl.scan(lines)
    assert [x["code"] for x in found["xid"]] == [48, 79, 9999]
    dbe = found["xid"][0]
    assert dbe["count"] == 3
    assert dbe["pci"] == ["0000:18:00", "0000:5d:00"]
    assert dbe["last"].endswith("DBE third")
    assert (dbe["meaning"], dbe["severity"]) == kl.XID_CODES[48]
    assert found["xid"][1] == {
        "code": 79,
        "meaning": "GPU has fallen off the bus",
        "severity": "critical",
        "count": 1,
        "pci": ["0000:3b:00"],
        "last": XID_79,
        "last_time": None,
    }
    assert found["xid"][2]["severity"] == kl.UNKNOWN_SEVERITY
    assert found["aer"] == {"corrected": 0, "uncorrected": 0, "fatal": 0, "last": None}


def test_scan_truncates_last_to_300_characters():
    line = "NVRM: Xid (PCI:0000:3b:00): 13, " + "x" * 1000
    last = kl.scan([line])["xid"][0]["last"]
    assert len(last) == 300 and last.endswith("...") and last.startswith("NVRM: Xid")


def test_aer_header_and_its_detail_count_once():
    lines = [
        "pcieport 0000:00:03.1: AER: Corrected error received: 0000:3b:00.0",
        "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
        "nvidia 0000:3b:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
        "nvidia 0000:3b:00.0:    [ 0] RxErr",
        "pcieport 0000:00:03.1: AER: Uncorrected (Non-Fatal) error received: 0000:3b:00.0",
        "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)",
        "pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error received: 0000:3b:00.0",
        "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
    ]
    aer = kl.scan(lines)["aer"]
    assert (aer["corrected"], aer["uncorrected"], aer["fatal"]) == (1, 1, 1)
    assert aer["last"] == lines[-1]


def test_aer_detail_without_header_counts():
    # Firmware-first platforms log only the detail lines; a detail far after a header is a new error.
    detail = "pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)"
    assert kl.scan([detail, detail])["aer"]["corrected"] == 2
    header = "pcieport 0000:00:03.1: AER: Corrected error received: 0000:3b:00.0"
    filler = ["kernel: unrelated"] * (kl.AER_DETAIL_WINDOW + 1)
    assert kl.scan([header] + filler + [detail])["aer"]["corrected"] == 2
    # A detail of another class right after a header is its own error.
    fatal = "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)"
    aer = kl.scan([header, fatal])["aer"]
    assert (aer["corrected"], aer["fatal"]) == (1, 1)


def test_tail_drops_journal_markers_and_blank_lines():
    text = "-- Logs begin at Mon 2024-05-27 --\na\n\nb\n-- Boot 1234 --\nc\n-- No entries --\n"
    assert kl.tail(text, 10) == ["a", "b", "c"]
    assert kl.tail(text, 2) == ["b", "c"]
    assert kl.tail("", 5) == [] and kl.tail(None, 5) == []
    assert kl.tail("a\nb", 0) == []


@pytest.mark.parametrize(
    "line, expected",
    [
        ("2024-05-31T09:35:42,123456+00:00 NVRM: x", calendar.timegm((2024, 5, 31, 9, 35, 42)) + 0.123456),
        ("2024-05-31T09:35:42+0000 host kernel: x", calendar.timegm((2024, 5, 31, 9, 35, 42))),
        ("2024-05-31T11:35:42+02:00 host kernel: x", calendar.timegm((2024, 5, 31, 9, 35, 42))),
        ("2024-05-31T04:35:42-0500 host kernel: x", calendar.timegm((2024, 5, 31, 9, 35, 42))),
        ("2024-05-31T09:35:42Z x", calendar.timegm((2024, 5, 31, 9, 35, 42))),
        ("May 31 09:35:42 host kernel: x", None),
        ("[ 12.345] x", None),
    ],
)
def test_line_time(line, expected):
    got = kl.line_time(line)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_since_keeps_recent_and_untimed_lines():
    now = calendar.timegm((2024, 6, 1, 12, 0, 0))
    lines = [
        "2024-05-30T12:00:00+00:00 old",
        "2024-06-01T00:00:01+00:00 recent",
        "no timestamp",
        "2024-06-01T11:59:59+0000 newest",
    ]
    assert kl.since(lines, now, 12) == lines[1:]
    assert kl.since(lines, now, 1) == ["no timestamp", lines[3]]
    assert kl.since(lines, now, 0) == lines


# NVSwitch SXid lines, as the nvidia-nvswitch driver prints them (forms seen in public bug reports and the fabric
# manager user guide): one error logs a Fatal / Non-fatal line and detail lines (Severity, Data) with the same code.
SXID_FATAL = "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up"
SXID_NONFATAL = [
    "[   38.175561] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, 0x0000002b, 0x00000000, "
    "0x0000002b, 0x80005302, 0x00000000, 0x00000000, 0x00000000, 0x00000000}",
    "[   38.178720] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt",
    "[   38.180708] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine "
    "instance 00",
    "[   38.187830] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 45 Minion Link DLREQ interrupt",
]


@pytest.mark.parametrize(
    "line, expected",
    [
        (SXID_FATAL, {"code": 20034, "pci": "0000:c2:00.0", "kind": "fatal"}),
        (SXID_NONFATAL[1], {"code": 22013, "pci": "0000:04:00.0", "kind": "non-fatal"}),
        (SXID_NONFATAL[0], {"code": 22013, "pci": "0000:04:00.0", "kind": "detail"}),
        (
            "2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0}",
            {"code": 12028, "pci": "0000:84:00.0", "kind": "detail"},
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", None),
        ("nvidia-nvswitch0: nvswitch_init: probe of 0000:c2:00.0 ok", None),
    ],
)
def test_parse_sxid_forms(line, expected):
    assert kl.parse_sxid(line) == expected


def test_scan_groups_sxid_events_and_counts_detail_lines_once():
    result = kl.scan(SXID_NONFATAL + [SXID_FATAL, SXID_FATAL])
    by_code = {s["code"]: s for s in result["sxid"]}
    assert by_code[22013]["count"] == 2 and not by_code[22013]["fatal"]
    assert by_code[22013]["severity"] == "medium"
    assert by_code[20034] == {
        "code": 20034,
        "fatal": True,
        "severity": "critical",
        "count": 2,
        "pci": ["0000:c2:00.0"],
        "last": SXID_FATAL,
        "last_time": None,
    }
    # SXid lines are not Xid lines.
    assert result["xid"] == []


def test_scan_detail_lines_alone_count_as_one_error():
    result = kl.scan(["nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a}"] * 3)
    assert [(s["code"], s["count"], s["fatal"]) for s in result["sxid"]] == [(12028, 1, False)]


def test_scan_without_sxid_lines_returns_an_empty_list():
    assert kl.scan([XID_79])["sxid"] == []


def test_scan_gives_each_code_the_time_of_its_newest_line():
    """watch/drain.py tells an event it already acted on from a new one by this time (epoch seconds)."""
    old = "2026-12-03T09:15:02,000000+00:00 " + XID_79
    new = "2026-12-03T11:40:17,500000+01:00 " + XID_79
    sxid = "2026-12-03T11:43:00+00:00 nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up"
    detail = "2026-12-03T11:43:01+00:00 nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Severity 5 Engine 28"
    found = kl.scan([old, new, sxid, detail])
    assert found["xid"][0]["last_time"] == kl.line_time(new) == kl.line_time(old) + 5115.5  # 10:40:17.5Z
    assert found["sxid"][0]["last_time"] == kl.line_time(sxid)  # the error's line, not its detail line
    assert kl.scan([XID_79])["xid"][0]["last_time"] is None
