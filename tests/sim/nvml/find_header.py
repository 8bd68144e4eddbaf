"""Print the directory holding NVIDIA's nvml.h from the nvidia-nvml-dev wheel (never committed here)."""

import pathlib
import sys


def find() -> pathlib.Path:
    import nvidia  # namespace package from nvidia-nvml-dev

    for base in nvidia.__path__:
        for header in sorted(pathlib.Path(base).glob("*/include/nvml.h")):
            return header.parent
    raise FileNotFoundError("nvml.h not found: pip install nvidia-nvml-dev")


if __name__ == "__main__":
    try:
        print(find())
    except (ImportError, FileNotFoundError) as exc:
        sys.exit(f"find_header: {exc}")
