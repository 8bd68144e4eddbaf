# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the power area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    RoleVar,
    get_in,
    mode_pending,
    per_gpu_check,
    readable_gpus,
    result,
    skip,
)


# GPU-PWR-001: what the check expects and gpu_runtime sets.
PERSISTENCE_WANTED = True


def check_persistence(facts, pol):
    return per_gpu_check(
        facts,
        lambda g: None if g.get("persistence_mode") is None else bool(g["persistence_mode"]) != PERSISTENCE_WANTED,
        lambda g: g.get("persistence_mode"),
        PERSISTENCE_WANTED,
        "persistence mode is on",
        "persistence mode off",
    )


def target_persistence(facts, pol, given):
    """GPU-PWR-001's fix: persistence mode on, what the check expects."""
    return {"persistence_mode": PERSISTENCE_WANTED}


def power_limit_policy(pol):
    """What GPU-PWR-002 asks of the power limit, as ``(policy key, value, mode)``: a declared cap (mode "cap":
    power.limit_w in watts or power.limit_pct of the default, kept exactly, clamped to the GPU's min/max), else
    power.min_power_limit_pct of the default as a minimum (mode "floor"). The check and the target both read it."""
    power = pol["power"]
    if power.get("limit_w") is not None:
        return "power.limit_w", power["limit_w"], "cap"
    if power.get("limit_pct") is not None:
        return "power.limit_pct", power["limit_pct"], "cap"
    return "power.min_power_limit_pct", power["min_power_limit_pct"], "floor"


def power_limit_key(pol):
    """The policy key that decides the power limit (gpu_runtime_power_limit takes its place)."""
    return power_limit_policy(pol)[0]


def _limit_floor(g, pol):
    default = get_in(g, "power", "default_limit_w")
    return None if default is None else default * power_limit_policy(pol)[1] / 100.0


def declared_cap_w(g, pol):
    """The power cap the policy declares for this GPU in watts (power.limit_w, or power.limit_pct of the default),
    clamped to the GPU's min/max limits as NVML enforces them; None when no cap is declared or the GPU does not
    report what it needs. gpu_runtime sets exactly this value (gpu_settings clamps the same way)."""
    key, value, mode = power_limit_policy(pol)
    if mode != "cap":
        return None
    if key == "power.limit_w":
        cap = float(value)
    else:
        default = get_in(g, "power", "default_limit_w")
        if default is None:
            return None
        cap = default * value / 100.0
    low, high = get_in(g, "power", "min_limit_w"), get_in(g, "power", "max_limit_w")
    if low is not None:
        cap = max(cap, low)
    if high is not None:
        cap = min(cap, high)
    return cap


def _spec(key, value):
    """A policy power value as gpu_settings' power_limit takes it: "300" (watts) or "80%" (of the default)."""
    return "%s" % value if key == "power.limit_w" else "%s%%" % value


def _declared_text(pol):
    key, value, _mode = power_limit_policy(pol)
    return "%s W" % value if key == "power.limit_w" else "%s%% of the default limit" % value


def target_power_limit(facts, pol, given):
    """GPU-PWR-002's fix, as gpufleet.tuning.gpu_settings takes it (one value for every GPU; the module resolves it
    per GPU): ``power_limit`` ("300" watts, "80%" of the default, or the user's gpu_runtime_power_limit),
    ``power_limit_cap`` (the declared cap, which no value may exceed, or None), ``power_limit_clamp`` (a declared
    cap is set exactly, clamped to each GPU's range, as the check judges it) and ``power_limit_at_least`` (no cap
    declared: power.min_power_limit_pct is a minimum, higher limits are kept)."""
    key, value, mode = power_limit_policy(pol)
    cap = _spec(key, value) if mode == "cap" else None
    user = given.get("power_limit")
    return {
        "power_limit": "%s" % user if user is not None else _spec(key, value),
        "power_limit_cap": cap,
        "power_limit_clamp": user is None and cap is not None,
        "power_limit_at_least": user is None and cap is None,
    }


def check_power_limit(facts, pol):
    _key, floor_pct, mode = power_limit_policy(pol)
    if mode == "floor":

        def bad(g):
            floor, limit = _limit_floor(g, pol), get_in(g, "power", "limit_w")
            return None if floor is None or limit is None else limit < floor - 0.5

        return per_gpu_check(
            facts,
            bad,
            lambda g: {
                "limit_w": get_in(g, "power", "limit_w"),
                "default_limit_w": get_in(g, "power", "default_limit_w"),
            },
            ">= %s%% of the default limit" % floor_pct,
            "power limits are at policy",
            "power limit below %s%% of the default (no cap declared in power.limit_w or power.limit_pct)" % floor_pct,
        )

    # A declared cap is an owner's decision (a rack's power budget): the limit must be exactly that, neither
    # below (the GPUs lose throughput for nothing) nor above (the budget is broken).
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    observed, items = {}, []
    for g in gpus:
        cap, limit = declared_cap_w(g, pol), get_in(g, "power", "limit_w")
        if cap is None or limit is None:
            continue
        observed[str(g["index"])] = {"limit_w": limit, "declared_cap_w": round(cap, 1)}
        if abs(limit - cap) > 0.5:
            items.append(
                {
                    "gpu": g["index"],
                    "limit_w": limit,
                    "declared_cap_w": round(cap, 1),
                    "problem": "above the declared cap" if limit > cap else "below the declared cap",
                }
            )
    if not observed:
        return skip("the GPUs do not report this")
    expected = "the declared cap, %s (clamped to each GPU's min/max limit)" % _declared_text(pol)
    if items:
        above = [i["gpu"] for i in items if i["problem"] == "above the declared cap"]
        below = [i["gpu"] for i in items if i["problem"] == "below the declared cap"]
        parts = (["GPU(s) %s above the declared cap" % above] if above else []) + (
            ["GPU(s) %s below the declared cap" % below] if below else []
        )
        return result(
            "fail",
            observed,
            expected,
            "power limit differs from the declared cap %s: %s" % (_declared_text(pol), "; ".join(parts)),
            items=items,
        )
    return result("pass", observed, expected, "power limits are at the declared cap %s" % _declared_text(pol))


# NVML (nvmlDeviceGetCurrentClocksEventReasons): SW power cap means the clocks are held to stay under the current
# power limit - what every fully loaded GPU shows, and not a fault. Thermal slowdown, HW slowdown and the power brake
# are. Azure's node health checks exempt SW_POWER_CAP the same way (azurehpc-health-checks, azure_gpu_clock_throttling).
POWER_CAP_REASON = "sw_power_cap"


def check_throttling(facts, pol):
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    known = [g for g in gpus if g.get("clock_event_reasons") is not None]
    if not known:
        return skip("the GPUs do not report clock event reasons")
    observed = {str(g["index"]): g["clock_event_reasons"].get("throttling") for g in known}
    items, capped = [], []
    for g in known:
        reasons = g["clock_event_reasons"].get("throttling") or []
        trouble = [r for r in reasons if r != POWER_CAP_REASON]
        if trouble:
            items.append({"gpu": g["index"], "reasons": trouble})
        elif POWER_CAP_REASON in reasons:
            capped.append(g["index"])
    if items:
        detail = "; ".join("%d: %s" % (i["gpu"], ",".join(i["reasons"])) for i in items)
        return result(
            "fail",
            observed,
            [],
            "GPU(s) %s: clocks held down for heat or by the hardware: %s" % ([i["gpu"] for i in items], detail),
            items=items,
        )
    if capped:
        return result(
            "warn",
            observed,
            [],
            "GPU(s) %s: clocks held at the power limit (sw_power_cap): normal under "
            "full load; only a limit capped below policy is a problem (GPU-PWR-002)" % capped,
            items=[{"gpu": i, "reasons": [POWER_CAP_REASON]} for i in capped],
            severity="info",
        )
    return result("pass", observed, [], "no thermal or hardware slowdown")


def check_temperature(facts, pol):
    margin = pol["power"]["temp_margin_c"]

    def bad(g):
        temp, slow = get_in(g, "temperature", "gpu"), get_in(g, "temperature", "slowdown")
        return None if temp is None or slow is None else temp >= slow - margin

    return per_gpu_check(
        facts,
        bad,
        lambda g: {
            "temperature_c": get_in(g, "temperature", "gpu"),
            "slowdown_c": get_in(g, "temperature", "slowdown"),
        },
        "more than %d C below the slowdown threshold" % margin,
        "temperatures are well below slowdown",
        "within %d C of the slowdown temperature" % margin,
    )


def check_mig_pending(facts, pol):
    return mode_pending(facts, "mig", "GPU reset")


RULES = (
    Rule(
        "GPU-PWR-001",
        "power",
        "high",
        "Persistence mode off",
        "Without persistence mode the driver tears down GPU state when no process uses it; every job start pays "
        "seconds of initialisation and settings such as power limits can be lost.",
        check_persistence,
        role="gpu_runtime",
        target=target_persistence,
        references=(sources.DRIVER_PERSISTENCE, sources.NVML_COMMANDS),
    ),
    Rule(
        "GPU-PWR-002",
        "power",
        "high",
        "Power limit not at policy",
        "A capped power limit lowers clocks under load; an A100 capped at 250 W loses a large share of its "
        "throughput. A cap the policy declares (power.limit_w or power.limit_pct, e.g. a rack's power budget) "
        "is kept exactly: above it breaks the budget, below it loses throughput for nothing.",
        check_power_limit,
        role="gpu_runtime",
        target=target_power_limit,
        role_vars=(RoleVar("gpu_runtime_power_limit", "power_limit", power_limit_key),),
        policy_keys=("power.limit_pct", "power.limit_w", "power.min_power_limit_pct"),
        references=(sources.NVML_QUERIES, sources.NVML_COMMANDS),
    ),
    Rule(
        "GPU-PWR-003",
        "power",
        "high",
        "GPU slowed down by heat or the hardware",
        "Clock event reasons show the GPU slowing down for heat (thermal slowdown) or by a hardware signal "
        "(HW slowdown, power brake): the work runs slower than paid for. Clocks held at the power limit "
        "(SW power cap) are normal under full load and reported apart, as info.",
        check_throttling,
        manual="Check airflow, inlet temperature and power supply; a capped power limit is GPU-PWR-002's fix "
        "(role gpu_runtime, tag GPU-PWR-002).",
        references=(sources.NVML_CLOCK_EVENTS, sources.AZURE_NHC),
    ),
    Rule(
        "GPU-THM-001",
        "power",
        "high",
        "GPU temperature near its slowdown threshold",
        "Within a few degrees of the slowdown threshold the GPU will soon throttle hard; cooling is marginal.",
        check_temperature,
        manual="Check fans, airflow, blanking panels and inlet temperature.",
        policy_keys=("power.temp_margin_c",),
        references=(sources.NVML_QUERIES,),
    ),
    Rule(
        "GPU-MIG-001",
        "power",
        "medium",
        "MIG mode change pending a GPU reset",
        "A MIG mode change (nvmlDeviceSetMigMode, nvidia-smi -mig) only takes effect after a GPU reset or reboot; "
        "until then the GPU runs in the old mode, so the scheduler and device plugin see whole GPUs where MIG "
        "instances were meant (or the reverse).",
        check_mig_pending,
        manual="Stop the GPU's processes and reset it (nvidia-smi -r -i N), or reboot; or set the mode back.",
        references=(sources.NVML_QUERIES, sources.NVML_COMMANDS),
    ),
)
