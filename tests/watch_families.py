"""The metric families the watch writes to its textfile (<watch.textfile_dir>/gpufleet.prom, written by
plugins/module_utils/watch/checker.py), as the alert rules and the dashboard name them: one list for the unit tests
of the monitoring files (tests/unit/test_monitoring.py) and for the watch scraped by Prometheus
(tests/integration/test_watch_prometheus.py). The first five are shared with the controller's report
(plugins/plugin_utils/report/prometheus.py)."""

from __future__ import annotations

# Written only where Slurm runs (the drain of issue 16).
SLURM = {
    "gpufleet_watch_slurm_drained",
    "gpufleet_watch_slurm_drain_suppressed",
}
# Every family of a watch run.
ALL = {
    "gpufleet_finding",
    "gpufleet_host_findings",
    "gpufleet_host_up",
    "gpufleet_audit_timestamp_seconds",
    "gpufleet_audit_complete",
    "gpufleet_watch_info",
    "gpufleet_watch_interval_seconds",
    "gpufleet_watch_run_duration_seconds",
    "gpufleet_watch_run_cpu_seconds",
    "gpufleet_watch_last_run_ok",
    "gpufleet_watch_last_success_timestamp_seconds",
    "gpufleet_watch_finding_since_timestamp_seconds",
    # the hardware baseline the role's first run records (issue 25): recorded, seen, differences, when
    "gpufleet_watch_baseline",
    "gpufleet_watch_baseline_seen",
    "gpufleet_watch_baseline_differences",
    "gpufleet_watch_baseline_recorded_timestamp_seconds",
} | SLURM
