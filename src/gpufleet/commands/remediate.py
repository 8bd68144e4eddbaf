"""`gpufleet remediate`: audit (before), run playbooks/remediate.yml, audit (after), write remediation.json.

What counts as fixed, new or unverified is report/diff's judgement (``diff_host``), the same as `gpufleet report
diff`: a finding is fixed only when its rule passed in the audit afterwards; one skipped, errored or missing then is
unverified. A changed task whose rules all passed before fixed nothing: it made persistent what was already in
effect (``--persist``). ansible-playbook's own output goes to the run directory (ansible.log); with ``--diff`` the
terminal gets gpufleet's per-host list of the changed tasks with their diffs (``render_changes``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path
from typing import Any

from gpufleet import exits, preflight
from gpufleet.commands import options
from gpufleet.commands.audit import run_audit
from gpufleet.runner import run_playbook
from gpufleet.text import clean

PLAYBOOK = "remediate.yml"


def register(sub: argparse._SubParsersAction) -> None:
    parser = options.command(
        sub,
        "remediate",
        help="fix findings (roles by area and rule-id tags), audit before and after",
        description="Audit, run the remediation roles (playbooks/remediate.yml), audit again, and say per host what "
        "was fixed, what still fails and why. Every change is recorded for `gpufleet rollback`.",
        examples="""
  gpufleet remediate -i inventories/prod --check --diff     # what would change, with diffs
  gpufleet remediate -i inventories/prod --persist          # also persist values that already hold
  gpufleet remediate -i inventories/prod -l gpu01 --tags memory,HOST-CPU-001
  gpufleet remediate -i inventories/prod --fail-on high     # exit 1 if high findings still fail
""",
    )
    options.fleet(parser, inventory_required=True)
    parser.add_argument("--tags", help="areas (memory,cpu,network,power,health,gpu,host) or rule ids (GPU-PWR-001,...)")
    options.check(parser, "what would change")
    parser.add_argument(
        "--diff",
        action="store_true",
        help="per host, each changed task with its rules and diff, paths as on the host (with --check: the changes "
        "it would make); ansible-playbook's own output is in the run directory's ansible.log",
    )
    parser.add_argument(
        "--persist",
        action="store_true",
        help="also write the settings of rules that already pass (sysctl.d, limits.d, the GPU boot-time config), so "
        "that they survive a reboot: the play variable gpufleet_remediate_persist=true. By default only what fixes "
        "a failing finding is changed",
    )
    options.out(parser)
    options.fail_on(parser, afterwards=True)
    options.forks(parser)
    options.host_timeout(parser)
    parser.add_argument(
        "--lock-timeout",
        type=options.seconds,
        metavar="SECONDS",
        help="wait this long for another remediation of the same host to finish (default: gpufleet_lock_timeout, 300)",
    )
    parser.set_defaults(func=run)


def _fixable(finding: dict[str, Any]) -> bool:
    return bool((finding.get("fix") or {}).get("role"))


# Roles remediate.yml runs only when asked (the variable that turns each on).
OPT_IN_ROLES = {"nvidia_driver": "gpufleet_driver_enabled"}
_RULE_TAG = re.compile(r"^[A-Z]+-[A-Z]+-\d{3}$")
# A role's `<role>_root` points it at a tree other than the real root: a fixture tree, a simulated host. Tasks that
# change devices rather than files (NICs) run only on the real root: `when: <role>_root == '/'`.
_ROOT_CONDITION = re.compile(r"^\s*(\w+_root)\s*==\s*['\"]/['\"]\s*$")
_DEBUG_ACTIONS = ("ansible.builtin.debug", "debug", "ansible.legacy.debug")


def _role_name(role: Any) -> str:
    return str(role or "").rsplit(".", 1)[-1]


def _first_sentence(text: str) -> str:
    text = " ".join(str(text).split())
    end = text.find(". ")
    return text[: end + 1] if end > 0 else text


# Modules whose diff names a file on the controller (the template's rendered copy, the copied source) as its "after":
# the file the host gets is their ``dest``.
_CONTROLLER_SOURCE_ACTIONS = {
    f"{ns}.{name}" for ns in ("ansible.builtin", "ansible.legacy") for name in ("template", "copy")
} | {"template", "copy"}


def _as_text(value: Any) -> str:
    """A side of a diff as text: a dict (e.g. ansible.builtin.file's path and state) one ``key: value`` a line."""
    if isinstance(value, dict):
        items = sorted(value.items())
        return "".join(f"{k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}\n" for k, v in items)
    if isinstance(value, list):
        return json.dumps(value, indent=4, sort_keys=True) + "\n"
    return "" if value is None else str(value)


def unified_diffs(res: dict[str, Any], action: str | None = None) -> list[str]:
    """The diffs a task returned (Ansible's ``diff``: one dict or a list; each with ``before``/``after`` strings or
    dicts, or ``prepared`` text), each as unified diff text whose headers name the path on the host: a
    template's or copy's ``after_header`` (a file on the controller) becomes its ``dest``; a diff without headers
    takes the result's ``path``/``dest``. Diffs with nothing in them (before == after) are left out. A loop's
    result: the diffs of its items that changed."""
    if isinstance(res.get("results"), list):
        return [
            t
            for item in res["results"]
            if isinstance(item, dict) and item.get("changed")
            for t in unified_diffs(item, action)
        ]
    raw = res.get("diff")
    items = raw if isinstance(raw, list) else [raw] if isinstance(raw, dict) else []
    args = (res.get("invocation") or {}).get("module_args") or {}
    host_path = res.get("dest") or args.get("dest") or res.get("path") or args.get("path")
    texts = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("prepared"):
            texts.append(str(item["prepared"]).rstrip("\n"))
            continue
        before, after = _as_text(item.get("before")), _as_text(item.get("after"))
        if before == after:
            continue
        before_header = item.get("before_header") or host_path or "before"
        after_header = item.get("after_header") or host_path or "after"
        if action in _CONTROLLER_SOURCE_ACTIONS and host_path:
            before_header = after_header = host_path
        # A header is one line (a path could hold a line break); the diff's lines are split from the texts.
        lines = difflib.unified_diff(
            before.splitlines(), after.splitlines(), clean(before_header), clean(after_header), lineterm=""
        )
        texts.append("\n".join(lines))
    return [t for t in texts if t]


class Watcher:
    """Follows the remediation playbook's events: progress on stderr (``stream``), each host's changed tasks, the
    facts the playbook sets (reboot, role overrides, refused changes), the roles that ran on each host, and the
    rule-tagged tasks a role skipped or used to explain itself (``summary`` turns these into the per-host summary).

    Changed tasks are listed by their display name (for a person to read); what the summary decides on comes from
    the facts the playbook sets, the events' role and the tasks' rule-id tags and conditions (read from the task
    files: ansible-runner's events carry neither). ``roots``: host -> {"<role>_root": value} as the inventory sets
    them (``preflight.host_variables``)."""

    def __init__(
        self, check: bool = False, stream=None, roots: dict[str, dict[str, Any]] | None = None, diff: bool = False
    ):
        self.check = check
        self.stream = stream
        self.roots = roots or {}
        self.diff = diff  # keep each changed task's diffs (--diff)
        self.changes: dict[str, list[str]] = {}
        self.tasks: dict[str, list[dict[str, Any]]] = {}  # host -> each changed task: role, rules, diffs
        self.reboot: dict[str, bool] = {}
        self.overrides: dict[str, list[dict[str, Any]]] = {}
        self.blocked: dict[str, list[str]] = {}
        self.restart: dict[str, list[str]] = {}
        self.roles: dict[str, set[str]] = {}
        self.root_only: dict[str, dict[str, str]] = {}  # host -> rule -> the `<role>_root` its skipped task needs
        self.explained: dict[str, dict[str, str]] = {}  # host -> rule -> what the role said about leaving it
        self.role: str | None = None

    def say(self, line: str) -> None:
        if self.stream is False:
            return
        try:
            print(clean(line), file=self.stream or sys.stderr, flush=True)  # host and task names: host data
        except (BrokenPipeError, ValueError):  # stderr's reader went away: carry on quietly
            self.stream = False

    def __call__(self, event: dict[str, Any]) -> None:
        from gpufleet.runner import action_of, task_info

        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "playbook_on_task_start":
            role = _role_name(data.get("role"))
            if role and role != self.role:
                self.say(f"gpufleet: remediating: role {role}")
            self.role = role or self.role
            return
        host = data.get("host")
        if not host or kind not in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
            return
        res = data.get("res") or {}
        role = _role_name(data.get("role"))
        self.roles.setdefault(host, set())
        if role:
            self.roles[host].add(role)
        task = data.get("task", "")
        where = f"{role}: {task}" if role else task
        info = task_info(data.get("task_path"))
        rules = [t for t in info.tags if _RULE_TAG.match(t)]
        if role and kind in ("runner_on_skipped", "runner_on_ok"):
            if kind == "runner_on_skipped":
                for condition in info.when:
                    match = _ROOT_CONDITION.match(condition)
                    if match and match.group(1) == f"{role}_root":
                        for rule in rules:
                            self.root_only.setdefault(host, {})[rule] = match.group(1)
            elif action_of(data) in _DEBUG_ACTIONS and res.get("msg"):
                # A role explains, with a debug task tagged with the rule ids, why it leaves them alone.
                for rule in rules:
                    self.explained.setdefault(host, {})[rule] = _first_sentence(res["msg"])
        if kind == "runner_on_skipped":
            return
        if kind == "runner_on_unreachable":
            self.say(f"  {host}: UNREACHABLE at {where}")
            return
        if kind == "runner_on_failed" and not data.get("ignore_errors"):
            self.say(f"  {host}: FAILED {where}")
            return
        if res.get("changed"):
            self.changes.setdefault(host, []).append(task)
            self.tasks.setdefault(host, []).append(
                {
                    "task": task,
                    "role": role or None,
                    "rules": sorted(set(rules)),
                    "diff": unified_diffs(res, action_of(data)) if self.diff else [],
                }
            )
            self.say(f"  {host}: {'would change' if self.check else 'changed'}: {where}")
        facts = res.get("ansible_facts") or {}
        if "gpufleet_reboot_required" in facts:
            self.reboot[host] = bool(facts["gpufleet_reboot_required"])
        if isinstance(facts.get("gpufleet_role_overrides"), list):
            self.overrides[host] = facts["gpufleet_role_overrides"]
        if isinstance(facts.get("gpufleet_blocked"), list):
            self.blocked[host] = [str(m) for m in facts["gpufleet_blocked"]]
        if isinstance(facts.get("gpufleet_restart_required"), list):
            self.restart[host] = [str(s) for s in facts["gpufleet_restart_required"]]

    def why_not_applied(self, host: str, rule: str, role: str) -> str | None:
        """Why a fixable finding was left alone on ``host``, or None when nothing says so (then it is "still
        failing (auto-fixable)"): its role is opt-in and was not turned on, or did not run; its task needs the real
        root and the host's ``<role>_root`` is a tree (a simulated host); the role said why (a debug task tagged
        with the rule)."""
        ran = self.roles.get(host)
        if ran is None:  # no event from this host: nothing is known
            return None
        if role not in ran:
            if role in OPT_IN_ROLES:
                return f"skipped: opt-in role ({role}: set {OPT_IN_ROLES[role]}: true)"
            return f"not run: role {role} did not run (--tags, or a failure before it)"
        var = (self.root_only.get(host) or {}).get(rule)
        root = (self.roots.get(host) or {}).get(var) if var else None
        if var and root not in (None, "/"):
            return f"not applicable on a simulated host ({var} is not '/': devices are tuned only on the real root)"
        said = (self.explained.get(host) or {}).get(rule)
        if said:
            return f"left alone by role {role}: {said}"
        return None

    def not_applied(self, before: dict[str, Any]) -> dict[str, dict[str, str]]:
        """host -> {rule id: why the remediation left it alone} for each auto-fixable finding of ``before``."""
        from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema

        out: dict[str, dict[str, str]] = {}
        for name, host in before["hosts"].items():
            for f in schema.host_findings(host):
                if schema.is_finding(f) and _fixable(f):
                    why = self.why_not_applied(name, f["rule"], f["fix"]["role"])
                    if why:
                        out.setdefault(name, {})[f["rule"]] = why
        return out

    def summary(self, before: dict[str, Any], after: dict[str, Any] | None) -> dict[str, Any]:
        return remediation_summary(
            before,
            after,
            self.changes,
            self.reboot,
            self.check,
            self.overrides,
            self.blocked,
            self.not_applied(before),
            self.restart,
            tasks=self.tasks,
        )


def remediation_summary(
    before: dict[str, Any],
    after: dict[str, Any] | None,
    changes: dict[str, list[str]],
    reboot: dict[str, bool],
    check: bool,
    overrides: dict[str, list[dict[str, Any]]] | None = None,
    blocked: dict[str, list[str]] | None = None,
    not_applied: dict[str, dict[str, str]] | None = None,
    restart: dict[str, list[str]] | None = None,
    tasks: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """Per host: fixed (passed afterwards), unverified (a finding before, neither passing nor failing afterwards:
    skipped, errored, not run), remaining (auto-fixable or manual), new findings, what changed, reboot needed, and
    the role variables that took the place of a policy value (the fix then follows the variable, not what the audit
    judged), and why the remediation left a fixable finding alone (``not_applied``: rule id -> reason, e.g. an
    opt-in role that was not turned on). ``tasks``: host -> the changed tasks (``Watcher.tasks``: task, role,
    rule-id tags, diffs), listed as ``changes``, each ``persistent`` when its rules all passed before (it fixed
    nothing: it wrote down what was already in effect); ``persisted``: those rules. The collection must be importable
    (``paths.import_collection``)."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import diff, schema

    hosts = {}
    for name, host in sorted(before["hosts"].items()):
        was = {f["rule"]: f for f in schema.host_findings(host) if schema.is_finding(f)}
        now_host = (after or before)["hosts"].get(name, {"findings": [], "status": "failed"})
        now = {f["rule"]: f for f in schema.host_findings(now_host) if schema.is_finding(f)}
        passed = {f.get("rule") for f in schema.host_findings(host) if f.get("status") == "pass"}
        changed = [
            {
                **t,
                "persistent": bool(t.get("rules")) and set(t["rules"]) <= passed,
                "in_effect": sorted(set(t.get("rules") or []) & passed),
            }
            for t in (tasks or {}).get(name) or []
        ]
        entry = {
            "status_before": host["status"],
            "status_after": now_host.get("status") if after is not None or check else None,
            "changed_tasks": changes.get(name, []),
            "reboot_required": bool(reboot.get(name)),
            "role_overrides": list((overrides or {}).get(name) or []),
            # Changes a role refused to make now (e.g. a driver upgrade under busy GPUs), with the blocker named.
            "blocked": list((blocked or {}).get(name) or []),
            "not_applied": dict((not_applied or {}).get(name) or {}),
            # Services whose new limits take effect only when they restart (host_tuning_restart_ok was not set).
            "restart_required": list((restart or {}).get(name) or []),
            "changes": changed,
            "persisted": sorted({r for t in changed if t["persistent"] for r in t["rules"]}),
        }
        if check:
            entry["would_fix"] = sorted(r for r, f in was.items() if _fixable(f))
            entry["manual"] = sorted(r for r, f in was.items() if not _fixable(f))
        elif after is None or now_host.get("status") != "ok":
            # Not audited afterwards (interrupted, or the host failed the second audit): nothing is known.
            entry.update(fixed=None, unverified=None, remaining_auto=None, remaining_manual=None, new=None)
        else:
            judged = diff.diff_host(host, now_host)
            entry["fixed"] = judged["fixed"]
            entry["unverified"] = judged["unverified"]
            entry["remaining_auto"] = sorted(r for r, f in now.items() if _fixable(f))
            entry["remaining_manual"] = sorted(r for r, f in now.items() if not _fixable(f))
            entry["new"] = judged["new"]
            # Only what still fails needs a reason (a rule fixed by another of its tasks needs none).
            entry["not_applied"] = {r: why for r, why in entry["not_applied"].items() if r in entry["remaining_auto"]}
        if check:
            entry["not_applied"] = {r: why for r, why in entry["not_applied"].items() if r in entry["would_fix"]}
        hosts[name] = entry
    return {
        "check": check,
        "before": before["run"]["id"],
        "after": after["run"]["id"] if after else None,
        "hosts": hosts,
    }


def _render_overrides(name: str, h: dict[str, Any]) -> list[str]:
    return [
        f"{name}: role variable {o.get('variable')}={o.get('value')!r} used instead of policy "
        f"{o.get('policy_key')}={o.get('policy_value')!r}"
        for o in h.get("role_overrides") or []
    ]


def render_remediation(summary: dict[str, Any]) -> str:
    """The per-host summary, one line a host (and one per role override or refusal), for a terminal."""
    lines = []
    for name, h in summary["hosts"].items():
        lines.extend(_render_overrides(name, h))
        lines.extend(f"{name}: refused: {message}" for message in h.get("blocked") or [])
        not_applied = h.get("not_applied") or {}
        by_reason: dict[str, list[str]] = {}
        for rule, reason in sorted(not_applied.items()):
            by_reason.setdefault(reason, []).append(rule)
        reasons = [f"{reason}: {', '.join(rules)}" for reason, rules in by_reason.items()]
        persisted = h.get("persisted") or []
        if summary["check"]:
            would = [r for r in h["would_fix"] if r not in not_applied]
            lines.append(
                "; ".join(
                    [
                        f"{name}: would fix {', '.join(would) or 'nothing'}",
                        f"{len(h['changed_tasks'])} task(s) would change",
                        *([f"would make persistent (already in effect): {', '.join(persisted)}"] if persisted else []),
                        *reasons,
                        *([f"manual: {', '.join(h['manual'])}"] if h["manual"] else []),
                    ]
                )
            )
            continue
        if h["fixed"] is None:
            lines.append(
                f"{name}: not audited afterwards; {len(h['changed_tasks'])} task(s) changed something"
                + ("; reboot required" if h["reboot_required"] else "")
            )
            continue
        if h["fixed"]:
            parts = [f"fixed {', '.join(h['fixed'])}"]
        elif h["changed_tasks"]:
            # Something changed, yet no finding is fixed (yet): a reboot pending, or a change the audit cannot see.
            parts = [f"no finding fixed; {len(h['changed_tasks'])} task(s) changed something"]
        else:
            parts = ["fixed nothing"]
        if persisted:
            parts.append(f"made persistent (already in effect): {', '.join(persisted)}")
        if h.get("unverified"):
            parts.append(f"unverified (skipped, errored or not run afterwards): {', '.join(h['unverified'])}")
        still = [r for r in h["remaining_auto"] if r not in not_applied]
        if still:
            parts.append(f"still failing (auto-fixable): {', '.join(still)}")
        parts.extend(reasons)
        if h["remaining_manual"]:
            parts.append(f"needs a person: {', '.join(h['remaining_manual'])}")
        if h["new"]:
            parts.append(f"NEW: {', '.join(h['new'])}")
        if h["reboot_required"]:
            parts.append("reboot required")
        if h.get("restart_required"):
            parts.append(f"restart needed (new limits apply then): {', '.join(h['restart_required'])}")
        lines.append(f"{name}: " + "; ".join(parts))
    # Each line holds host data (a role's refusal, a role variable's value, changed tasks' names): cleaned, so an
    # escape sequence or a newline in it stays inside its line.
    return "\n".join(clean(line) for line in lines)


DIFF_LINES = 40  # a diff longer than this shows its first lines in the terminal; remediation.json has it whole


NEW_FILE_LINES = 12  # a new file longer than this shows as its path and size in the terminal


def _new_file_lines(lines: list[str]) -> int:
    """How many lines a unified diff that creates a file adds (0 for any other diff): headers, one ``@@ -0,0``
    hunk, then only added lines."""
    if len(lines) < 3 or not lines[2].startswith("@@ -0,0 "):
        return 0
    body = lines[3:]
    return len(body) if all(line.startswith("+") for line in body) else 0


def _task_label(task: dict[str, Any], check: bool) -> str | None:
    """What a changed task did for its rules: made persistent what already held, or worked on the others."""
    rules = task.get("rules") or []
    if not rules:
        return None
    if task.get("persistent"):
        return f"{'would make' if check else 'made'} persistent (already in effect): {', '.join(rules)}"
    in_effect = task.get("in_effect") or []
    label = f"{'would fix' if check else 'to fix'}: {', '.join(r for r in rules if r not in in_effect)}"
    return label + (f" (already in effect: {', '.join(in_effect)})" if in_effect else "")


def _diff_line(line: str, color: bool) -> str:
    line = clean(line)
    if not color:
        return line
    for start, code in (("+++", "1"), ("---", "1"), ("+", "32"), ("-", "31"), ("@@", "36")):
        if line.startswith(start):
            return f"\033[{code}m{line}\033[0m"
    return line


def render_changes(summary: dict[str, Any], color: bool = False, max_lines: int = DIFF_LINES) -> str:
    """``--diff``: per host, each changed (or would-change) task with its role, what it did for its rules and the
    diffs it returned (headers: the paths on the host). Every line is cleaned (host data); ``color`` adds ANSI
    colours after that."""
    check = summary["check"]
    out: list[str] = []
    for name, h in summary["hosts"].items():
        changes = h.get("changes") or []
        if not changes:
            continue
        out.append(clean(f"{name}: {len(changes)} task(s) {'would change' if check else 'changed'}"))
        for task in changes:
            where = f"{task['role']}: {task['task']}" if task.get("role") else str(task.get("task"))
            out.append(clean(f"  {where}"))
            label = _task_label(task, check)
            if label:
                out.append(clean(f"    {label}"))
            diffs = task.get("diff") or []
            if not diffs:
                out.append("    (no diff returned)")
            for text in diffs:
                lines = str(text).split("\n")
                if _new_file_lines(lines) > NEW_FILE_LINES:  # a script or unit installed whole: its size, not its text
                    out.extend(f"    {_diff_line(line, color)}" for line in lines[:2])
                    out.append(f"    (new file, {_new_file_lines(lines)} lines: remediation.json has its text)")
                    continue
                out.extend(f"    {_diff_line(line, color)}" for line in lines[:max_lines])
                if len(lines) > max_lines:
                    out.append(f"    ... {len(lines) - max_lines} more line(s) (remediation.json has the whole diff)")
    return "\n".join(out)


def closing_lines(summary: dict[str, Any], report: Path, raw_log: Path, undo: str) -> list[str]:
    """Where the report and ansible-playbook's own output are, and how to undo the run: no undo after --check
    (nothing changed) nor after a run in which no task changed anything and no host failed (a failed task may have
    changed something before it failed); ``undo`` (the rollback command) otherwise."""
    lines = [f"ansible-playbook output: {raw_log}"]
    if summary["check"]:
        lines.append(f"report: {report}")
    elif not summary.get("failed") and not any(h.get("changed_tasks") for h in summary["hosts"].values()):
        lines.append(f"before/after report: {report}  (nothing changed: nothing to undo)")
    else:
        lines.append(f"before/after report: {report}  (undo: {undo})")
    return lines


def print_failed(failed: dict[str, str], out=None) -> None:
    """The hosts whose remediation failed, each with its message (a module's or a shell's own words, cleaned)."""
    for name, message in sorted(failed.items()):
        print(clean(f"{name}: remediation FAILED: {message}"), file=out or sys.stdout)


def run(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out).resolve() / f"remediation-{run_id}"
    overrides, host_names = preflight.prepare(args, out)
    preflight.refuse_local_changes(args.inventory, args.limit, "remediate")
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

    def stopped(stage: str, signame: str, summary: dict[str, Any]) -> int:
        """An interrupted remediation: remediation.json says where it stopped; nothing more runs."""
        summary.update(run_id=run_id, complete=False, interrupted={"signal": signame, "stage": stage})
        path = writer.write_atomic(out / "remediation.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
        if summary.get("hosts"):
            if args.diff:
                print(render_changes(summary, color=options.use_color(sys.stdout)))
            print(render_remediation(summary))
        print(f"gpufleet: interrupted by {signame} during {stage}; partial report: {path}", file=sys.stderr)
        # Check mode changed nothing; an audit interrupted after a run that changed nothing has nothing to undo.
        nothing_changed = stage == "audit-after" and not any(h["changed_tasks"] for h in summary["hosts"].values())
        if stage != "audit-before" and not args.check and not nothing_changed:
            undo = f"gpufleet rollback --run {run_id} {options.as_options(args.inventory)}"
            print(f"undo what changed: {undo}", file=sys.stderr)
        return exits.EXIT_INTERRUPTED

    before, interrupted = run_audit(args, out / "before", overrides, host_names, "auditing (before)")
    if interrupted:
        return stopped("audit-before", interrupted, {"check": args.check, "before": None, "after": None, "hosts": {}})
    if before is None:
        return exits.EXIT_HOSTS
    before.pop("_files")
    roles = sorted({f["fix"]["role"] for h in before["hosts"].values() for f in h["findings"] if _fixable(f)})
    roots = preflight.host_variables(args.inventory, args.limit, [f"{role}_root" for role in roles])
    watch = Watcher(check=args.check, roots=roots, diff=args.diff)
    lock_vars = {"gpufleet_lock_timeout": args.lock_timeout} if args.lock_timeout is not None else {}
    # Passed only when asked: an inventory's own gpufleet_remediate_persist is not overridden with false.
    persist_vars = {"gpufleet_remediate_persist": True} if args.persist else {}
    raw_log = out / "ansible.log"
    out.mkdir(parents=True, exist_ok=True)
    print(f"gpufleet: remediating{' (check mode)' if args.check else ''}, run {run_id}", file=sys.stderr)
    result = run_playbook(
        PLAYBOOK,
        args.inventory,
        limit=args.limit,
        forks=args.forks,
        tags=args.tags,
        check=args.check,
        diff=args.diff,
        quiet=not args.verbose,
        on_event=watch,
        extravars={"gpufleet_run_id": run_id, "gpufleet_policy_overrides": overrides, **lock_vars, **persist_vars},
        log_path=raw_log,
    )
    failed = {n: h.message for n, h in result.hosts.items() if h.status != "ok"}
    if result.interrupted:
        summary = watch.summary(before, None)
        summary["failed"] = failed
        return stopped("remediate", result.interrupted, summary)
    after = None
    if not args.check:
        after, interrupted = run_audit(args, out / "after", overrides, host_names, "auditing (after)")
        if after is not None:
            after.pop("_files")
        if interrupted:
            summary = watch.summary(before, after)
            summary["failed"] = failed
            return stopped("audit-after", interrupted, summary)
    summary = watch.summary(before, after)
    summary["run_id"] = run_id
    summary["failed"] = failed
    summary["complete"] = True
    summary["interrupted"] = None

    path = writer.write_atomic(out / "remediation.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if args.diff:
        changes = render_changes(summary, color=options.use_color(sys.stdout))
        print(changes or f"no task {'would change' if args.check else 'changed'} anything")
    print(render_remediation(summary))
    print_failed(failed)
    undo = f"gpufleet rollback --run {run_id} {options.as_options(args.inventory)}"
    print("\n".join(closing_lines(summary, path, raw_log, undo)))
    if failed or after is None and not args.check:
        return exits.EXIT_HOSTS
    return options.exit_with_reason(after, args.fail_on, "afterwards") if after else exits.EXIT_OK
