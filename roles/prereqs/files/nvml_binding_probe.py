# Prints which NVML binding this Python imports as "<distribution> <version>": "none - -" when pynvml does not
# import, "- <version or ->" when no installed distribution owns the module. Read-only; run by roles/prereqs.
import os
import sys

try:
    import pynvml
except Exception:  # not importable at all (ImportError), or broken on import
    print("none - -")
    sys.exit(0)

path = os.path.realpath(getattr(pynvml, "__file__", "") or "")
found = ("-", getattr(pynvml, "__version__", None) or "-")
try:
    from importlib import metadata
except ImportError:  # Python < 3.8: the version stays unknown, so the role installs the venv
    metadata = None
for name in ("nvidia-ml-py", "nvidia-ml-py3", "pynvml") if metadata else ():
    try:
        dist = metadata.distribution(name)
        files = [os.path.realpath(str(dist.locate_file(f))) for f in (dist.files or ())]
    except Exception:  # not installed, or a record that cannot be read: not this one
        continue
    if path in files:
        found = (name, dist.version)
        break
print(" ".join(str(part) for part in found))
