"""gpufleet: audit and tune fleets of NVIDIA GPU servers."""

__version__ = "0.1.0"
