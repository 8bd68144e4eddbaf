# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""What changed between two reports, per host and rule id.

A finding is a rule whose status is fail or warn. For a host in both reports:

- ``fixed``: a finding in the old report whose rule now passes;
- ``new``: a finding in the new report that was not a finding in the old one;
- ``unchanged``: a finding in both (its status or severity may differ: see ``rules``);
- ``unverified``: a finding in the old report that the new one cannot confirm either way: the host was not
  audited this time (unreachable, failed), or the rule was skipped, errored or did not run. These are not
  counted as fixed;
- ``policy``: a finding in the old report whose rule now passes against a different target (the finding's
  ``expected`` changed: the policy changed, not the host). Not counted as fixed either.
- ``enabled``: a finding in the new report whose rule the old run's policy had turned off (skipped as disabled, or
  below its ``min_severity``): the policy turned it back on; the host may have failed it all along. Not new.

Policies: a report records the --policy files of its run (``run.policy_sources``) and, in every finding, the
target the policy set (``expected``). Different policy files, or a rule judged against a different target, are
listed, so that a finding that went away because the policy changed is not called fixed. A host that carries a
``policy_digest`` (a digest of its effective policy; optional) in both reports is compared by it too.
"""

from __future__ import annotations

from typing import Any

from . import schema
from .terminal import clean

BUCKETS = ("fixed", "new", "unchanged", "unverified", "policy", "enabled")
# Shown in the totals only when a finding is in them (empty when both runs used the same policy).
POLICY_BUCKETS = ("policy", "enabled")


LABELS = {b: b for b in BUCKETS}
LABELS["policy"] = "passes under the new policy"
LABELS["enabled"] = "turned on by the new policy"


def _results(host: Any) -> dict[str, dict]:
    return {str(f.get("rule")): f for f in schema.host_findings(host) if f.get("rule") is not None}


def _status(host: Any) -> str | None:
    return host.get("status") if isinstance(host, dict) else None


def diff_reports(old: dict, new: dict) -> dict[str, Any]:
    """Compare two reports. Returns::

        {"hosts": {name: {"fixed": [rule ids], "new": [...], "unchanged": [...], "unverified": [...],
                          "status": {"old": str, "new": str},
                          "rules": {rule id: {"title", "area", "severity", "old", "new"}}}},
         "only_old": [host names], "only_new": [host names],
         "totals": {"fixed": n, "new": n, "unchanged": n, "unverified": n, "policy": n, "enabled": n},
         "runs": {"old": run id, "new": run id},
         "policy_sources": {"old": [paths], "new": [paths]} or None when the same,
         "policy_hosts": [host names whose policy_digest differs]}

    Rule id lists are sorted; ``rules`` describes each listed rule (``old``/``new``: its status in each report,
    None where absent), taking title, area and severity from the new report where it has the rule.
    """
    old_hosts = old.get("hosts") if isinstance(old.get("hosts"), dict) else {}
    new_hosts = new.get("hosts") if isinstance(new.get("hosts"), dict) else {}
    result: dict[str, Any] = {
        "hosts": {},
        "only_old": sorted(set(old_hosts) - set(new_hosts)),
        "only_new": sorted(set(new_hosts) - set(old_hosts)),
        "totals": {b: 0 for b in BUCKETS},
        "runs": {
            "old": (old.get("run") or {}).get("id") if isinstance(old.get("run"), dict) else None,
            "new": (new.get("run") or {}).get("id") if isinstance(new.get("run"), dict) else None,
        },
    }
    sources = [_policy_sources(old), _policy_sources(new)]
    result["policy_sources"] = None if sources[0] == sources[1] else {"old": sources[0], "new": sources[1]}
    result["policy_hosts"] = sorted(
        name
        for name in set(old_hosts) & set(new_hosts)
        if isinstance(old_hosts[name], dict)
        and isinstance(new_hosts[name], dict)
        and old_hosts[name].get("policy_digest")
        and new_hosts[name].get("policy_digest")
        and old_hosts[name]["policy_digest"] != new_hosts[name]["policy_digest"]
    )
    for name in sorted(set(old_hosts) & set(new_hosts)):
        result["hosts"][name] = diff_host(old_hosts[name], new_hosts[name])
        for bucket in BUCKETS:
            result["totals"][bucket] += len(result["hosts"][name][bucket])
    return result


def _policy_sources(report: dict) -> list:
    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    return list(run.get("policy_sources") or [])


def _target_changed(was: dict | None, now: dict | None) -> bool:
    """Both results name a target (``expected``) and the targets differ: the rule was judged by another policy."""
    if not was or not now:
        return False
    old, new = was.get("expected"), now.get("expected")
    return old is not None and new is not None and old != new


def _off_by_policy(was: dict | None) -> str | None:
    """The old run's reason when its policy had turned the rule off (the skip messages rules.evaluate gives a
    rule disabled by ``rules.<id>.enabled: false`` or below ``min_severity``), else None."""
    if not was or was.get("status") != "skip":
        return None
    message = str(was.get("message") or "")
    if message.startswith("disabled by policy") or " is below policy min_severity " in message:
        return message
    return None


def diff_host(old_host: Any, new_host: Any) -> dict[str, Any]:
    """One host's findings in two reports (``hosts[name]`` of each): ``{"fixed": [rule ids], "new": [...],
    "unchanged": [...], "unverified": [...], "policy": [...], "status": {"old", "new"}, "rules": {rule id:
    {...}}}``, as in ``diff_reports``. ``fixed`` means the rule passed, against the same target, in the new report
    of a host audited there (status ok); a rule skipped, errored or absent there is ``unverified``; one that passes
    against another target is ``policy``. Each rule whose target changed has ``expected: {"old", "new"}`` in
    ``rules``; a finding whose rule the old run's policy had turned off is ``enabled`` (not ``new``), with
    ``was_off`` (the old run's reason) in ``rules``. Also what ``gpufleet remediate`` reports per host."""
    before, after = _results(old_host), _results(new_host)
    new_audited = _status(new_host) == "ok"
    buckets: dict[str, list[str]] = {b: [] for b in BUCKETS}
    for rule in sorted(set(before) | set(after)):
        was = schema.is_finding(before[rule]) if rule in before else False
        now = schema.is_finding(after[rule]) if rule in after else False
        if was and now:
            buckets["unchanged"].append(rule)
        elif now:
            buckets["enabled" if _off_by_policy(before.get(rule)) else "new"].append(rule)
        elif was:
            if new_audited and rule in after and after[rule].get("status") == "pass":
                buckets["policy" if _target_changed(before[rule], after[rule]) else "fixed"].append(rule)
            else:
                buckets["unverified"].append(rule)
    rules = {}
    for bucket in BUCKETS:
        for rule in buckets[bucket]:
            src = after.get(rule) or before.get(rule) or {}
            rules[rule] = {
                "title": src.get("title"),
                "area": src.get("area"),
                "severity": src.get("severity"),
                "old": before[rule].get("status") if rule in before else None,
                "new": after[rule].get("status") if rule in after else None,
            }
            if _target_changed(before.get(rule), after.get(rule)):
                rules[rule]["expected"] = {"old": before[rule]["expected"], "new": after[rule]["expected"]}
            if bucket == "enabled":
                rules[rule]["was_off"] = _off_by_policy(before.get(rule))
    return {**buckets, "status": {"old": _status(old_host), "new": _status(new_host)}, "rules": rules}


def render_diff(d: dict) -> str:
    """``diff_reports``'s result as text: totals, then each host with changes, then hosts in one report only."""
    totals = d.get("totals") or {}
    runs = d.get("runs") or {}
    out = []
    head = "gpufleet diff"
    if runs.get("old") or runs.get("new"):
        head += f"  {clean(runs.get('old') or '?')} -> {clean(runs.get('new') or '?')}"
    out.append(head)
    # The policy buckets are shown only when a finding is in them (empty when both runs used the same policy).
    shown = [b for b in BUCKETS if b not in POLICY_BUCKETS or totals.get(b)]
    out.append(", ".join(f"{totals.get(b, 0)} {LABELS[b]}" for b in shown))
    sources = d.get("policy_sources")
    if sources:
        out.append(
            "the runs used different policy files: "
            f"{', '.join(clean(s) for s in sources['old']) or 'none'} -> "
            f"{', '.join(clean(s) for s in sources['new']) or 'none'} (a finding gone for that is not fixed)"
        )
    if d.get("policy_hosts"):
        out.append("the policy changed between the runs on: " + ", ".join(clean(n) for n in d["policy_hosts"]))
    retargeted = sum(
        1 for h in (d.get("hosts") or {}).values() for r in (h.get("rules") or {}).values() if r.get("expected")
    )
    if retargeted:
        out.append(
            f"the policy changed between the runs: {retargeted} finding(s) judged against another target "
            "(marked 'policy:'; those that now pass are counted as 'passes under the new policy', not fixed)"
        )
    for name, h in sorted((d.get("hosts") or {}).items()):
        if not any(h.get(b) for b in BUCKETS) and h["status"]["old"] == h["status"]["new"]:
            continue
        out.append("")
        line = clean(name)
        if h["status"]["old"] != h["status"]["new"]:
            line += f"  (host {clean(h['status']['old'])} -> {clean(h['status']['new'])})"
        out.append(line)
        for bucket in BUCKETS:
            for rule in h.get(bucket, []):
                r = h["rules"].get(rule, {})
                change = f"  [{clean(r.get('old') or 'absent')} -> {clean(r.get('new') or 'absent')}]"
                out.append(
                    f"  {bucket:<10} {clean(rule):<12} {clean(r.get('severity') or ''):<8} "
                    f"{clean(r.get('area') or ''):<9} {clean(r.get('title') or '')}{change}"
                )
                if r.get("was_off"):
                    out.append(f"  {'':<10} policy: the old run skipped it ({clean(r['was_off'])})")
                if r.get("expected"):
                    out.append(
                        f"  {'':<10} policy: expected {clean(schema.format_value(r['expected']['old']))} "
                        f"-> {clean(schema.format_value(r['expected']['new']))}"
                    )
    if d.get("only_old"):
        out.append("")
        out.append("only in the old report: " + ", ".join(clean(n) for n in d["only_old"]))
    if d.get("only_new"):
        out.append("")
        out.append("only in the new report: " + ", ".join(clean(n) for n in d["only_new"]))
    return "\n".join(out) + "\n"
