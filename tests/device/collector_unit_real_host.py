#!/usr/bin/env python3
"""The monitoring stage's GPU collector as its unit runs it, under a real systemd on a real GPU host.

    python3 tests/device/collector_unit_real_host.py --carry .devcarry --out OUT_DIR

Run as root from the repository root on the GPU host (a disposable one: it installs systemd, a user and
the collector). CARRY is the units harness's (tests/device/units_under_systemd/harness.py): debs/ with
Debian 12's systemd 252 and the libraries it needs, wheels/ with ansible-core 2.19 and its imports.

1. Finds nvidia-smi and the GPU count.
2. Renders nvidia-smi-textfile.service and .timer from the role (tests/playbooks/render_monitoring_units.yml,
   the role's templates and defaults) with this host's nvidia-smi and GPU count, with the carried
   ansible-core.
3. Prepares the host as the distribution's prometheus-node-exporter package would: the prometheus user
   and group, the textfile directory, the systemd-journal group; installs the collector where the role
   puts it.
4. Boots systemd 252 as PID 1 of a new PID and mount namespace (as the units harness does), installs the
   rendered units unchanged and a drop-in that sends their output to a file (there is no journald), starts
   the service once, then its timer, and waits for the timer's next run.
   Records what the collector's kernel-log commands (journalctl -k, dmesg) give its user.
5. Tries each line of the project's base sandbox that the collector's profile leaves out
   (plugins/filter/systemd_sandbox.py), one drop-in at a time and then all together: a run each, its
   result and its textfile (did nvidia-smi answer, could the kernel log be read).
6. Writes OUT_DIR/collector-unit.json (what systemd says of each run, the sandbox it applied, the
   textfile each run wrote), the units as rendered and logs.txt.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/device/units_under_systemd"))
import harness  # noqa: E402  the units harness's systemd install, manager and helpers

UNIT = "nvidia-smi-textfile"
COLLECTOR = Path("/usr/local/lib/sglang-fleet/nvidia_smi_textfile.py")  # the role's __fleet_monitoring_collector
TEXTFILE_DIR = Path("/var/lib/prometheus/node-exporter")                 # fleet_monitoring_node_exporter_textfile_dir
LOG = Path("/var/log/collector-harness.log")
PROPS = ["Result", "ExecMainStatus", "ExecMainCode", "ActiveState", "SubState", "InvocationID", "User",
         "SupplementaryGroups", "DevicePolicy", "DeviceAllow", "NoNewPrivileges", "PrivateNetwork",
         "ProtectSystem", "StateDirectory", "ExecMainStartTimestampMonotonic"]


def nvidia_smi():
    for path in (shutil.which("nvidia-smi"), "/usr/local/nvidia/bin/nvidia-smi", "/usr/bin/nvidia-smi"):
        if path and os.path.exists(path):
            return path
    raise SystemExit("no nvidia-smi on this host")


def render(site, extra, host_name, work):
    out = work / "render"
    vars_file = work / "render-vars.json"
    vars_file.write_text(json.dumps(dict(extra, render_dir=str(out), ansible_python_interpreter=sys.executable)))
    env = dict(os.environ, PYTHONPATH=str(site), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), LC_ALL="C.UTF-8",
               LANG="C.UTF-8", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"), ANSIBLE_HOME=str(work / "ansible-home"))
    run = harness.sh([sys.executable, "-m", "ansible", "playbook", "-i", host_name + ",", "-c", "local",
                      str(ROOT / "tests/playbooks/render_monitoring_units.yml"), "-e", "@" + str(vars_file)],
                     timeout=300, env=env, cwd=str(ROOT))
    units = {}
    for name in (UNIT + ".service", UNIT + ".timer"):
        path = out / "etc/systemd/system" / name
        units[name] = path.read_text() if path.exists() else None
    return harness.brief(run, 4000), units


def prepare_host(record):
    prep = record.setdefault("host_prep", {})
    for group in ("systemd-journal", "prometheus"):
        if harness.sh(["getent", "group", group])["rc"] != 0:
            prep["groupadd " + group] = harness.brief(harness.sh(["groupadd", "--system", group]))
    if harness.sh(["id", "prometheus"])["rc"] != 0:  # as the distribution's package creates it
        prep["useradd"] = harness.brief(harness.sh(["useradd", "--system", "--gid", "prometheus", "--home-dir",
                                                    "/var/lib/prometheus", "--shell", "/usr/sbin/nologin",
                                                    "prometheus"]))
    TEXTFILE_DIR.mkdir(parents=True, exist_ok=True)
    shutil.chown(TEXTFILE_DIR.parent, "prometheus", "prometheus")
    shutil.chown(TEXTFILE_DIR, "prometheus", "prometheus")
    COLLECTOR.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "files/monitoring/nvidia_smi_textfile.py", COLLECTOR)
    os.chmod(COLLECTOR, 0o755)


def write_units(units):
    harness.write_minimal_target("collector harness")
    for name, text in units.items():
        (harness.UNIT_DIR / name).write_text(text)
    dropin = harness.UNIT_DIR / (UNIT + ".service.d")
    dropin.mkdir(exist_ok=True)
    text = ("# The device harness: no journald on this host, the output goes to a file.\n"
            "[Service]\nStandardOutput=append:%s\nStandardError=append:%s\n" % (LOG, LOG))
    (dropin / "harness.conf").write_text(text)
    return {UNIT + ".service.d/harness.conf": text}


def tightenings():
    """{name: drop-in lines}: each base line the collector's profile leaves out or changes, then all of them."""
    sys.path.insert(0, str(ROOT / "plugins/filter"))
    import systemd_sandbox
    base = dict(systemd_sandbox.BASE)
    tries = {key: "%s=%s" % (key.rstrip("~"), base[key]) for key in systemd_sandbox.UNITS["gpu-collector"]["set"]}
    tries = {key: line for key, line in tries.items() if key != "RestrictAddressFamilies"}  # the profile's is tighter
    return dict({key: [line] for key, line in tries.items()}, all=list(tries.values()))


def samples(text):
    """{metric name: its first sample's value} (labels left out)."""
    found = {}
    for line in (text or "").splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            found.setdefault(key.split("{", 1)[0], value)
    return found


def textfile():
    path = TEXTFILE_DIR / "nvidia_smi.prom"
    return path.read_text() if path.exists() else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--carry", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--host-name", default="h200-driver580")
    args = parser.parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="collector-harness-"))
    record, files, manager = {"host_name": args.host_name}, {}, None

    def save():
        (args.out / "collector-unit.json").write_text(json.dumps(record, indent=1, sort_keys=True, default=str))
        for name, text in files.items():
            (args.out / name.replace("/", "-")).write_text(text)

    try:
        smi = nvidia_smi()
        listed = harness.sh([smi, "-L"])
        gpus = [line for line in listed["out"].splitlines() if line.startswith("GPU ")]
        record["host"] = {"nvidia_smi": smi, "gpus": gpus, "kernel": os.uname().release,
                          "dmesg_restrict": Path("/proc/sys/kernel/dmesg_restrict").read_text().strip()}
        site = work / "ansible-site"
        record["ansible_wheels"] = harness.unpack_wheels(args.carry.resolve(), site)
        sys.path.insert(0, str(site))  # the sandbox filter imports ansible's errors
        extra = {"fleet_nvidia_smi": smi, "fleet_gpus_per_host": len(gpus)}
        record["render"] = {"inventory_hostname": args.host_name, "extra_vars": extra,
                            "playbook": "tests/playbooks/render_monitoring_units.yml"}
        record["render"]["run"], units = render(site, extra, args.host_name, work)
        files.update({k: v for k, v in units.items() if v is not None})
        save()
        if None in units.values():
            raise SystemExit("the role's render failed: %s" % record["render"]["run"])

        prepare_host(record)
        record["systemd_install"] = harness.install_systemd(args.carry.resolve(), work)
        # What the collector's kernel-log commands give its user here, systemd installed, before it boots.
        sys.path.insert(0, str(ROOT / "files/monitoring"))
        from nvidia_smi_textfile import KERNEL_LOGS
        record["kernel_log_as_prometheus"] = {}
        for name, argv in KERNEL_LOGS.items():
            done = harness.sh(["runuser", "-u", "prometheus", "-g", "prometheus", "-G", "systemd-journal", "--"] + argv)
            record["kernel_log_as_prometheus"][name] = {"argv": argv, "rc": done["rc"], "stdout": done["out"][-4000:],
                                                        "stdout_lines": len(done["out"].splitlines()),
                                                        "stderr": done["err"][-2000:]}
        files.update(write_units(units))
        manager = harness.Manager(work / "systemd.log", "console")
        record["systemd"] = {"pid": manager.find(), "state": manager.wait_running()}
        record["systemd"]["version"] = manager.ctl("--version")["out"].splitlines()[:1]
        save()

        # Once by hand, as the role's first run does through its timer; then the timer's own next run.
        start = manager.ctl("start", UNIT + ".service", timeout=90)
        record["first"] = {"start": harness.brief(start), "show": manager.show(UNIT + ".service", PROPS),
                           "textfile": textfile()}
        save()
        record["timer"] = {"start": harness.brief(manager.ctl("start", UNIT + ".timer"))}
        first_id = record["first"]["show"].get("InvocationID")
        deadline = time.monotonic() + 45
        show = {}
        while time.monotonic() < deadline:
            show = manager.show(UNIT + ".service", PROPS)
            if show.get("InvocationID") not in (first_id, "", None) and show.get("ActiveState") != "activating":
                break
            time.sleep(1)
        record["timer"]["show"] = manager.show(UNIT + ".timer", ["ActiveState", "LastTriggerUSec", "NextElapseUSecMonotonic"])
        record["by_timer"] = {"show": show, "textfile": textfile()}
        record["timer"]["stop"] = harness.brief(manager.ctl("stop", UNIT + ".timer"))
        record["tightening"] = {}
        trial = harness.UNIT_DIR / (UNIT + ".service.d") / "tightening.conf"
        for name, lines in tightenings().items():
            trial.write_text("[Service]\n" + "\n".join(lines) + "\n")
            manager.ctl("daemon-reload")
            (TEXTFILE_DIR / "nvidia_smi.prom").unlink(missing_ok=True)
            start = manager.ctl("start", UNIT + ".service", timeout=90)
            found = samples(textfile())
            record["tightening"][name] = {
                "lines": lines, "start": harness.brief(start, 1500), "show": manager.show(UNIT + ".service", PROPS),
                "nvidia_smi_up": found.get("nvidia_smi_up"), "kernel_log_readable": found.get("nvidia_smi_kernel_log_readable"),
                "gpus_visible": found.get("nvidia_smi_gpus_visible")}
            save()
        trial.unlink()
        manager.ctl("daemon-reload")
        record["systemd"]["cat"] = manager.ctl("cat", UNIT + ".service", UNIT + ".timer")["out"]
        record["systemd"]["security"] = harness.brief(manager.run("systemd-analyze", "security", "--no-pager",
                                                                  UNIT + ".service"), 6000)
        dmesg = harness.sh(["dmesg"])
        record["audit"] = [x for x in dmesg["out"].splitlines() if "audit" in x and "syscall=" in x][-40:]
    except BaseException as exc:  # whatever happened, what was found so far comes back
        record["error"] = repr(exc)[:3000]
        raise
    finally:
        if manager:
            manager.stop()
        files["logs.txt"] = harness.log_tails([work / "systemd.log", LOG])
        if record.get("first", {}).get("textfile"):
            files["nvidia_smi.first.prom"] = record["first"]["textfile"]
        record["seconds"] = round(time.monotonic() - started, 1)
        save()
        first = record.get("first", {}).get("show", {})
        later = record.get("by_timer", {}).get("show", {})
        print("first run: %s %s; by the timer: %s %s; error: %s" % (
            first.get("Result"), first.get("ExecMainStatus"), later.get("Result"), later.get("InvocationID"),
            record.get("error")))


if __name__ == "__main__":
    main()
