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
