"""A settled venv is read by its own python, not by a run of pip: the router's and the eval's venvs
(roles/sglang_router, roles/sglang_quality) run pip only for a requirement the read does not show met."""
import importlib.metadata
import subprocess
import sys

from pip_environment import pip_pins_probe, pip_pins_unmet


def probe(requirements, python=sys.executable):
    """The role's read, as its command task runs it, registered as Ansible registers it."""
    argv = pip_pins_probe(requirements, python)
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError:  # the command module's rc for a missing executable
        return {"rc": 2, "stdout": "", "stderr": "No such file or directory"}
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def test_a_venv_that_holds_every_pin_needs_no_pip_run():
    pins = ["ansible-core==%s" % importlib.metadata.version("ansible-core"),
            "PyYAML==%s" % importlib.metadata.version("PyYAML")]
    assert pip_pins_unmet(pins, probe(pins)) == []


def test_a_pin_off_its_version_or_missing_is_unmet_and_the_others_are_not():
    held = "ansible-core==%s" % importlib.metadata.version("ansible-core")
    pins = [held, "ansible-core==0.0.1", "no-such-distribution-here==1.0"]
    assert pip_pins_unmet(pins, probe(pins)) == pins[1:]


def test_no_venv_yet_leaves_every_requirement_to_pip():
    pins = ["sglang-router==0.3.2"]
    read = probe(pins, python="/nonexistent/venv/bin/python")
    assert read["rc"] != 0 and pip_pins_unmet(pins, read) == pins


def test_what_only_pip_can_judge_is_always_left_to_it():
    # A range, extras, a marker, a URL, a wildcard: the read does not name them, pip decides.
    others = ["ansible-core>=2", "ansible-core[extra]==2.19.0", "ansible-core==2.19.0; python_version>'3'",
              "pkg @ https://example.invalid/pkg-1.0-py3-none-any.whl", "ansible-core==2.*"]
    argv = pip_pins_probe(others, sys.executable)
    assert argv[3:] == []
    assert pip_pins_unmet(others, probe(others)) == others
