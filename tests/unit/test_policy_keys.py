"""Each catalog entry lists the policy keys its check reads (issue 14: grep a rule id and find its policy keys;
grep a key and find its rules). Proven by running every rule's pass and fail case with a policy that records the
keys read."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules
from rule_cases import all_cases, case_policy
from rule_facts import healthy

CASES = all_cases()  # every area file's (tests/unit/test_rules_<area>.py)

DOCUMENTED = {path for path, _default, _doc in policy.documented()}


class Recording(dict):
    """A policy that records the dotted keys read from it (sections are walked, leaves recorded)."""

    def __init__(self, data, path, seen):
        super().__init__(data)
        self._path, self._seen = path, seen

    def _read(self, key, value):
        path = self._path + (key,)
        if isinstance(value, dict) and ".".join(path) not in DOCUMENTED:
            return Recording(value, path, self._seen)
        self._seen.add(".".join(path))
        return value

    def __getitem__(self, key):
        return self._read(key, dict.__getitem__(self, key))

    def get(self, key, default=None):
        return self._read(key, dict.get(self, key, default))


def test_declared_keys_are_policy_keys():
    for rule in rules.RULES:
        unknown = [k for k in rule.policy_keys if k not in DOCUMENTED]
        assert not unknown, (rule.id, unknown)
        assert rules.BY_ID[rule.id].describe()["policy_keys"] == list(rule.policy_keys)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_a_rule_reads_only_the_policy_keys_it_declares(rule_id):
    seen: set[str] = set()
    case = CASES[rule_id]
    for mutate in (None, *case[:2]):
        facts = healthy()
        if mutate:
            mutate(facts)
        pol = policy.validate(case_policy(case) or {}, known_rules=rules.BY_ID)
        rules.BY_ID[rule_id].check(facts, Recording(pol, (), seen))
    undeclared = sorted(seen - set(rules.BY_ID[rule_id].policy_keys))
    assert not undeclared, f"{rule_id} reads {undeclared} without listing them in policy_keys"
