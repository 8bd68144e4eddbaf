"""iperf3's JSON report (`iperf3 -c ... -J`): what the measurements take from it. Pure: no I/O."""

from __future__ import annotations

import json
from typing import Any


def parse(stdout: str, stderr: str = "") -> dict[str, Any]:
    """The client's summary from its -J output: goodput (the receiver's sum_received) and sending rate in Mbit/s,
    retransmits, the sender's congestion control, the receiver's seconds, and the sending rate of each interval
    (1 s by default: the sender side, retransmissions included).

    A run that failed gives {"error": text}: iperf3's own error from its JSON, else the end of what it printed
    (stderr first: the output is not JSON when iperf3 or `ip netns exec` died before writing it)."""
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        return {"error": (stderr or stdout)[-500:] or "no output"}
    if "error" in data:
        return {"error": data["error"]}
    end = data["end"]
    return {
        "mbps": end["sum_received"]["bits_per_second"] / 1e6,
        "sent_mbps": end["sum_sent"]["bits_per_second"] / 1e6,
        "retransmits": end["sum_sent"].get("retransmits"),
        "cc": end.get("sender_tcp_congestion"),
        "seconds": end["sum_received"]["seconds"],
        "sent_mbps_per_s": [iv["sum"]["bits_per_second"] / 1e6 for iv in data.get("intervals", [])],
    }


def second_half(per_s: list[float] | None) -> float | None:
    """Mean sending rate over the second half of a run (iperf3's 1 s intervals, sender side: what a flow holds
    once start-up is over; it includes retransmissions)."""
    if not per_s:
        return None
    half = per_s[len(per_s) // 2 :]
    return round(sum(half) / len(half), 2)
