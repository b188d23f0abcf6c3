"""The router in front of the lab fleet: what it routes to, the servers' rolling restarts through it
under load, a failed gate that keeps its host out, and the two-node group restarted as one.

The tests run in file order on one converged fleet: rt-gpu-1 serves alone, rt-gpu-2 (rank 0) and
rt-gpu-3 (rank 1) are one multi-node group, rt-router runs the real sglang-router 0.3.2. Load runs
on the router's node (files/lab/router_load.py), so every request stays on the pod's loopback."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import (INVENTORY, KEY, KEY_FILE, RANK1_URL, ROOT, ROUTER, ROUTER_URL, SERVERS, WORKERS, Load,
                      ask_through_router, router, say, sh, workers)
from fleet import report, run_playbook
from lab_nodes import server_events, server_starts
from leak_scan import leaks

LEASE_DIR = "/var/lib/sglang-router/leases"
LEASE_OF = {host: "%s/http_%s_30000.json" % (LEASE_DIR, url.split("//")[1].split(":")[0]) for host, url in WORKERS.items()}
HEALER_PERIOD = 5  # inventory/lab/group_vars/all.yml
# The server's root-only key file for local clients, which the plan writes (no running server reads it).
ENV_FILE = "/etc/sglang/sglang.env"
# The fleet's key from the rotation's test on: every later run asks for it.
KEY_TWO = "lab-router-secret-2b9c"
ROTATED = {"sglang_server_api_key": KEY_TWO}
# Short waits, so that a lease ends within a test: 5 + 10 + 15 = 30 s.
SHORT_WAITS = dict(ROTATED, sglang_server_drain_timeout=5, sglang_server_timeout_start_sec=10, sglang_server_health_timeout=15)


def lease(host):
    """rt-router's drain lease of a worker, or None."""
    done = sh(ROUTER, "cat %s" % LEASE_OF[host], check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def healer_lines(since):
    """What the healer itself logged since the unix time `since` (not systemd's lines about its unit)."""
    out = sh(ROUTER, "journalctl -u sglang-router-healer --no-pager -o cat --since @%d" % int(since)).stdout
    return "\n".join(line for line in out.splitlines() if line.startswith("sglang-router-healer: "))


def controller(tmp_path, name, playbook, extravars, limit=None):
    """ansible-playbook in a session of its own, as an operator's shell runs it (so that a SIGKILL of its
    process group is a dropped SSH session or a closed laptop); its output in tmp_path/<name>.log."""
    (tmp_path / ("%s.json" % name)).write_text(json.dumps(extravars))
    log = tmp_path / ("%s.log" % name)
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", INVENTORY, str(ROOT / playbook),
            "-e", "@%s" % (tmp_path / ("%s.json" % name))] + (["--limit", limit] if limit else [])
    with open(log, "w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")))
    return process, log


def kill(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def test_the_router_fronts_rank_0_of_each_server_and_answers_through_them():
    assert workers() == {WORKERS["rt-gpu-1"]: True, WORKERS["rt-gpu-2"]: True}  # rank 1 (rt-gpu-3) is no worker
    assert "42" in ask_through_router()
    # Prometheus metrics on the router's node, as configured.
    assert "smg_http_requests_total" in sh(ROUTER, "curl -sf http://127.0.1.4:29000/metrics").stdout
    # Its own unprivileged user, in its own venv.
    assert sh(ROUTER, "ps -o user= -C python3 -C 'sglang::router' || ps -eo user,args | grep '[s]glang::router'"
              ).stdout.split()[0] in ("sglang-router", "sglang-+")


def test_the_api_key_is_in_no_command_line_unit_or_journal():
    assert KEY in sh(ROUTER, "cat %s" % KEY_FILE).stdout  # the router runs with the key set...
    assert sh(ROUTER, "stat -c '%U:%G %a' " + KEY_FILE).stdout.split() == ["root:sglang-router", "640"]
    # ...which its workers demand of it: without it the router would list no model.
    assert router("/v1/models")["data"][0]["id"] == "/models/nvidia/Kimi-K2.5-NVFP4"
    assert KEY not in sh(ROUTER, "ps -eo args").stdout
    launcher = sh(ROUTER, "systemctl show -p MainPID --value sglang-router").stdout.strip()
    assert KEY not in sh(ROUTER, "tr '\\0' ' ' < /proc/%s/cmdline" % launcher).stdout
    assert KEY not in sh(ROUTER, "cat /etc/systemd/system/sglang-router.service; systemctl show sglang-router").stdout
    assert KEY not in sh(ROUTER, "journalctl --no-pager -o cat").stdout


def test_a_flag_the_router_rejects_fails_before_the_unit_changes():
    unit = sh(ROUTER, "sha256sum /etc/systemd/system/sglang-router.service").stdout
    run = run_playbook(ROOT / "playbooks/router.yml", INVENTORY, extravars={"sglang_router_extra_args": ["--no-such-flag"]})
    assert run.rc != 0
    said = run.failure_summary
    assert "rejects its command line" in said and "unrecognized arguments: --no-such-flag" in said, said
    assert sh(ROUTER, "sha256sum /etc/systemd/system/sglang-router.service").stdout == unit
    assert workers() == {url: True for url in WORKERS.values()}


HEALER = "/usr/local/lib/sglang-fleet/sglang_router_healer.py"


def test_a_drifted_router_host_is_found_by_one_read_and_repaired():
    """A router host as asked (its key included, compared by its sha256) runs none of the install, file or
    unit tasks; a healer edited by hand and its timer stopped are found by the one read, planned under
    --check without a write, then repaired, and the next run is settled again."""
    settled = run_playbook(ROOT / "playbooks/router.yml", INVENTORY)
    assert settled.rc == 0 and settled.changed == 0, settled.hosts[ROUTER].changed_tasks
    assert not {"ansible.builtin.pip", "ansible.builtin.copy", "ansible.builtin.template"} & set(
        settled.hosts[ROUTER].actions), settled.hosts[ROUTER].actions
    sh(ROUTER, "echo '# edited' >> %s; systemctl stop sglang-router-healer.timer" % HEALER)
    check = run_playbook(ROOT / "playbooks/router.yml", INVENTORY, check=True, diff=True)
    assert check.rc == 0, check.failure_summary
    assert {"The healer, the code it shares with the modules and its settings are in place",
            "The healer's timer is enabled and running, restarted when it changed"} <= set(
        check.hosts[ROUTER].changed_tasks), check.hosts[ROUTER].changed_tasks
    assert sh(ROUTER, "tail -n 1 %s" % HEALER).stdout == "# edited\n"
    assert sh(ROUTER, "systemctl is-active sglang-router-healer.timer", check=False).stdout.strip() == "inactive"
    run = run_playbook(ROOT / "playbooks/router.yml", INVENTORY)
    assert run.rc == 0, run.failure_summary
    assert "# edited" not in sh(ROUTER, "cat %s" % HEALER).stdout
    assert sh(ROUTER, "systemctl is-active sglang-router-healer.timer").stdout.strip() == "active"
    again = run_playbook(ROOT / "playbooks/router.yml", INVENTORY)
    assert again.rc == 0 and again.changed == 0, again.hosts[ROUTER].changed_tasks
    assert "ansible.builtin.pip" not in again.hosts[ROUTER].actions
    assert workers() == {url: True for url in WORKERS.values()}


def test_check_mode_says_what_would_restart_and_touches_neither_router_nor_server():
    before = {node: server_starts(node) for node in SERVERS}
    run = run_playbook(ROOT / "playbooks/server.yml", INVENTORY, check=True, diff=True,
                       extravars={"sglang_server_env": {"LAB_ROLLOUT": "check"}})
    assert run.rc == 0, run.failure_summary
    assert all("The server is out of every router before it restarts, under a drain lease" in run.hosts[h].changed_tasks for h in WORKERS)
    assert "The ranks >= 1 of a multi-node group stop first" in run.hosts["rt-gpu-3"].changed_tasks
    assert workers() == {url: True for url in WORKERS.values()}
    assert {node: server_starts(node) for node in SERVERS} == before


def http_code(url, key):
    """What a server or the router answers a chat request sent with `key`, asked from the router's node
    (the router 0.3.2 lets /v1/models by without its key; a chat it asks the key of)."""
    chat = json.dumps({"model": "/models/nvidia/Kimi-K2.5-NVFP4", "max_tokens": 4,
                       "messages": [{"role": "user", "content": "What is 17 + 25?"}]})
    return sh(ROUTER, "curl -s -o /dev/null -m 30 -w '%%{http_code}' -H 'Authorization: Bearer %s' "
                      "-H 'Content-Type: application/json' -d '%s' %s/v1/chat/completions" % (key, chat, url)).stdout


def test_a_key_rotation_killed_after_its_plan_is_finished_by_a_rerun_under_load_then_moves_the_router(capsys, tmp_path):
    """site.yml -e sglang_server_api_key=<key two>, as the operations runbook says, its first run SIGKILLed
    as soon as the plan has run on every host. The rerun's server stage restarts each server with key two,
    behind the floor, drained, the group as one; the router, still on key one (its key file, read on its
    host), takes each back with key two of its own. Then the router stage restarts the router with key
    two, and its clients move to it."""
    before = {node: server_starts(node) for node in SERVERS}
    env_files = {node: sh(node, "sha256sum %s" % ENV_FILE).stdout for node in SERVERS}
    # Killed once the plan has run on every host: the play that plans the rollout has begun, no server has
    # been drained. The plan wrote what no running server reads (the root-only key file for local clients).
    process, log = controller(tmp_path, "killed-after-the-plan", "playbooks/server.yml", ROTATED)
    try:
        deadline = time.monotonic() + 300
        while (time.monotonic() < deadline and process.poll() is None
               and "PLAY [The rollout is planned" not in log.read_text()):
            time.sleep(0.1)
        assert process.poll() is None, log.read_text()[-3000:]
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        kill(process)
    planned = log.read_text()
    assert all(sh(node, "sha256sum %s" % ENV_FILE).stdout != env_files[node] for node in SERVERS), planned[-3000:]
    assert {node: server_starts(node) for node in SERVERS} == before
    assert workers() == {url: True for url in WORKERS.values()}
    assert {url: http_code(url, KEY) for url in WORKERS.values()} == {url: "200" for url in WORKERS.values()}
    say(capsys, "key rotation: the controller SIGKILLed as the rollout was planned: every host's key file for "
        "local clients holds key two, every server still runs with key one, no server restarted")

    # The rerun, under load through the router: the plan finds each server's --config file unlike the key
    # asked for, and restarts exactly those servers.
    began = time.time()
    load = Load("rotation")
    run = run_playbook(ROOT / "playbooks/server.yml", INVENTORY, extravars=ROTATED)
    summary = load.finish()
    assert run.rc == 0, run.failure_summary
    lists = [set(urls) for _, urls in summary["worker_lists"]]
    most_out = max(sum(1 for url in WORKERS.values() if url not in seen) for seen in lists)
    say(capsys, "key rotation, servers: a rolling restart of 3 nodes under load through the router: %d requests at "
        "concurrency %d in %.0f s, %d answered right, %d failed; the worker list, read 4 times a second, changed "
        "%d times, at most %d of %d workers out; lists seen: %s"
        % (summary["sent"], summary["concurrency"], summary["seconds"], summary["ok"], summary["failed"], len(lists),
           most_out, len(WORKERS), [(t, [u.rsplit(".", 1)[-1] for u in urls]) for t, urls in summary["worker_lists"]]))
    assert summary["failed"] == 0, summary["errors"]
    assert summary["sent"] >= 100 and summary["ok"] == summary["sent"]
    said = {host: [res.get("msg", "") for name, res in result.results
                   if name == "A key the server does not run with yet is said (never the key)"]
            for host, result in run.hosts.items()}
    assert all(said[node] and "the server restarts with the new key" in said[node][0] for node in SERVERS), said
    # The floor (fleet_min_in_service 75% of 2 units: 1 stays in): never more than one worker out.
    assert most_out == 1, summary["worker_lists"]
    # Every node restarted exactly once, for its key alone (nothing else changed), and both workers are back.
    assert {node: server_starts(node) - before[node] for node in SERVERS} == {node: 1 for node in SERVERS}
    assert workers() == {url: True for url in WORKERS.values()}
    for url in WORKERS.values():
        assert any(url not in seen for seen in lists), url
    assert RANK1_URL not in summary["workers_seen"]  # rank 1 never registered
    # Drained first, with the key each server ran with: every stop found nothing in flight.
    for node in WORKERS:
        stops = [what for when, what in server_events(node) if when >= began and "request(s) in flight" in what]
        assert stops and all("with 0 request(s) in flight" in s for s in stops), (node, stops)
    def first(node, word):
        return min(when for when, what in server_events(node) if when >= began and word in what)
    assert first("rt-gpu-3", "Stopped") <= first("rt-gpu-2", "Stopped")
    assert first("rt-gpu-1", "start") < first("rt-gpu-3", "Stopped")
    said = [res.get("msg", "") for name, res in run.hosts["localhost"].results if name == "Multi-node groups restart as one"]
    assert said and "rt_tp_group: ranks rt-gpu-2, rt-gpu-3 in one batch" in said[0]
    assert "rank 1 of rt_tp_group, gated through rt-gpu-2: healthy" in report(run)
    # The servers answer key two only; the router still asks its clients for key one.
    assert {url: (http_code(url, KEY_TWO), http_code(url, KEY)) for url in WORKERS.values()} == {
        url: ("200", "401") for url in WORKERS.values()}
    assert (http_code(ROUTER_URL, KEY), http_code(ROUTER_URL, KEY_TWO)) == ("200", "401")

    # The router stage: its key file, then its restart; its clients move to key two.
    load = Load("rotation-router")
    moved = run_playbook(ROOT / "playbooks/router.yml", INVENTORY, extravars=ROTATED)
    summary = load.finish()
    assert moved.rc == 0, moved.failure_summary
    restarted = [res for name, res in moved.hosts[ROUTER].results
                 if name.startswith("The router restarts with its new unit, key, launcher or install")]
    say(capsys, "key rotation, router: restarted with key two under load: %d requests in %.0f s, %d answered right "
        "(%d of them sent again with key two after key one's 401), %d failed, between %s s: %s; the restart: %s"
        % (summary["sent"], summary["seconds"], summary["ok"], summary["rekeyed"], summary["failed"],
           summary.get("failed_between"), summary["errors"][:2], restarted[0].get("msg") if restarted else None))
    assert (http_code(ROUTER_URL, KEY_TWO), http_code(ROUTER_URL, KEY)) == ("200", "401")
    assert workers() == {url: True for url in WORKERS.values()} and "42" in ask_through_router()
    # The restart held the router's new connections until the new router listed both workers healthy, and
    # the old router finished the requests in flight: no connect refused, no request cut, none refused
    # for its key (its client reads key two on key one's 401), no wrong answer.
    assert restarted and restarted[0]["held"] and restarted[0]["ready"], restarted
    assert sorted(restarted[0]["workers"]) == sorted(WORKERS.values())
    assert summary["failed"] == 0, summary["errors"]
    assert summary["sent"] >= 100 and summary["ok"] == summary["sent"] and summary["rekeyed"] >= 1
    # Neither key, in any encoding, is in the runs' results and facts, the report, or any node's command
    # lines, units and journal.
    for secret in (KEY, KEY_TWO):
        for done in (run, moved):
            assert not leaks(json.dumps(done.events), secret) and not leaks(report(done), secret)
            assert not leaks(json.dumps([h.facts for h in done.hosts.values()]), secret)
        for node in SERVERS + [ROUTER]:
            assert not leaks(sh(node, "ps -eo args; cat /etc/systemd/system/*.service; "
                                      "journalctl --no-pager -o cat").stdout, secret), (node, secret)
    # A rerun with the same settings takes nobody out and restarts nothing.
    again = run_playbook(ROOT / "site.yml", INVENTORY, tags="server,router", extravars=ROTATED)
    assert again.rc == 0 and again.changed == 0, {h: r.changed_tasks for h, r in again.hosts.items()}


def test_a_failed_gate_keeps_its_host_out_of_the_router_and_stops_the_rollout(capsys):
    # Release 3: rt-gpu-1 is first in line and its server crashes on start; the group is next.
    sh("rt-gpu-1", "echo '{\"mode\": \"crash\"}' > /etc/lab-gpu/server-3.json")
    for node in ("rt-gpu-2", "rt-gpu-3"):
        sh(node, "cp /etc/lab-gpu/server.json /etc/lab-gpu/server-3.json")
    release = dict(SHORT_WAITS, sglang_server_env={"LAB_ROLLOUT": "3", "LAB_SERVER_CONFIG": "/etc/lab-gpu/server-3.json"})
    group_units = {node: sh(node, "sha256sum /etc/systemd/system/sglang.service").stdout for node in ("rt-gpu-2", "rt-gpu-3")}
    group_starts = {node: server_starts(node) for node in ("rt-gpu-2", "rt-gpu-3")}
    load = Load("failed-gate")
    run = run_playbook(ROOT / "playbooks/server.yml", INVENTORY, extravars=release)
    summary = load.finish()
    say(capsys, "failed gate on rt-gpu-1 under load: %d requests in %.0f s, %d failed; workers at the end: %s"
        % (summary["sent"], summary["seconds"], summary["failed"], sorted(workers())))
    assert run.rc != 0
    failures = run.hosts["rt-gpu-1"].failures
    assert failures and "health gate" in failures[-1]["msg"] and "crash" in failures[-1]["msg"]
    assert summary["failed"] == 0, summary["errors"]
    # rt-gpu-1 stays out; the group, never reached, serves on, through the router.
    assert workers() == {WORKERS["rt-gpu-2"]: True}
    assert "42" in ask_through_router()
    assert {node: sh(node, "sha256sum /etc/systemd/system/sglang.service").stdout for node in group_units} == group_units
    assert {node: server_starts(node) for node in group_starts} == group_starts

    # Its drain lease is marked failed, and the report, in a check run, says so and until when.
    failed = lease("rt-gpu-1")
    assert failed and failed["state"] == "failed" and failed["worker"] == WORKERS["rt-gpu-1"], failed
    check = run_playbook(ROOT / "site.yml", INVENTORY, tags="server,router", check=True, extravars=release)
    text = report(check)
    say(capsys, text)
    assert ("i rt-router: worker %s (rt-gpu-1) out: failed its gate in run %s (rt-gpu-1); lease until %s, not healed"
            % (WORKERS["rt-gpu-1"], failed["run"], failed["until_utc"])) in text
    assert "i rt-gpu-1: rt-router: out: failed its gate" in text and "this run would put it back" in text
    assert "router worker rt_tp_group" not in text  # not asked in check mode: no guess that it is out
    assert lease("rt-gpu-1") == failed and workers() == {WORKERS["rt-gpu-2"]: True}
    # Healthy again by hand, past the lease and a healer period: the healer leaves it out all the same
    # (a failed gate is the operator's to decide).
    sh("rt-gpu-1", "cp /etc/lab-gpu/server.json /etc/lab-gpu/server-3.json; systemctl reset-failed sglang; "
                   "systemctl restart sglang")
    sh(ROUTER, "for i in $(seq 60); do curl -sf -m 2 -H \"Authorization: Bearer $(cat %s)\" %s/health && exit 0; "
               "sleep 0.5; done; exit 1" % (KEY_FILE, WORKERS["rt-gpu-1"]))
    time.sleep(max(0.0, failed["until"] + 2 * HEALER_PERIOD + 2 - time.time()))
    assert workers() == {WORKERS["rt-gpu-2"]: True}
    assert lease("rt-gpu-1")["state"] == "failed"
    assert WORKERS["rt-gpu-1"] not in healer_lines(failed["since"])
    say(capsys, "failed gate: rt-gpu-1 healthy again by hand, %.0f s past its failed lease's end: still out"
        % (time.time() - failed["until"]))

    # Fixed: the same release with rt-gpu-1's server healthy again; the router stage runs too. The
    # host comes back into the router, the group rolls to release 3, and the report shows the router.
    sh("rt-gpu-1", "cp /etc/lab-gpu/server.json /etc/lab-gpu/server-3.json")
    fixed = run_playbook(ROOT / "site.yml", INVENTORY, tags="server,router", extravars=release)
    assert fixed.rc == 0, fixed.failure_summary
    assert workers() == {url: True for url in WORKERS.values()}
    assert lease("rt-gpu-1") is None  # put back: the lease is gone
    text = report(fixed)
    say(capsys, text)
    assert "healthy, 2/2 workers in, known answer right" in text
    assert "rt_tp_group (rt-gpu-2, rt-gpu-3)" in text


# The fault of issue 26: the controller dies (SIGKILL, as a dropped SSH session or a closed laptop)
# while rt-gpu-1 is out of the router for its restart. Its server comes up on its own; the drain lease
# the stage left on the router's host runs out and the healer puts it back: no rerun.
KILL_RELEASE = dict(SHORT_WAITS, sglang_server_env={"LAB_ROLLOUT": "kill", "LAB_SERVER_CONFIG": "/etc/lab-gpu/server-kill.json"})
KILL_LIMIT = "localhost,rt-gpu-1"


def test_a_killed_rollout_s_worker_comes_back_by_itself_under_load(capsys, tmp_path):
    # rt-gpu-1 loads its model for 8 s: the controller dies during its gate, after the restart.
    sh("rt-gpu-1", "python3 -c 'import json; c = json.load(open(\"/etc/lab-gpu/server.json\")); "
                   "c[\"startup_seconds\"] = 8; json.dump(c, open(\"/etc/lab-gpu/server-kill.json\", \"w\"))'")
    starts_before = server_starts("rt-gpu-1")
    began = time.time()
    load = Load("killed")
    process, log = controller(tmp_path, "killed-run", "playbooks/server.yml", KILL_RELEASE, limit=KILL_LIMIT)
    try:
        # The moment: rt-gpu-1 is out of the router under its lease, and its server has restarted.
        deadline, taken = time.monotonic() + 180, None
        while time.monotonic() < deadline and process.poll() is None:
            taken = lease("rt-gpu-1")
            if taken and WORKERS["rt-gpu-1"] not in workers() and server_starts("rt-gpu-1") > starts_before:
                break
            time.sleep(0.2)
        assert process.poll() is None and taken, (taken, log.read_text()[-3000:])
        os.killpg(process.pid, signal.SIGKILL)
        killed_at = time.time()
    finally:
        kill(process)
    assert taken["state"] == "draining" and taken["host"] == "rt-gpu-1" and taken["seconds"] == 30, taken
    assert taken["run"].endswith("Z") and "@" in taken["run"], taken  # user@controller and the run's start
    # The load loop runs on; the worker comes back by itself within the lease and one healer period.
    back, healthy = None, None
    while time.time() < taken["until"] + HEALER_PERIOD + 30:
        listed = workers()
        if back is None and WORKERS["rt-gpu-1"] in listed:
            back = time.time()
        if listed.get(WORKERS["rt-gpu-1"]):
            healthy = time.time()
            break
        time.sleep(0.25)
    summary = load.finish()
    said = healer_lines(began)
    say(capsys, "controller SIGKILLed %.1f s into a %d s lease (run %s); rt-gpu-1 back in the router %.1f s after "
        "the lease's end (healthy there %.1f s after), without a rerun; load through the router: %d requests, "
        "%d failed; the healer said: %s"
        % (killed_at - taken["since"], taken["seconds"], taken["run"], (back or float("nan")) - taken["until"],
           (healthy or float("nan")) - taken["until"], summary["sent"], summary["failed"], said.strip()))
    # Within the lease and one healer period, plus the pass's own work: /health, the known answer, the
    # router's add (about 1 s in the lab).
    assert back is not None and back <= taken["until"] + HEALER_PERIOD + 5, (back, taken, said)
    assert healthy is not None, said
    assert summary["failed"] == 0, summary["errors"]
    assert summary["sent"] >= 100 and summary["ok"] == summary["sent"]
    heals = [line for line in said.splitlines() if line.startswith("sglang-router-healer: put %s back" % WORKERS["rt-gpu-1"])]
    assert len(heals) == 1, said
    assert lease("rt-gpu-1") is None
    assert server_starts("rt-gpu-1") == starts_before + 1  # restarted by the killed run, never again


def test_a_rerun_after_the_heal_changes_nothing():
    again = run_playbook(ROOT / "playbooks/server.yml", INVENTORY, limit=KILL_LIMIT, extravars=KILL_RELEASE)
    assert again.rc == 0, again.failure_summary
    assert again.changed == 0, {h: r.changed_tasks for h, r in again.hosts.items()}
    assert workers() == {url: True for url in WORKERS.values()}
    assert lease("rt-gpu-1") is None
