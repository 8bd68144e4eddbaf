"""What `gpufleet remediate` prints (issue 29): with --diff, gpufleet's own per-host list of the changed tasks with
their diffs (headers: the path on the host, never the controller's template or source), host strings cleaned; a
task whose rules all passed before is named as persistence, not as a fix; the undo hint only when something may have
changed; ansible-playbook's own output in the raw log, its deprecation warnings never on the terminal."""

from __future__ import annotations

import io
import re
from pathlib import Path

from gpufleet import runner
from gpufleet.commands import remediate

TEMPLATE_SRC = "/root/.ansible/tmp/ansible-local-1234/tmpab/limits.conf.j2"
LIMITS = "/etc/security/limits.d/90-gpufleet.conf"
# What a host could put in a file's text: clear the screen, a C1 CSI, a carriage return and a forged line.
HOSTILE = "x\x1b[2J\x9b31m\r\nFAKE fixed everything"


def _finding(rule, status):
    return {"rule": rule, "status": status, "severity": "high", "fix": {"role": "gpu_runtime"}}


def _report(run_id, *findings):
    return {"run": {"id": run_id}, "hosts": {"h1": {"status": "ok", "findings": list(findings)}}}


def _tasks_file(tmp_path):
    """A role's task file, as the Watcher reads it for a task's rule-id tags (ansible-runner's task_path)."""
    path = tmp_path / "main.yml"
    path.write_text(
        "- name: Power limit (GPU-PWR-002)\n"
        "  gpufleet.tuning.gpu_settings: {power_limit: max}\n"
        "  tags: [power, GPU-PWR-002]\n"
        "- name: Persistence mode (GPU-PWR-001)\n"
        "  gpufleet.tuning.gpu_settings: {persistence_mode: true}\n"
        "  tags: [power, GPU-PWR-001]\n"
        "- name: Memlock limit for users' GPU jobs (HOST-MEM-004)\n"
        "  ansible.builtin.template: {src: limits.conf.j2, dest: /etc/security/limits.d/90-gpufleet.conf}\n"
        "  tags: [memory, HOST-MEM-004]\n"
    )
    return path


def _changed(task, line, path, diff, action, role="gpu_runtime", **res):
    return {
        "event": "runner_on_ok",
        "event_data": {
            "host": "h1",
            "task": task,
            "role": role,
            "task_path": f"{path}:{line}",
            "resolved_action": action,
            "res": {"changed": True, "diff": diff, **res},
        },
    }


def _watch(tmp_path, check=True):
    path = _tasks_file(tmp_path)
    watch = remediate.Watcher(check=check, stream=io.StringIO(), roots={"h1": {}}, diff=True)
    gpu = "gpufleet.tuning.gpu_settings"
    power = {"before": "GPU 0 power_limit_w: 300\n", "after": "GPU 0 power_limit_w: 700\n"}
    watch(_changed("Power limit (GPU-PWR-002)", 1, path, [power], gpu))
    config = {"before_header": "/etc/gpufleet/gpu-runtime.json", "after_header": "/etc/gpufleet/gpu-runtime.json"}
    persistence = [{"before": "", "after": ""}, {**config, "before": "", "after": "GPU-1 persistence_mode: true\n"}]
    watch(_changed("Persistence mode (GPU-PWR-001)", 4, path, persistence, gpu))
    limits = [{"before": "", "after_header": TEMPLATE_SRC, "after": "* soft memlock unlimited\n"}]
    invocation = {"module_args": {"dest": LIMITS, "src": TEMPLATE_SRC}}
    watch(
        _changed(
            "Memlock limit for users' GPU jobs (HOST-MEM-004)",
            7,
            path,
            limits,
            "ansible.builtin.template",
            role="host_tuning",
            invocation=invocation,
        )
    )
    return watch


BEFORE = _report(
    "a", _finding("GPU-PWR-002", "fail"), _finding("GPU-PWR-001", "pass"), _finding("HOST-MEM-004", "pass")
)


def test_diff_lists_each_would_change_task_with_its_role_rules_and_diff_against_the_host_path(tmp_path):
    summary = _watch(tmp_path).summary(BEFORE, None)
    text = remediate.render_changes(summary)
    assert text.splitlines()[0] == "h1: 3 task(s) would change"
    assert "  gpu_runtime: Power limit (GPU-PWR-002)\n    would fix: GPU-PWR-002\n" in text
    assert "    -GPU 0 power_limit_w: 300\n    +GPU 0 power_limit_w: 700" in text
    # the template's diff names the file the host gets, not the controller's rendered copy of the template
    assert f"    --- {LIMITS}\n    +++ {LIMITS}\n" in text
    assert TEMPLATE_SRC not in text
    # gpu_settings' empty GPU diff (nothing to set on the GPUs) is left out; the boot-time file's diff is shown
    assert "    +++ /etc/gpufleet/gpu-runtime.json\n" in text and "+GPU-1 persistence_mode: true" in text
    assert "(no diff returned)" not in text
    assert "PLAY [" not in text and "TASK [" not in text


def test_a_task_whose_rules_all_passed_before_is_named_persistence_not_a_fix(tmp_path):
    summary = _watch(tmp_path).summary(BEFORE, None)
    host = summary["hosts"]["h1"]
    assert host["would_fix"] == ["GPU-PWR-002"]
    assert host["persisted"] == ["GPU-PWR-001", "HOST-MEM-004"]
    assert [t["persistent"] for t in host["changes"]] == [False, True, True]
    line = remediate.render_remediation(summary)
    assert line == (
        "h1: would fix GPU-PWR-002; 3 task(s) would change; "
        "would make persistent (already in effect): GPU-PWR-001, HOST-MEM-004"
    )
    text = remediate.render_changes(summary)
    assert (
        "  gpu_runtime: Persistence mode (GPU-PWR-001)\n    would make persistent (already in effect): GPU-PWR-001"
        in (text)
    )
    assert "would fix: GPU-PWR-001" not in text and "would fix: HOST-MEM-004" not in text

    # After a real run: "made persistent", and a persistence is never counted as fixed.
    after = _report(
        "b", _finding("GPU-PWR-002", "pass"), _finding("GPU-PWR-001", "pass"), _finding("HOST-MEM-004", "pass")
    )
    done = _watch(tmp_path, check=False).summary(BEFORE, after)
    assert done["hosts"]["h1"]["fixed"] == ["GPU-PWR-002"]
    assert remediate.render_remediation(done) == (
        "h1: fixed GPU-PWR-002; made persistent (already in effect): GPU-PWR-001, HOST-MEM-004"
    )
    assert "    made persistent (already in effect): HOST-MEM-004" in remediate.render_changes(done)


def test_host_strings_in_a_diff_stay_data(tmp_path):
    """A file's text on the host (a diff's lines, its path, a task name) holds escapes and line breaks: each line is
    cleaned, so nothing reaches the terminal as control and no line is forged; our colours are added after."""
    watch = remediate.Watcher(check=True, stream=io.StringIO(), roots={"h1": {}}, diff=True)
    diff = {"before_header": f"/etc/{HOSTILE}", "after_header": "/etc/x", "before": HOSTILE + "\n", "after": "y\n"}
    watch(_changed(f"Set {HOSTILE}", 1, tmp_path / "none.yml", diff, "gpufleet.tuning.sysfs_settings"))
    text = remediate.render_changes(watch.summary(_report("a"), None), color=True)
    ours = re.compile(r"\x1b\[(?:0|1|31|32|36)m")
    for line in text.split("\n"):
        assert not line.lstrip().startswith("FAKE"), line
        assert not [c for c in ours.sub("", line) if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F], repr(line)
    assert "--- /etc/x\\x1b[2J\\x9b31m\\r\\nFAKE fixed everything" in text  # the path, shown as escapes
    assert "    \x1b[31m-FAKE fixed everything\x1b[0m" in text  # a line of the file: a line of the diff


def test_a_changed_task_without_a_diff_says_so(tmp_path):
    watch = remediate.Watcher(check=True, stream=io.StringIO(), roots={"h1": {}}, diff=True)
    watch(_changed("Set something", 1, tmp_path / "none.yml", None, "gpufleet.tuning.sysfs_settings"))
    assert "    (no diff returned)" in remediate.render_changes(watch.summary(_report("a"), None))


def test_file_and_copy_diffs_name_the_path_on_the_host():
    file_res = {
        "path": "/etc/gpufleet",
        "diff": {
            "before": {"path": "/etc/gpufleet", "state": "absent"},
            "after": {"path": "/etc/gpufleet", "state": "directory"},
        },
    }
    [text] = remediate.unified_diffs(file_res, "ansible.builtin.file")
    assert text.splitlines()[:2] == ["--- /etc/gpufleet", "+++ /etc/gpufleet"]
    assert "-state: absent" in text and "+state: directory" in text
    copy_res = {
        "diff": [{"before": "", "after_header": "/controller/roles/x/files/apply", "after": "#!/bin/sh\n"}],
        "invocation": {"module_args": {"dest": "/usr/local/libexec/gpufleet/apply", "src": "apply"}},
    }
    [text] = remediate.unified_diffs(copy_res, "ansible.legacy.copy")
    assert text.splitlines()[:2] == ["--- /usr/local/libexec/gpufleet/apply", "+++ /usr/local/libexec/gpufleet/apply"]
    assert remediate.unified_diffs({"diff": {"prepared": "+ added\n"}}) == ["+ added"]
    # a loop: the diffs of the items that changed, each with its own dest
    loop = {
        "changed": True,
        "results": [
            {"changed": False, "diff": [{"before": "a\n", "after": "b\n"}]},
            {**copy_res, "changed": True},
        ],
    }
    [text] = remediate.unified_diffs(loop, "ansible.builtin.copy")
    assert text.splitlines()[:2] == ["--- /usr/local/libexec/gpufleet/apply", "+++ /usr/local/libexec/gpufleet/apply"]


def test_undo_hint_only_when_something_may_have_changed():
    report, log, undo = Path("/r/remediation.json"), Path("/r/ansible.log"), "gpufleet rollback --run R -i inv"

    def closing(check, changed, failed=None):
        hosts = {"h1": {"changed_tasks": ["Set x"] if changed else []}}
        return "\n".join(
            remediate.closing_lines({"check": check, "hosts": hosts, "failed": failed or {}}, report, log, undo)
        )

    assert "rollback" not in closing(check=True, changed=True)  # --check changed nothing
    nothing = closing(check=False, changed=False)
    assert "rollback" not in nothing and "nothing changed: nothing to undo" in nothing
    assert f"(undo: {undo})" in closing(check=False, changed=True)
    assert f"(undo: {undo})" in closing(check=False, changed=False, failed={"h1": "boom"})  # it may have
    assert f"ansible-playbook output: {log}" in nothing


def test_raw_output_goes_to_the_log_whole_and_to_the_terminal_without_deprecation_warnings():
    events = [
        {"event": "verbose", "stdout": "/x/_ssh_agent.py:18: CryptographyDeprecationWarning: DSA is deprecated"},
        {"event": "verbose", "stdout": "  from cryptography.hazmat.primitives.asymmetric.dsa import ("},
        {"event": "playbook_on_play_start", "stdout": "\r\nPLAY [Remediate NVIDIA GPU servers] ****"},
        {"event": "deprecated", "stdout": "\x1b[1;35m[WARNING]: Deprecation warnings can be disabled\x1b[0m"},
        {"event": "deprecated", "stdout": "\x1b[0;35m[DEPRECATION WARNING]: Use of strategy plugins not ...\x1b[0m"},
        {"event": "runner_on_start", "stdout": ""},
        {"event": "verbose", "stdout": "  an indented line of Ansible's own"},
        {"event": "runner_on_ok", "stdout": "ok: [h1]"},
    ]
    log, terminal = io.StringIO(), io.StringIO()
    raw = runner.RawOutput(log=log, terminal=terminal)
    for event in events:
        raw(event)
    assert "[DEPRECATION WARNING]" in log.getvalue() and "CryptographyDeprecationWarning" in log.getvalue()
    assert log.getvalue().endswith("an indented line of Ansible's own\nok: [h1]\n")
    shown = terminal.getvalue()
    assert "DEPRECATION" not in shown and "Deprecation" not in shown and "from cryptography" not in shown
    assert "PLAY [Remediate" in shown and "ok: [h1]" in shown and "an indented line" in shown


class _Module:
    """What sysfs_settings reads of an AnsibleModule: its params and check mode."""

    def __init__(self, root, check_mode=True):
        self.params = {"root": str(root), "config_file": "/etc/gpufleet/sysfs.json"}
        self.check_mode = check_mode


def test_sysfs_settings_that_only_record_values_in_effect_return_the_config_files_diff(tmp_path):
    """--persist on a host whose governor already is `performance`: the task changes (it writes the boot-time
    record) and its diff shows that file, named as on the host; the value lines stay empty."""
    from ansible_collections.gpufleet.tuning.plugins.module_utils import sysfs_settings

    governor = tmp_path / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
    governor.parent.mkdir(parents=True)
    governor.write_text("performance\n")
    job = sysfs_settings.SysfsSettings(
        _Module(tmp_path), {"/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor": "performance"}
    )
    job.plan()
    job.apply()
    result = job.result()
    assert result["changed"] is True
    [text] = remediate.unified_diffs(result, "gpufleet.tuning.sysfs_settings")
    assert text.splitlines()[:2] == ["--- /etc/gpufleet/sysfs.json", "+++ /etc/gpufleet/sysfs.json"]
    assert '+    "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor": "performance"' in text
    assert not (tmp_path / "etc").exists()  # check mode


def test_a_new_file_longer_than_a_screenful_shows_its_path_and_size_not_its_text():
    script = "".join(f"line {i}\n" for i in range(80))
    summary = {
        "check": True,
        "hosts": {
            "h1": {
                "changes": [
                    {
                        "task": "Install the boot-time apply script",
                        "role": "gpu_runtime",
                        "diff": remediate.unified_diffs(
                            {"diff": {"before": "", "after": script}, "dest": "/usr/local/sbin/gpufleet-gpu-apply"}
                        ),
                    },
                    {
                        "task": "Small file",
                        "role": "gpu_runtime",
                        "diff": remediate.unified_diffs({"diff": {"before": "", "after": "a\nb\n"}, "dest": "/etc/x"}),
                    },
                ]
            }
        },
    }
    text = remediate.render_changes(summary)
    assert "    --- /usr/local/sbin/gpufleet-gpu-apply\n    +++ /usr/local/sbin/gpufleet-gpu-apply\n" in text
    assert "    (new file, 80 lines: remediation.json has its text)" in text
    assert "+line 3" not in text
    # a short new file and every other diff keep their text
    assert "    +a\n    +b" in text
