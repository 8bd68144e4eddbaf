# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Host strings as data: the one cleaner every string from a host passes through before a terminal or a journal.

A host says many things gpufleet prints: process names (any job user sets them, 15 bytes, ESC included), GPU and
NIC names, module messages, kernel-log lines, a worker's errors. Printed raw, an escape sequence clears the screen,
retitles the window or recolours what follows; a newline or carriage return forges a line of its own (a finding
that is not there, in a terminal or in the watch's journal); a bidi control reorders what the reader sees
(``\\u202e`` makes ``gpu01 evil.sh`` read backwards). ``clean`` makes any value one printable line:

- C0 controls, DEL and C1 controls (``\\x00``-``\\x1f``, ``\\x7f``-``\\x9f``: ESC, BEL, CSI ``\\x9b``, NEL
  ``\\x85``) become visible escapes: ``\\n``, ``\\r``, ``\\t`` by name, the others ``\\xNN``;
- the line and paragraph separators U+2028/U+2029 and lone surrogates (undecodable bytes Python kept with
  ``surrogateescape``) become ``\\uNNNN``;
- every bidi formatting character becomes ``\\uNNNN`` as well, rather than being removed, so that a reader sees
  that something tried to reorder the line: the embeddings and overrides U+202A-U+202E, the isolates
  U+2066-U+2069, and the marks U+200E/U+200F (LRM/RLM) and U+061C (ALM). The marks cannot reverse text by
  themselves, but they change where neutral characters (digits, punctuation, spaces) go; a host name or a process
  name never needs one.

Colour codes are not host data: the code that prints adds them after cleaning. This file is imported by the
controller (the CLI, the reports) and shipped to hosts with the watch (module_utils only).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# The bidi formatting characters (a regular-expression class body): the report's HTML and JUnit writers, which
# keep line breaks, replace these too (``plugin_utils/report``), from this one list.
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Everything that is not one printable, left-to-right-neutral line (see the docstring).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029" + BIDI + "\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match):
    ch = match.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code


def clean(value):
    """``value`` (any type; None is empty) as one printable line: controls, line separators, lone surrogates and
    bidi controls become visible escapes (``\\x1b``, ``\\n``, ``\\u202e``); everything else is kept."""
    if value is None:
        return ""
    if isinstance(value, bytes):  # their text (undecodable bytes as lone surrogates, escaped below), not b'...'
        value = value.decode("utf-8", "surrogateescape")
    return UNSAFE.sub(_escape, str(value))
