# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The watch's Slurm side: drain this host's node on a problem, resume it when a complete run finds none.

``reconcile(run, node, problems, clean, settings)`` is called by the on-host checker (``watch/checker.py``) once per
run when ``watch.slurm.drain`` is on. It talks to slurmctld only through ``scontrol`` (``run(argv)`` ->
``(rc, stdout, stderr)``, ``module_utils.programs.runner`` style, C locale) and follows these rules:

- A node whose Slurm reason starts with ``gpufleet:`` is drained by gpufleet; any other drained, down or failed
  node belongs to someone else and is never touched, whatever the findings ("foreign").
- A problem drains the node (``scontrol update nodename=N state=drain reason="gpufleet: GPU-HLT-002 ..."``); which
  findings are problems for Slurm is the checker's choice (``watch/drain.py``: only the health rules of its list,
  a kernel-log event only until a resume followed it). The circuit breaker holds a drain back ("suppressed") when,
  in any partition of the node, the other nodes that take no new jobs - drained, draining, down or failing, by
  anyone, not only by gpufleet - are already ``max_drained_fraction`` of the partition's nodes or more, or when
  draining this node would leave fewer than ``min_available_nodes`` nodes of the partition taking jobs. A bad policy
  or a driver roll-out seen on every node must not drain the cluster, and gpufleet must not finish off a partition
  that maintenance or other health checks have already thinned.
- A node gpufleet drained stays drained while it has problems; when the problems change, only its reason is
  rewritten (``scontrol update nodename=N reason=...``: the state is left as it is, "update").
- It is resumed (``state=resume``) only with ``watch.slurm.resume`` on, no problem, and ``clean``: a complete run
  (every rule evaluated, no error, the GPUs read). An incomplete run never resumes: the node is re-checked, not
  assumed repaired.

Limits: Slurm has no compare-and-set for a node's state, so a person's drain that lands between this call's read
and its update is overwritten (the window is one scontrol round trip). The breaker counts before it drains: nodes
that check in the same second all see the same count, so run the checks spread out (HealthCheckNodeState=CYCLE,
the timer's RandomizedDelaySec) - then a fleet-wide fault drains about the fraction, not the cluster.

Slurm 22.05 (Debian 12) output, as parsed here (tests/fixtures/slurm/ holds recordings from the lab):
``scontrol show node [NAME]`` without ``-o``: one block per node, ``NodeName=`` at the start of a line, then
indented lines; ``State=BASE+FLAG+...`` (IDLE+DRAIN drained, MIXED+DRAIN / ALLOCATED+DRAIN draining, DOWN+DRAIN,
IDLE+NOT_RESPONDING); ``Partitions=a,b``; ``Reason=TEXT [USER@TIME]`` on a line of its own. The one-line form
(``-o``) is not used: there ``Comment=`` and ``Extra=`` follow the reason on the same line, and a comment may contain
anything, "Reason=" included, so the reason's end cannot be told.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import SEVERITIES

PREFIX = "gpufleet:"
# Slurm stores a reason of any length; sinfo -R shows 20 characters by default and scontrol all of it. A short
# reason keeps `scontrol show node` readable and the journal line one line.
REASON_MAX = 200
MESSAGE_MAX = 60
# States in which a node takes no new jobs (`scontrol` man page, NODE STATE): drained/draining (DRAIN flag),
# down, failing/failed (FAIL flag).
_UNAVAILABLE_FLAGS = ("DRAIN", "FAIL")
_UNAVAILABLE_BASES = ("DOWN",)
_REASON_SUFFIX = re.compile(r"^(.*?)\s*\[([^\[\]@]*)@([^\[\]]*)\]$")
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z_]*)=(\S*)")


def _one_line(text):
    return " ".join(str(text or "").split())


def _cut(text, size):
    return text if len(text) <= size else text[: max(size - 3, 0)].rstrip() + "..."


def _rank(severity):
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def build_reason(problems):
    """The drain reason: ``gpufleet: RULE message; RULE message`` (<= REASON_MAX characters, one line, every rule id
    kept; the messages are shortened first). Ordered by severity then rule id, so the same problems give the same
    reason in every run."""
    seen = {}
    for p in problems:
        rule = _one_line(p.get("rule")) or "?"
        if rule not in seen:
            seen[rule] = (_rank(p.get("severity")), _one_line(p.get("message")))
    ordered = sorted(seen.items(), key=lambda kv: (kv[1][0], kv[0]))
    head = PREFIX + " "

    def render(budget):
        parts = []
        for rule, (_rank, message) in ordered:
            message = _cut(message, budget) if budget is not None else message
            parts.append(("%s %s" % (rule, message)).strip())
        return head + "; ".join(parts)

    text = render(None)
    if len(text) <= REASON_MAX:
        return text
    text = render(MESSAGE_MAX)
    if len(text) <= REASON_MAX:
        return text
    ids = "; ".join(rule for rule, _entry in ordered)
    if len(head + ids) <= REASON_MAX:
        # Whatever room is left goes to the messages, evenly.
        room = REASON_MAX - len(head + ids) - len(ordered)
        budget = room // len(ordered)
        if budget >= 8:
            text = render(budget)
            if len(text) <= REASON_MAX:
                return text
        return head + ids
    return _cut(head + ids, REASON_MAX)


def reason_rules(reason):
    """The rule ids named in a gpufleet reason, as a sorted list (the first word of each ``; `` part)."""
    text = (reason or "")[len(PREFIX) :] if is_ours(reason) else ""
    return sorted(set(part.split()[0] for part in text.split("; ") if part.split()))


def is_ours(reason):
    return bool(reason) and reason.startswith(PREFIX)


def parse_nodes(text):
    """``scontrol show node`` (multi-line) -> list of dicts: name, state (as printed), base, flags (list),
    partitions (list), reason (without the ``[user@time]`` suffix; None when the node has none), reason_user,
    reason_time."""
    nodes = []
    current = None
    for line in text.splitlines():
        if line.startswith("NodeName="):
            current = {
                "name": line.split()[0][len("NodeName=") :],
                "state": "",
                "base": "",
                "flags": [],
                "partitions": [],
                "reason": None,
                "reason_user": None,
                "reason_time": None,
            }
            nodes.append(current)
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("Reason="):
            reason = stripped[len("Reason=") :]
            match = _REASON_SUFFIX.match(reason)
            if match:
                reason, current["reason_user"], current["reason_time"] = match.groups()
            current["reason"] = reason
            continue
        if stripped.startswith(("OS=", "Comment=", "Extra=")):
            continue  # free text that may hold "Key=" words
        for key, value in _FIELD.findall(stripped):
            if key == "State":
                current["state"] = value
                parts = value.split("+")
                current["base"] = parts[0].rstrip("*~#%$@!^-")
                current["flags"] = parts[1:]
            elif key == "Partitions":
                current["partitions"] = [p for p in value.split(",") if p]
    return nodes


def unavailable(node):
    """Drained, draining, down or failed: the node takes no new jobs."""
    return node["base"] in _UNAVAILABLE_BASES or any(f in _UNAVAILABLE_FLAGS for f in node["flags"])


def drained_by_us(node):
    return unavailable(node) and is_ours(node["reason"])


def breaker(nodes, node, fraction, min_available=1):
    """(hold, detail): hold is True when, in one of ``node``'s partitions, the other nodes that take no new jobs
    (``unavailable``: drained, draining, down, failing - whoever set them so) are at least ``fraction`` of the
    partition, or when draining ``node`` would leave fewer than ``min_available`` nodes of it available. A node in no
    partition is judged against every node Slurm knows. ``detail`` (the worst partition): partition, unavailable
    (count), size, share, left (available nodes after the drain), nodes (the unavailable ones), why."""
    partitions = node["partitions"] or [None]
    worst = None
    for part in partitions:
        members = [n for n in nodes if part is None or part in n["partitions"]]
        size = len(members) or 1
        out = sorted(n["name"] for n in members if n["name"] != node["name"] and unavailable(n))
        share = float(len(out)) / size
        left = size - len(out) - 1
        why = []
        if share >= fraction:
            why.append("%d of %d nodes already drained, down or failing, at or above watch.slurm.max_drained_fraction "
                       "%g" % (len(out), size, fraction))
        if left < min_available:
            why.append("draining it would leave %d of %d nodes, below watch.slurm.min_available_nodes %d"
                       % (max(left, 0), size, min_available))
        detail = {"partition": part or "(all nodes)", "unavailable": len(out), "size": size, "share": share,
                  "left": left, "nodes": out, "why": "; ".join(why)}
        if why and (worst is None or (left, -share) < (worst["left"], -worst["share"])):
            worst = detail
    return worst is not None, worst


def show_node(run, node):
    """(node dict, None) from ``scontrol show node NODE``, or (None, why) when it cannot be read."""
    argv = ["scontrol", "show", "node", node]
    rc, out, err = run(argv)
    found = [n for n in parse_nodes(out) if n["name"] == node] if rc == 0 else []
    if not found:
        return None, (_scontrol_failed(argv, rc, out, err) if rc != 0 else "scontrol knows no node %s" % node)
    return found[0], None


def _scontrol_failed(argv, rc, out, err):
    why = _one_line(err or out) or "no output"
    return "scontrol %s failed (rc %s): %s" % (" ".join(argv[1:3]), rc, why)


def _result(action, drained, message, reason=None, suppressed=False):
    return {
        "action": action,
        "drained": bool(drained),
        "suppressed": bool(suppressed),
        "reason": reason,
        "message": message,
    }


def reconcile(run, node, problems, clean, settings, current=None):
    """Bring node ``node``'s Slurm state in line with this run's ``problems``; see the module docstring.

    Returns ``{"action": "drain"|"update"|"resume"|"none"|"suppressed"|"foreign"|"error", "drained": bool,
    "suppressed": bool, "reason": str|None, "message": str}``: ``drained`` is whether the node is drained by gpufleet
    after this call (on an error: as last read, False when it could not be read); ``reason`` the gpufleet reason on
    the node after this call, or the one this run would have set (suppressed, foreign, error; None without
    problems); ``message`` one journal line. A node gpufleet drained keeps its reason while the same rules fail (a
    message's numbers may move between runs); another set of rules rewrites it ("update"). ``current``: the node
    as ``show_node`` read it in this run already (the checker reads it first to see a resume), else it is read here.
    """
    settings = settings or {}
    problems = list(problems or [])
    reason = build_reason(problems) if problems else None
    if not settings.get("drain"):
        return _result("none", False, "draining is off (watch.slurm.drain)", reason)

    if current is None:
        me, why = show_node(run, node)
        if me is None:
            return _result("error", False, why + "; nothing changed", reason)
    else:
        me = current
    ours = drained_by_us(me)
    state = me["state"]

    if unavailable(me) and not ours:
        by = " by %s" % me["reason_user"] if me["reason_user"] else ""
        return _result(
            "foreign",
            False,
            "node %s is %s%s (reason %r), not by gpufleet: left alone%s"
            % (
                node,
                state,
                by,
                me["reason"] or "",
                " although %d problem(s) found" % len(problems) if problems else "",
            ),
            reason,
        )

    if problems:
        if ours:
            if reason_rules(me["reason"]) == reason_rules(reason):
                # Same rules: the reason stays, even if a message's numbers moved (no rewrite every run).
                return _result(
                    "none", True, "node %s stays drained (%s): %s" % (node, state, me["reason"]), me["reason"]
                )
            argv = ["scontrol", "update", "nodename=%s" % node, "reason=%s" % reason]
            rc, out, err = run(argv)
            if rc != 0:
                return _result("error", True, _scontrol_failed(argv, rc, out, err), reason)
            return _result("update", True, "node %s stays drained (%s); reason now: %s" % (node, state, reason), reason)
        fraction = float(settings.get("max_drained_fraction", 0.1))
        argv = ["scontrol", "show", "node"]
        rc, out, err = run(argv)
        if rc != 0:
            return _result(
                "error",
                False,
                _scontrol_failed(argv, rc, out, err) + "; not drained: the circuit "
                "breaker could not count the drained nodes",
                reason,
            )
        min_available = int(settings.get("min_available_nodes", 1))
        hold, detail = breaker(parse_nodes(out), me, fraction, min_available)
        if hold:
            return _result(
                "suppressed",
                False,
                "circuit breaker: node %s NOT drained although %s; partition %s: %s%s"
                % (node, reason, detail["partition"], detail["why"],
                   " (taking no jobs: %s)" % ",".join(detail["nodes"]) if detail["nodes"] else ""),
                reason,
                suppressed=True,
            )
        argv = ["scontrol", "update", "nodename=%s" % node, "state=drain", "reason=%s" % reason]
        rc, out, err = run(argv)
        if rc != 0:
            return _result("error", False, _scontrol_failed(argv, rc, out, err), reason)
        return _result("drain", True, "drained node %s: %s" % (node, reason), reason)

    if not ours:
        return _result("none", False, "node %s is %s, no problem" % (node, state))
    if not settings.get("resume"):
        return _result(
            "none",
            True,
            "node %s stays drained by gpufleet (%r): no problem now, but resuming is off "
            "(watch.slurm.resume)" % (node, me["reason"]),
        )
    if not clean:
        return _result(
            "none",
            True,
            "node %s stays drained by gpufleet (%r): no problem found, but the run was not "
            "complete; resumed only after a complete clean run" % (node, me["reason"]),
        )
    argv = ["scontrol", "update", "nodename=%s" % node, "state=resume"]
    rc, out, err = run(argv)
    if rc != 0:
        return _result("error", True, _scontrol_failed(argv, rc, out, err))
    return _result(
        "resume",
        False,
        "resumed node %s (drained by gpufleet: %r); a complete run found no problem" % (node, me["reason"]),
    )
