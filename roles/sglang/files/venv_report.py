"""What a Python (a venv's, or the one that makes venvs) holds, as JSON on stdout.

Run as `python -c "$(cat venv_report.py)"`: the interpreter and platform that name the wheel tags,
its site-packages, and the versions of the packages that define an sglang install. sgl-kernel's
METADATA says 0.3.21 whatever its file name says, so where it came from is read from PEP 610's
direct_url.json, which pip writes.
"""
import json
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, distribution

PACKAGES = ["sglang", "flashinfer-python", "torch", "torchvision", "torchaudio", "sgl-kernel"]


def installed(name):
    try:
        dist = distribution(name)
    except PackageNotFoundError:
        return None
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    return {"version": dist.version, "url": origin.get("url", ""),
            "sha256": origin.get("archive_info", {}).get("hashes", {}).get("sha256", "")}


print(json.dumps({
    "python": sys.implementation.cache_tag,
    "platform": sysconfig.get_platform(),
    "site_packages": sysconfig.get_paths()["purelib"],
    "packages": {name: installed(name) for name in PACKAGES},
}, sort_keys=True))
