"""gpufleet: audit and tune fleets of NVIDIA GPU servers."""

# The version galaxy.yml gives the collection (pyproject.toml reads it from here; tests/unit/test_versions.py).
__version__ = "0.2.0"
