"""One record per stage (plugins/modules/fleet_record.py): written once per change, read back by name,
and a host recorded by an earlier release (/etc/sglang/install.json, /etc/sglang/allreduce-fusion.json)
read as it is, then moved to the new record by the stage's next write."""
import json
import os
import subprocess
import sys

import pytest

import fleet_record
from conftest import ROOT

# The install record exactly as the sglang stage wrote it before (copy + to_nice_json).
LEGACY_INSTALL = """{
    "id": "0.5.9-9559f4d77ef0",
    "python": "/opt/sglang/venvs/0.5.9-9559f4d77ef0/bin/python",
    "root": "/opt/sglang",
    "site_packages": "/opt/sglang/venvs/0.5.9-9559f4d77ef0/lib/python3.12/site-packages",
    "venv": "/opt/sglang/venvs/0.5.9-9559f4d77ef0"
}
"""


@pytest.fixture
def host(tmp_path):
    legacy = tmp_path / "etc/sglang/install.json"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(LEGACY_INSTALL)
    return tmp_path / "etc/ansible/facts.d", legacy


def test_a_host_recorded_by_an_earlier_release_is_read_from_its_old_record(host):
    directory, legacy = host
    found = fleet_record.read(str(directory), "sglang", [str(legacy)])
    assert found["found"] and found["source"] == str(legacy)
    assert found["record"]["id"] == "0.5.9-9559f4d77ef0"
    assert found["path"] == str(directory / "sglang.fact")


def test_the_next_write_moves_it_and_a_second_write_changes_nothing(host):
    directory, legacy = host
    record = json.loads(LEGACY_INSTALL)
    first = fleet_record.write(str(directory), "sglang", record, [str(legacy)])
    assert first["changed"] and first["removed"] == [str(legacy)] and not legacy.exists()
    # Byte for byte what the old copy wrote: an upgraded host's records are not rewritten for nothing.
    assert (directory / "sglang.fact").read_text() == LEGACY_INSTALL
    assert oct((directory / "sglang.fact").stat().st_mode & 0o777) == "0o644"
    assert fleet_record.read(str(directory), "sglang", [str(legacy)])["source"] == str(directory / "sglang.fact")
    assert not fleet_record.write(str(directory), "sglang", record, [str(legacy)])["changed"]


def test_check_mode_says_what_would_change_and_writes_nothing(host):
    directory, legacy = host
    done = fleet_record.write(str(directory), "sglang", {"id": "x"}, [str(legacy)], check=True)
    assert done["changed"] and done["removed"] == [str(legacy)]
    assert legacy.exists() and not directory.exists()
    assert done["diff"]["before"] == "" and '"id": "x"' in done["diff"]["after"]


def test_a_host_with_no_record_reads_empty(tmp_path):
    assert fleet_record.read(str(tmp_path), "sglang_server_fusion", [str(tmp_path / "none.json")]) == {
        "path": str(tmp_path / "sglang_server_fusion.fact"), "record": {}, "found": False, "source": ""}


def test_a_broken_record_is_named_not_read_as_empty(tmp_path):
    (tmp_path / "sglang.fact").write_text("{\"id\": ")
    with pytest.raises(fleet_record.RecordError, match="sglang.fact is not JSON"):
        fleet_record.read(str(tmp_path), "sglang")
    (tmp_path / "sglang.fact").write_text("[1, 2]")
    with pytest.raises(fleet_record.RecordError, match="holds list, not a record"):
        fleet_record.read(str(tmp_path), "sglang")


def test_a_name_that_is_no_fact_name_is_refused(tmp_path):
    with pytest.raises(fleet_record.RecordError, match="use lowercase letters"):
        fleet_record.write(str(tmp_path), "../etc/passwd", {})


def test_setup_reads_the_record_as_ansible_local(tmp_path):
    """What the module writes is what Ansible's own local facts read, under the record's name."""
    fleet_record.write(str(tmp_path), "sglang", json.loads(LEGACY_INSTALL))
    out = subprocess.run([str(ROOT / ".venv/bin/ansible"), "localhost", "-c", "local", "-m", "ansible.builtin.setup",
                          "-a", "gather_subset=!all,!min,local filter=ansible_local fact_path=%s" % tmp_path],
                         capture_output=True, text=True, env=dict(os.environ, ANSIBLE_NOCOLOR="1",
                                                                   ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                                                                   ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
                                                                   ANSIBLE_PYTHON_INTERPRETER=sys.executable))
    assert out.returncode == 0, out.stdout + out.stderr
    facts = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["ansible_facts"]
    assert facts["ansible_local"] == {"sglang": json.loads(LEGACY_INSTALL)}
