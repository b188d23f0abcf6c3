#!/usr/bin/env python3
"""ansible-test sanity on the built collection, from the local environment (no container).

    tools/collection_sanity.py prime    # bin/setup: makes the virtual environments the tests run in
    tools/collection_sanity.py [run]    # the tests, offline: nothing is installed or fetched

ansible-test runs each sanity test in a virtual environment of its own, with the requirements
ansible-core pins for it (ansible_test/_data/requirements/sanity.<test>.txt: ansible-core==2.19.14 in
requirements.txt pins them all), and makes it on first use from a pip bootstrap script it downloads
from a host outside the package registries, then the package index. `prime` (bin/setup, which reaches
the index anyway) gets those pinned wheels once into a wheelhouse, then has ansible-test make its
environments from it, offline: HOME is .cache/ansible-test (where ansible-test keeps them, and a pip.conf
that allows no index, only the wheelhouse) and pip is bootstrapped from the Python's own ensurepip.
`run` finds them made; anything it would still install would have to come from the wheelhouse.
The exceptions a test needs are in collection/tests/sanity/ignore-2.19.txt, one reason per line.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import build_collection

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / ".cache/ansible-test"
WHEELS = HOME / "wheels"
REQUIREMENTS = Path(__import__("ansible_test").__file__).parent / "_data/requirements"
PYTHON = "3.11"
# Every test that applies to a collection and runs without a container or a network: the modules'
# documentation against their argument specs (validate-modules), their docs as ansible-doc renders
# them, that each imports with only what the collection declares, compiles, meta/runtime.yml, and the
# code-smell checks. pylint, pep8 and mypy are left out: the project's Python style is set by its own
# tools (black's line length of 120, not pep8's), not by ansible-core's.
TESTS = ("validate-modules", "ansible-doc", "import", "compile", "runtime-metadata", "yamllint", "shebang",
         "line-endings", "symlinks", "empty-init", "action-plugin-docs", "no-assert", "no-get-exception",
         "no-illegal-filenames", "no-smart-quotes",
         "use-argspec-type-path", "use-compat-six", "replace-urlopen", "ignores")

BOOTSTRAP = '''"""pip into an empty virtual environment, for ansible-test, as its get-pip script would: from this
Python's ensurepip, then the version ansible-test asks for (written by tools/collection_sanity.py)."""
import os
import subprocess
import sys

import ensurepip

env = dict(os.environ)  # ensurepip points pip's configuration at os.devnull for this process
ensurepip.bootstrap()
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args], env=env))
'''


def pip_version() -> str:
    """The pip version ansible-test bootstraps into its environments."""
    from ansible_test._internal.python_requirements import get_venv_packages
    from ansible_test._internal.host_configs import NativePythonConfig
    return get_venv_packages(NativePythonConfig(version=PYTHON))["pip"]


def bootstrap_pip() -> Path:
    """Where ansible-test looks for its cached pip bootstrap script, with ours in it."""
    path = HOME / ".ansible/test/cache" / ("get_pip_%s.py" % pip_version().replace(".", "_"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != BOOTSTRAP:
        path.write_text(BOOTSTRAP)
    return path


def requirement_files() -> list[Path]:
    """ansible-core's pinned requirements of the tests we run (a test without one needs nothing)."""
    names = [f"sanity.{test}.txt" for test in TESTS] + ["sanity.import.plugin.txt"]
    return [REQUIREMENTS / name for name in names if (REQUIREMENTS / name).is_file()]


def wheelhouse() -> None:
    """The wheels of every pinned requirement, and of the pip ansible-test bootstraps, in WHEELS; the
    pip.conf that makes ansible-test's environments install from there alone."""
    pinned = "\n".join([pip_version(), *(path.read_text() for path in requirement_files())])
    want = hashlib.sha256(pinned.encode()).hexdigest()
    stamp = WHEELS / ".requirements.sha256"
    if stamp.is_file() and stamp.read_text() == want:
        return  # made from these very pins: nothing to fetch
    WHEELS.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary", ":all:",
               "-d", str(WHEELS), "pip==" + pip_version()]
    for path in requirement_files():
        command += ["-r", str(path)]
    subprocess.run(command, check=True)
    stamp.write_text(want)
    conf = HOME / ".config/pip/pip.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("# tools/collection_sanity.py: ansible-test's environments install from the wheelhouse alone\n"
                    "[global]\nno-index = true\nfind-links = %s\n" % WHEELS)


def ansible_test(tree: Path, *argv: str, tests: tuple = TESTS) -> subprocess.CompletedProcess:
    """ansible-test sanity in the built tree, on `tests` (then argv: more options, or paths). ansible-test
    passes the commands it runs HOME and PATH and little else: HOME is how they find the environments."""
    env = {**os.environ, "HOME": str(HOME), "ANSIBLE_NOCOLOR": "1", "PY_COLORS": "0",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    command = [str(Path(sys.executable).with_name("ansible-test")), "sanity", "--local", "--python", PYTHON,
               "--color", "no", *[x for t in tests for x in ("--test", t)], *argv]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", nargs="?", choices=("prime", "run"), default="run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="collection-sanity-") as out:
        tree = build_collection.build(Path(out))
        if args.action == "prime":
            wheelhouse()
            bootstrap_pip()
            result = ansible_test(tree, "--prime-venvs")
        else:
            result = ansible_test(tree)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
