"""sglang_server_probe: the server stage's read-only checks in one call, each finding returned for the
stage's assertions to word, never a failure of its own; the device check fed the H200 host's capture."""
import json
import sys

import pytest

import sglang_server_probe as mod
import ansible.module_utils.systemd_devices as systemd_devices
from conftest import H200, captured_nodes


def run_module(capsys, args):
    from ansible.module_utils.testing import patch_module_args
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def h200_nodes(monkeypatch):
    """The device nodes the probe finds are the real driver-580 host's."""
    monkeypatch.setattr(systemd_devices, "host_nodes", lambda patterns: captured_nodes())


def install(root, name, complete=True):
    venv = root / "venvs" / name
    (venv / "bin").mkdir(parents=True)
    if complete:
        (venv / ".sglang-fleet-install.json").write_text(json.dumps({"id": name}))
    return venv


def test_a_settled_host_reads_its_installs_python_paths_and_devices_in_one_call(tmp_path, capsys, h200_nodes):
    install(tmp_path, "0.5.9-aaaa")
    install(tmp_path, "0.5.9-bbbb", complete=False)
    (tmp_path / "current").symlink_to("venvs/0.5.9-aaaa")
    model = tmp_path / "model"
    model.mkdir()
    out = run_module(capsys, {"root": str(tmp_path), "python": sys.executable,
                              "paths": [str(model), str(tmp_path / "drafter")],
                              "device_allow": ["char-nvidia* rw", "/dev/infiniband/rdma_cm rw"],
                              "proc_devices": str(H200 / "proc-devices.txt")})
    assert out["changed"] is False and not out.get("failed")
    assert {i["id"]: i["complete"] for i in out["installs"]} == {"0.5.9-aaaa": True, "0.5.9-bbbb": False}
    assert (out["current"], out["previous"]) == ("0.5.9-aaaa", "")
    assert out["site_packages"].endswith("site-packages") and out["python_error"] == ""
    assert out["missing"] == [str(tmp_path / "drafter")]
    assert (out["devices"]["denied"], out["device_problem"]) == ([], "")
    assert "/dev/nvidia0 195:0" in out["devices"]["nodes"]
    assert set(out["systemd"]) == {"booted", "system_bus", "run_rc"}


def test_a_python_that_cannot_run_and_a_unit_that_hides_the_gpus_are_findings_not_failures(tmp_path, capsys,
                                                                                           h200_nodes):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries: libpython3.12.so' >&2\nexit 127\n")
    broken.chmod(0o755)
    out = run_module(capsys, {"root": str(tmp_path), "python": str(broken),
                              "device_allow": ["char-nvidia-frontend rw", "char-nvidia-uvm rw"],
                              "proc_devices": str(H200 / "proc-devices.txt")})
    assert not out.get("failed")
    assert (out["site_packages"], out["python_error"]) == ("", "error while loading shared libraries: libpython3.12.so")
    assert out["installs"] == [] and out["current"] == ""
    assert "/dev/nvidia0" in out["devices"]["denied"] and "/dev/nvidiactl" in out["devices"]["denied"]
    assert out["device_problem"].startswith("DevicePolicy=closed with DeviceAllow=char-nvidia-frontend rw, ")
    missing = run_module(capsys, {"python": str(tmp_path / "nowhere/bin/python")})
    assert missing["python_error"] == "%s does not exist" % (tmp_path / "nowhere/bin/python")
    assert missing["devices"] == {"nodes": [], "denied": [], "unmatched": []}


def test_an_unreadable_device_list_fails_naming_it(tmp_path, capsys):
    out = run_module(capsys, {"python": sys.executable, "device_allow": ["char-nvidia* rw"],
                              "proc_devices": str(tmp_path / "devices")})
    assert out["failed"] and out["msg"].startswith("cannot read %s" % (tmp_path / "devices"))
