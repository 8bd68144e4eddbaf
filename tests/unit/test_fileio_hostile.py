"""fileio.write_atomic as root in a directory someone else can write (issue 26): a user who can write the target
directory (node_exporter's textfile directory, a 0777 or sticky directory) must not be able to redirect a root
write or a chmod to another file. Real files, real ownership (os.chown to nobody, 65534: these tests need root);
the only patch is of os.fsync, the library boundary the attacker races against."""

from __future__ import annotations

import os
import stat

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import fileio

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def _victim(tmp_path):
    victim = tmp_path / "shadow"
    victim.write_text("root:secret\n")
    victim.chmod(0o600)
    return victim


def test_a_temp_file_swapped_for_a_symlink_before_the_chmod_does_not_chmod_the_victim(tmp_path, monkeypatch):
    """The attacker replaces the temp file with a symlink to /etc/shadow while it is written (here: as it is
    fsynced). A chmod by name would follow the symlink; the mode is set on the descriptor, and the swapped temp
    file is not renamed into place."""
    victim = _victim(tmp_path)
    out = tmp_path / "textfile"
    out.mkdir()
    real_fsync = os.fsync

    def swap_then_fsync(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            for name in os.listdir(out):
                if name.startswith(".gpufleet.prom."):
                    os.unlink(out / name)
                    os.symlink(victim, out / name)
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", swap_then_fsync)
    refused = None
    try:
        fileio.write_atomic(str(out / "gpufleet.prom"), "gpufleet_up 1\n", mode=0o644)
    except OSError as exc:
        refused = exc
    assert _mode(victim) == 0o600  # a chmod by name made it 0644
    assert victim.read_text() == "root:secret\n"
    assert not (out / "gpufleet.prom").is_symlink()  # a rename by name put the attacker's symlink in place
    assert "the temp file was replaced" in str(refused)


@needs_root
def test_a_directory_owned_by_another_user_is_refused_naming_it(tmp_path):
    out = tmp_path / "textfile"
    out.mkdir(mode=0o755)
    os.chown(out, NOBODY, NOBODY)
    with pytest.raises(fileio.UnsafeDirectory) as caught:
        fileio.write_atomic(str(out / "gpufleet.prom"), "x\n")
    message = str(caught.value)
    assert str(out) in message and "uid 65534" in message and "0755" in message and "chown root:root" in message
    assert os.listdir(out) == []


@pytest.mark.parametrize(
    "mode, why, shared_ok",
    [(0o777, "0777.*writable by every user", False), (0o1777, "sticky", True)],
    ids=["world-writable", "sticky"],
)
def test_a_directory_every_user_writes_is_refused_unless_sticky_and_allowed(tmp_path, mode, why, shared_ok):
    """World-writable is refused; a sticky one (like /tmp) only unless the caller allows a shared directory."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with pytest.raises(fileio.UnsafeDirectory, match=why):
        fileio.write_atomic(str(shared / "f"), "x\n")
    assert os.listdir(shared) == []
    if shared_ok:
        fileio.write_atomic(str(shared / "f"), "x\n", mode=0o600, allow_shared=True)
        assert (shared / "f").read_text() == "x\n" and _mode(shared / "f") == 0o600
    else:
        with pytest.raises(fileio.UnsafeDirectory, match=why):
            fileio.write_atomic(str(shared / "f"), "x\n", mode=0o600, allow_shared=True)


@needs_root
def test_the_owner_the_caller_names_is_accepted(tmp_path):
    out = tmp_path / "node-exporter"
    out.mkdir(mode=0o755)
    os.chown(out, NOBODY, NOBODY)
    fileio.write_atomic(str(out / "gpufleet.prom"), "gpufleet_up 1\n", mode=0o644, owner=NOBODY)
    fileio.write_atomic(str(out / "gpufleet.prom"), "gpufleet_up 2\n", mode=0o644, owner="nobody")
    assert (out / "gpufleet.prom").read_text() == "gpufleet_up 2\n"
    assert _mode(out / "gpufleet.prom") == 0o644 and sorted(os.listdir(out)) == ["gpufleet.prom"]
    # the named owner is that owner only: another user's directory is still refused
    other = tmp_path / "other"
    other.mkdir(mode=0o755)
    os.chown(other, NOBODY - 1, NOBODY - 1)
    with pytest.raises(fileio.UnsafeDirectory, match="uid 65533"):
        fileio.write_atomic(str(other / "f"), "x\n", owner="nobody")


@needs_root
def test_a_symlink_planted_in_a_directory_another_user_writes_is_not_followed(tmp_path):
    """The textfile directory's parent belongs to node_exporter's user: it replaces the directory (or a missing
    one on the way) with a symlink to /etc. Neither the write nor the directory creation goes through it."""
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    parent = tmp_path / "prometheus"
    parent.mkdir(mode=0o755)
    os.chown(parent, NOBODY, NOBODY)
    (parent / "node-exporter").symlink_to(etc)
    os.lchown(parent / "node-exporter", NOBODY, NOBODY)
    for path in (parent / "node-exporter" / "gpufleet.prom", parent / "node-exporter" / "new" / "gpufleet.prom"):
        with pytest.raises(fileio.UnsafeDirectory, match="symlink node-exporter"):
            fileio.write_atomic(str(path), "x\n")
    assert os.listdir(etc) == []
    # where only root (or this user) could have made the symlink, it is the administrator's: followed, and a missing
    # directory behind it is created (as os.makedirs did)
    (tmp_path / "state").symlink_to(etc)
    fileio.write_atomic(str(tmp_path / "state" / "sub" / "watch.json"), "{}\n", dir_mode=0o700)
    assert (etc / "sub" / "watch.json").read_text() == "{}\n"
    assert _mode(etc / "sub") == 0o700 & ~_umask()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
