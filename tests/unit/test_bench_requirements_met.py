"""The bench's check of its extra imports (roles/sglang_bench/files/requirements_met.py), run as the role
runs it: a python with the requirements as arguments; pip runs only where it says something is unmet."""
import subprocess
import sys
from importlib import metadata

from conftest import ROOT

SCRIPT = (ROOT / "roles/sglang_bench/files/requirements_met.py").read_text()


def check(*requirements):
    out = subprocess.run([sys.executable, "-c", SCRIPT, *requirements], capture_output=True, text=True)
    return out.returncode, out.stdout.splitlines()


def test_installed_requirements_leave_pip_nothing_to_do():
    pytest_version = metadata.version("pytest")
    assert check("pytest", "PyYAML", "pytest==%s" % pytest_version, "pytest>=1.0") == (0, [])


def test_a_missing_package_or_another_version_is_named():
    pytest_version = metadata.version("pytest")
    rc, lines = check("pytest", "no-such-package-here", "pytest==0.0.1")
    assert rc == 1
    assert lines == ["no-such-package-here: not installed", "pytest==0.0.1: %s is installed" % pytest_version]
