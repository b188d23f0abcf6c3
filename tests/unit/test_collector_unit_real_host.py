"""The GPU collector's unit as systemd 252 ran it on the real H200 host (tests/device/collector_unit_real_host.py,
captured in tests/fixtures/hosts/h200-driver580/monitoring/unit/): the unit the role renders today, run
once by hand and once by its timer under its own sandbox, each run a textfile promtool reads that says the
GPU answered; and what the collector's kernel-log commands gave its user there."""
import json
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT, load_collector, settings_today
from fleet import run_playbook

CAPTURE = FIXTURES / "hosts/h200-driver580/monitoring/unit"


@pytest.fixture(scope="module")
def record():
    return json.loads((CAPTURE / "collector-unit.json").read_text())


def test_the_captured_units_are_the_ones_the_role_renders_today(record, tmp_path):
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(json.dumps({"all": {"hosts": {record["render"]["inventory_hostname"]: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    run = run_playbook(ROOT / "tests/playbooks/render_monitoring_units.yml", hosts,
                       extravars=dict(settings_today(record["render"]["extra_vars"]), render_dir=str(tmp_path / "out")))
    assert run.rc == 0, run.failure_summary
    for name in ("nvidia-smi-textfile.service", "nvidia-smi-textfile.timer"):
        assert (tmp_path / "out/etc/systemd/system" / name).read_text() == (CAPTURE / name).read_text(), name


def test_the_unit_ran_by_hand_and_by_its_timer_under_its_sandbox(record):
    assert record["systemd"]["version"] == ["systemd 252 (252.39-1~deb12u2)"] and "error" not in record
    for run in (record["first"], record["by_timer"]):
        show = run["show"]
        assert (show["Result"], show["ExecMainStatus"]) == ("success", "0"), show
        assert (show["User"], show["SupplementaryGroups"]) == ("prometheus", "systemd-journal")
        assert (show["DevicePolicy"], show["DeviceAllow"]) == ("closed", "char-nvidia* rw")
        assert (show["NoNewPrivileges"], show["PrivateNetwork"], show["ProtectSystem"]) == ("yes", "yes", "strict")
    assert record["by_timer"]["show"]["InvocationID"]  # a run of its own, started by the timer
    assert record["timer"]["show"]["ActiveState"] == "active"
    assert record["audit"] == []  # its filter killed nothing


def test_its_textfile_parses_and_says_the_gpu_answered(record):
    text = (CAPTURE / "nvidia_smi.first.prom").read_text()
    assert text == record["first"]["textfile"]
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert samples["nvidia_smi_up"] == "1"
    assert samples["nvidia_smi_gpus_visible"] == samples["nvidia_smi_gpus_expected"] == "1"
    assert any(key.startswith('nvidia_smi_gpu_info{') and 'name="NVIDIA H200"' in key for key in samples)


def replay(tmp_path, capture):
    """A command that answers as the captured one did: its output, its errors, its exit status."""
    path = tmp_path / capture["argv"][0]
    path.write_text("#!%s\nimport sys\nsys.stdout.write(%r)\nsys.stderr.write(%r)\nsys.exit(%d)\n"
                    % (sys.executable, capture["stdout"], capture["stderr"], capture["rc"]))
    path.chmod(0o755)
    return [str(path)] + capture["argv"][1:]


def test_a_journal_that_holds_no_kernel_log_is_not_read_as_one(record, tmp_path, monkeypatch):
    """There, journalctl -k exited 0 with nothing (no journald, so no journal) and dmesg was refused
    (dmesg_restrict=1). The collector took the empty journal for a readable kernel log with no XID, which
    the first textfile shows; a booted host's kernel log is never empty, so it now tries dmesg, and says
    that no kernel log could be read."""
    seen = record["kernel_log_as_prometheus"]
    assert (seen["journalctl"]["rc"], seen["journalctl"]["stdout"]) == (0, "")
    assert seen["dmesg"]["rc"] == 1 and "Operation not permitted" in seen["dmesg"]["stderr"]
    assert 'nvidia_smi_kernel_log_readable{source="journalctl"} 1' in record["first"]["textfile"]
    collector = load_collector()
    monkeypatch.setattr(collector, "KERNEL_LOGS", {name: replay(tmp_path, seen[name]) for name in ("journalctl", "dmesg")})
    assert collector.read_kernel_log("auto") == (None, [])
    text = collector.render([], 0, None, {}, (None, False))
    assert 'nvidia_smi_kernel_log_readable{source="none"} 0' in text
