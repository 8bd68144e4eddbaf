# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""One audit of one host: gather the facts, resolve the links, evaluate the rule catalog.

The ``audit`` module and the on-host checker (``watch/checker.py``, run by the watch role's timer) both call
``run``, so a finding means the same thing wherever it was made. ``module`` is the AnsibleModule, or the checker's
stand-in with the same four members: ``params`` (the GPU backend options of ``gpu.ARGUMENT_SPEC``),
``fail_json(msg=...)``, ``get_bin_path(name)`` and ``run_command(argv, environ_update=..., handle_exceptions=...)``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import threading

from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu, host, links, nic, programs, routes, rules
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpudirect, rdma, topology
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

GATHER = ("gpu", "host", "network")

# The shapes the audit module returns its result in (its ``result`` option). ``full``: every part as its own value
# (facts, links, findings, policy), what a user's own play reads. ``compact``: those four parts as one JSON string
# (``audit_json``) beside the small ``summary`` and ``policy_digest``: ansible-core copies a result value by value
# (the registered variable, the callbacks' copy, the stdout callback's), so ~4,700 values cost the controller more
# than one string of the same bytes; the report decodes it once (``plugin_utils/fleet.expand``).
RESULT_SHAPES = ("full", "compact")
PACKED = ("facts", "links", "findings", "policy")


def policy_digest(policy):
    """One digest of the policy a host was judged by (`gpufleet report diff` tells a policy change from a fix)."""
    return "sha256:" + hashlib.sha256(json.dumps(policy, sort_keys=True).encode("utf-8")).hexdigest()


def module_result(result, policy, include_facts=True, shape="full"):
    """What the audit module returns for ``result`` (``run``'s answer) judged by ``policy``, in ``shape``
    (``RESULT_SHAPES``); ``include_facts`` False returns empty facts."""
    full = {
        "facts": result["facts"] if include_facts else {},
        "links": result["links"],
        "findings": result["findings"],
        "policy": policy,
    }
    small = {"summary": result["summary"], "policy_digest": result["policy_digest"]}
    if shape == "compact":
        small["audit_json"] = json.dumps(full, separators=(",", ":"), default=_json_default)
        return small
    full.update(small)
    return full


def _json_default(value):
    """What the module's own JSON encoder makes of the values plain JSON lacks (sets, tuples are lists already)."""
    if isinstance(value, (set, frozenset)):
        return list(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError("not JSON serializable: %r" % type(value).__name__)


def run(module, policy, root="/", gather=GATHER, interfaces=None, sample_seconds=1.0, kernel_log="auto",
        kernel_log_file="/var/log/kern.log", kernel_log_lines=5000, kernel_log_since_hours=24, ethtool=None,
        peer_timeout=3.0):
    """facts, links, findings, summary and policy_digest of the host under ``root``, judged by ``policy`` (validated).

    ``interfaces`` None means the policy's network.interfaces; ``ethtool`` is the path of ethtool (None: searched in
    PATH).
    """
    fs = HostFS(root)
    runner = programs.runner(module)
    facts = {"gpu": None, "host": None, "network": None, "topology": None, "gpudirect": None, "rdma": None}
    if interfaces is None:
        interfaces = policy["network"]["interfaces"]
    if "network" in gather and not ethtool:
        ethtool = module.get_bin_path("ethtool")

    def network():
        first = rdma.start(fs)  # the RDMA port counters: first reading; the second when the window is over
        facts["network"] = nic.collect(fs, runner, interfaces=interfaces, ethtool=ethtool,
                                       ethtool_missing=None if ethtool else "ethtool not found in PATH",
                                       stats_interval=sample_seconds)
        facts["rdma"] = rdma.finish(fs, first, sample_seconds)

    def host_facts():
        facts["host"] = host.collect(fs, run=runner, sample_seconds=sample_seconds, kernel_log=kernel_log,
                                     kernel_log_file=kernel_log_file, kernel_log_lines=kernel_log_lines,
                                     kernel_log_since_hours=kernel_log_since_hours)

    # One sample window for the three counter samples: the GPUs' error counters, the NICs' drop counters and the
    # swap rates are each read twice, sample_seconds apart. The NIC reads (mostly ethtool runs) go to a thread at
    # once; NVML is read here: every GPU's links and first counters, then, inside the GPUs' wait, their other facts,
    # the driver facts outside NVML and the host's reads (its own swap-rate sample included; gpu.read's meanwhile),
    # so the audit takes about one window plus NVML's start and the first counters, not the window plus everything
    # else. The module itself, fail_json included, is only used from this thread.
    nic_thread = errors = None
    if "network" in gather:
        errors = []

        def guarded():
            try:
                network()
            except Exception as exc:  # re-raised below, in the caller's thread
                errors.append(exc)

        nic_thread = threading.Thread(target=guarded, name="gpufleet-nic")
        nic_thread.start()
    try:
        if "gpu" in gather:
            facts["gpu"] = gpu.read(module, fs, sample_seconds=sample_seconds,
                                    meanwhile=host_facts if "host" in gather else None)
        elif "host" in gather:
            host_facts()
    finally:
        if nic_thread is not None:
            nic_thread.join()
    if errors:
        raise errors[0]

    if "gpu" in gather and facts["gpu"] is not None:
        # Where each GPU sits (NUMA node, CPUs, PCIe path, nearest NICs, NVLink peers) for the reports' topology
        # view and ready bindings; sysfs reads only. A reader bug here must not cost the host its audit.
        try:
            facts["topology"] = topology.collect(fs, facts["gpu"].get("gpus") or [])
        except Exception as exc:  # reported in the facts, as every reader reports what it could not read
            facts["topology"] = {"available": False, "error": "topology: %s: %s" % (type(exc).__name__, exc)}
        # GPUDirect RDMA prerequisites (peer memory, ACS on the GPU-NIC bridges, IOMMU) where RDMA devices exist.
        try:
            facts["gpudirect"] = gpudirect.collect(fs, topo=facts["topology"],
                                                   driver_version=(facts["gpu"].get("driver") or {}).get("version"))
        except Exception as exc:  # as above: reported, not fatal
            facts["gpudirect"] = {"applies": None, "reason": "gpudirect: %s: %s" % (type(exc).__name__, exc)}

    link_facts = links.resolve(policy, measure=lambda peers: links.measure_rtt(peers, timeout=peer_timeout))
    facts["links"] = link_facts
    scope = policy["network"]["congestion_control_scope"]
    if facts["network"] is not None and scope in ("routes", "follow"):
        # network.congestion_control_scope: routes - NET-TCP-002 judges the routes to the long-haul peers' prefixes;
        # follow - the route the kernel really uses for them (ip route get: through the policy rules).
        read = routes.read_route_congctl if scope == "routes" else routes.read_route_get_congctl
        facts["network"]["routes"] = read(runner, links.classify(policy, link_facts)[2])
    findings = rules.evaluate(facts, policy)
    del facts["links"]
    return {
        "facts": facts,
        "links": link_facts,
        "findings": findings,
        "summary": rules.summarize(findings),
        "policy_digest": policy_digest(policy),
    }
