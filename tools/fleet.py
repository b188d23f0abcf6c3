#!/usr/bin/env python3
"""Run a playbook over the fleet through ansible-runner and report where each host stands.

    tools/fleet.py -i INVENTORY [--json out.json] PLAYBOOK [any ansible-playbook option...]

Everything after the playbook reaches ansible-playbook unchanged: --tags, --check, -e KEY=VALUE,
-e '{"json": ...}', -e @vars.yml, --skip-tags, -v, --forks, --start-at-task, ...

The report lists, per host, the play recap (ok/changed/failed/unreachable), the facts the
roles set for the roles after them (GPU count, arch list, driver...) and the first failure.
The same API (run_playbook) is what the tests use to read per-host results.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins/filter"))
from sglang_quality import MEASURES, shown  # noqa: E402 (the quality gate's measures, one home)
# Facts set by the roles for the roles after them; the report shows these.
FACT_PREFIXES = ("gpu_preflight_", "gpu_acceptance_", "cuda_toolkit_", "flash_attn_", "sglang_", "fleet_monitoring_")
COLLECTION_PLAYBOOK = re.compile(r"[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*")
STAT_KEYS = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")


@dataclass
class HostResult:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    facts: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    # A no_log task's result reaches the events censored, `changed` included: it counts in `changed` (the
    # play's stats) but is not named here.
    changed_tasks: list = field(default_factory=list)
    results: list = field(default_factory=list)  # (task name, result) of every task that ran, in order
    actions: list = field(default_factory=list)  # the module or action each of those ran, by full name


@dataclass
class PlaybookRun:
    playbook: str
    inventory: list
    status: str
    rc: int
    hosts: dict
    events: list = field(default_factory=list, repr=False)  # ansible-runner's events, as AWX would store them

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())

    @property
    def failed(self) -> int:
        return sum(h.failed + h.unreachable for h in self.hosts.values())

    @property
    def failure_summary(self) -> str:
        """Each host's failed tasks and their messages: what a failed assertion on rc should print."""
        return "\n".join("%s: %s: %s" % (host, f["task"], f["msg"])
                         for host, r in self.hosts.items() for f in r.failures) or "(no failed task; rc %s)" % self.rc


def failure_message(res: dict) -> str:
    """Why a task failed. A loop's own msg is only "One or more items failed": its failed item's says why
    (the progress watches are loops, and a crashed copy's reason is in the round it ended in)."""
    items = [item for item in res.get("results") or [] if isinstance(item, dict) and item.get("failed")]
    return (items[0].get("msg") if items else "") or res.get("msg", "")


def run_playbook(playbook: str | os.PathLike, inventory: str | os.PathLike | list, *, tags: str | None = None,
                 limit: str | None = None, check: bool = False, diff: bool = False,
                 extravars: dict | None = None, quiet: bool = True, extra_args: list | tuple = (),
                 env: dict | None = None) -> PlaybookRun:
    """Run one playbook with ansible-runner and collect per-host stats, facts and failures.

    playbook: a path, or an installed collection's playbook by name (sglang_fleet.fleet.site).
    extra_args: ansible-playbook options, passed on unchanged (a raw command line to ansible-runner).
    env: environment for ansible-playbook over the defaults (ANSIBLE_CONFIG: the repository's ansible.cfg)."""
    inventories = [str(Path(i).resolve()) for i in (inventory if isinstance(inventory, list) else [inventory])]
    cmdline = []
    for inv in inventories[1:]:
        cmdline += ["-i", inv]
    if tags:
        cmdline += ["--tags", tags]
    if limit:
        cmdline += ["--limit", limit]
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    cmdline += list(extra_args)
    private = tempfile.mkdtemp(prefix="fleet-run-")
    by_name = isinstance(playbook, str) and COLLECTION_PLAYBOOK.fullmatch(playbook) and not Path(playbook).exists()
    try:
        runner = ansible_runner.run(
            private_data_dir=private, project_dir=str(ROOT),
            playbook=playbook if by_name else str(Path(playbook).resolve()),
            inventory=inventories[0], cmdline=shlex.join(cmdline) or None, extravars=extravars or {},
            envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
                     # the ansible-playbook of the Python running this (the project's .venv)
                     "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                     **(env or {})},
            quiet=quiet, settings={"suppress_env_files": True},
            fact_cache_type="")  # keep ansible.cfg's own fact cache, shared with plain CLI runs
        hosts: dict[str, HostResult] = {}
        for event in runner.events:
            data = event.get("event_data", {})
            host = data.get("host")
            if not host:
                continue
            result = hosts.setdefault(host, HostResult())
            res = data.get("res") or {}
            if event["event"] == "runner_on_ok":
                if data.get("task_action") not in ("ansible.builtin.gather_facts", "gather_facts", "setup"):
                    result.facts.update({k: v for k, v in (res.get("ansible_facts") or {}).items()
                                         if k.startswith(FACT_PREFIXES)})
                if res.get("changed"):
                    result.changed_tasks.append(data.get("task"))
                result.results.append((data.get("task"), res))
                result.actions.append(data.get("resolved_action") or data.get("task_action"))
            elif event["event"] in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
                result.failures.append({"task": data.get("task"), "msg": failure_message(res)})
        stats = runner.stats or {}
        for key in STAT_KEYS:
            for host, count in (stats.get(key) or {}).items():
                result = hosts.setdefault(host, HostResult())
                attr = {"failures": "failed", "dark": "unreachable"}.get(key, key)
                if hasattr(result, attr):
                    setattr(result, attr, count)
        return PlaybookRun(playbook=str(playbook), inventory=inventories, status=runner.status,
                           rc=runner.rc, hosts=dict(sorted(hosts.items())), events=list(runner.events))
    finally:
        shutil.rmtree(private, ignore_errors=True)


def awx_slices(hosts: list, count: int) -> list:
    """The hosts of each of `count` slices as AWX job slicing deals them: every count-th host of the
    inventory, from the N-th (hosts in name order)."""
    if count < 1:
        raise ValueError("a sliced job has at least one slice, not %d" % count)
    hosts = sorted(hosts)
    return [hosts[offset::count] for offset in range(count)]


def slice_inventory(inventory: str | os.PathLike, hosts: list, dest: str | os.PathLike,
                    inventory_vars: dict | None = None) -> Path:
    """Write a YAML inventory's slice as AWX hands one to its job: only `hosts`, each group holding only
    its members among them, the inventory's variables kept (and `inventory_vars` added to them). `dest`
    beside `inventory` keeps its group_vars and host_vars."""
    import yaml

    whole = yaml.safe_load(Path(inventory).read_text()) or {}
    missing = sorted(set(hosts) - set(_inventory_hosts(whole)))
    if missing:
        raise ValueError("%s has no host %s" % (inventory, ", ".join(missing)))

    def pare(group: dict) -> dict:
        group = dict(group or {})
        if "hosts" in group:
            group["hosts"] = {h: v for h, v in (group["hosts"] or {}).items() if h in hosts}
        if "children" in group:
            group["children"] = {name: pare(child) for name, child in (group["children"] or {}).items()}
        return group

    sliced = {name: pare(group) for name, group in whole.items()}
    sliced.setdefault("all", {})
    sliced["all"]["vars"] = dict(sliced["all"].get("vars") or {}, **(inventory_vars or {}))
    Path(dest).write_text(yaml.safe_dump(sliced, sort_keys=False))
    return Path(dest)


def awx_sliced_inventories(inventory: str | os.PathLike, hosts: list, count: int, directory: str | os.PathLike,
                           inventory_vars: dict | None = None) -> list:
    """Each of `count` slices' inventories, as AWX job slicing hands them to its jobs, written into
    `directory` (not beside `inventory`, where a tool reading the whole directory would see them),
    with links to the group_vars and host_vars beside `inventory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("group_vars", "host_vars"):
        source, link = Path(inventory).parent / name, directory / name
        if source.exists() and not link.exists():
            link.symlink_to(source.resolve())
    return [slice_inventory(inventory, part, directory / ("slice-%d.yml" % (n + 1)), inventory_vars)
            for n, part in enumerate(awx_slices(hosts, count))]


WORKFLOW_KEYS = {"name": str, "playbook": str, "job_tags": str, "job_slice_count": int}


def load_awx_workflow(path: str | os.PathLike) -> list:
    """An AWX workflow as docs/awx-workflow.yml writes one: job templates in order, each a name, a
    playbook of this repository, its tags and its slice count. A malformed one is refused, naming
    the job and the field."""
    import yaml

    jobs = yaml.safe_load(Path(path).read_text())
    if not isinstance(jobs, list) or not jobs:
        raise ValueError("%s: a workflow is a list of job templates" % path)
    for index, job in enumerate(jobs):
        label = "%s: job %d (%s)" % (path, index + 1, job.get("name", "no name") if isinstance(job, dict) else job)
        if not isinstance(job, dict) or set(job) != set(WORKFLOW_KEYS):
            raise ValueError("%s: give exactly %s" % (label, ", ".join(WORKFLOW_KEYS)))
        for key, kind in WORKFLOW_KEYS.items():
            if not isinstance(job[key], kind) or isinstance(job[key], bool):
                raise ValueError("%s: %s is %r, not a %s" % (label, key, job[key], kind.__name__))
        if job["job_slice_count"] < 1:
            raise ValueError("%s: job_slice_count is %d; 1 runs unsliced" % (label, job["job_slice_count"]))
        if not (ROOT / job["playbook"]).is_file():
            raise ValueError("%s: playbook %s is not a file of this repository" % (label, job["playbook"]))
    return jobs


def run_awx_workflow(workflow: str | os.PathLike, inventory: str | os.PathLike, directory: str | os.PathLike,
                     inventory_vars: dict | None = None, prefix: str = "") -> list:
    """Run a workflow as AWX would: each job on success of the one before; a sliced job as one
    ansible-playbook per slice, all at once, each over its slice's inventory (no more slices than
    hosts, as AWX makes), in `directory`/`prefix`<job name>/. Returns [(job name, [PlaybookRun of
    each slice])] for the jobs that ran."""
    from concurrent.futures import ThreadPoolExecutor
    import yaml

    hosts = sorted(set(_inventory_hosts(yaml.safe_load(Path(inventory).read_text()) or {})))
    ran = []
    # AWX's job ids, as it passes them: each job its own awx_job_id, every job of the workflow (the slices
    # of a sliced job are one) the workflow's awx_workflow_job_id, which the fleet run lock is shared by.
    workflow_id, job_ids = os.getpid(), iter(range(1, 1000))
    for job in load_awx_workflow(workflow):
        count = max(1, min(job["job_slice_count"], len(hosts)))
        slices = awx_sliced_inventories(inventory, hosts, count, Path(directory) / (prefix + job["name"]),
                                        inventory_vars)
        awx = [{"awx_workflow_job_id": workflow_id, "awx_job_id": "%d-%d" % (workflow_id, next(job_ids))}
               for _ in slices]
        with ThreadPoolExecutor(len(slices)) as pool:
            runs = list(pool.map(lambda part, ids: run_playbook(ROOT / job["playbook"], part, tags=job["job_tags"],
                                                                extravars=ids),
                                 slices, awx))
        ran.append((job["name"], runs))
        if any(run.rc != 0 for run in runs):
            break
    return ran


def _inventory_hosts(groups: dict) -> list:
    """Every host named in a YAML inventory's groups (and their children)."""
    found = []
    for group in (groups or {}).values():
        found += list((group or {}).get("hosts") or {})
        found += _inventory_hosts((group or {}).get("children") or {})
    return found


def describe_gpus(facts: dict) -> str:
    gpus = facts.get("gpu_preflight_gpus") or []
    if not gpus:
        return "-"
    names = sorted({g["name"] for g in gpus})
    caps = sorted({g["compute_capability"] for g in gpus})
    return "%dx %s (cc %s)" % (len(gpus), ", ".join(names), ", ".join(caps))


def describe_patches(facts: dict) -> tuple[str, str]:
    """(sglang version, "5 applied" or "4 applied, 1 upstream") from the patch role's report."""
    report = facts.get("sglang_patches_report")
    if not report:
        return "-", "-"
    counts: dict[str, int] = {}
    for patch in report["patches"]:
        counts[patch["status"]] = counts.get(patch["status"], 0) + 1
    return report["sglang_version"], ", ".join("%d %s" % (n, s) for s, n in sorted(counts.items()))


def describe_flash_attn(facts: dict) -> str:
    """"2.8.3 built", "2.8.3 current", "off" or "-" from the flash_attn role's facts."""
    action = facts.get("flash_attn_action")
    if not action:
        return "-"
    if action == "disabled":
        return "off"
    version = str(facts.get("flash_attn_version_installed") or "").split("+")[0]
    return ("%s %s" % (version, action)).strip()


def describe_fusion(facts: dict) -> str:
    """The server role's fusion decision with the speed-up its self-test measured, as one cell:
    "on (self-test pass, 1.43x)", "off (self-test pass, not faster: 1.02x)", "off: self-test fail",
    "off (EAGLE-3 capture unpatched)", "off (switched off)" or "-"."""
    fusion = facts.get("sglang_server_fusion")
    if not fusion:
        return "-"
    speedup = fusion.get("speedup")
    measured = ", %.2fx" % float(speedup) if speedup not in (None, "", "None") else ""
    if fusion.get("enabled") in (True, "True", "true"):
        return "on (self-test %s%s)" % (fusion.get("selftest"), measured) if fusion.get("selftest") != "not run" \
            else "on"
    cause = fusion.get("cause")
    if fusion.get("switch") == "off" or cause == "switched-off":
        return "off (switched off)"
    if cause == "capture":
        return "off (EAGLE-3 capture unpatched)"
    if cause == "slower":
        return "off (self-test pass, not faster: %.2fx)" % float(speedup)
    if cause == "no-timings":
        return "off (self-test pass, no decode timings)"
    return "off: self-test %s" % fusion.get("selftest")


def describe_accept(facts: dict) -> str:
    """EAGLE-3's average accept length the server reported to the verify stage, or "-"."""
    value = facts.get("sglang_verify_accept_length")
    return "%.2f" % float(value) if value not in (None, "", "None") else "-"


def describe_gpu_acceptance(facts: dict) -> str:
    """The acceptance stage's verdict: "pass (measured now)", "pass (record)", "FAIL: <checks>", or "-"."""
    passed = facts.get("gpu_acceptance_passed")
    if passed in (None, "", "None"):
        return "-"
    if passed in (True, "True", "true"):
        burned = facts.get("gpu_acceptance_burned") in (True, "True", "true")
        return "pass (%s)" % ("measured now" if burned else "record")
    checks = sorted({str(f.get("check")) for f in facts.get("gpu_acceptance_failures") or []})
    return "FAIL: %s" % ", ".join(checks)


def describe_monitoring(status: dict) -> str:
    """'Prometheus http://…:9090: 5 of 6 targets up (down: node lab-gpu-2)' from the monitoring stage."""
    targets = status.get("targets") or []
    if status.get("checked") in (False, "False", "false"):
        return "Prometheus %s: targets not checked (check mode)" % status.get("url")
    down = ["%s %s" % (t.get("job"), t.get("host") or t.get("instance")) for t in targets if t.get("health") != "up"]
    return "Prometheus %s: %d of %d targets up%s" % (status.get("url"), len(targets) - len(down), len(targets),
                                                      " (down: %s)" % ", ".join(down) if down else "")


def describe_router(state: dict) -> str:
    """'healthy, 2/2 workers in, known answer right (0.4s)' from the router stage's check."""
    if state.get("checked") in (False, "False", "false"):
        return "not checked (check mode)"
    return "healthy, %s/%s workers in, known answer right (%ss)" % (
        state.get("healthy_workers"), state.get("workers"), state.get("waited"))


def describe_server_routers(states: list) -> str:
    """'out of router-1, router-2 (failed its gate; …)' for a host its gate kept out, else ''."""
    out = [s.get("router") for s in states or [] if s.get("state") == "failed-gate"]
    if not out:
        return ""
    return "out of %s (failed its gate; its drain lease is marked failed, so the healer leaves it out)" % ", ".join(out)


def describe_server(facts: dict) -> str:
    """The server stage's finding (sglang_server_state, with sglang_server_group for a rank >= 1), in words."""
    state = facts.get("sglang_server_state")
    if not state:
        return "-"
    group = facts.get("sglang_server_group") or {}
    prefix = ("rank %s of %s, gated through %s: " % (group.get("rank"), group.get("name"), state.get("rank0"))
              if group and group.get("rank") not in (0, "0") else "")
    gate = state.get("gate")
    if gate == "passed":
        return prefix + "healthy, known answer right (%ss)" % state.get("waited")
    if gate == "rolled-back":
        passes = state.get("serving_passes") in (True, "True", "true")
        return prefix + "rolled back to %s%s" % (state.get("serving"), "" if passes else ", which fails its gate too")
    if gate == "not-checked":
        return prefix + "not checked (check mode)"
    return prefix + str(gate)


def describe_models(facts: dict) -> str:
    """'fetched 1, verified 1': what the model stage found or did, per model."""
    models = facts.get("sglang_model_report")
    if not models:
        return "-"
    states = [m.get("state", "?") for m in models]
    return ", ".join("%s %d" % (state, states.count(state)) for state in sorted(set(states)))


def describe_server_lease(lease: dict) -> str:
    """What the server stage found of a drain lease that was not its own as it put the server back, or in
    check mode of any lease it found: "put back, ending the drain lease of run R (until T)" or the lease's
    own summary (by the router host's clock) with "this run would put it back"."""
    if lease.get("ended") in (True, "True", "true"):
        return "put back by this run, ending the %s drain lease of run %s (until %s)" % (
            "failed" if lease.get("state") == "failed" else "left", lease.get("run") or "?", lease.get("until_utc"))
    return "%s; this run would put it back" % (lease.get("summary") or "out under a drain lease until %s"
                                               % lease.get("until_utc"))


def describe_quality_gate(host: str, gate: dict) -> list[str]:
    """The canary's verdict: a heading, then baseline and canary side by side, one measure per row (OF: whose
    baseline, the model's or this host's own last eval)."""
    against = ("against the baseline of install %s (recorded %s)" % (gate.get("baseline_install"),
                                                                       gate.get("baseline_recorded"))
               if gate.get("baseline_install") else "with no baseline yet (the accuracy floor alone)")
    if gate.get("host_baseline_install"):
        against += " and this host's last eval (install %s, %s)" % (gate["host_baseline_install"],
                                                                   gate.get("host_baseline_recorded"))
    lines = ["  %s %s: quality gate of install %s %s: %s" % (
        "i" if gate.get("passed") else "!", host, gate.get("install"), against,
        "passed" if gate.get("passed") else "FAILED, " + "; ".join(gate.get("failures") or []))]
    rows = [("MEASURE", "BASELINE", "OF", "CANARY", "LIMIT", "")]
    for row in gate.get("rows") or []:
        measure = row["measure"]
        better = "higher" if measure == "accuracy floor" else MEASURES.get(measure, {}).get("better")
        limit = ("" if row.get("limit") is None
                 else ("≥ " if better == "higher" else "≤ ") + shown(measure, row["limit"]))
        rows.append((measure, shown(measure, row.get("baseline")),
                     {"model": "model", "host": "host"}.get(row.get("against"), "-"), shown(measure, row.get("canary")),
                     limit, {True: "ok", False: "WORSE"}.get(row.get("ok"), "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["      " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    return lines


def describe_quality(measures: dict) -> str:
    """One eval's measures in a line."""
    return ", ".join("%s %s" % (name, shown(name, measures.get(name))) for name in
                     ("accuracy", "decode_tok_s", "ttft_ms", "itl_ms", "accept_length", "eval_seconds")
                     if measures.get(name) is not None)


def report(run: PlaybookRun) -> str:
    rows = [("HOST", "OK", "CHANGED", "FAILED", "GPUS", "ARCHS", "DRIVER", "CUDA", "SGLANG", "FLASH-ATTN", "PATCHES",
             "MODELS", "GPU-ACCEPTANCE", "FUSION", "ACCEPT", "SERVER")]
    # The controller's own plays (the rollout plan, the bench report) get a row only when they fail.
    hosts = {h: r for h, r in run.hosts.items() if h != "localhost" or r.failed or r.unreachable}
    for host, r in hosts.items():
        f = r.facts
        rows.append((host, str(r.ok), str(r.changed), str(r.failed + r.unreachable), describe_gpus(f),
                     str(f.get("gpu_preflight_cuda_archs", "-")), str(f.get("gpu_preflight_driver_version", "-")),
                     str(f.get("cuda_toolkit_version", f.get("gpu_preflight_cuda_driver_version", "-"))),
                     str(f.get("sglang_install_id") or describe_patches(f)[0]), describe_flash_attn(f), describe_patches(f)[1], describe_models(f), describe_gpu_acceptance(f), describe_fusion(f),
                     describe_accept(f),
                     # the verify stage's finding, when it ran, says more than the health gate's
                     str(f.get("sglang_verify_status") or (describe_server(f) if f.get("sglang_server_state") else
                                                           describe_router(f["sglang_router_state"])
                                                           if f.get("sglang_router_state") else "-"))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["", "Fleet report: %s, %d host(s), %s" % (run.playbook, len(hosts), run.status)]
    lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    for host, r in hosts.items():
        fusion = r.facts.get("sglang_server_fusion") or {}
        if fusion.get("switch") == "auto" and fusion.get("enabled") in (False, "False", "false"):
            lines.append("  i %s: serves without allreduce fusion: %s" % (host, fusion.get("reason")))
        if r.facts.get("sglang_verify_keys_shown"):
            lines.append("  ! %s: /server_info hands %s to every client-key holder (sglang_patches_redact_secrets)"
                         % (host, " and ".join(r.facts["sglang_verify_keys_shown"])))
        for listener in r.facts.get("fleet_open_listeners") or []:
            lines.append("  ! %s: %s (fleet_allow_open_listeners)" % (host, listener))
        monitoring = r.facts.get("fleet_monitoring_status")
        if monitoring:
            lines.append("  i %s: %s" % (host, describe_monitoring(monitoring)))
        for row in r.facts.get("sglang_bench_fusion_flags") or []:
            lines.append("  ! %s: EAGLE-3 accepts fewer tokens with allreduce fusion: %.2f fused vs %.2f unfused "
                         "at concurrency %d (%.1f%% lower, tolerance %g%%)"
                         % (host, row["fused_accept_length"], row["unfused_accept_length"], row["concurrency"],
                            row["accept_drop_percent"], row["tolerance_percent"]))
        for model in r.facts.get("sglang_model_report") or []:
            for path, why in (model.get("problems") or {}).items():
                lines.append("  i %s: %s: %s was %s; fetched again%s" % (
                    host, model["repo_id"], path, why, " from " + model["from"] if model.get("from") else ""))
        if r.facts.get("sglang_quality_canary"):
            lines += describe_quality_gate(host, r.facts["sglang_quality_canary"])
        result = r.facts.get("sglang_quality_result")
        if result:
            lines.append("  i %s: quality eval of install %s: %s" % (host, result.get("install"),
                                                                   describe_quality(result.get("measures") or {})))
        baseline = r.facts.get("sglang_quality_baseline")
        if baseline:
            lines.append("  i quality baseline of %s now install %s, the median of %s: %s" % (
                baseline.get("model"), ", ".join(baseline.get("installs") or []), ", ".join(baseline.get("hosts") or []),
                describe_quality(baseline.get("measures") or {})))
        group = r.facts.get("sglang_server_group") or {}
        if group and group.get("rank") == 0:
            lines.append("  i %s: one server of %d ranks, %s; its gate and the routers talk to rank 0 only"
                         % (group["name"], len(group["ranks"]),
                            ", ".join("%s (rank %d)" % (h, i) for i, h in enumerate(group["ranks"]))))
        for stray in r.facts.get("sglang_server_strays") or []:
            lines.append("  ! %s: left on its GPUs by the stopped server: %s" % (host, stray))
        for lease in r.facts.get("sglang_server_leases") or []:
            lines.append("  i %s: %s: %s" % (host, lease.get("router"), describe_server_lease(lease)))
        for lease in r.facts.get("sglang_router_leases") or []:
            lines.append("  i %s: worker %s (%s) %s" % (host, lease.get("worker"), lease.get("host") or "?",
                                                       lease.get("summary") or lease.get("state")))
        routers_out = describe_server_routers(r.facts.get("sglang_server_router_state"))
        if routers_out:
            lines.append("  i %s: %s" % (host, routers_out))
        for worker in r.facts.get("sglang_router_workers") or []:
            ranks = worker.get("ranks") or []
            lines.append("  i %s: router worker %s%s at %s: %s" % (
                host, worker["unit"], " (%s)" % ", ".join(ranks) if len(ranks) > 1 else "", worker["url"],
                ("in, healthy" if worker.get("healthy") else "in, not healthy") if worker.get("in") else "out"))
        # A rescued failure that a later one repeats (the gate's, inside the rollback's) is said once.
        for i, failure in enumerate(r.failures):
            if not any(failure["msg"] and failure["msg"] in later["msg"] for later in r.failures[i + 1:]):
                lines.append("  ! %s: %s: %s" % (host, failure["task"], failure["msg"]))
    if not hosts:
        lines.append("  ! ansible-playbook ended (rc=%s) before any host ran: see its output above" % run.rc)
    lines.append("  %d host(s) ok, %d failed; %d change(s) in all"
                 % (sum(1 for r in hosts.values() if not (r.failed or r.unreachable)),
                    sum(1 for r in hosts.values() if r.failed or r.unreachable), sum(r.changed for r in hosts.values())))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", action="append", required=True)
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    parser.add_argument("playbook")
    parser.add_argument("ansible_args", nargs=argparse.REMAINDER, metavar="...",
                        help="ansible-playbook options, passed on unchanged")
    args = parser.parse_args(argv)
    run = run_playbook(args.playbook, args.inventory, extra_args=args.ansible_args, quiet=False)
    print(report(run))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"playbook": run.playbook, "status": run.status, "rc": run.rc,
                                         "hosts": {h: asdict(r) for h, r in run.hosts.items()}}, indent=2) + "\n")
    return 0 if run.rc == 0 else (run.rc or 1)


if __name__ == "__main__":
    sys.exit(main())
