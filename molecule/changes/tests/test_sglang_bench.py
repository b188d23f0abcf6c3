"""verify and bench in the lab: two nodes, the second slower; the A/B, the restore, the report."""
import hashlib
import json
import os
import struct
import subprocess
import sys

import pytest

import bench_report
import fleet
from conftest import INVENTORY, NODES, ROOT, UNIT, nodes
from fleet import run_playbook
from leak_scan import leaks

SECRETS = ["lab-secret-%s-4f9c" % n for n in NODES]
FUSION_RECORD = "/etc/ansible/facts.d/sglang_server_fusion.fact"  # the server stage's decision, which verify reads
CONCURRENCIES = [1, 8]
testinfra_hosts = ["podman://" + NODES[0]]


def unit_digests(host):
    return [hashlib.sha256(node.file(UNIT).content).hexdigest() for node in nodes(host)]


def fusion_records(host):
    """Each node's fusion record and when it was last written (fleet_record writes only on a change)."""
    return [(node.file(FUSION_RECORD).content_string, node.file(FUSION_RECORD).mtime) for node in nodes(host)]


def test_verify_reads_the_server_s_own_configuration_and_changes_nothing():
    run = run_playbook(ROOT / "site.yml", INVENTORY, tags="verify")
    assert run.rc == 0 and run.changed == 0, run.hosts
    for name in NODES:
        assert run.hosts[name].facts["sglang_verify_status"] == (
            "verified: EAGLE3, tp 8, allreduce fusion on, sglang lab")


def test_verify_names_what_differs_from_the_inventory():
    run = run_playbook(ROOT / "site.yml", INVENTORY, tags="verify",
                       extravars={"sglang_server_allreduce_fusion": "off"})
    assert run.rc != 0 and run.changed == 0
    for name in NODES:
        assert "enable_flashinfer_allreduce_fusion: asked for false, the server runs true" in \
            run.hosts[name].failures[0]["msg"]


@pytest.fixture(scope="module")
def ab_run(host, tmp_path_factory):
    """One verify + bench + A/B over both nodes, through the report tool (ansible-runner), at the
    two concurrencies where the lab's speed model puts the verdicts (a third costs 80 s of CI)."""
    before = unit_digests(host), fusion_records(host)
    out = tmp_path_factory.mktemp("bench-report")
    report, run = bench_report.run([INVENTORY], ab=True, extravars={"sglang_bench_concurrencies": CONCURRENCIES,
                                                                     "sglang_bench_fusion_ab": True}, out=out)
    return before, out, report, run


def test_the_a_b_runs_both_variants_at_every_concurrency(ab_run):
    _, _, report, run = ab_run
    assert run.rc == 0, run.hosts
    for name in NODES:
        results = report["hosts"][name]["results"]
        assert sorted((r["variant"], r["concurrency"]) for r in results) == sorted(
            (v, c) for v in ("baseline", "eagle3", "eagle3-fusion-ab") for c in CONCURRENCIES)
        assert all(r["completed"] > 0 and r["output_throughput"] > 0 for r in results)
        assert {(r["variant"], r["fusion"]) for r in results} == {
            ("baseline", True), ("eagle3", True), ("eagle3-fusion-ab", False)}
        # The accept length comes from the server, and only a speculative server has one; with the
        # capture patched, fusion costs none of it.
        assert {r["accept_length"] for r in results if r["variant"] != "baseline"} == {2.65}
        fusion_ab = report["hosts"][name]["fusion_ab"]
        assert [row["concurrency"] for row in fusion_ab] == CONCURRENCIES
        assert not any(row["flagged"] for row in fusion_ab) and run.hosts[name].facts["sglang_bench_fusion_flags"] == []
        assert {r["accept_length"] for r in results if r["variant"] == "baseline"} == {None}
        ab = {row["concurrency"]: row for row in report["hosts"][name]["ab"]}
        assert sorted(ab) == CONCURRENCIES
        # The lab's speed model: EAGLE-3 wins a single stream by about a quarter (+24 % on a quiet
        # machine, +40.3 % once with two other lab fleets on the same two CPUs), loses at 8.
        assert ab[1]["winner"] == "eagle3" and 10 < ab[1]["eagle3_gain_percent"] < 50
        assert ab[8]["winner"] == "baseline"


def test_the_slower_host_is_flagged_and_its_peer_is_not(ab_run):
    _, _, report, _ = ab_run
    assert report["hosts"][NODES[0]]["slow"] == []
    slow = report["hosts"][NODES[1]]["slow"]
    assert {(x["variant"], x["concurrency"]) for x in slow} >= {("baseline", 1), ("eagle3", 1)}
    assert all(x["below_median_percent"] > 10 for x in slow)


def test_both_nodes_end_on_their_original_unit_and_serve(host, ab_run):
    (units, records), _, _, _ = ab_run
    assert unit_digests(host) == units
    # The toggled units were measurements, never the server stage's decision: its record was not
    # rewritten, not even for the time of the fusion A/B (a run that dies there leaves it right).
    assert fusion_records(host) == records
    for node in nodes(host):
        assert node.service("sglang").is_running
        assert "--speculative-algorithm EAGLE3" in node.file(UNIT).content_string
        assert "--enable-flashinfer-allreduce-fusion" in node.file(UNIT).content_string


def test_the_report_validates_and_keeps_no_secret(ab_run):
    _, out, report, run = ab_run
    saved = json.loads((out / "report.json").read_text())
    bench_report.validate(saved)
    assert saved["simulated"] is True and saved == report
    assert "Lab numbers are simulated" in (out / "report.md").read_text()
    # In any encoding: bench_serving's result file holds the server's /get_server_info, keys and all, and
    # a file read back from a host travels base64-encoded (tools/leak_scan.py).
    for path in out.iterdir():
        assert not any(leaks(path.read_bytes().decode(errors="replace"), secret) for secret in SECRETS), path
    assert not any(leaks(json.dumps([h.facts for h in run.hosts.values()]), secret) for secret in SECRETS)
    assert run.events and not any(leaks(json.dumps(run.events), secret) for secret in SECRETS)


def test_the_plot_is_a_real_picture(ab_run):
    _, out, _, _ = ab_run
    data = (out / "report.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 600 and height >= 400


def test_a_failed_a_b_still_puts_the_original_unit_back(host, ab_run):
    before, records = unit_digests(host), fusion_records(host)
    node = nodes(host)[0]
    # The toggled server takes 30 s to load and the gate waits 5: the A/B fails after the toggle.
    node.check_output("printf '%s' '{\"mode\": \"healthy\", \"startup_seconds\": 30, \"tokens_per_second\": 40}' "
                      "> /etc/lab-gpu/server.json")
    try:
        run = run_playbook(ROOT / "site.yml", INVENTORY, tags="bench", limit=NODES[0],
                           extravars={"sglang_bench_ab": "true", "sglang_bench_concurrencies": [1],
                                      "sglang_server_health_timeout": "5"})  # as -e gives them: strings
        assert run.rc != 0
        failed = [f["task"] for f in run.hosts[NODES[0]].failures]
        assert failed and all("health gate" in task for task in failed), failed
    finally:
        node.check_output("printf '%s' '{\"mode\": \"healthy\", \"startup_seconds\": 1, \"tokens_per_second\": 40}' "
                          "> /etc/lab-gpu/server.json && systemctl restart sglang")
    assert unit_digests(host) == before and fusion_records(host) == records
    assert run_playbook(ROOT / "site.yml", INVENTORY, tags="verify").rc == 0


def test_a_poll_that_would_leave_a_run_unwatched_fails_before_anything_runs(host):
    run = run_playbook(ROOT / "site.yml", INVENTORY, tags="bench", limit=NODES[0],
                       extravars={"sglang_bench_poll_seconds": "0"})
    assert run.rc != 0 and run.changed == 0
    (failure,) = run.hosts[NODES[0]].failures
    assert failure["task"] == "The bench's timing settings can work"
    assert failure["msg"].startswith("sglang_bench_poll_seconds must be at least 1"), failure["msg"]

def test_the_key_reaches_bench_serving_but_no_command_line_output_event_or_report(host, tmp_path):
    """At -vvv Ansible prints each module's arguments, its result and the remote command it runs (a task's
    environment: is part of that command); the --json report holds every task's result: the key must be in
    none of them, in any encoding, and the bench still authenticates. The hosts keep no copy either."""
    out = subprocess.run([sys.executable, str(ROOT / "tools/fleet.py"), "-i", INVENTORY, "--json", str(tmp_path / "r.json"),
                          str(ROOT / "site.yml"), "--tags", "bench", "--limit", NODES[0], "-vvv",
                          "-e", '{"sglang_bench_concurrencies": [1]}'],
                         capture_output=True, text=True, env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")))
    assert out.returncode == 0, out.stdout[-3000:]
    for text in (out.stdout + out.stderr, (tmp_path / "r.json").read_text()):
        assert not any(leaks(text, secret) for secret in SECRETS), [leaks(text, s) for s in SECRETS]
    assert "%s eagle3 concurrency 1:" % NODES[0] in out.stdout  # bench_serving was let in with the key
    kept = nodes(host)[0].run("grep -rl %s /var/lib/sglang-fleet/bench" % SECRETS[0])
    assert kept.stdout == "", kept.stdout  # bench_serving's own file was cut on the host


def test_an_unpatched_capture_serves_without_fusion_and_the_fusion_a_b_flags_what_it_costs(host):
    """sglang 0.5.9 unpatched: the server stage keeps fusion off (EAGLE-3 at tp 8 would draft from
    partial sums); the fusion A/B turns it on to measure, and the lab server, like the real defect,
    accepts fewer drafts. The patch back on: fusion on again, nothing lost (the A/B above)."""
    node = nodes(host)[0]
    before = node.file(UNIT).content_string
    unpatched = {"sglang_patches_eagle3_fused_capture": False}
    try:
        run = run_playbook(ROOT / "site.yml", INVENTORY, tags="patches,server,verify", limit=NODES[0],
                           extravars=unpatched)
        assert run.rc == 0, run.failure_summary
        fusion = run.hosts[NODES[0]].facts["sglang_server_fusion"]
        assert (fusion["enabled"], fusion["cause"]) == (False, "capture")
        assert "eagle3_fused_allreduce_capture: apply" in fusion["reason"]
        assert "--enable-flashinfer-allreduce-fusion" not in node.file(UNIT).content_string
        report = fleet.report(run)
        assert "off (EAGLE-3 capture unpatched)  2.65" in report
        bench = run_playbook(ROOT / "site.yml", INVENTORY, tags="bench", limit=NODES[0],
                             extravars=dict(unpatched, sglang_bench_fusion_ab=True, sglang_bench_concurrencies=[1]))
        assert bench.rc == 0, bench.failure_summary
        flags = bench.hosts[NODES[0]].facts["sglang_bench_fusion_flags"]
        assert [(f["concurrency"], f["fused_accept_length"], f["unfused_accept_length"]) for f in flags] == \
            [(1, 1.6, 2.65)]
        assert ("! %s: EAGLE-3 accepts fewer tokens with allreduce fusion: 1.60 fused vs 2.65 unfused at concurrency "
                "1 (39.6%% lower, tolerance 5%%)" % NODES[0]) in fleet.report(bench)
        assert "--enable-flashinfer-allreduce-fusion" not in node.file(UNIT).content_string  # put back
    finally:
        run = run_playbook(ROOT / "site.yml", INVENTORY, tags="patches,server,verify", limit=NODES[0])
    assert run.rc == 0, run.failure_summary
    assert run.hosts[NODES[0]].facts["sglang_server_fusion"]["enabled"] is True
    assert node.file(UNIT).content_string == before
