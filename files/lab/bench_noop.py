#!/usr/bin/env python3
"""Fleet-scale speed: time no-op reruns of site.yml over 1 lab node and over N.

    bin/bench-noop [--nodes 8] [--runs 5] [--keep]
    bin/bench-noop --profile -i INVENTORY [-e VAR=VALUE ...]

Converges each fleet once, then times --runs reruns of `ansible-playbook site.yml` (wall clock,
as a user sees it) and prints the medians and the N/1 ratio. A benchmark, not a test.

--profile runs one no-op site.yml over a fleet that is already converged (bin/lab's, say) and prints
where its time goes, stage by stage: the tasks each GPU host runs (skipped ones included), how many
of them run a module on the host (the rest are the controller's own: set_fact, assert, skipped
tasks...), and the stage's wall seconds, with its slowest tasks. -e options (say, Mitogen's strategy
settings through ANSIBLE_* in the environment, or a variable) reach ansible-playbook.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import ansible_runner

import labctl

ROOT = labctl.ROOT

# Actions the controller runs itself: no module travels to the host for them.
CONTROLLER_ACTIONS = {"set_fact", "assert", "debug", "meta", "fail", "add_host", "group_by", "include_tasks",
                      "import_tasks", "include_role", "import_role", "include_vars", "set_stats", "noop",
                      "validate_argument_spec"}
HOST_EVENTS = ("runner_on_ok", "runner_on_skipped", "runner_on_failed", "runner_on_unreachable")


def playbook(inventory: Path) -> float:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    start = time.monotonic()
    proc = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory), "site.yml"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if proc.returncode != 0 or "changed=0" not in proc.stdout:
        sys.exit("bench: site.yml over %s did not end as a no-op:\n%s" % (inventory, proc.stdout[-3000:]))
    return elapsed


def profile(inventory: Path, extra_args: list) -> None:
    """One no-op site.yml through ansible-runner, its per-host events summed by role (the stage)."""
    private = tempfile.mkdtemp(prefix="bench-profile-")
    start = time.monotonic()
    runner = ansible_runner.run(private_data_dir=private, project_dir=str(ROOT), playbook=str(ROOT / "site.yml"),
                                inventory=str(inventory.resolve()), cmdline=" ".join(extra_args) or None, quiet=True,
                                envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                                         "PATH": os.pathsep.join([str(ROOT / ".venv/bin"), os.environ["PATH"]])},
                                fact_cache_type="",
                                settings={"suppress_env_files": True})
    wall = time.monotonic() - start
    events, stats = list(runner.events), runner.stats or {}
    shutil.rmtree(private, ignore_errors=True)
    changed = sum(stats.get("changed", {}).values())
    if runner.rc != 0 or changed:
        sys.exit("bench: the profiled site.yml did not end as a no-op (rc %s, %d changes)" % (runner.rc, changed))
    gpu = _gpu_hosts(inventory)
    tasks: dict = {}     # task uuid -> {stage, name, start, end, hosts}
    per_host: dict = {}  # (stage, host) -> [tasks, modules]
    for event in events:
        data = event.get("event_data") or {}
        if event.get("event") not in HOST_EVENTS or not data.get("host"):
            continue
        stage = data.get("role") or "(play)"
        action = (data.get("resolved_action") or data.get("task_action") or "").rsplit(".", 1)[-1]
        module = event["event"] != "runner_on_skipped" and action not in CONTROLLER_ACTIONS
        counts = per_host.setdefault((stage, data["host"]), [0, 0])
        counts[0] += 1
        counts[1] += int(module)
        task = tasks.setdefault(data.get("task_uuid"), {"stage": stage, "name": data.get("task"),
                                                        "start": data.get("start"), "end": data.get("end")})
        task["start"] = min(task["start"] or "", data.get("start") or "") or data.get("start")
        task["end"] = max(task["end"] or "", data.get("end") or "")
    seconds: dict = {}
    slowest: dict = {}
    for task in tasks.values():
        if not (task["start"] and task["end"]):
            continue
        took = _stamp(task["end"]) - _stamp(task["start"])
        seconds[task["stage"]] = seconds.get(task["stage"], 0.0) + took
        slowest.setdefault(task["stage"], []).append((took, task["name"]))
    stages = sorted(seconds, key=seconds.get, reverse=True)
    print("no-op site.yml over %s: %.1f s wall, %d GPU host(s)" % (inventory, wall, len(gpu)))
    print("%-18s %8s %14s %16s  slowest tasks" % ("stage", "seconds", "tasks/GPU host", "modules/GPU host"))
    total_tasks = total_modules = 0
    for stage in stages:
        rows = [per_host[(stage, host)] for host in gpu if (stage, host) in per_host]
        tasks_per = max((r[0] for r in rows), default=0)
        modules_per = max((r[1] for r in rows), default=0)
        total_tasks += tasks_per
        total_modules += modules_per
        top = ", ".join("%s %.1fs" % (name, took) for took, name in sorted(slowest[stage], reverse=True)[:3])
        print("%-18s %8.1f %14d %16d  %s" % (stage, seconds[stage], tasks_per, modules_per, top))
    print("%-18s %8.1f %14d %16d" % ("total", sum(seconds.values()), total_tasks, total_modules))


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _gpu_hosts(inventory: Path) -> list:
    out = subprocess.run([str(ROOT / ".venv/bin/ansible-inventory"), "-i", str(inventory), "--list"], check=True,
                         capture_output=True, text=True, env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")))
    groups = json.loads(out.stdout)
    hosts, queue = [], ["gpu_nodes"]
    while queue:
        group = groups.get(queue.pop(), {})
        hosts += group.get("hosts", [])
        queue += group.get("children", [])
    return hosts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the bench containers running")
    parser.add_argument("--profile", action="store_true", help="profile one no-op over -i INVENTORY, converged")
    parser.add_argument("-i", "--inventory", type=Path, help="the converged fleet --profile runs over")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], help="passed on to ansible-playbook")
    args = parser.parse_args()
    if args.profile:
        if not args.inventory:
            parser.error("--profile needs -i INVENTORY: a fleet site.yml has converged")
        profile(args.inventory, [arg for value in args.extra_vars for arg in ("-e", value)])
        return
    medians = {}
    try:
        for nodes in (1, args.nodes):
            inventory = labctl.write_inventory(nodes, prefix="bench-gpu")
            os.environ["LAB_QUIET"] = "1"
            labctl.up(inventory)
            playbook_first = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory),
                                             "site.yml"], cwd=ROOT, capture_output=True,
                                            env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")))
            if playbook_first.returncode != 0:
                sys.exit("bench: the first converge over %d node(s) failed" % nodes)
            times = [playbook(inventory) for _ in range(args.runs)]
            medians[nodes] = statistics.median(times)
            print("%d node(s): no-op site.yml %s -> median %.2fs"
                  % (nodes, " ".join("%.2f" % t for t in times), medians[nodes]), flush=True)
            if not args.keep:
                labctl.down(inventory)  # an idle fleet would still take the shared CPU
    finally:
        if not args.keep:
            for nodes in (1, args.nodes):
                labctl.down(labctl.write_inventory(nodes, prefix="bench-gpu"))
    print("ratio %d/1 nodes: %.2f" % (args.nodes, medians[args.nodes] / medians[1]))


if __name__ == "__main__":
    main()
