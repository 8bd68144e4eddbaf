"""Fidelity of the simulated NVML: every C symbol our code can reach through pynvml exists in the fake.

The set is derived, not listed: the pynvml functions our code names (plugins/ and src/) are expanded through
pynvml's own source down to the `_nvmlGetFunctionPointer("...")` symbols they resolve, and each symbol is looked
up in the fake library exactly as pynvml does (dlsym through ctypes).
"""

from __future__ import annotations

import ast
import ctypes
import inspect
import re
from pathlib import Path

import pynvml
import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = [REPO / "plugins", REPO / "src"]
SYMBOL = re.compile(r'_nvmlGetFunctionPointer\(\s*"(nvml\w+)"\s*\)')
NAME = re.compile(r"\b(nvml\w+)\s*\(")


def pynvml_names_in_our_code() -> set[str]:
    names: set[str] = set()
    for base in PRODUCTION:
        for path in base.rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr.startswith("nvml"):
                    names.add(node.attr)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("nvml"):
                    names.add(node.value)  # getattr(nv, "nvml...")
    return {n for n in names if callable(getattr(pynvml, n, None))}


def c_symbols(function_names: set[str]) -> set[str]:
    """C symbols the given pynvml functions resolve, following pynvml's calls into its other nvml* functions."""
    seen: set[str] = set()
    symbols: set[str] = set()
    todo = list(function_names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        fn = inspect.unwrap(getattr(pynvml, name))
        source = inspect.getsource(fn)
        symbols.update(SYMBOL.findall(source))
        body = source.split(":", 1)[1] if ":" in source else source
        for called in NAME.findall(body):
            if called != name and callable(getattr(pynvml, called, None)):
                todo.append(called)
    return symbols


def test_production_code_has_no_simulation_branches():
    for base in PRODUCTION:
        for path in base.rglob("*.py"):
            text = path.read_text()
            for marker in ("FAKE_NVML", "gpufleet-sim", "fake_nvml", "tests/sim"):
                assert marker not in text, f"{path.relative_to(REPO)} mentions {marker!r}"


def test_every_nvml_symbol_we_need_is_in_the_fake(sim_lib, capsys):
    names = pynvml_names_in_our_code()
    # Guard the extraction itself: gpu_info alone reaches dozens of NVML calls.
    assert {"nvmlInit", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPowerManagementLimit"} <= names
    symbols = c_symbols(names)
    assert {"nvmlInitWithFlags", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetCount_v2"} <= symbols
    lib = ctypes.CDLL(str(sim_lib))
    missing = sorted(s for s in symbols if not hasattr(lib, s))
    with capsys.disabled():
        print(
            f"\nNVML fidelity: {len(symbols) - len(missing)}/{len(symbols)} symbols our code needs "
            f"are in the simulated library ({len(names)} pynvml functions)"
        )
    assert not missing, f"the simulated libnvidia-ml.so.1 lacks: {', '.join(missing)}"


@pytest.mark.parametrize("symbol", ["nvmlInitWithFlags", "nvmlDeviceGetHandleByIndex_v2"])
def test_fake_exports_the_versioned_symbols_pynvml_uses(sim_lib, symbol):
    assert hasattr(ctypes.CDLL(str(sim_lib)), symbol)
