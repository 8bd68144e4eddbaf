"""--limit that matches no host: gpufleet's own message (exit 3) is the only word on it, not after Ansible's
"Could not match supplied host pattern" warning; a limit that matches some hosts still shows Ansible's warning for
the pattern that matched nothing (issue 29)."""

from __future__ import annotations

import pytest
import yaml

from gpufleet import preflight
from gpufleet.exits import UsageError


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"gpu01": {}, "gpu02": {}}}}))
    return str(path)


def test_nothing_matches_gpufleet_says_so_alone(inventory, capfd):
    with pytest.raises(UsageError, match="no host matches inventory .* with --limit gpu-typo-1"):
        preflight.inventory_hosts(inventory, "gpu-typo-1", {}, None)
    captured = capfd.readouterr()
    assert "Could not match supplied host pattern" not in captured.out + captured.err


def test_some_match_the_warning_for_the_rest_is_shown(inventory, capfd):
    assert preflight.inventory_hosts(inventory, "gpu01,gpu-typo-2", {}, None) == ["gpu01"]
    captured = capfd.readouterr()
    assert "Could not match supplied host pattern, ignoring: gpu-typo-2" in captured.out + captured.err
