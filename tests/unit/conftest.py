"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest
from report_fixtures import load


@pytest.fixture(scope="module")
def sample():
    """The recorded sample report (tests/fixtures/reports/sample-v1.json), loaded once per test module."""
    return load("sample-v1.json")
