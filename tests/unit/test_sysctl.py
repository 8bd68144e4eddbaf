"""module_utils.sysctl: settable (whether a runtime value can be set, known without writing: check mode needs it) and
at_least (raise, never lower)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import sysctl
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS


def _key(root, key: str, mode: int):
    path = root / "proc/sys" / key.replace(".", "/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("4194304\n")
    path.chmod(mode)
    return path


def test_writable_key_is_settable(tmp_path):
    _key(tmp_path, "net.ipv4.tcp_rmem", 0o644)
    assert sysctl.settable(HostFS(str(tmp_path)), "net.ipv4.tcp_rmem") is None


def test_key_without_write_bits_must_be_set_on_the_host(tmp_path):
    # As net.core.rmem_max in a child network namespace: 0444, and root cannot write it either.
    _key(tmp_path, "net.core.rmem_max", 0o444)
    reason = sysctl.settable(HostFS(str(tmp_path)), "net.core.rmem_max")
    assert reason.startswith("read-only or absent here (read-only file)") and reason.endswith("set on the host")


def test_absent_key_must_be_set_on_the_host(tmp_path):
    reason = sysctl.settable(HostFS(str(tmp_path)), "net.core.default_qdisc")
    assert reason.startswith("read-only or absent here (No such file or directory)")


@pytest.mark.parametrize(
    "wanted, running, expected",
    [
        ("4096 131072 90000000", "4096 87380 536870912", "4096 131072 536870912"),
        ("4096 131072 90000000", "4096 131072 33554432", "4096 131072 90000000"),
        ("90000000", "4194304", "90000000"),
        ("90000000", None, "90000000"),
        ("4096 131072 90000000", "4096 131072", "4096 131072 90000000"),  # not comparable: as wanted
        ("bbr", "cubic", "bbr"),
    ],
)
def test_at_least(wanted, running, expected):
    assert sysctl.at_least(wanted, running) == expected


@pytest.mark.parametrize(
    "wanted, running, expected",
    [
        ("10", "1", "1"),  # an owner's swappiness 1 stays
        ("10", "60", "10"),
        ("10", "10", "10"),
        ("10", None, "10"),
        ("4096 131072 6291456", "4096 87380 268435456", "4096 87380 6291456"),
        ("10", "1 2", "10"),  # not comparable: as wanted
        ("bbr", "cubic", "bbr"),
    ],
)
def test_at_most(wanted, running, expected):
    assert sysctl.at_most(wanted, running) == expected
