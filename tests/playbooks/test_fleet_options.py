"""Every ansible-playbook option given to tools/fleet.py (and so bin/lab) reaches ansible-playbook."""
import json
import sys

import pytest
import yaml

import fleet
from conftest import ROOT

PLAYBOOK = str(ROOT / "tests/playbooks/echo_options.yml")


@pytest.fixture
def run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))

    def go(*options):
        out = tmp_path / "report.json"
        rc = fleet.main(["-i", str(inventory), "--json", str(out), PLAYBOOK, *options])
        printed = capsys.readouterr().out
        assert rc == 0, printed[-2000:]
        return json.loads(out.read_text())["hosts"]["node"]["facts"], printed
    return go


def test_json_extra_vars_keep_their_types(run):
    facts, _ = run("-e", '{"sglang_server_extra_args": ["--log-level", "info"]}')
    assert facts["sglang_echo"]["extra_args"] == ["--log-level", "info"]


def test_extra_vars_from_a_file(run, tmp_path):
    (tmp_path / "vars.yml").write_text("echo_from_file: yes-from-file\n")
    facts, _ = run("-e", "@%s" % (tmp_path / "vars.yml"))
    assert facts["sglang_echo"]["from_file"] == "yes-from-file"


def test_skip_tags_verbosity_and_forks(run):
    facts, printed = run("--skip-tags", "skippable", "-vv", "--forks", "3")
    assert "sglang_echo_skippable" not in facts
    assert facts["sglang_echo"]["verbosity"] == 2 and facts["sglang_echo"]["forks"] == 3
    assert "Fleet report:" in printed


def test_start_at_task(run):
    facts, _ = run("--start-at-task", "The variables and settings are echoed")
    assert "sglang_echo_first" not in facts and "sglang_echo" in facts


def test_a_bad_option_fails_in_ansible_playbook_not_in_a_traceback(tmp_path, capsys):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {hosts: {node: {ansible_connection: local}}}\n")
    rc = fleet.main(["-i", str(inventory), PLAYBOOK, "--no-such-option"])
    assert rc != 0
    assert "ended (rc=" in capsys.readouterr().out
