#!/usr/bin/env python3
"""Fleet-scale speed: time no-op reruns of site.yml over 1 lab node and over N.

    bin/bench-noop [--nodes 8] [--runs 5] [--keep]

Converges each fleet once, then times --runs reruns of `ansible-playbook site.yml` (wall clock,
as a user sees it) and prints the medians and the N/1 ratio. A benchmark, not a test.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import labctl

ROOT = labctl.ROOT


def playbook(inventory: Path) -> float:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    start = time.monotonic()
    proc = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory), "site.yml"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if proc.returncode != 0 or "changed=0" not in proc.stdout:
        sys.exit("bench: site.yml over %s did not end as a no-op:\n%s" % (inventory, proc.stdout[-3000:]))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the bench containers running")
    args = parser.parse_args()
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
