# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What every rule shares: the Rule entry, result helpers and the fact accessors."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import AREAS, SEVERITIES


STATUSES = ("pass", "fail", "warn", "skip", "error")


class RoleVar:
    """A role's public variable that takes the place of what the policy asks for (the remediation report lists each
    one that is set). ``key``: the target key the value is given to (the rule's ``target`` reads it from ``given``);
    ``policy_key``: the dotted policy key it replaces, or a function of the policy that names it (the power limit
    replaces power.limit_w, power.limit_pct or power.min_power_limit_pct, whichever the policy uses)."""

    def __init__(self, variable, key, policy_key):
        self.variable = variable
        self.key = key
        self.policy_key = policy_key


class Rule:
    """One catalog entry. ``references``: ``(title, where)`` pairs from ``rules.sources`` (vendor or kernel
    documentation, or the bench script behind a threshold of ours); every rule has at least one.

    A rule fixed by a role (``role``) has a ``target(facts, policy, given)``: what the role must set, as a dict of the
    role's target keys, computed from the same facts and policy the check judges (``given``: the values of the
    rule's ``role_vars`` the user set, by key). ``module_utils/targets.py`` runs them for the remediation."""

    def __init__(
        self,
        rule_id,
        area,
        severity,
        title,
        rationale,
        check,
        role=None,
        manual=None,
        references=(),
        policy_keys=(),
        target=None,
        role_vars=(),
    ):
        if area not in AREAS:
            raise ValueError("unknown area %r" % (area,))
        if severity not in SEVERITIES:
            raise ValueError("unknown severity %r" % (severity,))
        self.id = rule_id
        self.area = area
        self.severity = severity
        self.title = title
        self.rationale = rationale
        self.check = check
        self.fix = {"role": role, "tag": rule_id if role else None, "manual": manual}
        if not references or not all(isinstance(r, tuple) and len(r) == 2 and r[0] and r[1] for r in references):
            raise ValueError("rule %s: references must be a non-empty tuple of (title, where) pairs" % rule_id)
        self.references = tuple(references)
        # The policy keys the check reads (dotted, as `gpufleet policy` lists them): grep a key to find its rules.
        self.policy_keys = tuple(policy_keys)
        if target is not None and role is None:
            raise ValueError("rule %s: a target needs the role that applies it" % rule_id)
        self.target = target
        self.role_vars = tuple(role_vars)

    def describe(self):
        return {
            "id": self.id,
            "area": self.area,
            "severity": self.severity,
            "title": self.title,
            "rationale": self.rationale,
            "fix": dict(self.fix),
            "references": [{"title": title, "url": where} for title, where in self.references],
            "policy_keys": list(self.policy_keys),
        }


def result(status, observed=None, expected=None, message="", items=None, severity=None):
    out = {"status": status, "observed": observed, "expected": expected, "message": message, "items": items or []}
    if severity:
        out["severity"] = severity
    return out


def skip(message):
    return result("skip", message=message)


def readable_gpus(facts):
    gpu = facts.get("gpu") or {}
    if not (gpu.get("nvml") or {}).get("available"):
        return None
    return [g for g in gpu.get("gpus") or [] if not g.get("lost") and not g.get("error")]


def host_fact(facts, *path):
    return get_in(facts, "host", *path)


def network_fact(facts, *path):
    return get_in(facts, "network", *path)


def get_in(d, *path):
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def gpu_indexes(gpus):
    return [g["index"] for g in gpus]


def swap_verdict(host, pol):
    """(swapping?, observed) from swap rates and memory pressure; swapping None when unknown."""
    mem = (host or {}).get("memory") or {}
    rin, rout = mem.get("swap_in_per_s"), mem.get("swap_out_per_s")
    psi = mem.get("psi_some_avg10")
    used = mem.get("swap_used_mib")
    observed = {"swap_in_per_s": rin, "swap_out_per_s": rout, "psi_some_avg10": psi, "swap_used_mib": used}
    verdicts = []
    if rin is not None and rout is not None:
        verdicts.append(rin + rout >= pol["memory"]["swap_rate_pages_per_s"])
    if psi is not None and used is not None:
        verdicts.append(used > 0 and psi >= pol["memory"]["psi_some_avg10"])
    if not verdicts:
        return None, observed
    return any(verdicts), observed


def physical_up_nics(facts, pol):
    nics = network_fact(facts, "nics")
    if nics is None:
        return None
    wanted = pol["network"]["interfaces"]
    out = []
    for nic in nics:
        if not nic.get("present", True):
            continue
        if wanted is not None and nic.get("name") not in wanted:
            continue
        if wanted is None and not nic.get("physical", True):
            continue
        if (nic.get("operstate") or "up").lower() not in ("up", "unknown"):
            continue
        out.append(nic)
    return out


def rtt_links(facts):
    return [p for p in (get_in(facts, "links", "peers") or []) if p.get("rtt_ms")]


def long_haul_links(facts, pol):
    return [p for p in rtt_links(facts) if p["rtt_ms"] >= pol["network"]["long_link_rtt_ms"]]


def version_tuple(text):
    out = []
    for part in str(text).split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def severity_rank(sev):
    return SEVERITIES.index(sev) if sev in SEVERITIES else len(SEVERITIES)


def per_gpu_check(facts, predicate, describe, expected, ok_message, bad_message):
    """Fail with one item per GPU where predicate(gpu) is True; skip GPUs where it returns None."""
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    known = [(g, predicate(g)) for g in gpus]
    known = [(g, v) for g, v in known if v is not None]
    if not known:
        return skip("the GPUs do not report this")
    bad = [g for g, v in known if v]
    observed = {str(g["index"]): describe(g) for g, _value in known}
    if bad:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s: %s" % (gpu_indexes(bad), bad_message),
            items=[dict(gpu=g["index"], **_as_dict(describe(g))) for g in bad],
        )
    return result("pass", observed, expected, ok_message)


def _as_dict(value):
    return value if isinstance(value, dict) else {"value": value}


def log_unreadable(log):
    """Why the kernel log could not be scanned, or None when it was."""
    if log is None:
        return "kernel log not gathered"
    if log.get("source") in (None, "none") or (log.get("error") and not log.get("lines_scanned")):
        return "kernel log not readable%s" % (": %s" % log["error"] if log.get("error") else "")
    return None


def driver_facts(facts):
    return (facts.get("gpu") or {}).get("driver") or {}


def mode_pending(facts, field, applied_by):
    """A mode (ECC, MIG) whose pending value differs from the current one: the change waits for ``applied_by``."""

    def bad(g):
        cur, pend = get_in(g, field, "current"), get_in(g, field, "pending")
        return None if cur is None or pend is None else cur != pend

    name = field.upper()
    return per_gpu_check(
        facts,
        bad,
        lambda g: {"current": get_in(g, field, "current"), "pending": get_in(g, field, "pending")},
        "pending == current",
        "no %s mode change is waiting for a %s" % (name, applied_by.split(" or ")[0]),
        "%s mode change pending a %s" % (name, applied_by),
    )
