#!/usr/bin/env python3
"""The server stage's stray clearing (plugins/modules/sglang_server_strays.py) on a real GPU host.

    python3 tests/device/strays_real_host.py --carry .devcarry --out OUT_DIR

Run as root from the repository root on the GPU host, with the Python that has torch (a disposable host:
it creates the service user). CARRY holds wheels/ (ansible-core 2.19 and its imports).

1. Captures `nvidia-smi --query-compute-apps` (the module's own query, and with header and units) with no
   process on the GPUs.
2. Starts three processes that hold GPU memory through torch, as a stopped server's leftovers do: two of
   the service user (one ignores SIGTERM, as a scheduler stuck in a collective does) and one of root.
3. Captures the same queries, and what this host's /proc says of each pid (its namespace is the one the
   module reads).
4. Runs the module through ansible-core, as the role runs it: in check mode (it must name both strays and
   end none), then for real (both strays ended, the one that ignores SIGTERM by SIGKILL; root's process
   named as foreign and left). The host has no systemd as PID 1, so `systemctl show` is answered by a
   stand-in that says the unit is inactive with no cgroup: the only part of the module not real here.
5. Captures the queries and the GPUs' used memory again, ends root's process, and writes
   OUT_DIR/strays.json and the captures.
"""
import argparse
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins/module_utils"))
from gpu_strays import COMPUTE_APPS_QUERY  # noqa: E402  the module's own query

USER = "sglang"  # the role's default sglang_server_user
HOLDER = r"""
import ctypes, signal, sys, time, torch
mib, name, ignore_term, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "ignore-term", sys.argv[4]
ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: the comm sglang's setproctitle sets too
if ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
held = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
held.fill_(1)
torch.cuda.synchronize()
open(ready, "w").write("ready")
time.sleep(600)
"""


def sh(argv, timeout=120, **kwargs):
    t0 = time.monotonic()
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
        return {"argv": argv, "rc": run.returncode, "out": run.stdout, "err": run.stderr,
                "seconds": round(time.monotonic() - t0, 2)}
    except (subprocess.TimeoutExpired, FileNotFoundError) as exc:
        return {"argv": argv, "rc": None, "out": "", "err": str(exc), "seconds": round(time.monotonic() - t0, 2)}


def proc_view(pid):
    try:
        status = Path("/proc/%d/status" % pid).read_text()
        return {"visible": True, "uid": int(status.split("Uid:")[1].split()[0]),
                "comm": Path("/proc/%d/comm" % pid).read_text().strip(),
                "cmdline": Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode().strip()}
    except FileNotFoundError:
        return {"visible": False}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--carry", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"steps": {}}

    def save():
        (out / "strays.json").write_text(json.dumps(result, indent=1, sort_keys=True))

    smi = shutil.which("nvidia-smi") or "/usr/bin/nvidia-smi"
    result["nvidia_smi"] = smi
    queries = {"module": [smi] + COMPUTE_APPS_QUERY,
               "header": [smi, "--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv"]}
    gpu_memory = [smi, "--query-gpu=index,uuid,memory.used", "--format=csv,noheader,nounits"]

    def capture(tag):
        for name, argv in queries.items():
            run = sh(argv)
            if tag == "holding":  # the capture the unit tests read; the others are in strays.json
                (out / ("compute-apps-%s-%s.csv" % (tag, name))).write_text(run["out"])
            result["steps"]["%s_%s" % (tag, name)] = run
        result["steps"][tag + "_memory"] = sh(gpu_memory)
        save()

    # ansible-core from the carried wheels, in a venv that sees this Python's packages.
    venv = Path(tempfile.mkdtemp(prefix="strays-ansible-"))
    result["steps"]["venv"] = sh([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    result["steps"]["pip"] = sh([str(venv / "bin/pip"), "install", "-q", "--no-index", "--find-links",
                                 str(Path(args.carry) / "wheels"), "ansible-core"], timeout=300)
    if subprocess.run(["id", USER], capture_output=True).returncode:
        result["steps"]["useradd"] = sh(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER])
    uid = pwd.getpwnam(USER).pw_uid

    capture("before")
    work = Path(tempfile.mkdtemp(prefix="strays-"))
    os.chmod(work, 0o777)
    (work / "holder.py").write_text(HOLDER)
    holders = {"scheduler": (USER, 4096, "sglang::schedul", "term"),
               "detokenizer": (USER, 2048, "sglang::detoken", "ignore-term"),
               "root": ("root", 1024, "other-job", "term")}
    procs = {}
    for name, (user, mib, comm, term) in holders.items():
        argv = [sys.executable, str(work / "holder.py"), str(mib), comm, term,
                str(work / (name + ".ready"))]
        if user != "root":
            argv = ["runuser", "-u", user, "--"] + argv
        procs[name] = subprocess.Popen(argv, stdout=open(work / ("holder-%s.log" % name), "w"), stderr=subprocess.STDOUT,
                                       env=dict(os.environ, HOME=str(work)), start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not all((work / (n + ".ready")).exists() for n in holders):
        time.sleep(0.5)
    result["ready"] = {n: (work / (n + ".ready")).exists() for n in holders}
    capture("holding")
    # The pids nvidia-smi names, as this /proc sees them.
    lines = result["steps"]["holding_module"]["out"].splitlines()
    result["proc_view"] = {line.split(",")[0]: proc_view(int(line.split(",")[0])) for line in lines if line.strip()}
    result["service_uid"] = uid
    save()

    # The module as the role runs it; systemctl is a stand-in (no systemd as PID 1 here).
    stub = work / "bin"
    stub.mkdir()
    (stub / "systemctl").write_text("#!/bin/sh\necho ActiveState=inactive\necho ControlGroup=\n")
    os.chmod(stub / "systemctl", 0o755)
    env = dict(os.environ, PATH="%s:%s:%s" % (stub, venv / "bin", os.environ.get("PATH", "")),
               ANSIBLE_LIBRARY=str(ROOT / "plugins/modules"), ANSIBLE_MODULE_UTILS=str(ROOT / "plugins/module_utils"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_CONFIG=str(work / "ansible.cfg"))
    (work / "ansible.cfg").write_text("[defaults]\n")  # no project or user config: the module alone
    module_args = "service=sglang user=%s nvidia_smi=%s term_timeout=5 kill_timeout=15" % (USER, smi)
    for mode in ("check", "real"):
        argv = [str(venv / "bin/ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m", "sglang_server_strays",
                "-a", module_args, "--one-line"] + (["--check"] if mode == "check" else [])
        run = sh(argv, timeout=180, env=env)
        try:  # one line: "localhost | CHANGED => {...}"
            run["result"] = json.loads(run["out"].split(" => ", 1)[1])
        except (ValueError, IndexError):
            pass
        result["steps"]["module_" + mode] = run
        result["alive_after_" + mode] = {n: p.poll() is None for n, p in procs.items()}
        save()
    capture("after")
    procs["root"].terminate()
    for p in procs.values():
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    result["returncodes"] = {n: p.returncode for n, p in procs.items()}
    result["holder_logs"] = {n: (work / ("holder-%s.log" % n)).read_text() for n in holders}
    capture("end")


if __name__ == "__main__":
    main()
