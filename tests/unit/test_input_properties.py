"""Property-based: parsers and validators of operator input either accept a value or raise their own clear
error naming the field - never anything else (no tracebacks reach an operator)."""

from __future__ import annotations

import string

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders, ifname, policy, rules, sysctl
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu_settings as gs
from hypothesis import given, settings
from hypothesis import strategies as st

text = st.text(alphabet=string.printable + "é€;$()`'\"\\", max_size=40)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=True), text)
json_like = st.recursive(
    scalars, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(text, c, max_size=4)), max_leaves=12
)


@settings(max_examples=400)
@given(
    st.one_of(
        text,
        st.integers(-1000, 10**6).map(str),
        st.floats(-1e6, 1e6).map(lambda f: f"{f}%"),
        st.floats(-1e6, 1e6).map(str),
    )
)
def test_power_limit_parser(value):
    try:
        kind, number = gs.parse_power_limit(value)
    except gs.SettingsError as exc:
        assert str(exc).startswith("power_limit:")
        return
    assert kind in ("default", "max", "watts", "percent")
    if kind == "percent":
        assert 0 < number <= 100
    if kind == "watts":
        assert number > 0


@settings(max_examples=400)
@given(st.one_of(text, st.just("../etc"), st.just("eth0;reboot"), st.just("$(id)"), st.just("a" * 16)))
def test_interface_names(name):
    why = ifname.interface_name_error(name)
    if why is None:
        assert 1 <= len(name.encode()) <= 15 and all(c.isalnum() or c in "_.@-" for c in name)
        assert not name.startswith("-") and "/" not in name


@settings(max_examples=300)
@given(text)
def test_sysctl_keys(key):
    if sysctl.key_error(key) is None:
        assert ".." not in key and not key.startswith((".", "/"))
        assert all(c.isascii() and (c.isalnum() or c in "._/-") for c in key)
        assert sysctl.proc_path(key).startswith("/proc/sys/") and "/../" not in sysctl.proc_path(key)


@settings(max_examples=500)
@given(st.dictionaries(st.sampled_from(sorted(policy.SPEC) + ["bogus"]), json_like, max_size=5))
def test_policy_validation_never_crashes(overrides):
    try:
        merged = policy.validate(overrides, known_rules=rules.BY_ID)
    except policy.PolicyError as exc:
        assert str(exc).startswith("policy")
        return
    assert set(merged) >= set(policy.DEFAULTS)


@settings(max_examples=300)
@given(text)
def test_cpulist_parser(value):
    try:
        cpus = decoders.parse_cpulist(value)
    except ValueError as exc:
        assert "cpulist" in str(exc)
        return
    assert cpus == sorted(set(cpus))
