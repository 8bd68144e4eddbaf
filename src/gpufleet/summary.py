"""Terminal summary of an audit run."""

from __future__ import annotations

from typing import Any

from gpufleet.runner import HostResult

GPU_TASK = "Read GPU and driver state"


def _gpu_line(gpu: dict[str, Any]) -> str:
    if gpu.get("lost"):
        return f"  GPU {gpu.get('index')}: LOST (fell off the bus)"
    if gpu.get("error"):
        return f"  GPU {gpu.get('index')}: {gpu['error']}"
    mem = gpu.get("memory") or {}
    power = gpu.get("power") or {}
    parts = [f"  GPU {gpu.get('index')}: {gpu.get('name')}"]
    if mem.get("used_pct") is not None:
        parts.append(f"mem {mem['used_pct']:.0f}% of {mem.get('total_mib')} MiB")
    if power.get("limit_w") is not None:
        parts.append(f"power limit {power['limit_w']:.0f} W (default {power.get('default_limit_w') or '?'} W)")
    if gpu.get("persistence_mode") is not None:
        parts.append("persistence " + ("on" if gpu["persistence_mode"] else "off"))
    throttling = (gpu.get("clock_event_reasons") or {}).get("throttling")
    if throttling:
        parts.append("throttling: " + ",".join(throttling))
    return ", ".join(parts)


def host_lines(host: HostResult, verbose: bool = False) -> list[str]:
    if host.status != "ok":
        return [f"{host.name}: {host.status.upper()}: {host.message}"]
    info = host.results.get(GPU_TASK)
    if info is None:
        return [f"{host.name}: no GPU facts returned"]
    nvml = info.get("nvml") or {}
    if not nvml.get("available"):
        return [f"{host.name}: no NVIDIA driver found ({nvml.get('error')})"]
    drv = info.get("driver") or {}
    gpus = info.get("gpus") or []
    names = sorted({g.get("name") or "?" for g in gpus})
    head = (
        f"{host.name}: {len(gpus)} GPU(s) {', '.join(names)}; driver {drv.get('version')}"
        f" (CUDA {drv.get('cuda_driver_version')}), via {nvml.get('source')}"
    )
    lines = [head]
    for gpu in gpus:
        if verbose or gpu.get("lost") or gpu.get("error"):
            lines.append(_gpu_line(gpu))
    return lines


def render(hosts: dict[str, HostResult], verbose: bool = False) -> str:
    lines: list[str] = []
    for name in sorted(hosts):
        lines.extend(host_lines(hosts[name], verbose))
    ok = sum(1 for h in hosts.values() if h.status == "ok")
    lines.append(f"{len(hosts)} host(s): {ok} audited, {len(hosts) - ok} failed or unreachable")
    return "\n".join(lines)
