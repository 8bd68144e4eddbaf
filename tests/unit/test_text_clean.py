"""The one cleaner of host strings (plugins/module_utils/text.py): whatever a host says comes out as one printable
line, with every control, line separator and bidi control visible as an escape, and nothing else changed."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import text
from ansible_collections.gpufleet.tuning.plugins.module_utils.text import clean
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import terminal

# What a terminal would act on, or what makes one string read as two lines or in another order.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def assert_inert(out: str) -> None:
    """One line, no character a terminal acts on (C0, DEL, C1), no separator, no surrogate, no bidi control."""
    assert len(out.splitlines()) <= 1
    bad = [c for c in out if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in BIDI + "\u2028\u2029"]
    bad += [c for c in out if 0xD800 <= ord(c) <= 0xDFFF]
    assert not bad, f"{out!r} keeps {bad!r}"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear the screen, cursor home
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # OSC 0: retitle the window, ended by BEL
        ("\x1b[1A\x1b[2K", "\\x1b[1A\\x1b[2K"),  # CSI: cursor up, erase the line above
        ("\x9b31m", "\\x9b31m"),  # C1 CSI (one byte) and NEL
        ("a\x85b", "a\\x85b"),
        ("ok\r\nFAIL GPU-HLT-002 forged", "ok\\r\\nFAIL GPU-HLT-002 forged"),  # a forged line
        ("a\tb\x7fc\x00d", "a\\tb\\x7fc\\x00d"),
        ("x\x0by\x0cz\x1c\x1d\x1e", "x\\x0by\\x0cz\\x1c\\x1d\\x1e"),  # splitlines() splits on these too
        ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),
        ("gpu01 \u202ehs.live", "gpu01 \\u202ehs.live"),  # RLO: reads "gpu01 evil.sh"
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),  # the isolates
        ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),  # embeddings, pop, LRO
        ("1\u200e2\u200f3\u061c4", "1\\u200e2\\u200f3\\u061c4"),  # the marks: escaped too
        ("bad\udcff", "bad\\udcff"),  # a lone surrogate (an undecodable byte kept by surrogateescape)
    ],
)
def test_controls_separators_and_bidi_become_visible_escapes(raw, shown):
    assert clean(raw) == shown
    assert_inert(clean(raw))


def test_a_fifteen_byte_process_name_with_esc_stays_one_inert_line():
    comm = "\x1b]0;pwn\x07x\nFAKE"  # prctl(PR_SET_NAME) takes any 15 bytes but NUL: this one fits
    assert len(comm.encode()) <= 15
    out = clean(comm)
    assert out == "\\x1b]0;pwn\\x07x\\nFAKE"
    assert_inert(out)


def test_ordinary_text_is_kept_as_it_is():
    for value in ("NVIDIA H100 80GB HBM3", "python3 (worker) 3)", "Grüße ✓ 日本語 \u2192 x", "a\\nb", ""):
        assert clean(value) == value


def test_any_value_is_text_and_none_is_empty():
    assert clean(None) == ""
    assert clean(3) == "3" and clean(["\x1b"]) == "['\\x1b']"
    assert clean(b"job\x1b[2J\xff") == "job\\x1b[2J\\udcff"  # bytes as their text, not b'...'


def test_the_controller_terminal_uses_the_same_cleaner():
    """One home: the terminal report's clean is module_utils/text.py's, not a copy."""
    assert terminal.clean is text.clean
