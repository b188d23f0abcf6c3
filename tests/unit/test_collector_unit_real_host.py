"""The GPU collector's unit as systemd 252 ran it on a real GPU host (tests/device/collector_unit_real_host.py,
captured on an H100 host in tests/fixtures/hosts/h100-device/monitoring/unit/): the unit the role renders
today, run once by hand and once by its timer under its own sandbox, each run a textfile promtool reads
that says the GPU answered, and the base sandbox's lines the unit leaves out tried there one by one; and
what the collector's kernel-log commands gave its user on the H200 host an earlier capture was made on
(tests/fixtures/hosts/h200-driver580/monitoring/unit/)."""
import json
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT, load_collector, settings_today
from fleet import run_playbook

CAPTURE = FIXTURES / "hosts/h100-device/monitoring/unit"
H200_CAPTURE = FIXTURES / "hosts/h200-driver580/monitoring/unit"


@pytest.fixture(scope="module")
def record():
    return json.loads((CAPTURE / "collector-unit.json").read_text())


@pytest.fixture(scope="module")
def h200_record():
    return json.loads((H200_CAPTURE / "collector-unit.json").read_text())


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
    for line in ("ProtectProc=invisible", "ProcSubset=pid", "MemoryDenyWriteExecute=yes",
                 "SystemCallFilter=~@privileged @resources"):  # the base's, which the real nvidia-smi runs under
        assert line in (CAPTURE / "nvidia-smi-textfile.service").read_text().splitlines(), line
    assert "Overall exposure level for nvidia-smi-textfile.service: 0.9" in record["systemd"]["security"]["out"]


def test_the_lines_of_the_base_it_leaves_out_were_tried_there_and_nvidia_smi_answered_under_each(record):
    """The collector's profile leaves out ProtectKernelLogs= (it reads the kernel log) and UMask= (its
    textfile's mode): each ran there too, alone and together, so neither is left out for nvidia-smi's sake."""
    tried = record["tightening"]
    assert set(tried) == {"ProtectKernelLogs", "UMask", "all"}
    for name, run in tried.items():
        assert (run["show"]["Result"], run["nvidia_smi_up"], run["gpus_visible"]) == ("success", "1", "1"), name
    # That host's kernel log is closed to the service user anyway (dmesg_restrict=1, no journald): what
    # ProtectKernelLogs= would take is not shown there.
    assert {run["kernel_log_readable"] for run in tried.values()} == {"0"}


def test_its_textfile_parses_and_says_the_gpu_answered(record):
    text = (CAPTURE / "nvidia_smi.first.prom").read_text()
    assert text == record["first"]["textfile"]
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert samples["nvidia_smi_up"] == "1"
    assert samples["nvidia_smi_gpus_visible"] == samples["nvidia_smi_gpus_expected"] == "1"
    assert any(key.startswith('nvidia_smi_gpu_info{') and 'name="NVIDIA H100 80GB HBM3"' in key for key in samples)


def replay(tmp_path, capture):
    """A command that answers as the captured one did: its output, its errors, its exit status."""
    path = tmp_path / capture["argv"][0]
    path.write_text("#!%s\nimport sys\nsys.stdout.write(%r)\nsys.stderr.write(%r)\nsys.exit(%d)\n"
                    % (sys.executable, capture["stdout"], capture["stderr"], capture["rc"]))
    path.chmod(0o755)
    return [str(path)] + capture["argv"][1:]


def test_a_journal_that_holds_no_kernel_log_is_not_read_as_one(h200_record, tmp_path, monkeypatch):
    """There, journalctl -k exited 0 with nothing (no journald, so no journal) and dmesg was refused
    (dmesg_restrict=1). The collector took the empty journal for a readable kernel log with no XID, which
    the first textfile shows; a booted host's kernel log is never empty, so it now tries dmesg, and says
    that no kernel log could be read."""
    seen = h200_record["kernel_log_as_prometheus"]
    assert (seen["journalctl"]["rc"], seen["journalctl"]["stdout"]) == (0, "")
    assert seen["dmesg"]["rc"] == 1 and "Operation not permitted" in seen["dmesg"]["stderr"]
    assert 'nvidia_smi_kernel_log_readable{source="journalctl"} 1' in h200_record["first"]["textfile"]
    collector = load_collector()
    monkeypatch.setattr(collector, "KERNEL_LOGS", {name: replay(tmp_path, seen[name]) for name in ("journalctl", "dmesg")})
    assert collector.read_kernel_log("auto") == (None, [])
    text = collector.render([], 0, None, {}, (None, False))
    assert 'nvidia_smi_kernel_log_readable{source="none"} 0' in text


def test_dmesg_is_not_killed_by_the_unit_s_system_call_filter():
    """With @system-service alone, the filter killed the collector's dmesg (syslog(2), x86-64 call 103) on
    that host at every run, where no journal holds the kernel log (audit-without-syslog.txt, the same host
    the run before the profile allowed syslog); with it allowed, dmesg meets dmesg_restrict's EPERM instead,
    and the textfile says the kernel log could not be read."""
    before = (CAPTURE / "audit-without-syslog.txt").read_text().splitlines()
    assert before and all('comm="dmesg"' in line and "syscall=103 " in line and "sig=31" in line for line in before)
    unit = (CAPTURE / "nvidia-smi-textfile.service").read_text().splitlines()
    assert "SystemCallFilter=syslog" in unit
    assert 'nvidia_smi_kernel_log_readable{source="none"} 0' in (CAPTURE / "nvidia_smi.first.prom").read_text()
