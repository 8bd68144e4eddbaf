"""docs/architecture.md stays true to the code: its command list is the CLI's, every playbook and role is named,
and every repository path it mentions exists (issue 27)."""

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from gpufleet import cli

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"

# Path-like words that name no file of the repository, each with its reason (none today).
NOT_REPO_PATHS: dict[str, str] = {}
# A word is read as a repository path when its first part is one of these (a tracked directory's name) or when it
# is a bare Python file name; absolute paths (a target's /etc, /proc), templates (<run>) and globs are not.
FILE_EXTENSIONS = (".py", ".yml", ".yaml", ".md", ".sh", ".c", ".txt", ".json", ".cfg", ".toml", ".j2", ".html")


def _tracked() -> tuple[set[str], set[str]]:
    """The repository's tracked files and every directory above them, as paths relative to the root."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True, check=True).stdout
    files = {f for f in out.split("\0") if f}
    dirs = {str(Path(f).parents[i]) for f in files for i in range(len(Path(f).parents) - 1)}
    return files, dirs


def path_words(text: str, dir_names: set[str]) -> list[str]:
    """The words of the text that name a path in the repository: `a/b.py`, `module_utils/x.py`, `roles/watch`,
    `tests/sim/host/`, a bare `runner.py`, `module_utils/fileio.write_atomic` (a module and one of its names)."""
    words = []
    for raw in re.split(r"[\s`'\"(),;\[\]|]+", text):
        word = raw.rstrip(".:!?").rstrip("/")
        if not word or word[0] in "/~$-" or any(c in word for c in "<>*{}=@+") or "://" in word:
            continue
        if "/" in word:
            if word.split("/")[0] in dir_names:
                words.append(word)
        elif word.endswith(".py") and re.fullmatch(r"[A-Za-z_][\w-]*\.py", word):
            words.append(word)
    return words


def resolves(word: str, files: set[str], dirs: set[str]) -> bool:
    """A word names a tracked file or directory: the path itself, or the end of one (`module_utils/nvml.py` for
    plugins/module_utils/nvml.py). A last part without a file extension may be a module (`report/diff`) or a
    module and a name in it (`fileio.write_atomic`)."""
    paths = files | dirs
    candidates = [word]
    head, _, last = word.rpartition("/")
    if not last.endswith(FILE_EXTENSIONS):
        module = last.split(".")[0]
        candidates += [f"{head}/{module}.py" if head else f"{module}.py"]
    return any(c in paths or any(p.endswith("/" + c) for p in paths) for c in candidates)


@pytest.fixture(scope="module")
def tracked():
    return _tracked()


def _commands() -> list[str]:
    """The sub-commands of `gpufleet`, from the CLI's own parser, in `gpufleet --help` order."""
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_the_command_list_is_the_clis():
    choices = _commands()
    match = re.search(r"a module per command \(([^)]*)\)", DOC.read_text())
    assert match, "docs/architecture.md: the Layers diagram's 'a module per command (...)' list is missing"
    listed = [c.strip() for c in match.group(1).split(",")]
    assert listed == choices, f"docs/architecture.md lists {listed}; `gpufleet --help` has {choices}"


def test_every_command_is_named_as_a_command():
    text = DOC.read_text()
    missing = [c for c in _commands() if f"gpufleet {c}" not in text]
    assert not missing, f"docs/architecture.md never says `gpufleet <command>` for {missing}"


def test_every_playbook_and_role_is_named(tracked):
    text = DOC.read_text()
    files, _dirs = tracked
    playbooks = sorted({f for f in files if re.fullmatch(r"playbooks/[^/]+\.yml", f)})
    roles = sorted({"/".join(f.split("/")[:2]) for f in files if f.startswith("roles/") and f.count("/") >= 2})
    assert playbooks and roles
    missing = [p for p in [*playbooks, *roles] if f"`{p}`" not in text]
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_every_path_it_mentions_exists(tracked):
    files, dirs = tracked
    dir_names = {Path(d).name for d in dirs} | {Path(d).parts[0] for d in dirs}
    words = path_words(DOC.read_text(), dir_names)
    assert len(words) > 50, words  # the extraction still finds the document's paths
    missing = sorted({w for w in words if w not in NOT_REPO_PATHS and not resolves(w, files, dirs)})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_path_check_catches_a_wrong_path(tracked):
    """The extraction and the resolution, on words that must fail and words that must pass."""
    files, dirs = tracked
    dir_names = {Path(d).name for d in dirs} | {Path(d).parts[0] for d in dirs}
    text = (
        "see `plugins/module_utils/nope.py`, module_utils/gone.py and roles/nosuchrole; runner.py and "
        "`module_utils/fileio.write_atomic`, plugin_utils/report/, /etc/gpufleet/watch.json, rules/<area>.py, "
        "nosuch_module.py."
    )
    words = path_words(text, dir_names)
    assert words == [
        "plugins/module_utils/nope.py",
        "module_utils/gone.py",
        "roles/nosuchrole",
        "runner.py",
        "module_utils/fileio.write_atomic",
        "plugin_utils/report",
        "nosuch_module.py",
    ]
    assert [w for w in words if not resolves(w, files, dirs)] == [
        "plugins/module_utils/nope.py",
        "module_utils/gone.py",
        "roles/nosuchrole",
        "nosuch_module.py",
    ]
