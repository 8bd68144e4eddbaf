# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""One end of a measured long-haul link (M(gpufleet.tuning.link_measure), run by ``gpufleet links``).

The receiving host starts an iperf3 server (``server``): ``timeout -k 2 SECONDS iperf3 -s -p PORT`` in a session of
its own, so that it can never outlive its bound, and returns its PID once the port listens. The sending host runs the
client (``client``): ``iperf3 -c ADDRESS -p PORT -t T -O OMIT -P N -J`` for each stream count, itself bounded by
``timeout``, and returns each run's goodput, retransmits, congestion control and the TCP round-trip time the kernel
measured (iperf3's ``min_rtt`` from TCP_INFO). ``stop`` ends the server's process group by the PID ``server``
returned, and only if that PID is still our iperf3 server on that port. Each end also returns its TCP settings
(``tcp_settings``): the sender's tcp_wmem and the receiver's tcp_rmem maxima bound the window, so the bandwidth,
whatever the path: at most window / RTT per stream (``rules/measured.py`` judges it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import signal
import subprocess  # nosec B404  # the iperf3 server is started detached, argv lists only, no shell
import time

from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

STATES = ("server", "client", "stop")
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
START_WAIT_S = 5.0
STOP_WAIT_S = 3.0
MISSING = (
    "iperf3 is not installed on this host: install it on one host of each site "
    "(Debian/Ubuntu: apt-get install iperf3; RHEL/Fedora: dnf install iperf3)"
)


def tcp_settings(fs=None):
    """{rmem, wmem: [min, default, max] or None, congestion_control: str or None} from /proc/sys/net/ipv4 (the
    network namespace the module runs in)."""
    fs = fs or HostFS("/")
    out = {}
    for key in ("rmem", "wmem"):
        text = fs.read("/proc/sys/net/ipv4/tcp_%s" % key)
        try:
            out[key] = [int(v) for v in text.split()] if text else None
        except ValueError:
            out[key] = None
    cc = fs.read("/proc/sys/net/ipv4/tcp_congestion_control")
    out["congestion_control"] = cc.strip() if cc else None
    return out


def listening(port, fs=None):
    """True when a TCP socket listens on ``port`` (any address, IPv4 or IPv6) in this network namespace."""
    fs = fs or HostFS("/")
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (fs.read(table) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == LISTEN and fields[1].rsplit(":", 1)[-1] == "%04X" % port:
                return True
    return False


def server_argv(timeout_bin, iperf3, port, seconds):
    return [timeout_bin, "-k", "2", str(int(seconds)), iperf3, "-s", "-p", str(port)]


def client_argv(timeout_bin, iperf3, address, port, seconds, omit, streams):
    """The client's command line, bounded: ``timeout`` kills it 20 s after the run should have ended."""
    bound = int(seconds + omit + 20)
    return [
        timeout_bin, "-k", "5", str(bound), iperf3, "-c", address, "-p", str(port), "-t", str(int(seconds)),
        "-O", str(int(omit)), "-P", str(int(streams)), "-J", "--connect-timeout", "5000",
    ]


def parse(stdout, stderr=""):
    """One client run from iperf3's -J output: goodput (the receiver's sum) and sending rate in Mbit/s,
    retransmits, the sender's congestion control and the streams' TCP RTTs (TCP_INFO, in ms). A run that failed
    gives {"error": text}: iperf3's own error, else the end of what it printed."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return {"error": ((stderr or stdout or "").strip()[-500:]) or "iperf3 printed nothing"}
    if not isinstance(data, dict) or "end" not in data or data.get("error"):
        return {"error": str((data or {}).get("error") if isinstance(data, dict) else "") or "no result"}
    end = data["end"]
    try:
        received = end["sum_received"]["bits_per_second"] / 1e6
        sent = end["sum_sent"]["bits_per_second"] / 1e6
    except (KeyError, TypeError):
        return {"error": "iperf3's JSON has no sum_received/sum_sent"}
    senders = [s.get("sender") or {} for s in end.get("streams") or []]
    min_rtts = [s["min_rtt"] for s in senders if s.get("min_rtt")]
    mean_rtts = [s["mean_rtt"] for s in senders if s.get("mean_rtt")]
    return {
        "streams": len(senders),
        "mbps": round(received, 1),
        "sent_mbps": round(sent, 1),
        "retransmits": end["sum_sent"].get("retransmits"),
        "congestion_control": end.get("sender_tcp_congestion"),
        "min_rtt_ms": round(min(min_rtts) / 1000.0, 3) if min_rtts else None,
        "mean_rtt_ms": round(sum(mean_rtts) / len(mean_rtts) / 1000.0, 3) if mean_rtts else None,
        "seconds": end["sum_received"].get("seconds"),
    }


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().decode("utf-8", "replace").split("\0")
    except (IOError, OSError):
        return None


def _alive(pid):
    """The process exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (IOError, OSError, IndexError):
        return False


def ours(pid, port):
    """True when ``pid`` is the ``timeout ... iperf3 -s -p PORT`` that ``start_server`` started, leading its own
    process group: the one process ``stop`` may signal."""
    argv = _cmdline(pid)
    if not argv or "-s" not in argv or "-p" not in argv or not any(a.endswith("iperf3") for a in argv):
        return False
    i = argv.index("-p")
    if i + 1 >= len(argv) or argv[i + 1] != str(port):
        return False
    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False


class LinkEnd:
    """One end of the measurement: ``run()`` does what ``state`` says and returns the module's result (without
    ``changed``: a measurement changes no setting, the server it starts is stopped by ``stop`` or its bound)."""

    def __init__(self, module, iperf3, timeout_bin):
        self.module = module
        self.params = module.params
        self.iperf3 = iperf3
        self.timeout_bin = timeout_bin

    def run(self):
        state = self.params["state"]
        out = {"state": state, "tcp": tcp_settings()}
        if state == "server":
            out.update(self.start_server())
        elif state == "client":
            out.update(self.run_client())
        else:
            out.update(self.stop_server())
        return out

    def start_server(self):
        port, seconds = self.params["port"], self.params["server_seconds"]
        argv = server_argv(self.timeout_bin, self.iperf3, port, seconds)
        if listening(port):
            self.module.fail_json(msg="port %d is already in use on this host: choose another (gpufleet links --port)"
                                  % port, port=port)
        if self.module.check_mode:
            return {"pid": None, "port": port, "argv": argv}
        null = subprocess.DEVNULL
        proc = subprocess.Popen(  # nosec B603  # argv list: timeout, iperf3 and numbers
            argv, stdin=null, stdout=null, stderr=null, close_fds=True, start_new_session=True
        )
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            if listening(port):
                return {"pid": proc.pid, "port": port, "argv": argv}
            code = proc.poll()
            if code is not None:
                self.module.fail_json(
                    msg="iperf3 server exited with code %s before listening on port %d" % (code, port), argv=argv
                )
            time.sleep(0.05)
        self._kill(proc.pid)
        self.module.fail_json(msg="iperf3 server did not listen on port %d within %s s" % (port, START_WAIT_S),
                              argv=argv)

    def run_client(self):
        p = self.params
        runs = []
        for streams in p["streams"]:
            argv = client_argv(self.timeout_bin, self.iperf3, p["address"], p["port"], p["seconds"], p["omit"],
                               streams)
            if self.module.check_mode:
                runs.append({"streams": streams, "argv": argv})
                continue
            rc, stdout, stderr = self.module.run_command(argv)
            run = parse(stdout, stderr)
            run.update(requested_streams=streams, rc=rc)
            runs.append(run)
        return {"address": p["address"], "port": p["port"], "runs": runs}

    def stop_server(self):
        pid, port = self.params["pid"], self.params["port"]
        if not pid or not _alive(pid):
            return {"pid": pid, "stopped": False, "msg": "not running"}
        if not ours(pid, port):
            self.module.fail_json(msg="process %d is not an iperf3 server on port %d started by link_measure: "
                                  "left alone" % (pid, port), pid=pid)
        if self.module.check_mode:
            return {"pid": pid, "stopped": False}
        return {"pid": pid, "stopped": self._kill(pid)}

    @staticmethod
    def _kill(pid):
        """SIGTERM to the process group (timeout and iperf3), SIGKILL after STOP_WAIT_S; True once it is gone."""
        for sig, wait in ((signal.SIGTERM, STOP_WAIT_S), (signal.SIGKILL, STOP_WAIT_S)):
            try:
                os.killpg(pid, sig)
            except OSError:
                return True
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not _alive(pid):
                    return True
                time.sleep(0.05)
        return not _alive(pid)
