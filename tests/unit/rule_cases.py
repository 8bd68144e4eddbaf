"""The machinery of the rule tests: one file per ``rules/<area>.py`` (``tests/unit/test_rules_<area>.py``) holds that
file's rules' CASES and its own tests; this module holds what they share.

A file's ``CASES`` maps each rule id of its source file to ``(passes, fails[, policy])``: a mutation of
``rule_facts.healthy()`` that still passes (None: the healthy host as it is), one that makes the rule fail, and the
policy both run under. ``pass_and_fail(CASES)`` makes the two parametrized tests every area file has;
``all_cases()`` collects the CASES of every area file for the catalog-wide checks (test_rule_catalog.py) and
test_policy_keys.py.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import host as host_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from rule_facts import healthy

mkroot = simulators.mkroot()
# Where a source a rule cites may live (a vendor, kernel, cloud or standards site); any other reference is a
# repository path of ours (a measurement).
DOC_HOSTS = re.compile(
    r"^https://(docs\.nvidia\.com|docs\.kernel\.org|man7\.org|www\.freedesktop\.org|fasterdata\.es\.net|"
    r"queue\.acm\.org|www\.rfc-editor\.org|docs\.aws\.amazon\.com|cloud\.google\.com|learn\.microsoft\.com|"
    r"github\.com|docs\.cloud\.google\.com|www\.kernel\.org|"
    r"aws\.amazon\.com|docs\.pytorch\.org|www\.tensorflow\.org|docs\.jax\.dev|slurm\.schedmd\.com|pypi\.org)/"
)


# ---------------------------------------------------------------- where a part of the facts is


def gpus(f):
    return f["gpu"]["gpus"]


def host(f):
    return f["host"]


def nics(f):
    return f["network"]["nics"]


def tcp(f):
    return f["network"]["tcp"]


def probe(f):
    return f["probe"]


# ---------------------------------------------------------------- mutations


def set_(getter, **values):
    """A mutation that updates the dict ``getter(facts)`` returns with ``values``."""

    def mutate(f):
        getter(f).update(values)

    return mutate


def each_gpu(fn):
    def mutate(f):
        for g in gpus(f):
            fn(g)

    return mutate


def gpu_at(i, fn):
    def mutate(f):
        fn(gpus(f)[i])

    return mutate


def nvml_mismatch(f, kmod="535.183.01", library="550.90.07"):
    """What gpu_info returns when nvmlInit fails with NVML_ERROR_LIB_RM_VERSION_MISMATCH: no NVML facts at all."""
    f["gpu"]["nvml"] = {
        "available": False,
        "source": "pynvml",
        "error_code": "LibRmVersionMismatch",
        "error": "NVML could not be initialised: LibRmVersionMismatch (RM has detected an NVML/RM version mismatch.)",
        "library": None,
    }
    unknown = dict.fromkeys(("version", "branch", "nvml_version", "cuda_driver_version"))
    f["gpu"]["driver"].update(unknown, kernel_module_version=kmod, library_version=library)
    f["gpu"]["gpus"] = []
    f["gpu"]["gpu_count"] = 0


def host_facts(tmp_path, overrides, name="root"):
    """The healthy 8 x H100 facts with memlock, cpu and numa read by the real reader (module_utils/host.py) from a
    fixture root built with ``overrides`` (tests/sim/host/mkroot.py); returns the facts and the whole host part."""
    facts = healthy()
    root = mkroot.build_root(tmp_path / name, overrides)
    read = host_mod.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")
    for part in ("memlock", "cpu", "numa"):
        facts["host"][part] = read[part]
    return facts, read


# ---------------------------------------------------------------- judging


def evaluate(facts, overrides=None):
    """Every rule's finding by rule id, under the policy ``overrides`` validated as the audit validates it."""
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate(facts, policy)}


def finding_after(rule_id, *mutations, policy=None):
    """The finding of ``rule_id`` on ``rule_facts.healthy()`` changed by each of ``mutations`` in turn."""
    facts = healthy()
    for mutate in mutations:
        mutate(facts)
    return evaluate(facts, policy)[rule_id]


def case_policy(case):
    """The policy a case runs under, or None."""
    return case[2] if len(case) > 2 else None


def _judged(case, which):
    facts = healthy()
    if case[which]:
        case[which](facts)
    return facts


def pass_and_fail(cases):
    """The two tests of an area file, parametrized over its CASES: each rule passes on its passing mutation and fails
    on its failing one (with a message, an expected value, its own metadata and a fix)."""

    @pytest.mark.parametrize("rule_id", sorted(cases))
    def test_rule_passes(rule_id):
        case = cases[rule_id]
        finding = evaluate(_judged(case, 0), case_policy(case))[rule_id]
        assert finding["status"] == "pass", finding

    @pytest.mark.parametrize("rule_id", sorted(cases))
    def test_rule_fails(rule_id):
        case = cases[rule_id]
        finding = evaluate(_judged(case, 1), case_policy(case))[rule_id]
        assert finding["status"] == "fail", finding
        assert finding["message"] and finding["expected"] is not None
        # The change trips its own rule; other rules may legitimately react too (GPU-MEM-001 implies swapping).
        rule = rules.BY_ID[rule_id]
        assert finding["area"] == rule.area and finding["title"] == rule.title
        assert finding["fix"]["role"] or finding["fix"]["manual"]

    return test_rule_passes, test_rule_fails


# ---------------------------------------------------------------- the catalog


def rule_files():
    """The files of the rules package that define rules (``RULES``), by name: the areas the tests follow."""
    found = {}
    for info in pkgutil.iter_modules(rules.__path__):
        module = importlib.import_module(rules.__name__ + "." + info.name)
        if hasattr(module, "RULES"):
            found[info.name] = module
    return found


def area_test_files():
    """Each rule file's test module (``test_rules_<name>``, imported as pytest imports it), or None where missing."""
    found = {}
    for name in rule_files():
        try:
            found[name] = importlib.import_module("test_rules_" + name)
        except ModuleNotFoundError as exc:
            if exc.name != "test_rules_" + name:
                raise
            found[name] = None
    return found


def all_cases():
    """The CASES of every area test file, merged (a rule id in two files is a test_rule_catalog.py failure)."""
    merged = {}
    for module in area_test_files().values():
        merged.update(getattr(module, "CASES", {}))
    return merged
