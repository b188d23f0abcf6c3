"""The fleet report a user reads at the end of bin/lab."""
from fleet import HostResult, PlaybookRun, failure_message, report

FACTS = {"gpu_preflight_gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                 "compute_capability": "12.0"}] * 8,
         "gpu_preflight_cuda_archs": "120", "gpu_preflight_driver_version": "580.95.05",
         "cuda_toolkit_version": "13.0.88",
         "sglang_patches_report": {"sglang_version": "0.5.9", "patches": [{"status": "applied"}] * 4
                                   + [{"status": "upstream"}]},
         "flash_attn_action": "installed from cache", "flash_attn_version_installed": "2.8.3+build.ddabe0ba14fe",
         "sglang_server_state": {"gate": "passed", "waited": 41.2, "rank0": "gpu-1"},
         "sglang_model_report": [{"repo_id": "nvidia/Kimi-K2.5-NVFP4", "state": "verified", "problems": {}},
                                 {"repo_id": "lightseekorg/kimi-k2.5-eagle3", "state": "verified", "problems": {}}],
         "sglang_server_fusion": {"enabled": True, "switch": "auto", "selftest": "pass", "speedup": 1.43,
                                  "cause": "faster", "reason": "self-test pass, 1.43x faster at decode"},
         "sglang_verify_accept_length": 2.65, "gpu_acceptance_passed": True, "gpu_acceptance_burned": True,
         "gpu_acceptance_failures": []}


def test_one_line_per_host_with_what_the_roles_found_and_the_failures_named():
    run = PlaybookRun("site.yml", ["inventory/lab"], "failed", 2, {
        "gpu-1": HostResult(ok=54, facts=FACTS),
        "gpu-2": HostResult(ok=4, failed=1, failures=[{"task": "The host fits the fleet profile",
                                                       "msg": "gpu-2 does not fit the GPU profile: GPU count"}])})
    lines = report(run).splitlines()
    assert lines[1] == "Fleet report: site.yml, 2 host(s), failed"
    assert lines[2].split() == ["HOST", "OK", "CHANGED", "FAILED", "GPUS", "ARCHS", "DRIVER", "CUDA", "SGLANG",
                                "FLASH-ATTN", "PATCHES", "MODELS", "GPU-ACCEPTANCE", "FUSION", "ACCEPT", "SERVER"]
    assert "8x NVIDIA RTX PRO 6000 Blackwell Server Edition (cc 12.0)  120    580.95.05  13.0.88  0.5.9" in lines[3]
    assert "0.5.9   2.8.3 installed from cache  4 applied" in lines[3]
    assert ("4 applied, 1 upstream  verified 2  pass (measured now)  on (self-test pass, 1.43x)  2.65    healthy, known "
            "answer right (41.2s)" in lines[3])
    assert lines[4].split()[:4] == ["gpu-2", "4", "0", "1"]
    assert lines[5] == "  ! gpu-2: The host fits the fleet profile: gpu-2 does not fit the GPU profile: GPU count"
    assert lines[6] == "  1 host(s) ok, 1 failed; 0 change(s) in all"


def test_the_gpu_acceptance_column_says_how_the_host_was_judged_and_which_checks_failed():
    held = [{"check": "pcie_width", "message": "GPU 0 (GPU-a): pcie_width: ..."},
            {"check": "xid", "message": "GPU 3 (GPU-b): xid: ..."}, {"check": "xid", "message": "GPU 5 (GPU-c): xid: ..."}]
    run = PlaybookRun("site.yml", ["x"], "failed", 2, {
        "gpu-1": HostResult(ok=80, facts=dict(FACTS, gpu_acceptance_burned=False)),
        "gpu-2": HostResult(ok=20, failed=1, facts=dict(FACTS, gpu_acceptance_passed=False, gpu_acceptance_failures=held)),
        "gpu-3": HostResult(ok=80, facts={k: v for k, v in FACTS.items() if not k.startswith("gpu_acceptance_")})})
    lines = report(run).splitlines()
    column = lines[2].index("GPU-ACCEPTANCE")
    assert [line[column:].split("  ")[0] for line in lines[3:6]] == ["pass (record)", "FAIL: pcie_width, xid", "-"]


def test_a_run_that_reached_no_host_says_so():
    text = report(PlaybookRun("site.yml", ["x"], "failed", 4, {}))
    assert "ended (rc=4) before any host ran" in text


def test_the_verify_stage_s_finding_replaces_the_health_gate_s():
    facts = dict(FACTS, sglang_verify_status="verified: EAGLE3, tp 8, allreduce fusion on, sglang 0.5.9")
    text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {"gpu-1": HostResult(ok=80, facts=facts)}))
    assert text.splitlines()[3].endswith("on (self-test pass, 1.43x)  2.65    verified: EAGLE3, tp 8, allreduce fusion "
                                         "on, sglang 0.5.9")


def test_a_host_serving_without_fusion_says_why():
    fusion = {"enabled": False, "switch": "auto", "selftest": "fail",
              "reason": "self-test fail: fused result differs from NCCL all-reduce + add + RMSNorm: max error 0.75"}
    text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {
        "gpu-1": HostResult(ok=80, facts=dict(FACTS, sglang_server_fusion=fusion)),
        "gpu-2": HostResult(ok=80, facts=dict(FACTS, sglang_server_fusion=dict(fusion, switch="off", reason="off")))}))
    lines = text.splitlines()
    assert "off: self-test fail" in lines[3] and "off (switched off)" in lines[4]
    assert lines[5] == ("  i gpu-1: serves without allreduce fusion: self-test fail: fused result differs from NCCL "
                        "all-reduce + add + RMSNorm: max error 0.75")


def test_every_reason_to_serve_without_fusion_has_its_words_and_the_measured_speedup():
    cases = {"slower": ({"selftest": "pass", "speedup": 1.02}, "off (self-test pass, not faster: 1.02x)"),
             "capture": ({"selftest": "pass", "speedup": 1.4}, "off (EAGLE-3 capture unpatched)"),
             "no-timings": ({"selftest": "pass", "speedup": None}, "off (self-test pass, no decode timings)")}
    for cause, (fields, words) in cases.items():
        fusion = dict(fields, enabled=False, switch="auto", cause=cause, reason="the filter's sentence")
        text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {
            "gpu-1": HostResult(ok=80, facts=dict(FACTS, sglang_server_fusion=fusion))}))
        assert words in text.splitlines()[3], cause
        assert "  i gpu-1: serves without allreduce fusion: the filter's sentence" in text


def test_a_fusion_a_b_that_lost_accept_length_is_flagged():
    flags = [{"concurrency": 1, "fused_accept_length": 1.6, "unfused_accept_length": 2.65, "accept_drop_percent": 39.6,
              "tolerance_percent": 5}]
    text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {
        "gpu-1": HostResult(ok=80, facts=dict(FACTS, sglang_bench_fusion_flags=flags))}))
    assert ("  ! gpu-1: EAGLE-3 accepts fewer tokens with allreduce fusion: 1.60 fused vs 2.65 unfused at "
            "concurrency 1 (39.6% lower, tolerance 5%)") in text


def test_a_repaired_model_file_is_named_with_where_it_came_from():
    models = [{"repo_id": "nvidia/Kimi-K2.5-NVFP4", "state": "repaired", "from": "gpu-1",
               "problems": {"model-00007-of-00119.safetensors": "sha256 mismatch"}},
              {"repo_id": "lightseekorg/kimi-k2.5-eagle3", "state": "verified", "problems": {}}]
    text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {
        "gpu-2": HostResult(ok=80, changed=3, facts=dict(FACTS, sglang_model_report=models))}))
    lines = text.splitlines()
    assert "repaired 1, verified 1" in lines[3]
    assert lines[4] == ("  i gpu-2: nvidia/Kimi-K2.5-NVFP4: model-00007-of-00119.safetensors was sha256 mismatch; "
                        "fetched again from gpu-1")


def test_a_rolled_back_host_names_the_install_it_serves_and_says_the_gate_s_finding_once():
    gate = "sglang failed its health gate: /health did not answer 200 within 15s"
    facts = dict(FACTS, sglang_install_id="0.5.9-9559f4d77ef0", sglang_server_state={
        "gate": "rolled-back", "serving": "0.5.9-39c3fe05c641", "serving_passes": True, "rank0": "gpu-1"})
    text = report(PlaybookRun("site.yml", ["x"], "failed", 2, {"gpu-1": HostResult(ok=80, failed=1, facts=facts, failures=[
        {"task": "The server passes its health gate", "msg": gate},
        {"task": "The host fails, saying what failed and what serves now",
         "msg": "gpu-1: install 0.5.9-9559f4d77ef0 failed its health gate and was rolled back: serving the previous "
                "install, 0.5.9-39c3fe05c641, again. The new install's failure: " + gate}])}))
    lines = text.splitlines()
    assert "13.0.88  0.5.9-9559f4d77ef0  2.8.3" in lines[3] and lines[3].endswith("rolled back to 0.5.9-39c3fe05c641")
    assert [line for line in lines if line.startswith("  !")] == [
        "  ! gpu-1: The host fails, saying what failed and what serves now: gpu-1: install 0.5.9-9559f4d77ef0 failed "
        "its health gate and was rolled back: serving the previous install, 0.5.9-39c3fe05c641, again. The new "
        "install's failure: " + gate]


def test_the_router_its_workers_and_a_multi_node_group_as_one_server():
    group = {"name": "tp_a", "ranks": ["gpu-2", "gpu-3"]}
    run = PlaybookRun("site.yml", ["inventory/lab"], "successful", 0, {
        "gpu-1": HostResult(ok=40, facts={"sglang_server_state": {"gate": "passed", "waited": 2.1, "rank0": "gpu-1"}}),
        "gpu-2": HostResult(ok=40, facts={"sglang_server_state": {"gate": "passed", "waited": 2.1, "rank0": "gpu-2"},
                                          "sglang_server_group": dict(group, rank=0)}),
        "gpu-3": HostResult(ok=40, facts={"sglang_server_state": {"gate": "passed", "waited": 2.1, "rank0": "gpu-2"},
                                          "sglang_server_group": dict(group, rank=1)}),
        "localhost": HostResult(ok=2),  # the rollout plan: no row, not counted
        "router-1": HostResult(ok=16, facts={
            "sglang_router_state": {"checked": True, "healthy_workers": 1, "workers": 2, "waited": 0.1},
            "sglang_router_workers": [
                {"unit": "gpu-1", "ranks": ["gpu-1"], "url": "http://10.0.0.1:30000", "in": False, "healthy": False},
                {"unit": "tp_a", "ranks": ["gpu-2", "gpu-3"], "url": "http://10.0.0.2:30000", "in": True,
                 "healthy": True}]})})
    text = report(run)
    assert "Fleet report: site.yml, 4 host(s), successful" in text and "localhost" not in text
    assert "4 host(s) ok, 0 failed" in text
    assert "  i tp_a: one server of 2 ranks, gpu-2 (rank 0), gpu-3 (rank 1)" in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  gpu-")}
    assert rows["gpu-2"].endswith("healthy, known answer right (2.1s)")
    assert rows["gpu-3"].endswith("rank 1 of tp_a, gated through gpu-2: healthy, known answer right (2.1s)")
    assert "  i router-1: router worker gpu-1 at http://10.0.0.1:30000: out" in text
    assert "  i router-1: router worker tp_a (gpu-2, gpu-3) at http://10.0.0.2:30000: in, healthy" in text
    assert [line for line in text.splitlines() if line.startswith("  router-1")][0].endswith(
        "healthy, 1/2 workers in, known answer right (0.1s)")


def test_a_host_that_failed_its_gate_says_it_is_out_of_the_router():
    run = PlaybookRun("site.yml", ["inventory/lab"], "failed", 2, {
        "gpu-1": HostResult(ok=30, failed=1, facts={"sglang_server_router_state": [
            {"router": "router-1", "state": "failed-gate"}, {"router": "router-2", "state": "failed-gate"}]}),
        "gpu-2": HostResult(ok=30, facts={"sglang_server_router_state": [
            {"router": "router-1", "state": "in"}, {"router": "router-2", "state": "would-return"}]})})
    text = report(run)
    assert ("  i gpu-1: out of router-1, router-2 (failed its gate; its drain lease is marked failed, so the "
            "healer leaves it out)") in text
    assert "i gpu-2:" not in text  # in, or back in by this run: no news


def test_a_router_checked_says_how_many_workers_are_in_and_a_check_run_says_it_checked_nothing():
    def row(state):
        text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {
            "router-1": HostResult(ok=16, facts={"sglang_router_state": state})}))
        return [line for line in text.splitlines() if line.startswith("  router-1")][0]
    assert row({"checked": True, "healthy_workers": "2", "workers": "2", "waited": "0.4"}).endswith(
        "healthy, 2/2 workers in, known answer right (0.4s)")
    assert row({"checked": False, "healthy_workers": 0, "workers": 2, "waited": 0.0}).endswith("not checked (check mode)")


def test_the_monitoring_host_names_prometheus_and_how_many_targets_are_up():
    status = {"url": "http://127.0.1.9:9090", "checked": True, "targets": [
        {"job": "sglang", "host": "gpu-1", "instance": "127.0.1.1:30000", "health": "up"},
        {"job": "node", "host": "gpu-2", "instance": "127.0.1.2:9100", "health": "down"}]}
    text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {
        "mon-1": HostResult(ok=30, facts={"fleet_monitoring_status": status})}))
    assert "  i mon-1: Prometheus http://127.0.1.9:9090: 1 of 2 targets up (down: node gpu-2)" in text


def test_a_failed_loop_is_reported_with_its_failed_item_s_reason_not_ansible_s_summary():
    # ansible-runner's runner_on_failed for the model copy's watch, a loop whose last round failed.
    why = ("the fetch of nvidia/Kimi-K2.5-NVFP4 on gpu-2 failed: it ran past its time limit and was stopped "
           "(last progress: fetching 212.4 GB of 594.9 GB (35%), model-00043-of-00119.safetensors, 1.1 GB/s, "
           "86390s elapsed)")
    res = {"failed": True, "msg": "One or more items failed", "changed": False,
           "results": [{"failed": False, "finished": False, "msg": "fetching 212.3 GB of 594.9 GB (35%)"},
                       {"failed": True, "finished": True, "msg": why}]}
    assert failure_message(res) == why
    assert failure_message({"failed": True, "msg": "gpu-2 does not fit the GPU profile: GPU count"}) == (
        "gpu-2 does not fit the GPU profile: GPU count")
    assert failure_message({"failed": True, "msg": "One or more items failed", "results": [{"failed": True}]}) == (
        "One or more items failed")


def test_the_server_s_finding_in_words_from_the_facts_the_role_sets():
    from fleet import describe_server
    assert describe_server({}) == "-"
    assert describe_server({"sglang_server_state": {"gate": "not-checked", "waited": 0.0, "rank0": "a"}}) == \
        "not checked (check mode)"
    assert describe_server({"sglang_server_state": {"gate": "rolled-back", "serving": "0.5.9-1", "serving_passes": "False",
                                                    "rank0": "a"}}) == "rolled back to 0.5.9-1, which fails its gate too"


def test_a_worker_out_under_a_drain_lease_says_whose_and_until_when():
    from ansible.module_utils import drain_lease as leases
    lease = leases.new("http://10.0.0.1:30000", "ops@ctl 2026-12-01T11:00:00Z", "gpu-1", 35, now=1000.0)
    running = dict(lease, expired=False, summary=leases.describe(lease, 1010.0))
    failed = dict(lease, worker="http://10.0.0.2:30000", host="gpu-2", state="failed", expired=True,
                  summary=leases.describe(dict(lease, state="failed"), 2000.0))
    run = PlaybookRun("site.yml", ["x"], "successful", 0, {
        "gpu-1": HostResult(ok=30, facts={"sglang_server_leases": [dict(running, router="router-1", ended=False)]}),
        "gpu-3": HostResult(ok=30, facts={"sglang_server_leases": [dict(lease, router="router-1", ended=True)]}),
        "router-1": HostResult(ok=20, facts={"sglang_router_leases": [running, failed]})})
    lines = report(run).splitlines()
    assert ("  i gpu-1: router-1: out under the drain lease of run ops@ctl 2026-12-01T11:00:00Z (gpu-1) until "
            "1970-01-01T00:17:15Z (25s from now); this run would put it back") in lines
    assert ("  i gpu-3: router-1: put back by this run, ending the left drain lease of run ops@ctl "
            "2026-12-01T11:00:00Z (until 1970-01-01T00:17:15Z)") in lines
    assert ("  i router-1: worker http://10.0.0.1:30000 (gpu-1) out under the drain lease of run "
            "ops@ctl 2026-12-01T11:00:00Z (gpu-1) until 1970-01-01T00:17:15Z (25s from now)") in lines
    assert ("  i router-1: worker http://10.0.0.2:30000 (gpu-2) out: failed its gate in run ops@ctl "
            "2026-12-01T11:00:00Z (gpu-1); lease until 1970-01-01T00:17:15Z, not healed (the operator decides)"
            ) in lines


def test_an_open_listener_the_inventory_accepted_is_named():
    listener = "the server listens on 0.0.0.0:30000 (fleet_server_host) with no sglang_server_api_key"
    text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {
        "gpu-1": HostResult(ok=80, facts=dict(FACTS, fleet_open_listeners=[listener])),
        "gpu-2": HostResult(ok=80, facts=FACTS)}))
    assert "  ! gpu-1: %s (fleet_allow_open_listeners)" % listener in text.splitlines()
    assert "gpu-2: the server" not in text


def test_a_process_the_stopped_server_left_on_its_gpus_is_named_as_ended():
    ended = ["pid 4242 sglang::schedul (sglang, 655360 MiB on 8 GPUs): ended by SIGKILL before the server started"]
    text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {
        "gpu-1": HostResult(ok=80, changed=4, facts=dict(FACTS, sglang_server_strays=ended)),
        "gpu-2": HostResult(ok=80, facts=FACTS)}))
    assert ("  ! gpu-1: left on its GPUs by the stopped server: pid 4242 sglang::schedul (sglang, 655360 MiB on "
            "8 GPUs): ended by SIGKILL before the server started") in text.splitlines()
    assert "gpu-2: left on its GPUs" not in text


def test_a_server_that_hands_its_keys_to_any_client_is_named():
    text = report(PlaybookRun("site.yml", ["x"], "successful", 0, {
        "gpu-1": HostResult(ok=80, facts=dict(FACTS, sglang_verify_keys_shown=["api_key", "admin_api_key"])),
        "gpu-2": HostResult(ok=80, facts=dict(FACTS, sglang_verify_keys_shown=[]))}))
    assert ("  ! gpu-1: /server_info hands api_key and admin_api_key to every client-key holder "
            "(sglang_patches_redact_secrets)") in text.splitlines()
    assert "gpu-2: /server_info" not in text
