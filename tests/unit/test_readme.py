import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_readme_tables_match_the_code():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-readme-tables.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_readme_starts_with_the_two_commands():
    head = (REPO / "README.md").read_text().split("\n## ")[0]
    assert "make audit" in head and "make test" in head


def test_role_readmes_match_their_argument_specs():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-role-readmes.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for role in ("host_tuning", "network_tuning", "gpu_runtime", "nvidia_driver", "prereqs"):
        text = (REPO / "roles" / role / "README.md").read_text()
        assert text.startswith(f"# gpufleet.tuning.{role}\n") and "## Variables" in text and "## Reboots" in text
