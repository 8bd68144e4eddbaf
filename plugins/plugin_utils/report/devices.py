# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""The devices a finding names (its ``items``: ``gpu`` indexes, ``nic`` names), shared by the HTML and terminal
renderers so that the failing GPU 3 of eight is shown first, marked, instead of somewhere in a long value."""

from __future__ import annotations

import json
from typing import Any

# Item keys that name the device a finding is about, and how a report names one (GPU 3, ens2f0np0).
DEVICE_KEYS = {"gpu": "GPU {}", "nic": "{}"}
DEVICE_WORDS = {"gpu": ("GPU", "GPUs"), "nic": ("NIC", "NICs")}


def failing_devices(items: Any) -> dict[str, str]:
    """The devices a finding's ``items`` name (GPU indexes, NIC names): {key as in observed: kind}, in order."""
    out: dict[str, str] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        for kind in DEVICE_KEYS:
            value = item.get(kind)
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                out.setdefault(str(value), kind)
                break
    return out


def focus(value: Any, failing: dict[str, str], fmt=None) -> dict[str, Any] | None:
    """A per-device value (a dict keyed by GPU index or NIC name) with the failing devices first; ``fmt`` makes
    each device's text (default: compact JSON).

    None when ``value`` is not keyed by the devices ``failing`` names. ``bad``: [{"label", "text"}], the failing
    devices with their values, devices with the same value in one entry (``GPUs 0\u20137``); ``others``: the keys
    of the devices not flagged; ``word``: how to count them ("GPUs", "NICs")."""
    if not failing or not isinstance(value, dict):
        return None
    keys = {str(k): k for k in value}
    bad = [(k, kind, value[keys[k]]) for k, kind in failing.items() if k in keys]
    if not bad:
        return None
    groups: dict[tuple[str, str], list[str]] = {}
    for key, kind, v in bad:
        groups.setdefault((kind, (fmt or _compact)(v)), []).append(key)
    kinds = {entry[1] for entry in bad}
    kind = kinds.pop() if len(kinds) == 1 else ""
    others = [k for k in keys if k not in failing]
    word = DEVICE_WORDS.get(kind, ("device", "devices"))[0 if len(others) == 1 else 1]
    return {
        "bad": [{"label": _label(kind, ks), "text": text} for (kind, text), ks in groups.items()],
        "others": others,
        "word": word,
    }


def _label(kind: str, keys: list[str]) -> str:
    if kind == "gpu":
        return ("GPU " if len(keys) == 1 else "GPUs ") + key_ranges(keys)
    return ", ".join(keys)


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        return repr(value)


def key_ranges(keys: list[str]) -> str:
    """``0\u20132, 4\u20137`` for runs of integer keys; other keys as they are."""
    if not all(k.isdigit() for k in keys):
        return ", ".join(keys)
    nums = sorted(int(k) for k in keys)
    runs: list[list[int]] = []
    for n in nums:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}\u2013{b}" for a, b in runs)


def others_text(f: dict[str, Any]) -> str:
    """``7 other GPUs not flagged: 0\u20132, 4\u20137`` (empty when every device failed)."""
    if not f["others"]:
        return ""
    return f"{len(f['others'])} other {f['word']} not flagged: {key_ranges(f['others'])}"
