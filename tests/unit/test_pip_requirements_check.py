"""Whether a venv holds its requirements, read by its own python (plugins/filter/pip_environment.py,
pip_requirements_check) as the bench's, the eval's and the router's venvs are read: pip runs only where the
read says something is unmet, or finds no venv to ask."""
import subprocess
import sys
from importlib import metadata

from pip_environment import pip_requirements_check


def check(*requirements, python=sys.executable):
    """The roles' read, as their command task runs it: (rc, lines); rc 2 where the python is missing,
    as the command module reports it."""
    try:
        out = subprocess.run(pip_requirements_check(requirements, python), capture_output=True, text=True)
    except FileNotFoundError:
        return 2, []
    return out.returncode, out.stdout.splitlines()


def test_installed_requirements_leave_pip_nothing_to_do():
    pytest_version = metadata.version("pytest")
    assert check("pytest", "PyYAML", "pytest==%s" % pytest_version, "pytest>=1.0") == (0, [])


def test_a_missing_package_or_another_version_is_named():
    pytest_version = metadata.version("pytest")
    rc, lines = check("pytest", "no-such-package-here", "pytest==0.0.1")
    assert rc == 1
    assert lines == ["no-such-package-here: not installed", "pytest==0.0.1: %s is installed" % pytest_version]


def test_no_venv_yet_is_neither_answer_so_pip_runs():
    rc, _ = check("sglang-router==0.3.2", python="/nonexistent/venv/bin/python")
    assert rc not in (0, 1)
