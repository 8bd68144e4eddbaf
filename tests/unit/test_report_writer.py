"""write_all: one directory per run, four formats written atomically with mode 0640, `latest` swapped atomically;
check_writable fails early with a message naming the directory and the reason."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

REPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "reports"
NAMES = {"report.json", "report.html", "junit.xml", "gpufleet.prom"}


@pytest.fixture
def sample():
    return json.loads((REPORTS / "sample-v1.json").read_text(encoding="utf-8"))


@pytest.fixture
def umask_zero():
    old = os.umask(0)
    yield
    os.umask(old)


def _mode(path):
    return os.stat(path).st_mode & 0o777


def test_write_all_layout_and_contents(tmp_path, sample):
    out = tmp_path / "reports"
    paths = writer.write_all(sample, out, stamp="20261101T083127Z")
    run = out / "20261101T083127Z"
    assert paths == {
        "dir": run,
        "json": run / "report.json",
        "html": run / "report.html",
        "junit": run / "junit.xml",
        "prometheus": run / "gpufleet.prom",
        "latest": out / "latest",
    }
    assert {p.name for p in run.iterdir()} == NAMES  # and no temp file left behind
    assert {p.name for p in out.iterdir()} == {"20261101T083127Z", "latest"}
    text = paths["json"].read_text(encoding="utf-8")
    assert text == json.dumps(sample, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert json.loads(text) == sample
    assert paths["html"].read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert ET.parse(paths["junit"]).getroot().tag == "testsuites"
    assert "gpufleet_host_up{host=\"iad-h100-03\",status=\"ok\"} 1\n" in paths["prometheus"].read_text(encoding="utf-8")


@pytest.mark.parametrize("mask", [0, 0o022, 0o077])
def test_modes_do_not_depend_on_the_umask(tmp_path, sample, mask):
    old = os.umask(mask)
    try:
        paths = writer.write_all(sample, tmp_path, stamp="s")
    finally:
        os.umask(old)
    for key in ("json", "html", "junit", "prometheus"):
        assert _mode(paths[key]) == 0o640, key
    assert _mode(paths["dir"]) == 0o750


def test_latest_points_at_the_newest_run(tmp_path, sample):
    first = writer.write_all(sample, tmp_path, stamp="20261101T000000Z")
    assert os.readlink(tmp_path / "latest") == "20261101T000000Z"  # relative: the tree can move
    second = writer.write_all(sample, tmp_path, stamp="20261102T000000Z")
    assert os.readlink(tmp_path / "latest") == "20261102T000000Z"
    assert (tmp_path / "latest" / "report.json").resolve() == second["json"].resolve()
    assert first["json"].exists()  # older runs are kept
    assert {p.name for p in tmp_path.iterdir()} == {"20261101T000000Z", "20261102T000000Z", "latest"}


def test_existing_stamp_gets_a_suffix(tmp_path, sample):
    dirs = [writer.write_all(sample, tmp_path, stamp="20261101T000000Z")["dir"].name for _ in range(3)]
    assert dirs == ["20261101T000000Z", "20261101T000000Z-1", "20261101T000000Z-2"]
    assert os.readlink(tmp_path / "latest") == "20261101T000000Z-2"


def test_default_stamp_is_utc_time(tmp_path, sample):
    paths = writer.write_all(sample, tmp_path)
    assert re.fullmatch(r"\d{8}T\d{6}Z(-\d+)?", paths["dir"].name)


def test_latest_is_replaced_by_rename_never_removed(tmp_path, sample, monkeypatch):
    writer.write_all(sample, tmp_path, stamp="a")
    renames = []
    real_replace, real_unlink = os.replace, os.unlink

    def spy_replace(src, dst, *args, **kwargs):
        renames.append((Path(src), Path(dst), os.path.islink(src)))
        return real_replace(src, dst, *args, **kwargs)

    def guard_unlink(path, *args, **kwargs):
        assert Path(path).name != "latest", "latest must never be missing, not even for a moment"
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(writer.os, "replace", spy_replace)
    monkeypatch.setattr(writer.os, "unlink", guard_unlink)
    monkeypatch.setattr(writer.os, "remove", guard_unlink)
    writer.write_all(sample, tmp_path, stamp="b")
    src, dst, was_link = renames[-1]
    assert dst == tmp_path / "latest" and was_link and src.parent == tmp_path and src.name.startswith(".latest.")
    # each file: a temp file in the run directory renamed onto its final name
    files = [(s, d) for s, d, _ in renames[:-1]]
    assert sorted(d.name for _, d in files) == sorted(NAMES)
    assert all(s.parent == d.parent == tmp_path / "b" and s.name.startswith("." + d.name) for s, d in files)


def test_files_are_fsynced(tmp_path, sample, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(writer.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    writer.write_all(sample, tmp_path, stamp="x")
    assert len(synced) >= 4 + 2  # four files, the run directory, the report directory


def test_a_render_error_writes_nothing(tmp_path, sample, monkeypatch):
    def boom(report):
        raise RuntimeError("template broke")

    monkeypatch.setattr(writer, "render_html", boom)
    with pytest.raises(RuntimeError, match="template broke"):
        writer.write_all(sample, tmp_path / "out", stamp="x")
    assert not (tmp_path / "out").exists()


def test_a_failed_write_leaves_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    target.write_text("old")

    def fail(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.os, "fsync", fail)
    with pytest.raises(OSError, match="No space left"):
        writer.write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_lone_surrogate_is_kept_in_json(tmp_path, sample):
    sample["hosts"]["iad-h100-03"]["message"] = "bad \ud800 byte"
    paths = writer.write_all(sample, tmp_path, stamp="x")
    assert json.loads(paths["json"].read_text(encoding="ascii"))["hosts"]["iad-h100-03"]["message"] == (
        "bad \ud800 byte")
    assert "\ufffd" in paths["html"].read_text(encoding="utf-8")


@pytest.mark.parametrize("stamp", ["", ".", "..", "latest", "last-partial", ".hidden", "a/b", "../x"])
def test_bad_stamps_are_refused(tmp_path, sample, stamp):
    with pytest.raises(ValueError, match="invalid report stamp"):
        writer.write_all(sample, tmp_path, stamp=stamp)
    assert list(tmp_path.iterdir()) == []


def test_latest_that_is_a_real_directory_is_not_clobbered(tmp_path, sample):
    (tmp_path / "latest").mkdir()
    with pytest.raises(writer.ReportDirError, match="latest exists and is not a symlink"):
        writer.check_writable(tmp_path)
    with pytest.raises(writer.ReportDirError, match="latest exists and is not a symlink"):
        writer.write_all(sample, tmp_path, stamp="x")
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]


# ------------------------------------------------------------------------- latest: the fleet's complete view only
# Issue 29: a --limit or interrupted run moved `latest`, so a scraper of latest/gpufleet.prom or a diff against
# latest saw a part of the fleet as the fleet.


def _partial(sample, **run):
    report = json.loads(json.dumps(sample))
    report["run"].update(run)
    return report


@pytest.mark.parametrize(
    "run, why",
    [
        ({"limit": "eu_west"}, "--limit eu_west: a part of the inventory"),
        ({"complete": False, "incomplete_reason": "interrupted by SIGINT"}, "the run did not finish"),
    ],
)
def test_a_partial_run_is_written_but_latest_stays_on_the_complete_one(tmp_path, sample, run, why):
    full = writer.write_all(sample, tmp_path, stamp="20261101T000000Z")
    assert writer.full_view(sample) == (True, "a complete run of the whole inventory")
    partial = _partial(sample, **run)
    assert writer.full_view(partial)[0] is False and why in writer.full_view(partial)[1]
    paths = writer.write_all(partial, tmp_path, stamp="20261102T000000Z")
    assert "latest" not in paths and paths["last-partial"] == tmp_path / "last-partial"
    assert os.readlink(tmp_path / "latest") == "20261101T000000Z"  # still the complete view
    assert (tmp_path / "latest" / "report.json").resolve() == full["json"].resolve()
    assert os.readlink(tmp_path / "last-partial") == "20261102T000000Z"
    assert json.loads((tmp_path / "last-partial" / "report.json").read_text()) == partial
    assert {p.name for p in tmp_path.iterdir()} == {"20261101T000000Z", "20261102T000000Z", "latest", "last-partial"}
    # the next complete run moves latest again; last-partial keeps the partial run
    writer.write_all(sample, tmp_path, stamp="20261103T000000Z")
    assert os.readlink(tmp_path / "latest") == "20261103T000000Z"
    assert os.readlink(tmp_path / "last-partial") == "20261102T000000Z"


def test_a_first_run_that_is_partial_creates_no_latest(tmp_path, sample):
    writer.write_all(_partial(sample, limit="iad-h100-03"), tmp_path, stamp="s")
    assert not (tmp_path / "latest").exists() and os.readlink(tmp_path / "last-partial") == "s"


def test_hosts_left_interrupted_make_the_run_partial_and_hosts_down_do_not(tmp_path, sample):
    # unreachable and failed hosts of a finished run are the fleet's state (the sample has both): latest moves
    assert {h["status"] for h in sample["hosts"].values()} >= {"unreachable", "failed"}
    assert writer.full_view(sample)[0] is True
    report = json.loads(json.dumps(sample))
    report["hosts"]["sg-l40s-03"]["status"] = "interrupted"
    assert writer.full_view(report) == (False, "1 host(s) not audited (interrupted)")
    assert "last-partial" in writer.write_all(report, tmp_path, stamp="s")


def test_a_merge_of_slices_is_the_fleet_view(tmp_path, sample):
    """`gpufleet report merge` assembles the fleet from --limit slices: its union limit does not make it partial;
    an unfinished slice does."""
    merged = _partial(sample, limit="ap_southeast:eu_west:us_east", merged_from=[])
    assert writer.full_view(merged) == (True, "a merge of finished runs")
    assert "latest" in writer.write_all(merged, tmp_path, stamp="s")
    assert writer.full_view(_partial(merged, complete=False, incomplete_reason="slice1: interrupted"))[0] is False


def test_last_partial_that_is_a_real_directory_is_not_clobbered(tmp_path, sample):
    (tmp_path / "last-partial").mkdir()
    with pytest.raises(writer.ReportDirError, match="last-partial exists and is not a symlink"):
        writer.check_writable(tmp_path)


# ---------------------------------------------------------------------------------------------- check_writable


def test_check_writable_creates_the_directory_and_leaves_nothing(tmp_path):
    target = tmp_path / "a" / "b"
    assert writer.check_writable(target) == target
    assert target.is_dir()
    assert list(target.iterdir()) == []


def test_check_writable_on_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(writer.ReportDirError) as err:
        writer.check_writable(f)
    assert str(err.value) == f"report directory {f} is not writable: exists and is not a directory"


def test_check_writable_under_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(writer.ReportDirError) as err:
        writer.check_writable(f / "sub")
    assert str(err.value).startswith(f"report directory {f / 'sub'} is not writable: Not a directory")
    assert err.value.path == f / "sub"


def test_check_writable_reports_the_os_reason(tmp_path, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(writer.tempfile, "mkdtemp", denied)
    with pytest.raises(writer.ReportDirError) as err:
        writer.check_writable(tmp_path)
    assert str(err.value) == f"report directory {tmp_path} is not writable: Permission denied ({tmp_path})"
    assert isinstance(err.value.__cause__, PermissionError)


def test_check_writable_needs_symlinks(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(writer.os, "symlink", no_links)
    with pytest.raises(writer.ReportDirError, match="Operation not permitted"):
        writer.check_writable(tmp_path)
    assert list(tmp_path.iterdir()) == []  # the probe is cleaned up


def test_json_is_indented_for_people_and_compact_for_large_fleets(tmp_path, sample):
    """report.json is indented up to the HTML report's LAZY_FROM_HOSTS hosts and compact above (issue 18: 43 MB
    instead of 81 MB at 1,000 hosts); both decode to the same report."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.html import LAZY_FROM_HOSTS
    from fleetreport import scaled_report

    small = writer.render_all(sample)["json"]
    assert small.startswith('{\n  "') and json.loads(small) == sample
    large = scaled_report(LAZY_FROM_HOSTS + 1)
    assert writer.json_layout(large) == {"separators": (",", ":")}
    assert writer.json_layout({"hosts": dict.fromkeys(map(str, range(LAZY_FROM_HOSTS)), {})}) == {"indent": 2}
    files = writer.write_all(large, tmp_path, stamp="large")
    text = files["json"].read_text()
    assert text.count("\n") == 1 and text.endswith("}\n") and '": ' not in text[:200]
    assert json.loads(text) == json.loads(json.dumps(large))


def test_run_directory_swapped_for_a_link_is_not_chmodded(tmp_path, sample, monkeypatch):
    """A shared reports directory (issue 26): another user who swaps the run directory for a link to a directory of
    theirs (or the operator's) between mkdir and chmod must not have gpufleet chmod the link's target."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    os.chmod(victim, 0o700)
    real_mkdir = os.mkdir

    def mkdir_then_swap(path, mode=0o777, *args, **kwargs):
        real_mkdir(path, mode, *args, **kwargs)
        if Path(path).parent.name == "reports":
            os.rmdir(path)
            os.symlink(victim, path)

    monkeypatch.setattr(writer.os, "mkdir", mkdir_then_swap)
    with pytest.raises(OSError):
        writer.write_all(sample, tmp_path / "reports", stamp="20261101T083127Z")
    assert _mode(victim) == 0o700
