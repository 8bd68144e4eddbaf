"""Host strings before the terminal: the commands' way to the collection's one cleaner (module_utils/text.py).

Everything a command prints that a host, a worker or a job user could have written (process and GPU names, module
messages, worker errors, host names of a dynamic inventory) goes through ``clean``: control characters, line
separators and bidi controls become visible escapes, so an escape sequence cannot clear the screen or retitle the
window and a newline cannot forge a line. Colours are added by our code after cleaning. There is no copy of the
cleaner here: the collection is imported on first use (``gpufleet --help`` does not need it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufleet import paths

_clean: Callable[[Any], str] | None = None


def clean(value: Any) -> str:
    """``value`` as one printable line (module_utils/text.py's ``clean``)."""
    global _clean
    if _clean is None:
        paths.import_collection()
        from ansible_collections.gpufleet.tuning.plugins.module_utils.text import clean as one_cleaner

        _clean = one_cleaner
    return _clean(value)


def clean_lines(text: Any) -> str:
    """A message of our own that spans lines (``\\n``) with host strings in it: each line cleaned, the line breaks
    kept. A host string must not hold the breaks (they would forge lines): clean it with ``clean`` first."""
    return "\n".join(clean(line) for line in str(text).split("\n"))
