"""nvml.binding_info's fast path: the wheel beside the imported pynvml names the binding (no importlib.metadata)."""

from __future__ import annotations

import types

from ansible_collections.gpufleet.tuning.plugins.module_utils import nvml


def wheel(site, dist, version, listed):
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\nVersion: 0.0\n")
    (info / "RECORD").write_text("".join(f"{f},sha256=x,1\n" for f in listed) + f"{info.name}/RECORD,,\n")


def test_module_wheel(tmp_path):
    (tmp_path / "pynvml.py").write_text("")
    wheel(tmp_path, "nvidia_ml_py3", "7.352.0", ["pynvml.py"])
    wheel(tmp_path, "nvidia_ml_py", "12.535.133", ["example.py"])  # installed beside, but not the owner
    module = types.SimpleNamespace(__file__=str(tmp_path / "pynvml.py"))
    assert nvml.binding_info(module) == {
        "module": str(tmp_path / "pynvml.py"), "distribution": "nvidia-ml-py3", "version": "7.352.0"}


def test_package_wheel(tmp_path):
    (tmp_path / "pynvml").mkdir()
    (tmp_path / "pynvml" / "__init__.py").write_text("")
    wheel(tmp_path, "pynvml", "11.5.0", ["pynvml/__init__.py", "pynvml/smi.py"])
    assert nvml._wheel_owner(str(tmp_path / "pynvml" / "__init__.py")) == ("pynvml", "11.5.0")


def test_no_wheel_lists_the_file(tmp_path):
    (tmp_path / "pynvml.py").write_text("")
    wheel(tmp_path, "nvidia_ml_py", "12.535.133", ["other.py"])
    (tmp_path / "nvidia_ml_py-1.0.dist-info").mkdir()  # no RECORD: unreadable, skipped
    assert nvml._wheel_owner(str(tmp_path / "pynvml.py")) is None
    out = nvml.binding_info(types.SimpleNamespace(__file__=str(tmp_path / "pynvml.py")))
    assert (out["distribution"], out["version"]) == (None, None)
