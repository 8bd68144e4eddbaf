"""HostFS.read (plugins/module_utils/hostfs.py): every reader's one way into /proc, /sys and /etc under a root."""

from __future__ import annotations

import os

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import hostfs
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS


@pytest.fixture()
def fs(tmp_path):
    (tmp_path / "sys").mkdir()
    return HostFS(str(tmp_path))


def test_reads_small_files_whole(fs, tmp_path):
    (tmp_path / "sys" / "governor").write_bytes(b"performance\n")
    assert fs.read("/sys/governor") == "performance\n"


def test_reads_files_larger_than_one_chunk_and_stops_at_the_limit(fs, tmp_path):
    body = bytes(range(97, 123)) * ((3 * hostfs.READ_CHUNK) // 26 + 5)
    (tmp_path / "sys" / "big").write_bytes(body)
    assert fs.read("/sys/big") == body.decode()
    assert fs.read("/sys/big", limit=hostfs.READ_CHUNK + 7) == body[: hostfs.READ_CHUNK + 7].decode()
    assert fs.read("/sys/big", limit=5) == "abcde"


def test_empty_missing_directory_and_unreadable(fs, tmp_path):
    (tmp_path / "sys" / "empty").write_bytes(b"")
    assert fs.read("/sys/empty") == ""
    assert fs.read("/sys/none") is None
    assert fs.read("/sys") is None  # a directory: EISDIR on read
    secret = tmp_path / "sys" / "secret"
    secret.write_bytes(b"x")
    secret.chmod(0)
    if os.geteuid() != 0:
        assert fs.read("/sys/secret") is None


def test_bytes_that_are_not_utf8_are_replaced_not_raised(fs, tmp_path):
    (tmp_path / "sys" / "vpd").write_bytes(b"SN\xff\xfe1234")
    assert fs.read("/sys/vpd") == "SN\ufffd\ufffd1234"


def test_no_descriptor_is_left_open(fs, tmp_path):
    (tmp_path / "sys" / "f").write_bytes(b"1\n")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        fs.read("/sys/f")
        fs.read("/sys")
    assert len(os.listdir("/proc/self/fd")) == before
