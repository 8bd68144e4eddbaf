# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""Write every report format for one run into ``<out_dir>/<stamp>/`` and point ``<out_dir>/latest`` at it when the
run is the complete view of the fleet, else ``<out_dir>/last-partial``.

Layout::

    out_dir/
      20261101T083127Z/      report.json  report.html  junit.xml  gpufleet.prom   (files 0640, dir 0750)
      20261101T091500Z/      (a --limit run)
      latest -> 20261101T083127Z
      last-partial -> 20261101T091500Z

``latest`` is what a scraper of ``latest/gpufleet.prom`` or a diff against ``latest`` reads, so it moves only for
a run of the whole inventory that finished (``full_view``): no ``--limit``, not interrupted, no host left
``interrupted``. A host that was unreachable or timed out in such a run is part of the fleet's true state and is
reported as down there. Any other run is written all the same and ``last-partial`` points at it.

All formats are rendered before anything is written (a renderer error leaves no partial run); each file is
written to a temp file in its final directory, fsynced, chmod 0640 and renamed into place; ``latest`` is
replaced by renaming a fresh symlink over it, so a reader (node_exporter's textfile collector, a web server)
sees the old run or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .html import LAZY_FROM_HOSTS, render_html
from .junit import render_junit
from .prometheus import render_prometheus

REPORT_MODE = 0o640  # reports map the fleet: not world-readable
DIR_MODE = 0o750
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
LATEST = "latest"
LAST_PARTIAL = "last-partial"
LINKS = (LATEST, LAST_PARTIAL)
FILES = {
    "json": "report.json",
    "html": "report.html",
    "junit": "junit.xml",
    "prometheus": "gpufleet.prom",
}
_MAX_SUFFIX = 1000


class ReportDirError(RuntimeError):
    """The report directory cannot be used; the message names the directory and the reason."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"report directory {path} is not writable: {reason}")
        self.path = path
        self.reason = reason


def _reason(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    if exc.filename is not None:
        text += f" ({exc.filename})"
    return text


def check_writable(out_dir: str | os.PathLike) -> Path:
    """Create ``out_dir`` if needed and prove a run can be written there: a file, a directory and a symlink.

    Call it before any host is touched. Raises ReportDirError naming the directory and the OS reason.
    """
    path = Path(out_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ReportDirError(path, "exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = Path(tempfile.mkdtemp(prefix=".gpufleet-probe-", dir=path))
        try:
            fd, name = tempfile.mkstemp(dir=probe)
            os.close(fd)
            os.symlink(os.path.basename(name), probe / "link")
        finally:
            shutil.rmtree(probe, ignore_errors=True)
    except OSError as exc:
        raise ReportDirError(path, _reason(exc)) from exc
    _check_links(path)
    return path


def _check_links(out_dir: Path) -> None:
    for name in LINKS:
        link = out_dir / name
        if link.exists() and not link.is_symlink():
            raise ReportDirError(out_dir, f"{link} exists and is not a symlink (move it away)")


def full_view(report: dict) -> tuple[bool, str]:
    """``(True, why)`` when the report is the complete view of the fleet that ``latest`` stands for: the run
    finished, had no ``--limit`` and left no host ``interrupted``; else ``(False, why not)``. A merge
    (``run.merged_from``) assembles the fleet from its slices on purpose: their limits do not make it partial."""
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    hosts = report.get("hosts") if isinstance(report.get("hosts"), dict) else {}
    if run.get("complete") is False:
        return False, f"the run did not finish ({run.get('incomplete_reason') or 'interrupted'})"
    if run.get("limit") and "merged_from" not in run:
        return False, f"--limit {run['limit']}: a part of the inventory"
    interrupted = [name for name, host in hosts.items() if (host or {}).get("status") == "interrupted"]
    if interrupted:
        return False, f"{len(interrupted)} host(s) not audited (interrupted)"
    if "merged_from" in run:
        return True, "a merge of finished runs"
    return True, "a complete run of the whole inventory"


def json_layout(report: dict) -> dict[str, Any]:
    """json.dumps keywords of report.json: indented for people up to LAZY_FROM_HOSTS hosts (the HTML report's own
    threshold), compact above: at that size the indented form is about twice as large and is encoded by json's
    pure-Python encoder instead of its C one (figures in docs/benchmarks.md); programs read it either way."""
    hosts = report.get("hosts")
    if isinstance(hosts, dict) and len(hosts) > LAZY_FROM_HOSTS:
        return {"separators": (",", ":")}
    return {"indent": 2}


def render_all(report: dict) -> dict[str, str]:
    """Every format's text, keyed like FILES."""
    return {
        "json": json.dumps(report, sort_keys=True, ensure_ascii=False, **json_layout(report)) + "\n",
        "html": render_html(report),
        "junit": render_junit(report),
        "prometheus": render_prometheus(report),
    }


def _encode(report: dict, texts: dict[str, str]) -> dict[str, bytes]:
    """UTF-8 bytes of every format. A lone surrogate (JSON can decode one from ``"\\ud800"``) cannot be UTF-8:
    the JSON is then written with ASCII escapes, which keep it exactly; the other formats get U+FFFD."""
    data = {}
    for key, text in texts.items():
        try:
            data[key] = text.encode("utf-8")
        except UnicodeEncodeError:
            if key == "json":
                text = json.dumps(report, sort_keys=True, ensure_ascii=True, **json_layout(report))
                data[key] = (text + "\n").encode("ascii")
            else:
                data[key] = text.encode("utf-8", errors="replace")
    return data


def write_atomic(path: Path, data: str | bytes, mode: int = REPORT_MODE) -> Path:
    """Write ``data`` (str: as UTF-8) to ``path`` through a temp file in the same directory: chmod ``mode``,
    fsync, rename over ``path``. On any error the temp file is removed and ``path`` is untouched."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp)
        raise
    return path


def _discard(tmp: str | Path) -> None:
    """Remove a temp file that did not take its place (gone already is fine)."""
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_stamp(stamp: str) -> str:
    if (
        not stamp
        or stamp in (".", "..", *LINKS)
        or stamp.startswith(".")
        or "/" in stamp
        or "\\" in stamp
        or "\x00" in stamp
    ):
        raise ValueError(f"invalid report stamp {stamp!r}: it must be a plain directory name, not {LATEST!r}")
    return stamp


def _make_run_dir(out_dir: Path, stamp: str) -> Path:
    for n in range(_MAX_SUFFIX):
        candidate = out_dir / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            os.mkdir(candidate, DIR_MODE)
        except FileExistsError:
            continue
        # mkdir's mode is filtered by the umask: set it on the directory just made, through a descriptor that
        # refuses a link swapped in since (a shared reports directory: never chmod by name)
        fd = os.open(candidate, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, DIR_MODE)
        finally:
            os.close(fd)
        return candidate
    raise FileExistsError(f"{out_dir / stamp} and {_MAX_SUFFIX - 1} suffixed variants already exist")


def point_latest(out_dir: Path, target: str, name: str = LATEST) -> Path:
    """Atomically make ``out_dir/<name>`` (``latest`` or ``last-partial``) a relative symlink to ``target`` (a name
    inside ``out_dir``)."""
    latest = out_dir / name
    if latest.exists() and not latest.is_symlink():
        raise ReportDirError(out_dir, f"{latest} exists and is not a symlink (move it away)")
    tmp = out_dir / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, latest)
    except BaseException:
        _discard(tmp)
        raise
    _fsync_dir(out_dir)
    return latest


def write_all(report: dict[str, Any], out_dir: str | os.PathLike, stamp: str | None = None) -> dict[str, Path]:
    """Write report.json, report.html, junit.xml and gpufleet.prom into a new ``out_dir/<stamp>/``.

    ``stamp`` defaults to the current UTC time as ``%Y%m%dT%H%M%SZ``; if that directory exists, ``-1``, ``-2``, ...
    is appended. Returns the paths by format (``json``, ``html``, ``junit``, ``prometheus``) plus ``dir`` (the run
    directory) and the symlink now pointing at ``dir``: ``latest`` when the run is the fleet's complete view
    (``full_view``), else ``last-partial`` (``latest`` stays where it was).
    """
    out_dir = Path(out_dir).expanduser()
    stamp = _check_stamp(stamp if stamp is not None else datetime.now(timezone.utc).strftime(STAMP_FORMAT))
    data = _encode(report, render_all(report))
    out_dir.mkdir(parents=True, exist_ok=True)
    _check_links(out_dir)
    run_dir = _make_run_dir(out_dir, stamp)
    paths: dict[str, Path] = {"dir": run_dir}
    for key, name in FILES.items():
        paths[key] = write_atomic(run_dir / name, data[key])
    _fsync_dir(run_dir)
    link = LATEST if full_view(report)[0] else LAST_PARTIAL
    paths[link] = point_latest(out_dir, run_dir.name, link)
    return paths
