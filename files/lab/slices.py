#!/usr/bin/env python3
"""AWX job slicing over a six-node lab fleet, counted.

    .venv/bin/python files/lab/slices.py [--keep]

Brings up a fresh lab fleet of six GPU nodes and a router (their own pod and Hub), where slices-gpu-3
and slices-gpu-6 are one two-node tensor-parallel group, and with a fresh flash-attn cache and model
manifest directory. Then, as AWX would run it:

1. the rollout job sliced in two, which splits the group: every slice must be refused, naming it,
   before any change;
2. docs/awx-workflow.yml: prepare (unsliced), the rollout in three slices at once ([1, 4, router],
   [2, 5], [3, 6]: the group kept whole), finish (unsliced: the server stage, the router, verify);
3. the same workflow again with a change on every server (an environment variable of the unit), under
   load through the router: the finish job restarts the five units under the fleet's floor
   (fleet_min_in_service, 75% of 5 units: 3 stay in), each drained out of the router first.

It counts what the issues of slice-safe fleet-once steps and of the fleet's floor ask for: flash-attn
builds (1), the bytes the Hub sent per model (1x), the router's workers (every unit of the fleet), the
refusal, and in 3. every server restarted once, at most 2 of the 5 workers out of the router's list (read
4 times a second) and 0 failed requests; prints them, and exits 1 if any is off. The fleet is taken down
at the end unless --keep. It takes about ten minutes on two cores, which would take CI past its 45, so
bin/test does not run it: the default, sglang_model and sglang_router scenarios test each part on their
own fleets (docs/awx.md).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(HERE))

import hub_fixture  # noqa: E402
import labctl  # noqa: E402
from lab_nodes import RouterLoad, node_sh, server_starts  # noqa: E402
from fleet import awx_sliced_inventories, run_awx_workflow, run_playbook  # noqa: E402

GPUS = ["slices-gpu-%d" % i for i in range(1, 7)]
ROUTER = "slices-router-1"
# The router's address: the pod's loopback, 127.0.1.N by the order of the nodes' names (the router is 7th).
ROUTER_URL = "http://127.0.1.7:30090"
# fleet_min_in_service's default, 75% of the fleet's 5 units rounded down, keeps 3 in: 2 may be out.
FLOOR_OUT = 2
GROUP = "slices_tp"
RANKS = ["slices-gpu-3", "slices-gpu-6"]
FOLDER = ROOT / ".lab" / "slices-fleet-6"
# Each job's slices' inventories, as deep below the repository as FOLDER: the lab's group_vars find its
# SSH key and known_hosts from an inventory's folder (../../.cache/lab-ssh).
JOBS, PREFIX = ROOT / ".lab", "slices-fleet-6-"


def write_inventory() -> tuple[Path, dict]:
    """The fleet's inventory beside the lab's group_vars, and the variables AWX's inventory would hold."""
    for folder in [FOLDER] + list(JOBS.glob(PREFIX + "*")):
        shutil.rmtree(folder, ignore_errors=True)
    FOLDER.mkdir(parents=True)
    (FOLDER / "group_vars").symlink_to(ROOT / "inventory/lab/group_vars")
    # In the order of their names, as AWX lists them: the group's ranks (a slice count apart, so that
    # AWX keeps them in one slice) are never neighbours, and the rollout takes them together anyway.
    gpu = {name: ({"sglang_server_multinode_group": GROUP} if name in RANKS else None) for name in GPUS}
    hosts = FOLDER / "hosts.yml"
    hosts.write_text(yaml.safe_dump({
        "gpu_nodes": {"hosts": gpu, "children": {GROUP: {"hosts": {name: None for name in RANKS}}}},
        "sglang_routers": {"hosts": {ROUTER: None}},
        "lab_nodes": {"children": {"gpu_nodes": None, "sglang_routers": None}}}, sort_keys=False))
    inventory_vars = {
        "fleet_gpu_nodes": {name: (GROUP if name in RANKS else "") for name in GPUS},
        "lab_hosts": sorted(GPUS + [ROUTER]),
        # A fresh wheel cache, shared by every slice (this one controller): one build must happen. The
        # lab's manifests are under the inventory's folder (group_vars), fresh too: one fetch must happen.
        "flash_attn_cache_dir": str(FOLDER / "wheels"),
        # A lab build takes a minute: a seed that never builds ends the other slices' wait in 20.
        "flash_attn_build_timeout_minutes": 20,
    }
    return hosts, inventory_vars


def sh(node: str, script: str) -> str:
    """What a command on a node prints, whether it succeeds or not (an empty listing is an answer here)."""
    return node_sh(node, script, check=False).stdout


def hub_bytes(pod: str) -> dict:
    stats = json.loads(subprocess.run(["podman", "exec", labctl.hub_name(pod), "cat", "/run/hub-stats.json"],
                                      capture_output=True, text=True, check=True).stdout)
    return stats.get("by_repo", {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="leave the fleet up at the end")
    args = parser.parse_args(argv)
    inventory, inventory_vars = write_inventory()
    pod = labctl.pod_name(inventory)
    labctl.down(inventory)
    started = time.monotonic()
    labctl.up(inventory)
    checks, ok = [], True

    def check(what: str, passed: bool, detail: str) -> None:
        nonlocal ok
        ok = ok and passed
        checks.append((what, "yes" if passed else "NO", detail))
        print("[slices] %s: %s (%s)" % (what, "yes" if passed else "NO", detail), flush=True)

    try:
        # 1. A slicing that splits the group: the rollout's tags, in two slices.
        split = awx_sliced_inventories(inventory, GPUS + [ROUTER], 2, JOBS / (PREFIX + "split"), inventory_vars)
        rollout = "cuda,sglang,flash_attn,patches,acceptance,server"
        runs = [run_playbook(ROOT / "site.yml", part, tags=rollout) for part in split]
        refused = [f["msg"] for run in runs for r in run.hosts.values() for f in r.failures]
        check("the split group is refused, before any change",
              all(run.rc != 0 and run.changed == 0 for run in runs)
              and sum("multi-node group %s is split across slices" % GROUP in m for m in refused) == 2,
              "; ".join(sorted(set(refused)))[:300])

        # 2. The workflow, the rollout in three slices at once.
        t0 = time.monotonic()
        jobs = run_awx_workflow(ROOT / "docs/awx-workflow.yml", inventory, JOBS, inventory_vars, PREFIX)
        for name, job_runs in jobs:
            for run in job_runs:
                hosts = sorted(set(run.hosts) - {"localhost"})
                check("job %s over %s passes" % (name, ", ".join(hosts)), run.rc == 0,
                      run.failure_summary[:300] if run.rc else "%d change(s)" % run.changed)
        print("[slices] the workflow took %.0f s" % (time.monotonic() - t0), flush=True)

        builds = [name for name in GPUS if sh(name, "ls /var/cache/sglang-fleet/flash_attn/build-*.log 2>/dev/null")]
        entries = [json.loads(p.read_text()) for p in (FOLDER / "wheels").glob("*/key.json")]
        check("flash-attn builds: 1", builds == ["slices-gpu-1"] and [e["built_on"] for e in entries] == ["slices-gpu-1"],
              "build logs on %s; cache entries built on %s" % (builds, [e["built_on"] for e in entries]))
        installed = {name: sh(name, "/opt/sglang/current/bin/python -c \"from importlib.metadata import version; "
                                    "print(version('flash-attn'))\"").strip() for name in GPUS}
        check("every GPU host runs that one wheel", len(set(installed.values())) == 1 and entries
              and set(installed.values()) == {"2.8.3+build." + entries[0]["id"]}, json.dumps(installed))

        served = hub_bytes(pod)
        models = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())["sglang_model_models"]
        sizes = {m["repo_id"]: sum(len(data) for data in hub_fixture.REPOS[m["repo_id"]].values()) for m in models}
        served = {repo: served.get(repo, 0) for repo in sizes}
        check("Hub bytes: 1x each model", all(served[repo] == sizes[repo] for repo in sizes),
              ", ".join("%s %d of %d" % (repo, served[repo], sizes[repo]) for repo in sorted(sizes)))

        listed = sh(ROUTER, "curl -sf -m 30 %s/workers" % ROUTER_URL)
        urls = sorted(w["url"] for w in json.loads(listed or "{}").get("workers", []))
        wanted = sorted("http://127.0.1.%d:30000" % (i + 1) for i, name in enumerate(sorted(GPUS + [ROUTER]))
                        if name in GPUS and name != RANKS[1])
        check("router workers: every unit of the fleet", urls == wanted, "%d listed: %s" % (len(urls), urls))

        # 3. A change on every server, the workflow again, under load through the router.
        before = {name: server_starts(name) for name in GPUS}
        changed = dict(inventory_vars, sglang_server_env={"LAB_ROLLOUT": "slices-floor"})
        load = RouterLoad(ROUTER, "slices-load", ROUTER_URL, max_requests=20000, seconds=900)
        t0 = time.monotonic()
        jobs = run_awx_workflow(ROOT / "docs/awx-workflow.yml", inventory, JOBS, changed, PREFIX + "changed-")
        took = time.monotonic() - t0
        summary = load.finish()
        for name, job_runs in jobs:
            for run in job_runs:
                hosts = sorted(set(run.hosts) - {"localhost"})
                check("changed: job %s over %s passes" % (name, ", ".join(hosts)), run.rc == 0,
                      run.failure_summary[:300] if run.rc else "%d change(s)" % run.changed)
        restarted = {name: server_starts(name) - before[name] for name in GPUS}
        check("changed: every server restarted once", restarted == {name: 1 for name in GPUS}, json.dumps(restarted))
        lists = [set(urls) for _, urls in summary.get("worker_lists", [])]
        most_out = max((sum(1 for url in wanted if url not in seen) for seen in lists), default=-1)
        each_out = all(any(url not in seen for seen in lists) for url in wanted)
        check("changed: the floor held (75%% of %d units: at most %d out)" % (len(wanted), FLOOR_OUT),
              0 < most_out <= FLOOR_OUT and each_out,
              "at most %d of %d workers out in %d worker lists over %.0f s; every worker out once: %s; lists: %s"
              % (most_out, len(wanted), len(lists), took, each_out,
                 [(t, [url.split(":")[1].rsplit(".", 1)[-1] for url in urls]) for t, urls in summary.get("worker_lists", [])]))
        check("changed: 0 failed requests through the router",
              summary.get("failed") == 0 and summary.get("sent", 0) >= 100 and summary.get("ok") == summary.get("sent"),
              "%s sent, %s answered right, %s failed: %s" % (summary.get("sent"), summary.get("ok"),
                                                              summary.get("failed"), summary.get("errors", [])[:2]))
    finally:
        print("\n| check | result | detail |\n|---|---|---|")
        for what, result, detail in checks:
            print("| %s | %s | %s |" % (what, result, detail.replace("|", "/")))
        print("\n[slices] %s in %.0f s" % ("all counts right" if ok else "SOME COUNTS WRONG", time.monotonic() - started))
        if not args.keep:
            labctl.down(inventory)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
