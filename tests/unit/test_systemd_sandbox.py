"""The server unit's sandbox as one list (plugins/filter/systemd_sandbox.py): the unit the real H200 host ran
holds exactly it, the self-test's transient unit gets every line of it, and a run the sandbox stops is an
error verdict naming the directive."""
import json

import pytest
from ansible.errors import AnsibleFilterError

import systemd_sandbox as sandbox_filter
from conftest import H200
from systemd_sandbox import (parse_line, sandbox_denial, selftest_properties, selftest_sandboxed, selftest_verdict,
                             server_sandbox)

# tests/unit/test_units_under_systemd.py proves this capture is what the role renders today.
UNIT = (H200 / "units-under-systemd/sglang.service").read_text()
NOT_SANDBOX = {"Type", "User", "Group", "WorkingDirectory", "Environment", "ExecStart", "Restart", "RestartSec",
               "TimeoutStartSec", "TimeoutStopSec", "KillMode"}
CACHE = "/var/lib/sglang-fleet/fusion-selftest"
SANDBOX = server_sandbox(["char-nvidia* rw"], "/var/lib/sglang", 1048576)
SANDBOXED = selftest_sandboxed(True, 0)


def service_lines(unit):
    text = unit.split("[Service]\n", 1)[1].split("\n[Install]", 1)[0].replace("\\\n", "")
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_the_unit_systemd_ran_on_the_h200_host_holds_the_sandbox_line_for_line():
    lines = [line for line in service_lines(UNIT) if line.split("=", 1)[0] not in NOT_SANDBOX]
    home = next(line.split("=", 1)[1] for line in service_lines(UNIT) if line.startswith("WorkingDirectory="))
    nofile = next(line.split("=", 1)[1] for line in lines if line.startswith("LimitNOFILE="))
    devices = [line.split("=", 1)[1] for line in lines if line.startswith("DeviceAllow=")]
    entries = server_sandbox(devices, home, nofile)
    assert ["%s=%s" % (e["directive"], e["value"]) for e in entries] == lines
    assert selftest_properties(entries, [CACHE]) == ["--property=" + line for line in lines] + \
        ["--property=ReadWritePaths=" + CACHE]
    # The comments and the blank line the unit holds come from the same entries.
    for entry in entries:
        block = "".join("# %s\n" % c for c in entry["comment"]) + "%s=%s\n" % (entry["directive"], entry["value"])
        assert (("\n" if entry["gap"] else "") + block) in UNIT


def test_no_directive_is_respelled_or_left_out_on_systemd_252():
    assert sandbox_filter.TRANSIENT_SPELLING == {}
    assert len(selftest_properties(SANDBOX)) == len(SANDBOX) == 29


def test_extra_hardening_comes_after_the_unit_s_own_and_a_line_it_cannot_hold_is_refused():
    entries = server_sandbox(["char-nvidia* rw"], "/var/lib/sglang", 1048576,
                             ["SystemCallFilter=~@resources", "ReadOnlyPaths = /srv"])
    assert [(e["directive"], e["value"], e["comment"]) for e in entries[-2:]] == [
        ("SystemCallFilter", "~@resources", ["sglang_server_hardening_extra:"]), ("ReadOnlyPaths", "/srv", [])]
    for bad in ["ExecStartPre=/bin/true", "SystemCallFilter", "systemcallfilter=~@debug", "User=root",
                "ProtectSystem=strict\nExecStart=/bin/sh"]:
        with pytest.raises(AnsibleFilterError, match="sglang_server_hardening_extra"):
            parse_line(bad)
    with pytest.raises(AnsibleFilterError, match="absolute"):
        server_sandbox([], "var/lib/sglang", 1)


def test_where_systemd_is_not_pid_1_or_systemd_run_is_missing_the_reason_says_so():
    assert SANDBOXED["sandboxed"] is True
    assert selftest_sandboxed(False, 0) == {"sandboxed": False, "why": (
        "systemd is not PID 1 here (no /run/systemd/system): the self-test ran as the service user outside the "
        "server unit's sandbox")}
    assert selftest_sandboxed(True, 2)["why"].startswith("systemd-run is missing here (rc 2)")


def run(result=None, stderr="", rc=0):
    return {"rc": rc, "stdout": json.dumps(result) + "\n" if result else "", "stderr": stderr}


def test_a_pass_is_read_as_the_self_test_gave_it_with_where_it_ran():
    result = {"status": "pass", "reason": "max error 0.0078 within tolerance", "cached": True}
    verdict = selftest_verdict(run(result, "Running as unit: sglang-fusion-selftest.service\n"), SANDBOX, SANDBOXED)
    assert verdict == dict(result, sandbox={"sandboxed": True,
                                            "why": "ran as a transient unit under the server unit's sandbox"})


def test_a_rank_killed_by_sigsys_names_the_system_call_filter():
    result = {"status": "error", "cached": False, "reason": "rank 1 was killed by SIGSYS: a system call it made is "
              "one this process's seccomp filter kills (not a verdict on its GPUs, and not cached): "}
    extra = server_sandbox(["char-nvidia* rw"], "/var/lib/sglang", 1048576, ["SystemCallFilter=~@resources"])
    verdict = selftest_verdict(run(result), extra, SANDBOXED)
    assert verdict["status"] == "error" and verdict["cached"] is False
    assert verdict["denial"]["directives"] == ["SystemCallArchitectures=native", "SystemCallFilter=@system-service",
                                               "SystemCallFilter=~@privileged", "SystemCallFilter=~@resources"]
    assert verdict["reason"].startswith(
        "the server unit's sandbox stopped the self-test, SystemCallArchitectures=native SystemCallFilter=@system-service "
        "SystemCallFilter=~@privileged SystemCallFilter=~@resources (killed by SIGSYS: a system call the seccomp "
        "filter kills): SIGSYS; the server would meet it at its start")
    assert verdict["selftest_reason"] == result["reason"]


def test_a_self_test_killed_by_sigsys_itself_is_named_from_systemd_run_s_report():
    """No JSON at all: the parent died; systemd-run says how (as the lab's systemd 252 writes it)."""
    stderr = ("Running as unit: sglang-fusion-selftest.service\nFinished with result: signal\n"
              "Main processes terminated with: code=killed/status=SYS\nService runtime: 48ms\n")
    verdict = selftest_verdict(run(stderr=stderr, rc=255), SANDBOX, SANDBOXED)
    assert verdict["status"] == "error" and verdict["denial"]["evidence"] == "status=SYS"
    assert "SystemCallFilter=~@privileged" in verdict["reason"]
    assert verdict["selftest_reason"].startswith("the self-test gave no verdict (exit 255): Running as unit")


@pytest.mark.parametrize("evidence,directives", [
    ("PermissionError: [Errno 1] Operation not permitted: '/dev/nvidia0'", ["DevicePolicy=closed",
                                                                          "DeviceAllow=char-nvidia* rw"]),
    ("OSError: [Errno 30] Read-only file system: '/var/lib/sglang-fleet/fusion-selftest/ab.json.part'",
     ["ProtectSystem=strict", "ReadWritePaths=/var/lib/sglang", "ReadWritePaths=" + CACHE]),
    ("OSError: [Errno 97] Address family not supported by protocol", ["RestrictAddressFamilies=AF_UNIX AF_INET "
                                                                      "AF_INET6 AF_NETLINK"]),
])
def test_each_denial_names_its_directives(evidence, directives):
    from_rank = {"status": "error", "cached": False, "reason": "rank 0 could not run the test on this host: " + evidence}
    assert selftest_verdict(run(from_rank), SANDBOX, SANDBOXED, [CACHE])["denial"]["directives"] == directives
    # The self-test's own traceback, with no verdict printed (a write of its cache, say).
    died = selftest_verdict(run(stderr="Traceback (most recent call last):\n" + evidence + "\n", rc=1), SANDBOX,
                            SANDBOXED, [CACHE])
    assert died["status"] == "error" and died["denial"]["directives"] == directives


def test_an_eacces_on_a_device_is_the_file_s_mode_not_the_device_cgroup():
    text = "PermissionError: [Errno 13] Permission denied: '/dev/nvidia-caps/nvidia-cap1'"
    assert sandbox_denial(text, SANDBOX) is None


def test_a_wrong_result_stays_a_fail_and_nothing_is_mapped_outside_the_sandbox():
    fail = {"status": "fail", "cached": False, "reason": "fused result differs from NCCL all-reduce + add + RMSNorm: "
            "max error 0.75 at 1 tokens (tolerance 0.0625 + 0.0078125 x |ref|)"}
    assert selftest_verdict(run(fail), SANDBOX, SANDBOXED)["status"] == "fail"
    outside = selftest_sandboxed(False, 0)
    died = {"status": "error", "reason": "rank 0 was killed by SIGSYS: ...", "cached": False}
    verdict = selftest_verdict(run(died), SANDBOX, outside)
    assert "denial" not in verdict and verdict["reason"] == died["reason"] and verdict["sandbox"] == outside


def test_a_run_with_no_verdict_is_an_error_with_what_it_said():
    verdict = selftest_verdict(run(stderr="Failed to start transient service unit: Unit sglang-fusion-selftest.service "
                                          "already exists.\n", rc=1), SANDBOX, SANDBOXED)
    assert verdict["status"] == "error" and verdict["cached"] is False and "denial" not in verdict
    assert verdict["reason"] == ("the self-test gave no verdict (exit 1): Failed to start transient service unit: "
                                 "Unit sglang-fusion-selftest.service already exists.")


# --- every unit's hardening from one base ---------------------------------------------------------------

def lines(entries):
    return ["%s=%s" % (e["directive"], e["value"]) for e in entries]


def test_every_unit_s_change_to_the_base_says_why():
    for unit, profile in sandbox_filter.UNITS.items():
        changed = set(profile.get("set", {})) | {directive for _, directive, _ in profile.get("add", ())}
        assert changed == set(profile.get("why", {})), unit
        assert set(profile.get("set", {})) <= set(sandbox_filter._BASE_KEYS), unit  # a change, not a new line
        assert all(sandbox_filter.UNITS[unit]["why"][key].strip() for key in changed), unit


def test_a_unit_with_no_change_is_the_base_in_its_order_devices_and_writable_paths_in_their_places():
    base = ["%s=%s" % (key.rstrip("~"), value) for key, value in sandbox_filter.BASE]
    assert lines(sandbox_filter.unit_hardening("router")) == ["PrivateDevices=yes"] + base
    healer = lines(sandbox_filter.unit_hardening("router-healer", writable=["/var/lib/leases"]))
    assert healer[healer.index("ProtectSystem=strict") + 1] == "ReadWritePaths=/var/lib/leases"
    assert "RemoveIPC=yes" not in healer and "PrivateDevices=yes" in healer
    collector = lines(sandbox_filter.unit_hardening("gpu-collector", devices=["char-nvidia* rw"], writable=["/t"]))
    assert collector[:2] == ["DevicePolicy=closed", "DeviceAllow=char-nvidia* rw"] and "PrivateDevices=yes" not in collector
    assert collector[collector.index("PrivateTmp=yes") + 1] == "PrivateNetwork=yes"
    assert "RestrictAddressFamilies=AF_UNIX" in collector and "ProtectKernelLogs=yes" not in collector
    exporter = lines(sandbox_filter.unit_hardening("node-exporter"))
    assert exporter[exporter.index("SystemCallFilter=@system-service") + 1] == "SystemCallFilter=adjtimex"


def test_the_server_s_sandbox_is_the_base_with_its_own_changes():
    """The unit the H200 host ran (above) is what the base and the server's profile make."""
    hardening = [line for line in lines(SANDBOX) if not line.startswith(("LimitNOFILE=", "LimitMEMLOCK="))]
    assert hardening == lines(sandbox_filter.unit_hardening("server", ["char-nvidia* rw"], ["/var/lib/sglang"]))
    assert "SystemCallFilter=~@privileged" in hardening and "MemoryDenyWriteExecute=yes" not in hardening


def test_the_rendered_lines_carry_the_headline_and_comments():
    text = sandbox_filter.unit_directives(sandbox_filter.unit_hardening("router"))
    assert text.startswith("# Hardening: a network service with no devices, no writable system, no privilege to gain.\n"
                           "PrivateDevices=yes\n") and text.endswith("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6")
    gap = sandbox_filter.unit_directives(server_sandbox(["char-nvidia* rw"], "/h", 8))
    assert "LimitMEMLOCK=infinity\n\n# Hardening, as far as GPU serving allows" in gap


def test_an_unknown_unit_or_a_relative_writable_path_is_refused():
    with pytest.raises(AnsibleFilterError, match="no unit 'routr'"):
        sandbox_filter.unit_hardening("routr")
    with pytest.raises(AnsibleFilterError, match="must be absolute, not 'var/lib'"):
        sandbox_filter.unit_hardening("router-healer", writable=["var/lib"])


def test_the_peer_copy_server_gets_every_line_as_a_transient_property():
    words = selftest_properties(sandbox_filter.unit_hardening("model-peer"))
    assert words[0] == "--property=PrivateDevices=yes" and "--property=SystemCallFilter=~@privileged @resources" in words
    assert len(words) == len(sandbox_filter.BASE) + 1
