"""sysctl_settings through real Ansible: against a fixture root (files, who-else-sets-it, TuneD), and inside a
real network namespace where per-namespace keys change and global ones are reported, not failed."""

from __future__ import annotations

from pathlib import Path

import labkit
import pytest

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration
TASK = "Set sysctls"

TASKS = """
- name: Set sysctls
  gpufleet.tuning.sysctl_settings:
    settings: "{{ settings }}"
    file: "{{ file }}"
    root: "{{ root | default('/') }}"
    at_least: "{{ at_least | default([]) }}"
  check_mode: "{{ check | default(false) }}"
  diff: true
"""
PLAY = labkit.play("sysctl_settings", tasks=TASKS)

SETTINGS = {"vm.swappiness": 10, "kernel.numa_balancing": 0, "net.ipv4.tcp_rmem": [4096, 131072, 268435456]}


def _root(tmp: Path) -> Path:
    root = tmp / "root"
    for key, value in {
        "vm/swappiness": "60",
        "kernel/numa_balancing": "1",
        "net/ipv4/tcp_rmem": "4096\t131072\t6291456",
    }.items():
        path = root / "proc/sys" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    etc = root / "etc/sysctl.d"
    etc.mkdir(parents=True)
    (etc / "10-cloud.conf").write_text("vm.swappiness = 30\n")
    (root / "etc/sysctl.conf").write_text("# distro default\nkernel.numa_balancing=1\n")
    (etc / "99-sysctl.conf").symlink_to("../sysctl.conf")
    (root / "etc/tuned/throughput-performance").mkdir(parents=True)
    (root / "etc/tuned/active_profile").write_text("throughput-performance\n")
    (root / "etc/tuned/throughput-performance/tuned.conf").write_text(
        "[main]\nsummary=x\n[sysctl]\nvm.swappiness=10\nnet.ipv4.tcp_rmem=4096 87380 16777216\n"
    )
    return root


def _run(tmp: Path, hosts: dict, check=False):
    inventory = labkit.write_inventory(tmp, hosts)
    play = labkit.write_play(tmp, PLAY)
    return run_playbook(str(play), str(inventory), extravars={"check": check} if check else {}).hosts


def test_fixture_root_conflicts_check_then_apply(tmp_path):
    root = _root(tmp_path)
    host = {"h": labkit.local_host(settings=SETTINGS, file="/etc/sysctl.d/60-gpufleet.conf", root=str(root))}
    snapshot = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    check = _run(tmp_path, host, check=True)["h"]
    assert check.status == "ok", check.message
    res = check.results[TASK]
    assert res["changed"] is True
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot  # check mode wrote nothing
    assert res["others"]["vm.swappiness"] == [{"path": "/etc/sysctl.d/10-cloud.conf", "value": "30"}]
    # /etc/sysctl.conf (via 99-sysctl.conf and itself) is applied after 60-gpufleet.conf: it wins at boot.
    assert res["overridden"]["kernel.numa_balancing"]["value"] == "1"
    assert "vm.swappiness" not in res["overridden"]  # 10-cloud.conf comes before 60-gpufleet.conf
    assert res["tuned"] == {
        "profile": "throughput-performance",
        "conflicts": {"net.ipv4.tcp_rmem": "4096 87380 16777216"},
    }
    assert "kernel.numa_balancing = 0" in res["diff"][0]["after"]

    first = _run(tmp_path, host)["h"].results[TASK]
    assert first["changed"] is True and first["runtime"]["vm.swappiness"] == {
        "before": "60",
        "after": "10",
        "changed": True,
    }
    assert (root / "proc/sys/net/ipv4/tcp_rmem").read_text().split() == ["4096", "131072", "268435456"]
    text = (root / "etc/sysctl.d/60-gpufleet.conf").read_text()
    assert text.splitlines()[1:] == [
        "kernel.numa_balancing = 0",
        "net.ipv4.tcp_rmem = 4096 131072 268435456",
        "vm.swappiness = 10",
    ]
    assert oct((root / "etc/sysctl.d/60-gpufleet.conf").stat().st_mode & 0o777) == "0o644"
    second = _run(tmp_path, host)["h"].results[TASK]
    assert second["changed"] is False


def test_at_least_keeps_larger_running_values(tmp_path):
    """A host already sized for a bigger path keeps its larger buffer maximum; smaller fields are still raised."""
    root = _root(tmp_path)
    (root / "proc/sys/net/ipv4/tcp_rmem").write_text("4096\t87380\t536870912\n")
    wanted = {"net.ipv4.tcp_rmem": "4096 131072 90000000", "vm.swappiness": 10}
    host = {
        "h": labkit.local_host(
            settings=wanted,
            file="/etc/sysctl.d/61-gpufleet-network.conf",
            root=str(root),
            at_least=["net.ipv4.tcp_rmem"],
        )
    }
    check = _run(tmp_path, host, check=True)["h"].results[TASK]
    assert check["kept"] == {
        "net.ipv4.tcp_rmem": {
            "wanted": "4096 131072 90000000",
            "running": "4096 87380 536870912",
            "kept": "4096 131072 536870912",
        }
    }
    assert (root / "proc/sys/net/ipv4/tcp_rmem").read_text().split() == ["4096", "87380", "536870912"]
    first = _run(tmp_path, host)["h"].results[TASK]
    assert first["runtime"]["net.ipv4.tcp_rmem"]["after"] == "4096 131072 536870912"
    assert (root / "proc/sys/net/ipv4/tcp_rmem").read_text().split() == ["4096", "131072", "536870912"]
    assert "net.ipv4.tcp_rmem = 4096 131072 536870912" in (root / "etc/sysctl.d/61-gpufleet-network.conf").read_text()
    assert _run(tmp_path, host)["h"].results[TASK]["changed"] is False
    # not listed in at_least: the value is set as given, even if that lowers it
    host["h"]["at_least"] = []
    lowered = _run(tmp_path, host)["h"].results[TASK]
    assert lowered["kept"] == {} and lowered["runtime"]["net.ipv4.tcp_rmem"]["after"] == "4096 131072 90000000"
    host["h"]["at_least"] = ["net.ipv4.tcp_wmem"]
    bad = _run(tmp_path, host)["h"]
    assert bad.status == "failed" and "at_least: net.ipv4.tcp_wmem not in settings" in bad.message


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"vm.swappiness;reboot": 1}, "settings: 'vm.swappiness;reboot' is not a sysctl name"),
        ({"../../etc/passwd": 1}, "is not a sysctl name"),
        ({"vm.swappiness": {"a": 1}}, "settings.vm.swappiness: value must be a number, a string or a list"),
    ],
)
def test_bad_keys_and_values(tmp_path, settings, message):
    root = _root(tmp_path)
    host = {"h": labkit.local_host(settings=settings, file="/etc/sysctl.d/60-gpufleet.conf", root=str(root))}
    labkit.assert_clear_error(_run(tmp_path, host)["h"], message)


@pytest.fixture
def netns():
    with labkit.namespace("gpft", tools=("ip",)) as name:
        yield name


def test_inside_a_network_namespace(tmp_path, netns):
    """Per-namespace keys are set in the namespace only; global ones are reported as 'set on the host'."""
    host_rmem = Path("/proc/sys/net/ipv4/tcp_rmem").read_text()
    host_core = Path("/proc/sys/net/core/rmem_max").read_text()
    settings = {
        "net.ipv4.tcp_rmem": "4096 131072 33554432",
        "net.ipv4.tcp_mtu_probing": 1,
        "net.core.rmem_max": 33554432,
    }
    file = str(tmp_path / "etc/sysctl.d/61-gpufleet-network.conf")
    host = {"ns": labkit.local_host(labkit.ns_python(tmp_path, netns), settings=settings, file=file)}
    res = _run(tmp_path, host)["ns"]
    assert res.status == "ok", res.message
    out = res.results[TASK]
    assert out["runtime"]["net.ipv4.tcp_rmem"]["after"] == "4096 131072 33554432"
    assert "must be set on the host" in out["not_settable"]["net.core.rmem_max"]
    inside = labkit.ns_exec(netns, "cat", "/proc/sys/net/ipv4/tcp_rmem")
    assert inside.split() == ["4096", "131072", "33554432"]
    assert Path("/proc/sys/net/ipv4/tcp_rmem").read_text() == host_rmem  # the host is untouched
    assert Path("/proc/sys/net/core/rmem_max").read_text() == host_core
    assert "net.core.rmem_max = 33554432" in (tmp_path / "etc/sysctl.d/61-gpufleet-network.conf").read_text()
