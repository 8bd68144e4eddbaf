"""What the controller reads of an execution node's stream: JSON event and status lines only, bounded in size.

ansible-runner's ``process`` streamer unpacks any artifacts zip a stream carries (a ``{"zipfile": N}`` line, then
the zip's N bytes as base64) into its artifact directory, following symlinks the zip itself creates: a node that
answers with ``x -> /home/operator`` and then ``x/.bashrc`` writes the operator's files. A compromised node in one
region must not reach the controller, so ``StreamGuard`` sits between ssh's stdout and the processor (as its
``_input``; the processor only calls ``readline``) and passes on:

- ``{"status": ...}`` lines (the run's state and explanation),
- task events (``{"event": ..., "counter": N, "uuid": "..."}``; keepalives and events without a plain counter and
  uuid are dropped, as the processor would ignore them),
- the ``{"eof": true}`` that ends the stream.

Zip records are never passed on nor unpacked (the controller keeps nothing of the node's artifacts: the events
carry every result); each is decoded into a temporary file of the controller's and its central directory read.
A zip that is not one, or that holds a symlink, a special file or a path outside its directory (what
ansible-runner's worker never sends: a node that may be compromised), anything else (a line that is not a JSON
object, a record of another kind, a malformed zip size), a line longer than ``max_line`` or a stream longer than
``max_bytes`` ends the stream: ``error`` says why, ``on_error`` is called (run_worker kills ssh there) and the
processor reads an error status and the end of the stream.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import stat
import tempfile
import zipfile
from collections.abc import Callable
from typing import IO

MB = 1024 * 1024
MAX_STREAM_BYTES = 512 * MB  # a region's whole stream: ~100 kB of results per host, and room
MAX_LINE_BYTES = 32 * MB  # one event (one host's audit result)
_UUID = re.compile(r"[0-9A-Za-z-]{1,64}")
_SPACE = b" \t\n\r\x0b\x0c"


def _size(n: int) -> str:
    return f"{n // MB} MB" if n >= MB and n % MB == 0 else f"{n} bytes"


def zip_problem(held: IO[bytes]) -> str | None:
    """Why a zip the node sent is not what ansible-runner's worker sends (its artifact files: regular files and
    directories under relative paths), read from its central directory only, never extracted; None when it is."""
    held.seek(0)
    try:
        with zipfile.ZipFile(held) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        return f"is not a zip ({exc})"
    for info in entries:
        name = info.filename
        kind = stat.S_IFMT(info.external_attr >> 16)
        if name.startswith(("/", "\\")) or ".." in re.split(r"[/\\]", name) or ":" in name.split("/")[0]:
            return f"holds a path outside its directory: {name[:80]!r}"
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            what = "a symlink" if kind == stat.S_IFLNK else "a special file"
            return f"holds {what}: {name[:80]!r}"
    return None


class StreamGuard:
    """A file-like reader over a worker's raw stream (``readline`` only) that yields the lines the processor may
    see; see the module docstring."""

    def __init__(
        self,
        raw: IO[bytes],
        max_bytes: int = MAX_STREAM_BYTES,
        max_line: int = MAX_LINE_BYTES,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.raw = raw
        self.max_bytes = max_bytes
        self.max_line = max_line
        self.on_error = on_error
        self.seen = 0  # bytes read from the node
        self.dropped_zips = 0
        self.error: str | None = None
        self._ending: list[bytes] = []

    def _fail(self, reason: str) -> bytes:
        self.error = reason
        if self.on_error is not None:
            self.on_error(reason)
        self._ending = [json.dumps({"eof": True}).encode() + b"\n"]
        return json.dumps({"status": "error", "job_explanation": reason}).encode() + b"\n"

    def _count(self, n: int) -> bool:
        self.seen += n
        return self.seen <= self.max_bytes

    def _too_big(self) -> bytes:
        return self._fail(f"the worker's stream exceeded {_size(self.max_bytes)}")

    def _skip_zip(self, size: int, into: IO[bytes]) -> bool:
        """Read past the base64 of a ``size``-byte zip (whitespace is not counted, as ansible-runner's reader
        skips it), its bytes decoded into ``into``; False when the stream ends first."""
        left = 4 * ((size + 2) // 3)
        pending, broken = b"", False
        while left > 0:
            chunk = self.raw.read(min(left, MB))
            if not chunk:
                return False
            if not self._count(len(chunk)):
                return True  # the caller sees seen > max_bytes
            text = chunk.translate(None, _SPACE)
            left -= len(text)
            if broken:
                continue
            pending += text
            whole = len(pending) - len(pending) % 4
            try:
                into.write(base64.b64decode(pending[:whole], validate=True))
            except binascii.Error:
                broken = True
            pending = pending[whole:]
        if broken or pending:  # not base64, or cut short: not a zip (zip_problem says so)
            into.seek(0)
            into.truncate()
        return True

    def readline(self, size: int = -1) -> bytes:  # noqa: ARG002  # the processor reads whole lines
        if self._ending:
            return self._ending.pop(0)
        if self.error is not None:
            return b""
        while True:
            line = self.raw.readline(self.max_line + 1)
            if not line:
                return b""  # the processor reports a stream that ended early
            if not self._count(len(line)):
                return self._too_big()
            if len(line) > self.max_line:
                return self._fail(f"a line of the worker's stream exceeded {_size(self.max_line)}")
            try:
                data = json.loads(line)
            except ValueError:
                data = None
            if not isinstance(data, dict):
                return self._fail(f"the worker's stream has a line that is not a JSON object: {line[:80]!r}")
            if "zipfile" in data:  # never passed on: the processor would unpack it
                size = data["zipfile"]
                if type(size) is not int or size < 0:
                    return self._fail(f"the worker's stream has a malformed zipfile record: {line[:80]!r}")
                if 4 * ((size + 2) // 3) > self.max_bytes - self.seen:
                    return self._too_big()
                with tempfile.SpooledTemporaryFile(max_size=8 * MB) as held:
                    if not self._skip_zip(size, held):
                        return b""
                    if self.seen > self.max_bytes:
                        return self._too_big()
                    why = zip_problem(held)
                if why:
                    return self._fail(f"the worker's artifacts zip {why} (a node that may be compromised)")
                self.dropped_zips += 1
                continue
            if "eof" in data:
                self._ending = []
                return json.dumps({"eof": True}).encode() + b"\n"
            if "status" in data:
                if not isinstance(data["status"], str):
                    return self._fail(f"the worker's stream has a malformed status line: {line[:80]!r}")
                return line if line.endswith(b"\n") else line + b"\n"
            if "event" in data:
                counter, uuid = data.get("counter"), data.get("uuid")
                if data["event"] == "keepalive" or type(counter) is not int or counter < 1:
                    continue
                if not isinstance(uuid, str) or not _UUID.fullmatch(uuid):
                    continue
                return line if line.endswith(b"\n") else line + b"\n"
            keys = ", ".join(sorted(str(k) for k in data)[:5])
            return self._fail(f"the worker's stream has a record of an unknown kind (keys: {keys[:80]})")
