"""pytest imports test files by their basename (rootdir-relative packages are not used here): two test files of the
same name in tests/unit and tests/integration stop the whole run at collection ("import file mismatch"). It happened
twice in issue 25; this fails first, naming the pair."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_has_its_own_basename():
    seen = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test files sharing a basename (rename one): {clashes}"
