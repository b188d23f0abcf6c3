"""The server role's units under a real systemd on the one-GPU H200 host (Ubuntu 24.04, driver 580), captured
by tests/device/units_under_systemd/harness.py: Debian 12's systemd 252, PID 1 of a PID and mount namespace,
ran the sglang and gpu-init units the role renders for that host, the server's ExecStart replaced by a
workload that does on the GPU what sglang 0.5.9 does at TP 1. The workload ran outside any unit too, as root
and as the service user with the unit's environment, so a step that fails only inside is the sandbox's doing."""
import importlib.util
import json
import shlex
import sys

import yaml

from conftest import H200, ROOT, settings_today
from fleet import run_playbook

CAPTURE = H200 / "units-under-systemd"
RUN = json.loads((CAPTURE / "units-under-systemd.json").read_text())
UNIT = (CAPTURE / "sglang.service").read_text()
GPU_INIT = (CAPTURE / "sglang-gpu-init.service").read_text()
DROPIN = (CAPTURE / "sglang.service.d-harness.conf").read_text()
GPU_INIT_DROPIN = (CAPTURE / "sglang-gpu-init.service.d-harness.conf").read_text()
NODES_DROPIN = CAPTURE / "sglang-gpu-init.service.d-harness-nodes.conf"


def _module(name):
    path = ROOT / "tests/device/units_under_systemd" / (name + ".py")
    spec = importlib.util.spec_from_file_location("units_under_systemd_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HARNESS = _module("harness")
WORKLOAD = _module("workload")
INSIDE = RUN["inside"]["record"]
OUTSIDE = {label: run["record"] for label, run in RUN["outside"].items()}
USER = HARNESS.unit_values(UNIT, "User")[0]
HOME = HARNESS.unit_values(UNIT, "WorkingDirectory")[0]


def test_the_capture_holds_the_units_the_role_renders_today(tmp_path, monkeypatch):
    """The role rendered again here with the host's settings as captured: a template or variable change
    since the capture fails this (run the harness on the host again). No line is left out of the comparison."""
    render = RUN["render"]
    host = render["inventory_hostname"]
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {host: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    run = run_playbook(ROOT / render["playbook"], inventory,
                       extravars=dict(settings_today(render["extra_vars"]), render_dir=str(tmp_path)))
    assert run.rc == 0, run.hosts
    for name, captured in (("sglang.service", UNIT), ("sglang-gpu-init.service", GPU_INIT)):
        assert (tmp_path / f"{host}.{name}").read_text() == captured, f"{name} is not what the role renders now"
    # The fusion self-test's systemd-run command line too (the server unit's sandbox as properties).
    assert json.loads((tmp_path / f"{host}.selftest-argv.json").read_text()) == render["selftest_argv"] == \
        json.loads((CAPTURE / "selftest-argv.json").read_text())
    # The host's own settings, not the role's defaults for an 8-GPU fleet host.
    extra = render["extra_vars"]
    assert extra["sglang_server_gpus_per_node"] == len(RUN["host"]["gpus"]) == 1
    assert extra["sglang_server_python"] == RUN["host"]["python"] == HARNESS.exec_argv(UNIT)[0]
    assert extra["sglang_server_env"] == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                                          "NVSHMEM_DISABLE_NVLS": "1"}
    assert HARNESS.exec_argv(UNIT)[HARNESS.exec_argv(UNIT).index("--tp") + 1] == "1"


def test_systemd_ran_those_units_with_only_the_server_s_exec_start_replaced():
    systemd = RUN["systemd"]
    assert systemd["version"][0].startswith("systemd 252 ") and systemd["state"] in ("running", "degraded")
    cat = systemd["cat"]
    for path, text in (("sglang.service", UNIT), ("sglang-gpu-init.service", GPU_INIT),
                       ("sglang.service.d/harness.conf", DROPIN),
                       ("sglang-gpu-init.service.d/harness.conf", GPU_INIT_DROPIN)):
        assert "# /etc/systemd/system/%s\n%s" % (path, text) in cat, path
    entries = HARNESS.unit_lines(DROPIN)
    assert {(section, key) for section, key, _ in entries} == {
        ("Service", "ExecStart"), ("Service", "StandardOutput"), ("Service", "StandardError")}
    reset, start = HARNESS.unit_values(DROPIN, "ExecStart")
    argv = shlex.split(start)
    assert reset == "" and argv[0] == HARNESS.exec_argv(UNIT)[0] and argv[1].endswith("/workload.py")
    assert {k for _, k, _ in HARNESS.unit_lines(GPU_INIT_DROPIN)} == {"StandardOutput", "StandardError"}
    show = systemd["show"]["sglang.service"]
    assert show["FragmentPath"] == "/etc/systemd/system/sglang.service"
    assert show["DropInPaths"] == "/etc/systemd/system/sglang.service.d/harness.conf"
    # What the unit file says is what the manager applied.
    for key in ("User", "Group", "WorkingDirectory", "Type", "NoNewPrivileges", "DevicePolicy", "DeviceAllow",
                "ProtectSystem", "ProtectHome", "PrivateTmp", "ProtectProc", "ProcSubset", "RestrictNamespaces",
                "UMask", "LimitMEMLOCK", "LimitNOFILE", "SystemCallArchitectures", "KillMode"):
        assert show[key] == HARNESS.unit_values(UNIT, key)[0], key
    assert show["Environment"] == " ".join(HARNESS.unit_values(UNIT, "Environment"))


def test_the_gpu_init_unit_runs_as_rendered_on_a_host_without_nvidia_modprobe():
    """The H200 host has no nvidia-modprobe and its device nodes exist: the gpu-init unit as the role renders
    it checks the nodes instead and succeeds, so the server's Requires= holds and no ExecStart of it is
    replaced (issue 22, item 4; the unit of before failed there with 203/EXEC and took the server with it)."""
    as_rendered = RUN["as_rendered"]
    assert RUN["host"]["nvidia_modprobe"] is None
    assert (as_rendered["gpu_init"]["Result"], as_rendered["gpu_init"]["ExecMainStatus"]) == ("success", "0")
    assert not NODES_DROPIN.exists() and RUN["inside"]["states"] == as_rendered["states"]
    assert "harness-nodes.conf" not in RUN["inside"]["gpu_init"].get("DropInPaths", "")
    assert as_rendered["states"][-1]["ExecMainPID"] != "0"  # the server started


def test_the_unit_s_own_process_ran_the_workload_as_the_service_user_with_the_unit_s_environment():
    final = RUN["inside"]["states"][-1]
    assert (final["ActiveState"], final["Result"], final["ExecMainStatus"]) == ("inactive", "success", "0")
    assert INSIDE["pid"] == int(final["ExecMainPID"]) and INSIDE["user"] == USER
    assert INSIDE["sandbox"]["cgroup"].endswith("/system.slice/sglang.service")
    env = HARNESS.unit_environment(UNIT)
    for name, value in env.items():
        assert INSIDE["environ"][name] == value, name
        assert OUTSIDE[USER]["environ"][name] == value, name
    assert OUTSIDE[USER]["user"] == USER and OUTSIDE["root"]["uid"] == 0
    assert {k: OUTSIDE["root"]["environ"][k] for k in RUN["render"]["extra_vars"]["sglang_server_env"]} \
        == RUN["render"]["extra_vars"]["sglang_server_env"]


def test_every_step_that_passes_outside_the_unit_passes_inside_it():
    assert set(INSIDE["steps"]) == set(WORKLOAD.STEPS), "the capture predates the workload's steps: run it again"
    broken = []
    for step in WORKLOAD.STEPS:
        passed = [label for label, record in OUTSIDE.items() if record["steps"].get(step, {}).get("ok")]
        if passed and not INSIDE["steps"][step]["ok"]:
            broken.append((step, passed, INSIDE["steps"][step]["detail"]))
    assert broken == []


def test_what_sglang_does_at_tp_1_works_under_the_unit_s_sandbox():
    for step in WORKLOAD.STEPS:
        inside = INSIDE["steps"][step]
        assert OUTSIDE[USER]["steps"][step]["ok"], (step, OUTSIDE[USER]["steps"][step]["detail"])
        assert inside["ok"], (step, inside["detail"])
        assert inside["process"] == {"NoNewPrivs": "1", "Seccomp": "2"}, step  # each step ran sandboxed
    detail = {step: INSIDE["steps"][step]["detail"] for step in WORKLOAD.STEPS}
    assert detail["cuda_init"]["name"] == "NVIDIA H200" and detail["cuda_init"]["devices"] == 1
    assert detail["device_alloc_64gib"]["gib"] == 64 and detail["pinned_host_16gib"]["gib"] == 16
    assert detail["pinned_host_16gib"]["rlimit_memlock"] == ["infinity", "infinity"]  # LimitMEMLOCK=infinity
    extension = detail["jit_extension"]
    assert extension["build_dir"].startswith(HOME + "/") and "units_harness_ext_unit.so" in extension["built"]
    assert extension["ninja"] and extension["nvcc"] == HARNESS.unit_environment(UNIT)["CUDA_HOME"] + "/bin/nvcc"
    assert detail["triton_jit"]["cache"].startswith(HOME + "/") and detail["triton_jit"]["cache_files"] > 0
    assert detail["cuda_ipc_two_processes"]["child"]["seccomp"] == "2"
    assert detail["symm_mem_world1"]["multicast"] is False  # TORCH_SYMM_MEM_DISABLE_MULTICAST=1


def test_the_sandbox_took_effect_inside_the_unit_and_not_outside():
    inside, user, root = INSIDE["sandbox"], OUTSIDE[USER]["sandbox"], OUTSIDE["root"]["sandbox"]
    assert (inside["status"]["NoNewPrivs"], inside["status"]["Seccomp"]) == ("1", "2")
    assert (user["status"]["NoNewPrivs"], user["status"]["Seccomp"]) == ("0", "0")
    assert int(inside["status"]["CapBnd"], 16) == 0 != int(root["status"]["CapBnd"], 16)  # CapabilityBoundingSet=
    assert inside["status"]["Umask"] == HARNESS.unit_values(UNIT, "UMask")[0]
    # LimitNOFILE= as far as the host's hard limit lets systemd go (a container's: 20000 on the H200 host).
    nofile = min(int(HARNESS.unit_values(UNIT, "LimitNOFILE")[0]), user["rlimits"]["RLIMIT_NOFILE"][1])
    assert inside["rlimits"]["RLIMIT_NOFILE"] == [nofile, nofile]
    # DevicePolicy=closed: nodes outside DeviceAllow that the user opens outside the unit are refused inside
    # by the device policy (EPERM, where the mode bits would say EACCES): the harness's own 0666 node always.
    denied = {n for n, r in inside["devices"].items() if r == "EPERM" and user["devices"][n] == "ok"}
    assert "/dev/harness-fuse" in denied
    assert "/dev/infiniband/rdma_cm" in denied or user["devices"]["/dev/infiniband/rdma_cm"] != "ok"
    # Every NVIDIA node the user reaches outside, it reaches inside (DeviceAllow=char-nvidia* rw).
    nvidia = {n: r for n, r in user["devices"].items() if n.startswith("/dev/nvidia")}
    assert nvidia["/dev/nvidiactl"] == nvidia["/dev/nvidia0"] == nvidia["/dev/nvidia-uvm"] == "ok"
    assert {n: inside["devices"][n] for n in nvidia} == nvidia
    # ProtectSystem=strict with ReadWritePaths= the home: /opt, /etc, /usr read-only, the home writable.
    assert (inside["writes"]["/opt"], root["writes"]["/opt"]) == ("EROFS", "ok")
    assert inside["writes"]["/etc"] == inside["writes"]["/usr/local"] == "EROFS"
    assert inside["writes"][HOME] == user["writes"][HOME] == "ok"
    assert inside["mounts"]["/"]["options"].startswith("ro,") and user["mounts"]["/"]["options"].startswith("rw,")
    assert inside["mounts"][HOME]["options"].startswith("rw,")
    assert inside["mounts"]["/proc/sys"]["options"].startswith("ro,")  # ProtectKernelTunables
    # ProtectHome: /root and /home are mounts of their own, read-only, inside only.
    for path in ("/root", "/home"):
        assert inside["mounts"][path]["mount"] == path and user["mounts"][path]["mount"] == "/"
    # ProtectProc=invisible: PID 1 (root's) is gone from /proc; PrivateTmp: the host's /tmp is not there.
    assert (inside["proc_1_visible"], user["proc_1_visible"]) == (False, True)
    assert (inside["tmp_marker_visible"], user["tmp_marker_visible"]) == (False, True)


def test_the_filter_kills_exactly_what_systemd_s_own_tables_leave_out():
    groups = HARNESS.expand_filter_groups(RUN["systemd"]["syscall_filter"])
    allowed = HARNESS.allowed_calls(UNIT, groups)
    assert "@system-service" in groups and allowed
    probes = INSIDE["syscalls"]
    assert set(probes) == {name for name, _, _ in WORKLOAD.SYSCALLS}
    killed = {name for name, result in probes.items() if result["outcome"] == "killed"}
    assert {probes[name]["signal"] for name in killed} == {"SIGSYS"}
    assert killed == {name for name in probes if name not in allowed}
    assert {"bpf", "ptrace", "setuid"} <= killed and {"getpid", "sched_setaffinity", "mbind"}.isdisjoint(killed)
    for label, record in OUTSIDE.items():
        assert {r["outcome"] for r in record["syscalls"].values()} == {"returned"}, label
    # The kernel's seccomp audit records (type 1326, syscall=N) name only calls the filter does not allow.
    numbers = {nr: name for name, nr, _ in WORKLOAD.SYSCALLS}
    audited = {int(line.split(" syscall=")[1].split()[0]) for line in RUN["audit"]["lines"]}
    assert audited and {numbers[nr] for nr in audited} <= killed


def test_cuda_ipc_of_an_expandable_segment_works_under_the_unit_only_if_pidfd_getfd_does():
    """torch's CUDA IPC of an expandable segment (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) imports the
    sender's memory with pidfd_getfd: the receiving process dies of SIGSYS where the filter kills that call."""
    outside = OUTSIDE[USER]["probes"]["cuda_ipc_expandable_segments"]
    inside = INSIDE["probes"]["cuda_ipc_expandable_segments"]
    assert outside["ok"] and outside["detail"]["alloc_conf"] == "expandable_segments:True"
    pidfd_getfd_killed = INSIDE["syscalls"]["pidfd_getfd"]["outcome"] == "killed"
    assert inside["ok"] is not pidfd_getfd_killed
    if pidfd_getfd_killed:
        assert "exit code -31" in inside["detail"]["error"]  # -SIGSYS


def test_the_harness_reads_units_and_filter_tables_as_systemd_does():
    listing = "@default\n    brk\n@a\n    # a comment\n    read\n    @b\n@b\n    write\n    setuid\n" \
              "# Ungrouped\n#   foo\n@priv\n    setuid\n"
    groups = HARNESS.expand_filter_groups(listing)
    assert groups["@a"] == {"read", "write", "setuid"} and groups["@priv"] == {"setuid"}
    assert HARNESS.allowed_calls("[Service]\nSystemCallFilter=@a\nSystemCallFilter=~@priv\n", groups) == {
        "brk", "read", "write"}
    assert HARNESS.allowed_calls("[Service]\nSystemCallFilter=~@priv\n", groups) is None  # a deny list only
    text = ('[Unit]\nEnvironment=X=unit-section\n[Service]\nEnvironment="A=b c" D=e\nEnvironment=P=$$HOME\n'
            '# ExecStart=/commented\nExecStart=/x/python -m m \\\n    --flag "a b"\n')
    assert HARNESS.unit_environment(text) == {"A": "b c", "D": "e", "P": "$HOME"}
    assert HARNESS.exec_argv(text) == ["/x/python", "-m", "m", "--flag", "a b"]


def test_without_a_d_bus_system_bus_the_self_test_runs_as_before_since_systemd_run_cannot_follow_its_unit():
    """The real host booted systemd 252 and has systemd-run, but no D-Bus: the role's own systemd-run command
    line failed there (and over systemd's private socket too), so the role must not choose the sandbox."""
    sys.path.insert(0, str(ROOT / "plugins/filter"))
    from systemd_sandbox import selftest_sandboxed
    host = RUN["selftest_host"]
    assert host == {"systemd_booted": True, "systemd_run_rc": 0, "system_bus": False}
    for run in RUN["transient"].values():
        assert run["command"][:4] == ["systemd-run", "--wait", "--pipe", "--collect"]
        assert [(a["bus"], a["rc"]) for a in run["attempts"]] == [("default", 1), ("unix:path=/run/systemd/private", 1)]
        assert "Failed to connect to bus" in run["attempts"][0]["stderr"]
        assert "Invalid request descriptor" in run["attempts"][1]["stderr"]
    where = selftest_sandboxed(host["systemd_booted"], host["systemd_run_rc"], host["system_bus"])
    assert where["sandboxed"] is False and "no D-Bus system bus" in where["why"]
    assert selftest_sandboxed(True, 0, True)["sandboxed"] is True  # the lab's nodes run dbus-daemon
