"""gpufleet.tuning.linear (plugins/strategy/linear.py) against ansible.builtin.linear, both real ansible-playbook runs
over the local connection: the same plays give the same results, while every fork waits on a slow host the
controller's main process sleeps instead of polling its workers (its own CPU time, read from inside it), and the
workers are forked with ansible-core's filter and test plugins already loaded."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from labkit import local_host, write_inventory, write_play

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"

# Runs ansible-playbook in this process and, when it exits, writes the main process's own CPU time (user + system,
# all its threads; the forked workers leave with os._exit and write nothing) to $MAIN_CPU_FILE.
MAIN_CPU = """\
import atexit, os, resource, runpy, sys
main_pid = os.getpid()
def record():
    if os.getpid() == main_pid:
        r = resource.getrusage(resource.RUSAGE_SELF)
        with open(os.environ["MAIN_CPU_FILE"], "w") as f:
            f.write(repr(r.ru_utime + r.ru_stime))
atexit.register(record)
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

PLAYS = """\
- name: Hosts that take a while, more of them than forks
  hosts: all
  gather_facts: false
  tasks:
    - name: Wait on each host
      ansible.builtin.command: sleep {sleep}
      changed_when: false
    - name: One host at a time (throttle; the built-in queueing)
      ansible.builtin.command: "true"
      changed_when: false
      throttle: 1
    - name: Once
      ansible.builtin.debug:
        msg: "{{{{ ansible_play_hosts_all | length }}}} hosts"
      run_once: true
"""

RECAP = re.compile(r"^(h\d)\s+:\s+(ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=\d+\s+skipped=\d+)", re.M)


def _run(tmp: Path, strategy: str, inventory: Path, play: Path, **env_extra: str) -> tuple[dict[str, str], float, str]:
    wrapper = tmp / "main_cpu.py"
    wrapper.write_text(MAIN_CPU)
    cpu_file = tmp / f"main-cpu-{strategy}"
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STRATEGY": strategy,
        "ANSIBLE_FORKS": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
        "MAIN_CPU_FILE": str(cpu_file),
        **env_extra,
    }
    proc = subprocess.run(
        [sys.executable, str(wrapper), str(PLAYBOOK_BIN), "-i", str(inventory), str(play)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict(RECAP.findall(proc.stdout)), float(cpu_file.read_text()), proc.stdout


def test_same_results_and_an_idle_controller_while_forks_wait(tmp_path):
    hosts = {f"h{i}": local_host() for i in range(4)}
    inventory = write_inventory(tmp_path, hosts)
    play = write_play(tmp_path, PLAYS.format(sleep=2))
    ours, ours_cpu, out = _run(tmp_path, "gpufleet.tuning.linear", inventory, play)
    builtin, builtin_cpu, _ = _run(tmp_path, "ansible.builtin.linear", inventory, play)
    assert sorted(ours) == sorted(hosts), out[-2000:]
    assert ours == builtin  # same per-host recap: ok, changed, unreachable, failed, skipped
    assert out.count('"msg": "4 hosts"') == 1  # run_once ran once
    # One fork, four hosts of 2 s: ansible.builtin.linear polls its worker every 0.1 ms for the ~6 s the last three
    # wait; gpufleet.tuning.linear sleeps until the worker exits.
    print(f"main process CPU: gpufleet.tuning.linear {ours_cpu:.2f} s, ansible.builtin.linear {builtin_cpu:.2f} s")
    assert ours_cpu < builtin_cpu - 0.3, (ours_cpu, builtin_cpu)


# An action plugin that reports, from inside the forked worker, which Jinja filter plugin modules the worker already
# holds. Its task has no template, so the worker itself loads none before the plugin runs: what it holds came with
# the fork from the main process.
PROBE_ACTION = """\
import sys
from ansible.plugins.action import ActionBase
class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result["filter_modules"] = sorted(m for m in sys.modules if ".filter." in m)
        return result
"""

PROBE_PLAY = """\
- name: Probe the workers
  hosts: all
  gather_facts: false
  tasks:
    - name: Which filter plugins came with the fork
      jinja_probe:
      register: probe
    - name: Show
      ansible.builtin.debug:
        msg: "PROBE {{ inventory_hostname }} {{ probe.filter_modules | join(',') or 'none' }}"
"""


def test_forks_start_with_the_jinja_plugins_loaded(tmp_path):
    """Without the strategy each fork loads every filter and test plugin again the first time it templates a filter
    (controller CPU per host and task: docs/benchmarks.md); with it, the main process loads them once
    before the play and every worker inherits them."""
    actions = tmp_path / "action_plugins"
    actions.mkdir()
    (actions / "jinja_probe.py").write_text(PROBE_ACTION)
    inventory = write_inventory(tmp_path, {f"h{i}": local_host() for i in range(2)})
    play = write_play(tmp_path, PROBE_PLAY, name="probe.yml")
    probes = {}
    for strategy in ("gpufleet.tuning.linear", "ansible.builtin.linear"):
        _, _, out = _run(tmp_path, strategy, inventory, play, ANSIBLE_ACTION_PLUGINS=str(actions))
        found = dict(re.findall(r'"msg": "PROBE (h\d) (\S+)"', out))
        assert sorted(found) == ["h0", "h1"], out[-2000:]
        probes[strategy] = found
    print(probes)
    for host in ("h0", "h1"):
        # ansible-core loads plugin files under a suffixed name: ansible.plugins.filter.core_<hash>
        assert any(
            m.startswith("ansible.plugins.filter.core") for m in probes["gpufleet.tuning.linear"][host].split(",")
        )
        assert probes["ansible.builtin.linear"][host] == "none"
