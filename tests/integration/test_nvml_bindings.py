"""Issue 25 §1: every NVML binding in the wild gives a complete audit.

One release of each binding family on the package index (tests/sim/nvml/bindings.txt: nvidia-ml-py3 7.352.0, the
same code as Ubuntu 22.04's python3-pynvml; nvidia-ml-py 11.450 ... 13.x; the pynvml package with its own copy and
as a wrapper) is installed from the wheel cache (`make bindings`) into a throwaway venv, offline; that venv's Python
runs gpu_info and the audit module through real Ansible over the simulated libnvidia-ml.so.1, on one HGX H100 host
with a fault in each field an old binding may lack. The newest nvidia-ml-py is the reference. Every binding gives a
complete report (no failed host), the same GPU facts and the same failing findings wherever it can read the fields,
and SW-NVML-001 names its version and exactly the fields it cannot read.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import labkit
import pytest

from gpufleet.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

pytestmark = pytest.mark.integration

BINDINGS_FILE = REPO / "tests" / "sim" / "nvml" / "bindings.txt"
WHEELS = REPO / "build" / "wheels" / "nvml-bindings"
REFERENCE = "nvidia-ml-py==13.615.71"
OLDEST = "nvidia-ml-py3==7.352.0"
NO_SMI = "oldest_without_nvidia_smi"

# The demo's healthy HGX H100 (driver 570) with one fault per field an old binding may lack, and a few it can read.
FAULTS = [
    "gpu.0.nvlink_down=3,4",  # GPU-NVL-001: nvlink
    "gpu.1.cpu_affinity=56-111,168-223",  # GPU-NUMA-001: numa_node (0) against an affinity on node 1
    "gpu.2.remapped_failure=1",  # GPU-HLT-001: remapped_rows
    "gpu.3.fabric_state=1",  # GPU-FAB-001: fabric
    "gpu.4.mig_pending=1",  # GPU-MIG-001: mig
    "gpu.5.recovery_action=1",  # GPU-RCV-001: recovery_action
    "gpu.6.power_limit_mw=250000",  # GPU-PWR-002: read by every binding
    "gpu.6.enforced_power_limit_mw=250000",
    "gpu.7.ecc_pending=0",  # GPU-ECC-002: read by every binding
    # Retired pages by cause: nvidia-ml-py3 7.352 has the two cause constants swapped against nvml.h.
    "gpu.7.retired_sbe=3",
    "gpu.7.retired_dbe=1",
    "gpu.7.retired_pending=0",
]
# The fields (as `lacks` names them) each of these rules judges: a binding that cannot read one leaves the rule
# without its fault.
NVLINK_ERRORS = {f"nvlink.errors.{name}" for name in ("replay", "recovery", "crc_flit", "crc_data")}
RULE_FIELDS = {
    "GPU-NVL-001": {"nvlink"},
    "GPU-NVL-002": {"nvlink"} | NVLINK_ERRORS,
    "GPU-NUMA-001": {"numa_node"},
    "GPU-HLT-001": {"remapped_rows"},
    "GPU-FAB-001": {"fabric"},
    "GPU-MIG-001": {"mig.current"},
    "GPU-RCV-001": {"recovery_action"},
}
# What each binding has no function for and nvidia-smi does not stand in for (read from the bindings' sources:
# nvmlDeviceGetNumaNodeId and the fabric V call arrived in 12.550, the plain fabric call in 11.525; nvidia-ml-py3
# 7.352 predates row remapping, MIG, field values, NVLink, the architecture query and the CUDA driver version). Row
# remapping, MIG mode, the fabric state and the NVLink states come from nvidia-smi then (nvidia_smi.ESSENTIAL,
# nvidia-smi nvlink --status); the NVLink error counters stay unknown.
FROM_NVIDIA_SMI = {"remapped_rows", "mig.current", "mig.pending", "fabric", "nvlink"}
LACKS_7_352 = NVLINK_ERRORS | {
    "architecture",
    "nvlink.link_count",
    "recovery_action",
    "numa_node",
    "driver.cuda_driver_version",
}
EXPECTED_LACKS = {
    "nvidia-ml-py3==7.352.0": LACKS_7_352,
    "nvidia-ml-py==11.450.51": {"numa_node"},
    "nvidia-ml-py==11.495.46": {"numa_node"},
    "nvidia-ml-py==11.515.75": {"numa_node"},
    "nvidia-ml-py==11.525.150": {"numa_node"},
    "nvidia-ml-py==12.535.161": {"numa_node"},
    "nvidia-ml-py==12.560.30": set(),
    "nvidia-ml-py==12.570.172": set(),
    "nvidia-ml-py==13.615.71": set(),
    "pynvml==11.5.3": {"numa_node"},
    "pynvml==12.0.0": set(),
    "pynvml==13.0.1": set(),
}
# The distribution that owns the imported pynvml module: the pynvml wrappers (12.x, 13.x) import nvidia-ml-py's.
OWNER = {"pynvml==12.0.0": "nvidia-ml-py", "pynvml==13.0.1": "nvidia-ml-py"}


def specs() -> list[str]:
    out = []
    for line in BINDINGS_FILE.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            out.append(spec)
    return out


def _host_name(spec: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", spec.lower())


@pytest.fixture(scope="session")
def binding_pythons(tmp_path_factory) -> dict[str, Path]:
    """{spec: python of a throwaway venv holding only that binding}, installed offline from build/wheels."""
    missing = [s for s in specs() if not list(WHEELS.glob(s.replace("-", "_").replace("==", "-") + "-*.whl"))]
    if missing:  # `make bindings` fills the cache; a checkout that skipped it fetches here
        subprocess.run(
            [str(REPO / "scripts" / "fetch-nvml-bindings.sh"), sys.executable, str(WHEELS)], cwd=REPO, check=True
        )
    base = tmp_path_factory.mktemp("bindings")
    started = time.monotonic()
    out = {}
    for spec in specs():
        venv = base / _host_name(spec)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(venv / "bin" / "python"),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-index",
                "--find-links",
                str(WHEELS),
                spec,
            ],
            check=True,
            env={**os.environ, "PIP_CONSTRAINT": ""},
        )
        out[spec] = venv / "bin" / "python"
    print(f"binding venvs: {len(out)} in {time.monotonic() - started:.1f} s")
    return out


PLAY = labkit.play(
    "Every binding",
    tasks=[
        {"name": "Read GPUs", "gpufleet.tuning.gpu_info": {"root": "{{ gpufleet_audit_root }}"}},
        {
            "name": "Audit",
            "gpufleet.tuning.audit": {
                "policy": {},
                "root": "{{ gpufleet_audit_root }}",
                "sample_seconds": 0,
                "ethtool_path": str(REPO / "tests/fixtures/ethtool/fake-ethtool"),
            },
        },
    ],
    environment="{{ gpufleet_environment }}",
)


@pytest.fixture(scope="module")
def matrix(binding_pythons, sim_lib, profiles, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("matrix")
    host = "iad-h100-03"
    built = demo.build(tmp / "fleet")[host]
    # The binding's own answers are judged here: without the kernel's NUMA node of each GPU (the demo's PCIe tree),
    # a binding without nvmlDeviceGetNumaNodeId leaves numa_node unknown and says why.
    for numa in (built / "root" / "sys" / "bus" / "pci" / "devices").glob("*/numa_node"):
        numa.unlink()
    _profile, count, driver, overrides = demo.HOSTS[host]["gpu"]
    state = profiles.build_state("h100", gpus=count, driver=driver, overrides=overrides + FAULTS, seed=host)
    for g in range(count):  # as demo.build: a busy GPU's link runs at full generation
        state[f"gpu.{g}.pcie_gen_current"] = state[f"gpu.{g}.pcie_gen_max"]
    profiles.write_state(built / "nvml.state", state)
    common = {
        "ansible_connection": "local",
        "gpufleet_audit_root": str(built / "root"),
        "gpufleet_environment": {
            "LD_LIBRARY_PATH": str(sim_lib.parent),
            "FAKE_NVML_STATE": str(built / "nvml.state"),
            "FAKE_ETHTOOL_DIR": str(built / "ethtool"),
        },
    }
    # nvidia-smi on PATH: the stand-in that answers from the same simulated state (tests/sim/nvml/nvidia-smi-sim).
    smi = tmp / "smi-bin"
    smi.mkdir()
    (smi / "nvidia-smi").symlink_to(REPO / "tests/sim/nvml/nvidia-smi-sim")
    with_smi = {**common["gpufleet_environment"], "PATH": f"{smi}:{os.environ['PATH']}"}
    hosts = {
        _host_name(s): {**common, "gpufleet_environment": with_smi, "ansible_python_interpreter": str(p)}
        for s, p in binding_pythons.items()
    }
    # The oldest binding on a host without nvidia-smi: the health facts it lacks stay unknown, and are named.
    hosts[NO_SMI] = {**common, "ansible_python_interpreter": str(binding_pythons[OLDEST])}
    started = time.monotonic()
    result = run_playbook(str(labkit.write_play(tmp, PLAY)), str(labkit.write_inventory(tmp, hosts)), forks=4)
    print(f"gpu_info + audit through {len(hosts)} bindings: {time.monotonic() - started:.1f} s")
    return result.hosts


def _ok(matrix, spec: str, task: str) -> dict:
    host = matrix[spec if spec == NO_SMI else _host_name(spec)]
    assert host.status == "ok", f"{spec}: {host.status}: {host.message}"
    return host.results[task]


def _failing(audit: dict) -> set[str]:
    assert {f["status"] for f in audit["findings"]} <= {"pass", "fail", "warn", "skip"}, [
        (f["rule"], f["message"]) for f in audit["findings"] if f["status"] == "error"
    ]
    return {f["rule"] for f in audit["findings"] if f["status"] == "fail"}


def _flat(value, prefix=""):
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


# A field `lacks` names -> the GPU facts it leaves unknown.
FACTS_OF = {
    "mig.current": ("mig",),
    "mig.pending": ("mig",),
    "nvlink.link_count": ("nvlink.count_source",),
    **{f: (f, f.replace("errors.", "errors_increase.")) for f in NVLINK_ERRORS},
}


def _lacking(field: str, lacks: set[str]) -> bool:
    prefixes = {p for f in lacks for p in FACTS_OF.get(f, (f,))}
    return any(field == p or field.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("spec", specs())
def test_every_binding_gives_a_complete_report(matrix, spec):
    info = _ok(matrix, spec, "Read GPUs")
    audit = _ok(matrix, spec, "Audit")
    name, version = spec.split("==")
    binding = info["nvml"]["binding"]
    assert info["nvml"]["available"] is True and info["nvml"]["source"] == "pynvml"
    assert (binding["distribution"], info["gpu_count"]) == (OWNER.get(spec, name), 8)
    if spec not in OWNER:
        assert binding["version"] == version
    assert set(binding["lacks"]) == EXPECTED_LACKS[spec], binding["lacks"]
    for field, functions in binding["lacks"].items():
        assert functions and all(f.startswith("nvml") for f in functions), (field, functions)
    assert audit["summary"]["by_status"]["error"] == 0
    finding = {f["rule"]: f for f in audit["findings"]}["SW-NVML-001"]
    if EXPECTED_LACKS[spec]:
        assert finding["status"] == "fail" and finding["severity"] == "low"
        assert binding["version"] in finding["message"]
        assert set(finding["observed"]["cannot_read"]) == EXPECTED_LACKS[spec]
    else:
        assert finding["status"] == "pass", finding


@pytest.mark.parametrize("spec", [s for s in specs() if s != REFERENCE])
def test_same_findings_where_the_binding_can_read(matrix, spec):
    reference = _failing(_ok(matrix, REFERENCE, "Audit"))
    assert reference >= set(RULE_FIELDS) - {"GPU-NVL-002"} | {"GPU-PWR-002", "GPU-ECC-002"}, reference
    lacks = EXPECTED_LACKS[spec]
    expected = {r for r in reference if not RULE_FIELDS.get(r, set()) & lacks}
    if lacks:
        expected.add("SW-NVML-001")
    assert _failing(_ok(matrix, spec, "Audit")) == expected


@pytest.mark.parametrize("spec", [s for s in specs() if s != REFERENCE])
def test_same_gpu_facts_where_the_binding_can_read(matrix, spec):
    """Field by field, every GPU value a binding reads equals the reference binding's; what it cannot read is null
    with the reason "binding lacks <function>"."""
    lacks = EXPECTED_LACKS[spec]
    ref = _ok(matrix, REFERENCE, "Read GPUs")["gpus"]
    got = _ok(matrix, spec, "Read GPUs")["gpus"]
    problems = []
    for want_gpu, got_gpu in zip(ref, got, strict=True):
        want, have = _flat(want_gpu), _flat(got_gpu)
        for field, value in want.items():
            if field.startswith("unsupported.") or field.endswith("sample_seconds") or field == "nvlink.count_source":
                continue
            if _lacking(field, lacks):
                continue
            if field == "fabric.health_mask" and (got_gpu.get("sources") or {}).get("fabric") == "nvidia-smi":
                continue  # nvidia-smi's CSV has no health mask
            if have.get(field, "<missing>") != value:
                problems.append(f"gpu {want_gpu['index']} {field}: {have.get(field, '<missing>')!r} != {value!r}")
        for field in lacks:
            if field.startswith("driver."):
                continue
            assert got_gpu["unsupported"][field].startswith("binding lacks nvml"), (field, got_gpu["unsupported"])
            if field in NVLINK_ERRORS:
                value = ((got_gpu.get("nvlink") or {}).get("errors") or {}).get(field.rsplit(".", 1)[1])
            elif field == "nvlink.link_count":
                continue  # the links were counted another way (count_source says which)
            else:
                value = got_gpu.get(field.split(".")[0])
            if value is not None:
                problems.append(f"gpu {got_gpu['index']} {field}: {value!r} although the binding lacks it")
    assert not problems, "\n".join(problems[:40])


def test_health_facts_the_binding_lacks_come_from_nvidia_smi(matrix):
    """nvidia-ml-py3 7.352 has no nvmlDeviceGetRemappedRows and no nvmlDeviceGetMigMode: with nvidia-smi on the host
    those facts are read through it (and GPU-HLT-001, GPU-MIG-001 fail as with a full binding); without it they are
    unknown and SW-NVML-001 names them."""
    gpus = _ok(matrix, OLDEST, "Read GPUs")["gpus"]
    assert gpus[2]["remapped_rows"] == {"corrected": 0, "uncorrected": 0, "pending": False, "failure": True}
    assert gpus[4]["mig"] == {"current": False, "pending": True}
    assert gpus[3]["fabric"]["state"] == "not_started" and gpus[0]["fabric"]["status"] == "Success"
    assert all(g["sources"] == {f: "nvidia-smi" for f in ("remapped_rows", "mig", "fabric", "nvlink")} for g in gpus)
    assert (gpus[0]["nvlink"]["down"], gpus[0]["nvlink"]["count_source"]) == ([3, 4], "nvidia-smi")
    assert set(gpus[0]["nvlink"]["errors"].values()) == {None}  # unknown, never "no errors"
    bare = _ok(matrix, NO_SMI, "Read GPUs")
    assert all(g["remapped_rows"] is None and g["mig"] is None and "sources" not in g for g in bare["gpus"])
    assert all(g["fabric"] is None and g["nvlink"] is None for g in bare["gpus"])
    # (no NVLink at all then: the error counters are not asked for)
    assert set(bare["nvml"]["binding"]["lacks"]) == LACKS_7_352 - NVLINK_ERRORS | FROM_NVIDIA_SMI
    audit = _ok(matrix, NO_SMI, "Audit")
    failing = _failing(audit)
    assert {"GPU-HLT-001", "GPU-MIG-001", "GPU-FAB-001", "GPU-NVL-001"} & failing == set()
    assert "SW-NVML-001" in failing
    finding = {f["rule"]: f for f in audit["findings"]}["SW-NVML-001"]
    assert "remapped_rows" in finding["message"] and "nvmlDeviceGetRemappedRows" in finding["message"]
