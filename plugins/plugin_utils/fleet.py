# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Build the fleet report (schema gpufleet.report/v1) from each host's audit result.

Used by the ``audit_report`` action plugin (so ``ansible-playbook playbooks/audit.yml`` writes reports) and by
the ``gpufleet`` CLI (for a partial report when a run is interrupted).
"""

from __future__ import annotations

import json
import socket
import uuid
from datetime import datetime, timezone
from collections.abc import Callable
from typing import Any

from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.schema import (
    DOWN_STATUSES,
    SCHEMA,
    SEVERITIES,
    accepted_findings,
    severity_rank,
    summarize,
)

# What a run's outcome means for the caller, the same for `gpufleet audit` (its exit code) and for
# `ansible-playbook playbooks/audit.yml` (the run fails): hosts not audited, then findings at or above fail_on.
VERDICT_OK, VERDICT_FINDINGS, VERDICT_HOSTS = 0, 1, 2
# The report's generator: galaxy.yml's version, the CLI's too (tests/unit/test_versions.py).
VERSION = "0.2.0"


def plain(value: Any, decrypt: Callable[[Any], str] | None = None) -> Any:
    """Copy into plain JSON types (Ansible hands back tagged/unsafe str subclasses and its own containers): the one
    copier, for a host's audit result here and a host's inventory variables in ``gpufleet.workers``.

    ``decrypt``: what a vaulted value (``!vault``: an EncryptedString, AnsibleVaultEncryptedUnicode before 2.19)
    becomes; it may raise to leave the value out. Without it a vaulted value is copied as ``str()`` makes it."""
    if decrypt is not None and hasattr(value, "_ciphertext"):
        return decrypt(value)
    if isinstance(value, dict):
        return {str(k): plain(v, decrypt) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, decrypt) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


# The key of the audit module's compact result (``result: compact``): facts, links, findings and policy in one JSON
# string (module_utils/audit_core.module_result).
PACKED_KEY = "audit_json"


def expand(result: Any) -> Any:
    """A registered audit result in the full shape, as plain JSON types: a compact one's ``audit_json`` decoded (the
    one decoding, on the controller) into ``facts``, ``links``, ``findings`` and ``policy``; a full one copied
    (``plain``). A string that is not a JSON object makes the result a failed one that says so; anything other than
    a dict is returned as it is."""
    if not isinstance(result, dict):
        return result
    if PACKED_KEY not in result:
        return plain(result)
    out = plain({k: v for k, v in result.items() if k != PACKED_KEY})
    try:
        parts = json.loads(str(result[PACKED_KEY]))
    except ValueError as exc:
        parts = exc
    if not isinstance(parts, dict):
        why = parts if isinstance(parts, ValueError) else "not a JSON object"
        return {**out, "failed": True, "msg": f"{PACKED_KEY}: the compact audit result cannot be read: {why}"}
    out.update(parts)
    return out


def answered(result: Any) -> bool:
    """Whether a registered result is an audit's answer (either shape), not a failure."""
    return isinstance(result, dict) and ("findings" in result or PACKED_KEY in result) and not result.get("failed")


def host_site(host_vars: Any, overrides: dict | None = None) -> str | None:
    """The host's ``site`` from its policy layers, lowest first (``policy.LAYERS``: the inventory's policy, its
    group's, its host's, then the ``--policy`` overrides): the last layer that sets one, or None. A host that did
    not answer has no audit result to say its site; the report still groups it with its site. The one reading, for
    the ``audit_report`` action and for the CLI's report of a run with workers.

    ``host_vars``: the host's variables (its ``hostvars`` entry, or a dict); ``overrides``: the ``--policy`` layer
    when the caller holds it apart from them (the CLI's extra vars). A layer that cannot be read (a template that
    fails) ends the reading: the site is what the layers below it said; the audit judges the policy."""
    site = None
    for layer in policy.LAYERS:
        if layer == policy.LAYERS[-1]:
            site = _file_site(host_vars, site)  # the policy file's layer comes before the last one
        try:
            value = overrides if layer == policy.LAYERS[-1] and overrides is not None else host_vars.get(layer)
        except Exception:  # Ansible templating the layer failed (any of its errors)
            return site
        if isinstance(value, dict) and isinstance(value.get("site"), str) and value["site"]:
            site = value["site"]
    return site


def _file_site(host_vars: Any, site: str | None) -> str | None:
    """The site the host's policy file (gpufleet_policy_file: a path, or its content) sets, else ``site``; a file
    that cannot be read says nothing here (the audit reports it)."""
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import policy_layers  # it imports this module

    try:
        value = host_vars.get(policy_layers.FILE_VARIABLE)
        if isinstance(value, str):
            value = policy_layers.read_policy_file(value)
    except Exception:  # a template that fails, a file that cannot be used
        return site
    if isinstance(value, dict) and isinstance(value.get("site"), str) and value["site"]:
        return value["site"]
    return site


def _down(status: str, message: str, site: str | None = None) -> dict:
    return {
        "status": status,
        "message": message,
        "site": site,
        "links": {"source": "none", "peers": []},
        "facts": {},
        "findings": [],
    }


def host_entry(
    result: dict | None, missing: str = "failed", site: str | None = None, catalog_ids: set | None = None
) -> dict:
    """One host of the report from its registered `gpufleet.tuning.audit` result (or its absence).

    ``missing``: the status of a host without a result: ``failed`` (skipped, or the play stopped for it) or
    ``interrupted`` (the run was interrupted before the host answered). ``site``: the host's site from its policy
    (inventory), for a host that did not answer: the report still groups it with its site. ``catalog_ids``: the
    controller's rule ids; a finding the report's schema would not accept with them (a rule not in the catalog, an
    unknown status, severity or area, a second result of one rule: a host lying, or running another version of the
    collection) is set aside and the host's message says how many and the first reason.
    """
    if result is None:
        if missing == "interrupted":
            return _down("interrupted", "the run was interrupted before this host answered", site)
        return _down("failed", "no audit result (the host was skipped or the run stopped)", site)
    timedout = result.get("timedout") if isinstance(result, dict) else None
    if timedout:
        # Ansible's task `timeout:` (gpufleet_host_timeout) fired: a hung host or a link too slow to answer in time.
        # Read only the period: the rest of `timedout` is deprecated and warns when touched.
        period = timedout.get("period") if isinstance(timedout, dict) else None
        return _down("timeout", "no answer within the per-host timeout (gpufleet_host_timeout = %s s)" % period, site)
    result = expand(result)
    if result.get("unreachable"):
        status = "unreachable"
    elif result.get("failed") or "findings" not in result:
        status = "failed"
    else:
        status = "ok"
    if status != "ok":
        msg = str(result.get("msg") or result.get("reason") or "audit failed").strip()
        return {
            "status": status,
            "message": msg.splitlines()[0][:500] if msg else status,
            "site": site,
            "links": {"source": "none", "peers": []},
            "facts": {},
            "findings": [],
        }
    findings = result.get("findings") or []
    message = None
    if catalog_ids is not None:
        findings, refused = accepted_findings(findings, catalog_ids)
        if refused:
            message = f"{len(refused)} result(s) set aside, not known to this controller: {refused[0]}"[:500]
    links = result.get("links") or {"source": "none", "peers": []}
    return {
        "status": "ok",
        "message": message,
        "site": links.get("site") or site,
        "links": {
            "source": links.get("source", "none"),
            "peers": [
                {"site": p.get("site"), "rtt_ms": p.get("rtt_ms"), "bandwidth_gbps": p.get("bandwidth_gbps")}
                for p in links.get("peers") or []
            ],
        },
        "facts": result.get("facts") if isinstance(result.get("facts"), dict) else {},
        "findings": findings,
        "policy_digest": result.get("policy_digest"),
    }


def build_report(
    results: dict,
    started_at: str | None = None,
    inventory: str | None = None,
    limit: str | None = None,
    policy_sources: list | None = None,
    complete: bool = True,
    incomplete_reason: str | None = None,
    sites: dict | None = None,
) -> dict:
    """``results``: inventory host name -> registered audit result (None when the host has none); ``sites``: host
    name -> its site from the inventory's policy, so that hosts that did not answer keep their site.

    An incomplete report (``complete=False``: the run was interrupted) marks hosts without a result
    ``interrupted`` and says why in ``run.incomplete_reason``.
    """
    finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
    missing = "failed" if complete else "interrupted"
    sites = sites or {}
    catalog = rules.catalog()
    known = {entry["id"] for entry in catalog}
    hosts = {str(name): host_entry(res, missing, sites.get(name), known) for name, res in sorted(results.items())}
    return {
        "schema": SCHEMA,
        "tool": {"name": "gpufleet", "version": VERSION},
        "run": {
            "id": str(uuid.uuid4()),
            "started_at": started_at or finished,
            "finished_at": finished,
            "inventory": inventory,
            "limit": limit,
            "policy_sources": [str(p) for p in policy_sources or []],
            "complete": bool(complete),
            "incomplete_reason": None if complete else (incomplete_reason or "the run was interrupted"),
            "controller": socket.gethostname(),
        },
        "summary": summarize(hosts),
        "catalog": catalog,
        "hosts": hosts,
    }


def failing(report: dict, statuses=("fail", "warn")) -> dict:
    """host -> sorted rule ids whose finding has one of ``statuses``."""
    return {
        name: sorted(f["rule"] for f in h["findings"] if f["status"] in statuses) for name, h in report["hosts"].items()
    }


def worst_severity(report: dict) -> str | None:
    order = {s: i for i, s in enumerate(SEVERITIES)}
    worst = None
    for h in report["hosts"].values():
        for f in h["findings"]:
            if f["status"] == "fail" and (worst is None or order[f["severity"]] < order[worst]):
                worst = f["severity"]
    return worst


def verdict(report: dict, fail_on: str = "none") -> tuple[int, str | None]:
    """``(VERDICT_HOSTS, "exit 2: 1 host not audited (unreachable: 1)")`` when a host was not audited, else
    ``(VERDICT_FINDINGS, "exit 1: 3 findings at or above high (--fail-on high)")`` when findings fail at or above
    ``fail_on`` (a severity, or ``none``), else ``(VERDICT_OK, None)``."""
    hosts = report["summary"]["hosts"]
    down = {status: hosts.get(status) for status in DOWN_STATUSES if hosts.get(status)}
    if down:
        count = sum(down.values())
        detail = ", ".join("%s: %d" % (status, n) for status, n in down.items())
        return VERDICT_HOSTS, "exit %d: %d host%s not audited (%s)" % (
            VERDICT_HOSTS,
            count,
            "s" if count != 1 else "",
            detail,
        )
    if fail_on != "none":
        worst = severity_rank(fail_on)
        failing = sum(
            1
            for h in report["hosts"].values()
            for f in h["findings"]
            if f["status"] == "fail" and severity_rank(f["severity"]) <= worst
        )
        if failing:
            noun = "finding" if failing == 1 else "findings"
            return VERDICT_FINDINGS, "exit %d: %d %s at or above %s (--fail-on %s)" % (
                VERDICT_FINDINGS,
                failing,
                noun,
                fail_on,
                fail_on,
            )
    return VERDICT_OK, None
