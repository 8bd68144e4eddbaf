"""End to end, real parts: the watch role on a simulated GPU server, node_exporter, Prometheus and the shipped alerts.

A podman container from the lab's watch image (systemd as PID 1, Debian 12's prometheus-node-exporter 1.5.0 with its
textfile collector on /var/lib/prometheus/node-exporter) becomes a GPU server with the simulated libnvidia-ml.so.1
(tests/integration/watchlab.py); the prereqs role (pynvml) and the watch role are applied with the policy
``watch.interval_seconds: 10`` (the policy's minimum), ``watch.randomized_delay_seconds: 0``.

Prometheus is Debian's ``/usr/bin/prometheus`` (the ``prometheus`` package, scripts/install-deps.sh test), run by this
test as a child process with a temporary config and storage directory, scraping every second, evaluating every
second, ``rule_files`` = monitoring/prometheus/gpufleet-alerts.yml. The lab network is internal (no address on this
machine's side), so Prometheus is started inside the container's network namespace only (``nsenter --net``: its
binary, files and process stay on this machine), listens on 127.0.0.1 there and scrapes node_exporter at
127.0.0.1:9100; the test queries its HTTP API through the same namespace. Nothing of this machine's network changes.
It is killed by its PID at the end and the container is removed.

Faults go into the simulated GPU's state file (tests/sim/nvml/README.md): a GPU lost (``gpu.1.lost=1``: GPU-HLT-002,
critical) must fire GpufleetCriticalFinding within two intervals and resolve within two more once cleared; a power
cap (``gpu.0.power_limit_mw`` below the default: GPU-PWR-002, high) must fire GpufleetFindingNewlyFailing within two
intervals (GpufleetHighFinding waits its 30 minutes: pending). A stopped timer fires GpufleetWatchStale after three
intervals. Before any fault, after two runs, no alert fires and every dashboard query works on the real series.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest
import watch_families
import watchlab
import yaml

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (scripts/lab-setup.sh)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab is rootful podman; nsenter needs root"),
]

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "monitoring" / "prometheus" / "gpufleet-alerts.yml"
DASHBOARD = REPO / "monitoring" / "grafana" / "gpufleet-dashboard.json"
PROMETHEUS = "/usr/bin/prometheus"
INTERVAL = 10  # seconds; policy.validate refuses less (a run reads every GPU and samples counters for ~1 s)
SITE = "lab-e2e"
PORT = 19090  # Prometheus, on 127.0.0.1 inside the container's network namespace
PROFILE = {"profile": "a100", "gpus": 2, "driver": "550"}
LOST = {"gpu.1.lost": "1"}
# A100 default and maximum 400 W: a limit of 250 W is a cap the policy did not ask for (GPU-PWR-002).
CAPPED = {"gpu.0.power_limit_mw": "250000", "gpu.0.enforced_power_limit_mw": "250000"}
# The watch's families (docs: issue 16's design) that a run without Slurm writes.
WATCH_FAMILIES = watch_families.ALL - watch_families.SLURM

_GET = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"


class Lab:
    def __init__(self, name: str, netns_pid: int, baseline: str):
        self.name = name
        self.netns_pid = netns_pid
        self.baseline = baseline

    def api(self, path: str, **params: str) -> dict:
        """GET Prometheus' HTTP API (inside the container's network namespace) -> its ``data``."""
        url = f"http://127.0.0.1:{PORT}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        proc = subprocess.run(
            ["nsenter", f"--target={self.netns_pid}", "--net", sys.executable, "-S", "-c", _GET, url],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, f"GET {url}: {proc.stderr[-500:]}"
        body = json.loads(proc.stdout)
        assert body["status"] == "success", body
        return body["data"]

    def wait_ready(self, process: subprocess.Popen, log: Path, limit: float = 30) -> None:
        """Until Prometheus answers /-/ready (bounded); its log when it exits or never gets ready."""
        deadline = time.monotonic() + limit
        url = f"http://127.0.0.1:{PORT}/-/ready"
        while True:
            assert process.poll() is None, f"prometheus exited {process.returncode}:\n{log.read_text()[-3000:]}"
            probe = subprocess.run(
                ["nsenter", f"--target={self.netns_pid}", "--net", sys.executable, "-S", "-c", _GET, url],
                capture_output=True,
                timeout=30,
            )
            if probe.returncode == 0:
                return
            assert time.monotonic() < deadline, f"prometheus not ready in {limit} s:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def firing(self, alertname: str, **labels: str) -> list[dict]:
        return [
            a
            for a in self.alerts()
            if a["labels"]["alertname"] == alertname
            and a["state"] == "firing"
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    def diagnostics(self) -> str:
        journal = watchlab.exec_in(
            self.name, "journalctl", "-u", "gpufleet-watch.service", "-n", "15", "--no-pager", check=False
        ).stdout
        textfile = watchlab.exec_in(
            self.name, "cat", "/var/lib/prometheus/node-exporter/gpufleet.prom", check=False
        ).stdout
        alerts = [(a["labels"]["alertname"], a["labels"].get("rule"), a["state"]) for a in self.alerts()]
        return f"\nalerts: {alerts}\n--- journal:\n{journal}\n--- gpufleet.prom:\n{textfile}"

    def wait(self, what: str, predicate, limit: float) -> float:
        """Poll ``predicate`` every 0.5 s; the seconds it took, or fail after ``limit`` (with what the host did)."""
        start = time.monotonic()
        while True:
            if predicate():
                return time.monotonic() - start
            if time.monotonic() - start > limit:
                pytest.fail(f"{what}: not within {limit:.0f} s{self.diagnostics()}")
            time.sleep(0.5)

    def last_success(self) -> float:
        rows = self.query(f'gpufleet_watch_last_success_timestamp_seconds{{host="{self.name}"}}')
        return float(rows[0]["value"][1]) if rows else 0.0

    def fires(self, alertname: str, rule: str, fault: dict[str, str]) -> tuple[dict, float]:
        """Put ``fault`` into the simulated GPUs' state; ``alertname`` must fire for ``rule`` on this host within two
        intervals (waited for up to four): the alert and the seconds it took."""
        watchlab.set_gpu(self.name, fault)
        fired = self.wait(
            f"{alertname} for {rule}", lambda: self.firing(alertname, host=self.name, rule=rule), 4 * INTERVAL
        )
        assert fired <= 2 * INTERVAL, f"fired after {fired:.1f} s, more than two intervals{self.diagnostics()}"
        (alert,) = self.firing(alertname, host=self.name, rule=rule)
        return alert, fired

    def resolves(self, what: str, predicate) -> float:
        """Put the healthy state back; ``predicate`` (the alerts gone) must hold within two intervals (waited for up
        to four): the seconds it took."""
        watchlab.write_state(self.name, self.baseline)
        resolved = self.wait(what, predicate, 4 * INTERVAL)
        assert resolved <= 2 * INTERVAL, f"resolved after {resolved:.1f} s{self.diagnostics()}"
        return resolved


def _prometheus_config(tmp: Path) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [{"job_name": "node", "static_configs": [{"targets": ["127.0.0.1:9100"]}]}],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def lab(sim_lib, profiles, tmp_path_factory):
    if not Path(PROMETHEUS).exists():
        pytest.fail(f"{PROMETHEUS} is missing: Debian's prometheus package (scripts/install-deps.sh test)")
    tmp = tmp_path_factory.mktemp("watch-prometheus")
    name = f"h2mon-{uuid.uuid4().hex[:6]}"
    baseline = profiles.format_state(profiles.build_state(**PROFILE))
    with watchlab.gpu_container(name, baseline, sim_lib) as host:
        inventory = watchlab.inventory(
            tmp,
            {host: {}},
            {"gpufleet_policy": {"site": SITE, "watch": {"interval_seconds": INTERVAL, "randomized_delay_seconds": 0}}},
        )
        proc, stats = watchlab.apply_watch(tmp, inventory)
        assert proc.returncode == 0 and stats[host]["failures"] == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        pid = int(watchlab.podman("inspect", "-f", "{{.State.Pid}}", host).stdout.strip())
        log = (tmp / "prometheus.log").open("w")
        prometheus = subprocess.Popen(
            [
                "nsenter",
                f"--target={pid}",
                "--net",
                PROMETHEUS,
                f"--config.file={_prometheus_config(tmp)}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{PORT}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # nsenter execs Prometheus: this PID is Prometheus'
        try:
            lab = Lab(host, pid, baseline)
            lab.wait_ready(prometheus, tmp / "prometheus.log")
            yield lab
        finally:
            prometheus.terminate()
            try:
                prometheus.wait(timeout=15)
            except subprocess.TimeoutExpired:
                prometheus.kill()
                prometheus.wait(timeout=5)
            log.close()


@pytest.fixture
def host(lab):
    """The lab with the simulated GPUs healthy again after the test (and the timer running)."""
    yield lab
    watchlab.write_state(lab.name, lab.baseline)
    watchlab.exec_in(lab.name, "systemctl", "start", "gpufleet-watch.timer", check=False)
    # the next test starts from a host whose fault is gone from Prometheus too
    lab.wait(
        "the host clean again",
        lambda: not [a for a in lab.alerts() if a["labels"]["alertname"] != "GpufleetHighFinding"],
        4 * INTERVAL,
    )


def test_prometheus_scrapes_the_watch_and_nothing_fires_on_a_healthy_host(host):
    # two runs after Prometheus came up: the clean state has been evaluated more than once
    first = host.wait("a first run scraped", lambda: host.last_success() > 0, 3 * INTERVAL)
    seen = host.last_success()
    host.wait("a second run scraped", lambda: host.last_success() > seen, 2 * INTERVAL)
    assert first < 3 * INTERVAL
    assert host.alerts() == [], host.diagnostics()

    info = host.query("gpufleet_watch_info")
    assert [r["metric"]["host"] for r in info] == [host.name]
    assert info[0]["metric"]["site"] == SITE and info[0]["metric"]["policy_digest"].startswith("sha256:")
    interval = host.query(f'gpufleet_watch_interval_seconds{{host="{host.name}"}}')
    assert float(interval[0]["value"][1]) == INTERVAL
    # every family the watch writes without Slurm, as the rules and the dashboard name them
    names = {r["metric"]["__name__"] for r in host.query('{__name__=~"gpufleet_.*"}')}
    assert names == WATCH_FAMILIES
    # node_exporter 1.5.0 reports the textfile by its full path (the alerts' regex takes it)
    files = [r["metric"]["file"] for r in host.query("node_textfile_mtime_seconds")]
    assert files == ["/var/lib/prometheus/node-exporter/gpufleet.prom"]
    assert host.query('node_textfile_mtime_seconds{file=~"(.*/)?gpufleet\\\\.prom"}')
    assert float(host.query("node_textfile_scrape_error")[0]["value"][1]) == 0


def test_every_dashboard_query_runs_on_the_real_series(host):
    host.wait("a run scraped", lambda: host.last_success() > 0, 3 * INTERVAL)
    dashboard = json.loads(DASHBOARD.read_text())
    empty = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$site", SITE).replace("$host", host.name)
            if not host.query(expr):  # a PromQL error fails in api()
                empty.append(panel["title"])
    # without Slurm and with no GPU throttling, exactly these have nothing to show
    assert sorted(set(empty)) == sorted(
        {"Slurm nodes drained by gpufleet", "Hosts with GPUs slowed down or capped", "Throttling per host"}
    )


def test_gpu_lost_fires_the_critical_alert_within_two_intervals_and_resolves(host):
    host.wait("a run scraped", lambda: host.last_success() > 0, 3 * INTERVAL)
    alert, fired = host.fires("GpufleetCriticalFinding", "GPU-HLT-002", LOST)
    assert alert["labels"]["severity"] == "critical" and alert["labels"]["finding_severity"] == "critical"
    assert alert["annotations"]["summary"] == f"{host.name}: GPU-HLT-002 failing (critical, health)"
    assert f"gpufleet audit -i INVENTORY --limit {host.name}" in alert["annotations"]["runbook"]
    # it is news, too: the GPU was there when the watch started
    assert host.firing("GpufleetFindingNewlyFailing", host=host.name, rule="GPU-HLT-002")

    resolved = host.resolves(
        "GpufleetCriticalFinding resolved",
        lambda: not [a for a in host.alerts() if a["labels"]["alertname"] == "GpufleetCriticalFinding"],
    )
    print(f"GPU lost: fired after {fired:.1f} s, resolved {resolved:.1f} s after the fix (interval {INTERVAL} s)")


def test_power_cap_is_newly_failing_within_two_intervals_and_resolves(host):
    host.wait("a run scraped", lambda: host.last_success() > 0, 3 * INTERVAL)
    alert, fired = host.fires("GpufleetFindingNewlyFailing", "GPU-PWR-002", CAPPED)
    assert alert["labels"]["finding_severity"] == "high" and alert["labels"]["severity"] == "warning"
    # a high finding waits its 30 minutes; the critical alert stays quiet
    states = {(a["labels"]["alertname"], a["state"]) for a in host.alerts()}
    assert ("GpufleetHighFinding", "pending") in states
    assert not any(name == "GpufleetCriticalFinding" for name, _ in states)
    # the dashboard's throttling panel shows the capped host
    rows = host.query(
        f'count by (rule) (gpufleet_finding{{host="{host.name}", rule=~"GPU-PWR-003|GPU-THM-001|GPU-PWR-002"}})'
    )
    assert [r["metric"]["rule"] for r in rows] == ["GPU-PWR-002"]

    resolved = host.resolves(
        "the power cap's alerts resolved",
        lambda: not [a for a in host.alerts() if a["labels"].get("rule") == "GPU-PWR-002"],
    )
    print(f"power cap: fired after {fired:.1f} s, resolved {resolved:.1f} s after the fix (interval {INTERVAL} s)")


def test_a_stopped_checker_is_stale_after_three_intervals(host):
    host.wait("a run scraped", lambda: host.last_success() > 0, 3 * INTERVAL)
    watchlab.exec_in(host.name, "systemctl", "stop", "gpufleet-watch.timer")
    host.wait("GpufleetWatchStale", lambda: host.firing("GpufleetWatchStale", host=host.name), 6 * INTERVAL)
    fired_at = time.time()
    # not before the last success is three intervals old, and within seconds after (scrape, evaluation, poll)
    age = fired_at - host.last_success()
    assert 3 * INTERVAL < age <= 3 * INTERVAL + 5, f"fired at age {age:.1f} s{host.diagnostics()}"
    watchlab.exec_in(host.name, "systemctl", "start", "gpufleet-watch.timer")
    resolved = host.wait(
        "GpufleetWatchStale resolved", lambda: not host.firing("GpufleetWatchStale", host=host.name), 3 * INTERVAL
    )
    assert resolved <= 2 * INTERVAL
    print(f"stopped timer: stale at a last-success age of {age:.1f} s, resolved {resolved:.1f} s after the restart")
