"""What a stopped server left on its GPUs is ended before a new server starts (sglang_server_strays): real
processes, found through the lab's nvidia-smi (which lists a process started with LAB_GPU_MEMORY_MIB in its
environment, as the real one lists a process holding GPU memory) and a unit's cgroup."""
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import sglang_server_strays as mod
from ansible.module_utils.gpu_strays import classify, compute_apps, end, unit_processes
from conftest import ROOT

HOLDER_PYTHON = "/usr/bin/python3"  # one another user may run (the test's own may live in root's home)
LAB_SMI = ROOT / "files/lab/nvidia-smi.py"
GPUS = {"state": "ok", "driver_version": "580.159.04", "cuda_version": "13.0",
        "gpus": [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "uuid": "GPU-lab-%d" % i,
                  "pci_bus_id": "00000000:%02X:00.0" % (i + 1), "compute_cap": "12.0", "memory_mib": 97887}
                 for i in range(2)]}
HOLD = ("import os, signal, sys, time\n"
        "if sys.argv[1] == 'ignore-term':\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open(sys.argv[2] + '.tmp', 'w').write(str(os.getpid()))\n"
        "os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n"
        "time.sleep(120)\n")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starts processes as another user (bin/test runs as root)")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """The lab's nvidia-smi over two GPUs, a systemctl that says the unit is stopped, and a way to start
    processes that hold 'GPU memory' as a user, each ended at the test's end."""
    config = tmp_path / "gpus.json"
    config.write_text(json.dumps(GPUS))
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nLAB_GPU_CONFIG=%s exec %s %s \"$@\"\n" % (config, sys.executable, LAB_SMI))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text("#!/bin/sh\necho ActiveState=${LAB_UNIT_STATE:-inactive}\necho ControlGroup=\n")
    for path in (smi, bin_dir / "systemctl"):
        path.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    shared = tempfile.mkdtemp(prefix="strays-")  # where another user can write (pytest's tmp is root's alone)
    os.chmod(shared, 0o777)
    started, pids = [], []

    def holder(user, mib, term="term", indexes=""):
        """Starts a process of `user` that the lab's nvidia-smi lists with `mib` MiB on each GPU (of
        `indexes`, or all); returns its pid."""
        ready = Path(shared) / ("ready-%d" % len(started))
        env = ["LAB_GPU_MEMORY_MIB=%d" % mib] + (["LAB_GPU_INDEXES=" + indexes] if indexes else [])
        started.append(subprocess.Popen(["runuser", "-u", user, "--", "env"] + env
                                        + [HOLDER_PYTHON, "-c", HOLD, term, str(ready)]))
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pids.append(int(ready.read_text()))
        return pids[-1]

    yield type("Host", (), {"smi": smi, "holder": staticmethod(holder), "tmp": tmp_path})
    for pid in pids:  # the holders themselves: runuser, their parent, leaves them when it is killed
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for proc in started:
        proc.kill()
        proc.wait()
    shutil.rmtree(shared)


def run_module(capsys, args, check=False):
    from ansible.module_utils.testing import patch_module_args
    with patch_module_args(dict(args, _ansible_check_mode=check)), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def running(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_service_user_s_gpu_processes_end_sigterm_then_sigkill_and_another_user_s_stay(host, capsys):
    scheduler = host.holder("nobody", 81920)
    stuck = host.holder("nobody", 2048, term="ignore-term", indexes="1")
    other = host.holder("root", 1024)
    args = {"service": "sglang", "user": "nobody", "nvidia_smi": str(host.smi), "term_timeout": 2, "kill_timeout": 5}

    looked = run_module(capsys, args, check=True)
    assert looked["changed"] is True
    assert sorted(s["pid"] for s in looked["strays"]) == sorted([scheduler, stuck])
    assert all(running(pid) for pid in (scheduler, stuck, other)), "check mode ends nothing"

    done = run_module(capsys, args)
    assert done["changed"] is True and not done.get("failed")
    ended = {s["pid"]: s for s in done["strays"]}
    assert ended[scheduler]["ended_by"] == "SIGTERM" and ended[stuck]["ended_by"] == "SIGKILL"
    assert ended[scheduler]["gpus"] == ["GPU-lab-0", "GPU-lab-1"] and ended[scheduler]["used_mib"] == 2 * 81920
    assert ended[stuck]["gpus"] == ["GPU-lab-1"] and ended[stuck]["user"] == "nobody"
    assert not running(scheduler) and not running(stuck)
    # (the machine's other lab-GPU processes, a lab container's server, are other users' too)
    assert other in [f["pid"] for f in done["foreign"]] and running(other), "another user's process is left"
    assert any(line.startswith("pid %d " % stuck) and "nobody, 2048 MiB on 1 GPU): ended by SIGKILL before the server started" in line
               for line in done["summary"])

    again = run_module(capsys, args)
    assert again["changed"] is False and again["strays"] == []


def test_a_process_that_survives_its_sigkill_fails_the_host_naming_it(host):
    pid = host.holder("nobody", 512)
    apps = compute_apps(subprocess.run([str(host.smi), "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                                        "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout)
    strays, _foreign, _hidden = classify(apps, pwd.getpwnam("nobody").pw_uid, [])
    sent = []
    left = end(strays, 0.3, 0.3, kill=lambda p, sig: sent.append((p, sig)))  # a process no signal ends
    assert [s["pid"] for s in left] == [pid]
    assert sent == [(pid, signal.SIGTERM), (pid, signal.SIGKILL)]


LAB_CGROUPS = "/libpod_parent/18c7/libpod-09aa"  # a lab container's view: cgroup v1, systemd's hierarchy named


@pytest.mark.parametrize("lines,control_group", [
    (["0::/system.slice/sglang.service"], "/system.slice/sglang.service"),  # cgroup v2
    (["0::/system.slice/sglang.service/worker"], "/system.slice/sglang.service"),  # below the unit's cgroup
    (["9:name=systemd:%s/system.slice/sglang.service" % LAB_CGROUPS, "8:pids:%s" % LAB_CGROUPS],
     LAB_CGROUPS + "/system.slice/sglang.service"),
])
def test_a_unit_s_processes_are_read_from_each_process_s_cgroup(tmp_path, lines, control_group):
    for pid, content in ((101, lines), (102, ["0::/system.slice/sglang-gpu-init.service"]), (103, ["0::/user.slice"]),
                         (104, ["9:name=systemd:/system.slice/sglang.service.bak", "0::/init.scope"])):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text("\n".join(content) + "\n")
    (tmp_path / "self").mkdir()
    assert unit_processes(control_group, proc=str(tmp_path)) == [101]
    assert unit_processes("", proc=str(tmp_path)) == []  # stopped, its cgroup removed: systemd found it empty


def test_a_process_is_found_by_the_cgroup_path_this_host_shows():
    """This host's own /proc: pid 1 is found by its own path."""
    with open("/proc/1/cgroup") as handle:
        path = next(line.split(":", 2)[2] for line in handle.read().splitlines()
                    if line.startswith("0::") or ":name=systemd:" in line)
    assert 1 in unit_processes(path)


def test_a_running_unit_s_own_processes_are_the_server_and_a_stopped_one_s_leftovers_are_strays(host):
    server = host.holder("root", 80000)  # the server itself, as root for the test: any owner in the cgroup
    apps = compute_apps(subprocess.run([str(host.smi), "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                                        "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout)
    nobody = pwd.getpwnam("nobody").pw_uid
    found = classify(apps, nobody, [], unit_pids=[server])  # check mode: the unit still runs
    assert server not in [app["pid"] for kind in found for app in kind]
    strays, foreign, _hidden = classify(apps, nobody, [server])  # stopped, yet its process is still in its cgroup
    assert [(s["pid"], s["found_in"]) for s in strays] == [(server, "gpu and unit cgroup")]
    assert server not in [f["pid"] for f in foreign]


def test_a_gpu_process_this_proc_does_not_show_is_named_and_left(host):
    line = "4194300, sglang::scheduler_TP0, 81920, GPU-lab-0\n"  # a pid of another PID namespace
    strays, foreign, hidden = classify(compute_apps(line), 0, [])
    assert strays == [] and foreign == [] and [h["pid"] for h in hidden] == [4194300]


def test_a_running_unit_outside_check_mode_is_refused(host, capsys, monkeypatch):
    monkeypatch.setenv("LAB_UNIT_STATE", "active")
    out = run_module(capsys, {"service": "sglang", "user": "nobody", "nvidia_smi": str(host.smi)})
    assert out["failed"] and "sglang.service is active" in out["msg"]


def test_compute_apps_rows_are_one_process_each_and_a_name_may_hold_commas():
    text = ("1201, python3 -m sglang.launch_server, 80000, GPU-a\n"
            "1201, python3 -m sglang.launch_server, 80000, GPU-b\n"
            "1305, odd, name, [N/A], GPU-a\n")
    apps = compute_apps(text)
    assert apps == [{"pid": 1201, "name": "python3 -m sglang.launch_server", "gpus": ["GPU-a", "GPU-b"], "used_mib": 160000},
                    {"pid": 1305, "name": "odd, name", "gpus": ["GPU-a"], "used_mib": None}]
    with pytest.raises(ValueError, match="not pid, name, memory, GPU"):
        compute_apps("No running processes found\n")


def test_the_real_host_s_compute_apps_are_read_one_process_each():
    """The H100 host's answer to the module's own query, with six leftovers of sglang and one of root on its
    GPU (tests/fixtures/hosts/h100-device/strays), and its answer with none."""
    smi = Path(__file__).resolve().parents[1] / "fixtures/nvidia-smi"
    apps = compute_apps((smi / "h100-compute-apps-noheader-nounits.csv").read_text())
    assert [(a["pid"], a["used_mib"]) for a in apps] == [(620, 4706), (621, 2658), (780, 2658), (779, 4706),
                                                         (934, 1634), (935, 4706), (936, 2658)]
    assert {a["name"] for a in apps} == {"/opt/torch/.venv/bin/python3"}
    assert {g for a in apps for g in a["gpus"]} == {"GPU-7b93e277-31a3-bd6c-58f2-ad3db702f633"}
    assert compute_apps((smi / "h100-compute-apps-none-noheader-nounits.csv").read_text()) == []
