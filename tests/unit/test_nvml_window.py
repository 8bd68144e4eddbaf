"""nvml.collect's sample window: each GPU's links and first error counters come first, every other fact of every
GPU is read inside the window (then the caller's ``meanwhile``), and the second counters at least
``sample_seconds`` after the first. pynvml bound in-process to the simulated library; the calls are recorded on the
way into the binding (our code is not replaced)."""

from __future__ import annotations

import time

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvml


@pytest.fixture
def nv(sim_lib, profiles, tmp_path, monkeypatch):
    import pynvml

    saved = pynvml.nvmlLib
    state = tmp_path / "nvml.state"
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    profiles.write_state(state, profiles.build_state("h100", gpus=4, driver="550"))
    yield nvml.load_pynvml(str(sim_lib))
    pynvml.nvmlLib = saved
    cache = getattr(pynvml, "_nvmlGetFunctionPointer_cache", None)
    if isinstance(cache, dict):
        cache.clear()


class Recorded:
    """The binding, with each device call's name and time noted before it runs."""

    def __init__(self, binding):
        self._binding = binding
        self.calls = []

    def __getattr__(self, name):
        attr = getattr(self._binding, name)
        if not (name.startswith("nvmlDevice") and callable(attr)):
            return attr

        def call(*args, **kwargs):
            self.calls.append((name, time.monotonic()))
            return attr(*args, **kwargs)

        return call


def test_other_facts_are_read_inside_the_window(nv):
    rec = Recorded(nv)
    marks = {}
    _driver, gpus = nvml.collect(rec, sample_seconds=0.3, meanwhile=lambda: marks.setdefault("meanwhile",
                                                                                               time.monotonic()))
    assert len(gpus) == 4 and all(not g["lost"] for g in gpus)
    replays = [t for name, t in rec.calls if name == "nvmlDeviceGetPcieReplayCounter"]
    assert len(replays) == 8  # two readings per GPU
    first_done, second_start = max(replays[:4]), min(replays[4:])
    inside = [t for name, t in rec.calls if name in ("nvmlDeviceGetName", "nvmlDeviceGetTemperature",
                                                     "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetVbiosVersion")]
    assert len(inside) >= 16 and all(first_done < t < second_start for t in inside)
    assert first_done < marks["meanwhile"] < second_start and marks["meanwhile"] > max(inside)
    assert second_start - min(replays[:4]) >= 0.3
    assert all(g["pcie"]["sample_seconds"] >= 0.3 for g in gpus)


def test_without_a_window_every_fact_is_still_read_once(nv):
    rec = Recorded(nv)
    _driver, gpus = nvml.collect(rec, sample_seconds=0)
    names = [name for name, _t in rec.calls]
    assert names.count("nvmlDeviceGetPcieReplayCounter") == 4 and names.count("nvmlDeviceGetName") == 4
    assert all(g["pcie"]["replay_increase"] is None and g["nvlink"]["total"] == 18 for g in gpus)
