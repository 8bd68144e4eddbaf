"""Machine-readable reports, written atomically (temp file + rename) with mode 0640."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpufleet import __version__
from gpufleet.runner import HostResult

REPORT_MODE = 0o640  # reports map the fleet: not world-readable


class ReportDirError(RuntimeError):
    pass


def check_report_dir(path: Path) -> Path:
    """Create ``path`` if needed and prove it is writable, before any host is touched."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".gpufleet-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ReportDirError(f"report directory {path} is not writable: {exc.strerror or exc}") from exc
    return path


def write_atomic(path: Path, text: str, mode: int = REPORT_MODE) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def build(hosts: dict[str, HostResult], inventory: str, complete: bool = True) -> dict[str, Any]:
    return {
        "tool": "gpufleet",
        "version": __version__,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "inventory": inventory,
        "complete": complete,
        "hosts": {
            name: {"status": h.status, "message": h.message, "results": h.results} for name, h in sorted(hosts.items())
        },
    }


def write_json(report: dict[str, Any], directory: Path, stamp: str | None = None) -> Path:
    stamp = stamp or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return write_atomic(directory / f"audit-{stamp}.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
