"""What gpufleet.runner leaves in ansible-runner's artifact directory while a playbook runs (issue 18).

ansible-runner writes each event it is handed back ``True`` for into ``artifacts/<ident>/job_events/`` (with the
host's full result: ~40 KB per host for the audit) and the run's stdout into ``artifacts/<ident>/stdout``. The CLI
reads neither (it keeps what it needs from the events in memory, and the directory is temporary), so at 1,000 hosts
that was ~40 MB written, JSON-encoded twice, for nothing. A real ansible-playbook run through ansible-runner; the
test looks into the run's temporary directory from inside the run (on_event) and at the end.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import labkit

from gpufleet.runner import run_playbook

# Each host returns a result of ~40 KB, as the audit does.
PLAY = labkit.play(
    "Results as big as the audit's",
    tasks="""
    - name: A big result
      ansible.builtin.set_fact:
        big: "{{ 'x' * 40000 }}"
    - name: Echo it
      ansible.builtin.debug:
        var: big | length
    """,
)


def _job_event_files(tmp: Path) -> tuple[list[Path], list[Path]]:
    """(event files ansible-runner wrote, stdout files) under every gpufleet run directory in tmp."""
    events = [
        p
        for p in tmp.glob("gpufleet-run-*/runner/artifacts/*/job_events/*.json")
        if not p.name.endswith("-partial.json")  # the callback's hand-over files, read and removed by the runner
    ]
    return events, list(tmp.glob("gpufleet-run-*/runner/artifacts/*/stdout"))


def test_events_and_stdout_are_not_written(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(runs))  # run_playbook's TemporaryDirectory goes here
    inventory = labkit.write_inventory(tmp_path, {f"h{i}": labkit.local_host() for i in range(3)})
    seen: list[tuple[int, int]] = []
    kinds: list[str] = []

    def on_event(event):
        kinds.append(event.get("event", ""))
        written, stdout = _job_event_files(runs)
        seen.append((len(written), sum(p.stat().st_size for p in stdout)))

    result = run_playbook(str(labkit.write_play(tmp_path, PLAY)), str(inventory), on_event=on_event, keep_events=True)
    assert result.rc == 0, result.status
    # The caller still gets every host's results and, with keep_events, every event.
    assert sorted(result.hosts) == ["h0", "h1", "h2"]
    assert all(len(h.results["A big result"]["ansible_facts"]["big"]) == 40000 for h in result.hosts.values())
    assert kinds.count("runner_on_ok") == 6 and len(result.events) == len(kinds)
    # Nothing was written while the run went on: no event file, no stdout (seen from the last event on).
    assert seen, "no event reached on_event"
    assert seen[-1] == (0, 0), f"ansible-runner wrote {seen[-1][0]} event files, {seen[-1][1]} bytes of stdout"
