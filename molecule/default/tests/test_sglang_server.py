"""sglang_server in the lab: the unit, its guard rails, its health gate and the rolling restart."""
import json
import os
import time
from pathlib import Path

import pytest

import fleet
from fleet import run_playbook
from leak_scan import leaks

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
NODES = ["fleet-gpu-1", "fleet-gpu-2"]
ADDRESSES = ["127.0.1.1", "127.0.1.2"]  # each node's own on the fleet's loopback
KEYS = ["lab-secret-%s-4f9c" % node for node in NODES]  # host_vars
SERVER = ROOT / "playbooks/server.yml"
UNIT = "/etc/systemd/system/sglang.service"
testinfra_hosts = ["podman://" + NODES[0]]


def run_server(**extravars):
    return run_playbook(SERVER, INVENTORY, extravars=extravars)


def set_mode(host, mode):
    """The lab server's behaviour on that node, its simulated speed kept (the bench's slow host stays slow)."""
    config = json.loads(host.file("/etc/lab-gpu/server.json").content_string)
    config.update(mode=mode, startup_seconds=1)
    host.check_output("printf '%%s\\n' '%s' > /etc/lab-gpu/server.json" % json.dumps(config))


def nodes(host):
    return [host.get_host("podman://" + n) for n in NODES]


@pytest.mark.parametrize("index", [0, 1])
def test_the_unit_runs_as_its_own_user_and_listens_on_its_own_address_only(host, index):
    host = nodes(host)[index]
    service = host.service("sglang")
    assert service.is_running and service.is_enabled
    user = host.user("sglang")
    assert user.shell == "/usr/sbin/nologin" and user.home == "/var/lib/sglang"
    assert host.process.get(comm="python").user == "sglang"
    assert host.socket("tcp://%s:30000" % ADDRESSES[index]).is_listening
    assert not host.socket("tcp://0.0.0.0:30000").is_listening


@pytest.mark.parametrize("index", [0, 1])
def test_the_secret_is_in_its_config_file_only_never_in_argv_environment_or_journal(host, index):
    host = nodes(host)[index]
    secret = "lab-secret-%s-4f9c" % NODES[index]
    config = host.file("/etc/sglang/sglang.yaml")
    assert (config.user, config.group, config.mode) == ("root", "sglang", 0o640)
    assert json.loads(config.content_string) == {"api-key": secret}
    env = host.file("/etc/sglang/sglang.env")
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
    unit = host.file(UNIT)
    assert unit.mode == 0o644 and secret not in unit.content_string
    assert "--config /etc/sglang/sglang.yaml" in unit.content_string
    # Every process's command line and the server's environment, as any local user could read them.
    pid = host.check_output("systemctl show -p MainPID --value sglang")
    assert secret not in host.check_output("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert secret not in host.check_output("tr '\\0' '\\n' < /proc/%s/environ" % pid)
    assert secret not in host.check_output("journalctl --no-pager -o cat -u sglang -u sglang-gpu-init")


def test_the_gpu_nodes_were_created_as_root_before_the_server(host):
    node = nodes(host)[0]
    init = node.service("sglang-gpu-init")
    assert init.is_enabled and init.is_running  # a oneshot that remains after exit
    calls = node.file("/run/lab-nvidia-modprobe.log").content_string.splitlines()
    assert calls[:8] == ["uid=0 -u -c0"] + ["uid=0 -c%d" % i for i in range(1, 8)]
    requires = node.check_output("systemctl show -p Requires -p After --value sglang")
    assert "sglang-gpu-init.service" in requires


def test_the_self_test_ran_as_the_service_user_and_left_its_jit_builds_to_the_server(host):
    node = nodes(host)[0]
    build = node.file("/var/lib/sglang/.cache/flashinfer/0.6.3/lab/cached_ops/trtllm_comm.lab")
    assert build.exists and build.user == "sglang"  # the server's own home: its first start reuses them
    assert not node.file("/root/.cache/flashinfer").exists
    verdicts = node.file("/var/lib/sglang-fleet/fusion-selftest")
    assert verdicts.user == "sglang"
    assert {node.file(verdicts.path + "/" + name).user for name in verdicts.listdir()} == {"sglang"}


# The [Service] lines that are not the process's sandbox (tests/playbooks/test_selftest_sandbox.py).
NOT_SANDBOX = {"Type", "User", "Group", "WorkingDirectory", "Environment", "ExecStart", "Restart", "RestartSec",
               "TimeoutStartSec", "TimeoutStopSec", "KillMode"}


def unit_sandbox(unit):
    """The server unit's sandbox lines, as the node holds them."""
    text = unit.split("[Service]\n", 1)[1].split("\n[Install]", 1)[0].replace("\\\n", "")
    return [line for line in text.splitlines()
            if line and not line.startswith("#") and line.split("=", 1)[0] not in NOT_SANDBOX]


def test_the_self_test_ran_as_a_transient_unit_under_the_server_unit_s_own_sandbox(host):
    """What the self-test saw of itself (the kernel's word: /proc/self/status and /proc/self/cgroup), in every
    verdict the converge left, and the properties systemd-run gave it: the unit's own lines, in its order."""
    node = nodes(host)[0]
    sandbox = unit_sandbox(node.file(UNIT).content_string)
    assert "SystemCallFilter=~@privileged" in sandbox and len(sandbox) == 29
    folder = "/var/lib/sglang-fleet/fusion-selftest"
    verdicts = [json.loads(node.file(folder + "/" + name).content_string) for name in node.file(folder).listdir()]
    assert verdicts
    for verdict in verdicts:
        assert verdict["status"] == "pass"
        process = verdict["process"]
        assert (process["user"], process["unit"]) == ("sglang", "sglang-fusion-selftest.service")
        assert process["cgroup"].endswith("/system.slice/sglang-fusion-selftest.service")
        assert (process["NoNewPrivs"], process["Seccomp"], process["CapBnd"], process["Umask"]) == \
            ("1", "2", "0000000000000000", "0027")
        assert verdict["settings"]["sandbox"] == sandbox + ["ReadWritePaths=" + folder]
    decision = json.loads(node.file("/etc/ansible/facts.d/sglang_server_fusion.fact").content_string)
    assert decision["reason"].startswith("self-test pass, ") and "outside" not in decision["reason"]
    assert node.run("systemctl status sglang-fusion-selftest.service").rc == 4  # collected: no such unit left


def test_a_hardening_line_that_breaks_the_self_test_is_an_error_naming_it_before_the_unit_changes(host):
    """An operator's extra line, SystemCallFilter=~@resources, kills what pins threads to CPUs, as NCCL and the
    lab's fixture do (sched_setaffinity): the self-test dies of SIGSYS in its transient unit, and the host stops
    with the directive named before the server's unit takes the line."""
    node = nodes(host)[0]
    before = node.file(UNIT).content_string
    folder = "/var/lib/sglang-fleet/fusion-selftest"
    cached = node.check_output("ls %s" % folder).split()
    run = run_playbook(SERVER, INVENTORY, limit=NODES[0],
                       extravars={"sglang_server_allreduce_fusion": "on",
                                  "sglang_server_hardening_extra": ["SystemCallFilter=~@resources"]})
    result = run.hosts[NODES[0]]
    assert run.rc != 0 and result.failed == 1
    message = result.failures[0]["msg"]
    assert ("sglang_server_allreduce_fusion is on, but self-test error: the server unit's sandbox stopped the "
            "self-test, SystemCallArchitectures=native SystemCallFilter=@system-service SystemCallFilter=~@privileged "
            "SystemCallFilter=~@resources (killed by SIGSYS: a system call the seccomp filter kills): SIGSYS; the "
            "server would meet it at its start") in message, message
    assert node.file(UNIT).content_string == before
    assert node.check_output("ls %s" % folder).split() == cached  # an error is never cached
    assert node.service("sglang").is_running


def test_a_rerun_starts_a_server_that_a_crash_loop_left_failed(host):
    """StartLimitBurst=3 an hour: after a crash loop systemd refuses every start until reset-failed."""
    node = nodes(host)[0]
    set_mode(node, "crash")
    try:
        # A crash loop, at the pace of an operator's restarts rather than RestartSec's: the server crashes on
        # each start, and these starts with the converge's own are past the burst.
        for _ in range(4):
            node.run("systemctl restart sglang")
            time.sleep(1)
    finally:
        set_mode(node, "healthy")
    # Healthy again, and still refused: systemd starts it no more.
    refused = node.run("systemctl start sglang")
    assert refused.rc != 0 and node.check_output("systemctl show -p ActiveState --value sglang") == "failed"
    assert "Start request repeated too quickly" in node.check_output("journalctl -u sglang --no-pager -o cat -n 5")
    run = run_playbook(SERVER, INVENTORY, limit=NODES[0])  # nothing changed: start it
    assert run.rc == 0, run.hosts[NODES[0]].failures
    assert "A server failed by an earlier crash loop may start again" in run.hosts[NODES[0]].changed_tasks
    assert node.service("sglang").is_running


def test_a_rollout_restarts_its_server_after_three_deliberate_restarts_within_the_hour(host):
    """StartLimitBurst=3 an hour counts every start, not only systemd's own after a crash: a host changed
    a fourth time within the hour had its restart refused ('start-limit-hit'), outside the gate, its new
    install switched in and its server down. A rollout's restart is deliberate: the limit is for crash loops."""
    node = nodes(host)[0]
    node.check_output("systemctl reset-failed sglang && systemctl restart sglang && systemctl restart sglang"
                      " && systemctl restart sglang")  # three starts in the window: systemd refuses a fourth
    # A restart with no new unit (a daemon-reload forgets the count): here the key file rewritten, as an
    # install switched in or a rotated key is.
    node.check_output("touch /etc/sglang/sglang.yaml")
    try:
        run = run_playbook(SERVER, INVENTORY, limit=NODES[0])
        assert run.rc == 0, run.failure_summary
        assert "The server runs, restarted when its unit, environment, install or patches changed" \
            in run.hosts[NODES[0]].changed_tasks
        assert node.service("sglang").is_running
        assert run.hosts[NODES[0]].facts["sglang_server_state"]["gate"] == "passed"
    finally:
        node.run("systemctl reset-failed sglang && systemctl start sglang")  # as it was, whatever happened


def test_the_server_answers_the_known_answer_with_its_api_key(host):
    secret = "lab-secret-%s-4f9c" % NODES[0]
    body = json.dumps({"model": "/models/nvidia/Kimi-K2.5-NVFP4", "temperature": 0,
                       "messages": [{"role": "user", "content": "What is 17 + 25?"}]})
    out = host.check_output("curl -sf -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' "
                            "-d '%s' http://%s:30000/v1/chat/completions" % (secret, body, ADDRESSES[0]))
    assert json.loads(out)["choices"][0]["message"]["content"] == "42"
    assert host.run("curl -sf http://%s:30000/v1/models" % ADDRESSES[0]).rc != 0  # no key, no answer



ENV_FILE = "/etc/sglang/sglang.env"
SELFTEST = "/usr/local/lib/sglang-fleet/fusion_selftest.py"
WRITERS = {"ansible.builtin.user", "ansible.builtin.copy", "ansible.builtin.file"}
# The check-mode pass over the unit and the install switch (unit.yml): a host whose unit, its state and
# `current` are as asked runs none of it.
UNIT_PASS = {"slurp", "systemd_service", "sglang_venvs"}


def modules_run(result):
    """The short names of the modules a host ran (ansible.builtin.slurp, ansible.legacy.sglang_venvs...)."""
    return {action.rsplit(".", 1)[-1] for action in result.actions}


def test_a_rerun_restarts_nothing_and_a_drifted_host_is_found_by_one_read_and_repaired(host):  # in file order
    """A rerun restarts nothing and logs no key, in any encoding; a settled host runs none of the user, file
    or gpu-init tasks. The key's env file opened to every reader and the self-test edited by hand are
    found by the stage's one footprint read, planned under --check without a write, then repaired
    without a restart (neither is the unit's), and the next run is settled again."""
    node = nodes(host)[0]
    started = node.check_output("systemctl show -p ActiveEnterTimestampMonotonic --value sglang")
    settled = run_server()
    assert settled.rc == 0 and settled.changed == 0, {h: r.changed_tasks for h, r in settled.hosts.items()}
    said = json.dumps({h: r.__dict__ for h, r in settled.hosts.items()}) + json.dumps(settled.events)
    assert not [key for key in KEYS if leaks(said, key)]
    for name in NODES:
        assert not WRITERS & set(settled.hosts[name].actions), settled.hosts[name].actions
        assert not UNIT_PASS & modules_run(settled.hosts[name]), settled.hosts[name].actions
    # Left drifted if this test fails: the next run of the stage repairs it, as it does here.
    node.check_output("chmod 0644 %s && echo '# edited' >> %s" % (ENV_FILE, SELFTEST))
    check = run_playbook(SERVER, INVENTORY, limit=NODES[0], check=True, diff=True)
    assert check.rc == 0, check.failure_summary
    # The env file's task is no_log, and ansible-runner's events carry its result censored, `changed`
    # included: it counts in the host's changes (the play's stats) without being named.
    planned = check.hosts[NODES[0]]
    assert "The fusion self-test is in place" in planned.changed_tasks, planned.changed_tasks
    assert planned.changed == len(planned.changed_tasks) + 1, (planned.changed, planned.changed_tasks)
    assert node.file(ENV_FILE).mode == 0o644 and node.file(SELFTEST).content_string.endswith("# edited\n")
    run = run_playbook(SERVER, INVENTORY, limit=NODES[0])
    assert run.rc == 0, run.failure_summary
    assert node.file(ENV_FILE).mode == 0o600 and "# edited" not in node.file(SELFTEST).content_string
    again = run_playbook(SERVER, INVENTORY, limit=NODES[0])
    assert again.rc == 0 and again.changed == 0, again.hosts[NODES[0]].changed_tasks
    assert not WRITERS & set(again.hosts[NODES[0]].actions), again.hosts[NODES[0]].actions
    assert node.check_output("systemctl show -p ActiveEnterTimestampMonotonic --value sglang") == started


def test_a_hand_edited_unit_is_found_by_the_read_planned_under_check_and_put_back_with_a_restart(host):
    """The plan's second read (the unit as rendered, enabled and active, `current` as switched) finds a
    unit edited by hand: --check plans its rewrite and writes nothing, the run puts it back and restarts
    the server on it, and the next run skips the unit pass again."""
    node = nodes(host)[0]
    rendered = node.file(UNIT).content_string
    started = node.check_output("systemctl show -p ActiveEnterTimestampMonotonic --value sglang")
    node.check_output("echo '# edited by hand' >> %s" % UNIT)  # left drifted on failure: the next run repairs it
    check = run_playbook(SERVER, INVENTORY, limit=NODES[0], check=True, diff=True)
    assert check.rc == 0, check.failure_summary
    assert "The unit is rendered" in check.hosts[NODES[0]].changed_tasks, check.hosts[NODES[0]].changed_tasks
    assert node.file(UNIT).content_string.endswith("# edited by hand\n")
    run = run_playbook(SERVER, INVENTORY, limit=NODES[0])
    assert run.rc == 0, run.failure_summary
    assert node.file(UNIT).content_string == rendered
    assert node.check_output("systemctl show -p ActiveEnterTimestampMonotonic --value sglang") != started
    again = run_playbook(SERVER, INVENTORY, limit=NODES[0])
    assert again.rc == 0 and again.changed == 0, again.hosts[NODES[0]].changed_tasks
    assert not UNIT_PASS & modules_run(again.hosts[NODES[0]]), again.hosts[NODES[0]].actions


def test_a_process_the_old_server_left_on_the_gpus_is_ended_before_the_new_one_starts_and_named(host):
    """A process of the service user that holds GPU memory (the lab's nvidia-smi lists it, as the real one
    lists a scheduler that outlived its server's stop) is ended between the stop and the start of a restart,
    and the report names it; --check names it and ends nothing; the server it would have starved serves."""
    node = nodes(host)[0]
    node.check_output("systemd-run --unit=lab-stray --uid=sglang --setenv=LAB_GPU_MEMORY_MIB=81920 "
                      "/usr/bin/python3 -c 'import time; time.sleep(600)'")
    try:
        stray = int(node.check_output("systemctl show -p MainPID --value lab-stray"))
        apps = node.check_output("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits")
        assert "%d, 81920" % stray in apps.splitlines()
        node.check_output("touch %s" % UNIT)  # newer than the running server: it restarts (sglang_server_stale)
        check = run_playbook(SERVER, INVENTORY, limit=NODES[0], check=True)
        assert check.rc == 0, check.failure_summary
        assert node.file("/proc/%d" % stray).exists, "check mode ends nothing"
        assert ("%s: left on its GPUs by the stopped server: pid %d /usr/bin/python3 (sglang, 655360 MiB on 8 GPUs): "
                "would be ended before the server starts" % (NODES[0], stray)) in fleet.report(check)
        run = run_playbook(SERVER, INVENTORY, limit=NODES[0])
        assert run.rc == 0, run.failure_summary
        assert ("%s: left on its GPUs by the stopped server: pid %d /usr/bin/python3 (sglang, 655360 MiB on 8 GPUs): "
                "ended by SIGTERM before the server started" % (NODES[0], stray)) in fleet.report(run)
        assert not node.file("/proc/%d" % stray).exists
        server = node.check_output("systemctl show -p MainPID --value sglang")
        apps = node.check_output("nvidia-smi --query-compute-apps=pid --format=csv,noheader").split()
        assert set(apps) == {server}, "only the new server holds the GPUs"
        again = run_playbook(SERVER, INVENTORY, limit=NODES[0])
        assert again.rc == 0 and again.changed == 0, again.hosts[NODES[0]].changed_tasks
    finally:
        node.run("systemctl stop lab-stray")


@pytest.mark.parametrize("extravars,expected", [
    ({"sglang_server_extra_args": ["--enable-flashinfer-allreduce-fusiom"]},
     "sglang 0.5.9 does not accept this command line: unknown flag --enable-flashinfer-allreduce-fusiom "
     "(closest: --enable-flashinfer-allreduce-fusion"),
    ({"sglang_server_extra_args": ["--speculative-algorithm", "EAGLE4"]}, "--speculative-algorithm EAGLE4: not one of"),
    ({"sglang_server_quantization": "modelopt_fp4"}, "--speculative-draft-model-quantization unquant"),
    ({"sglang_server_speculative_eagle_topk": 4}, "SGLANG_ENABLE_SPEC_V2 needs --speculative-eagle-topk 1, not 4"),
    ({"sglang_server_tp": 4}, "--tp 4 does not match 8 GPU(s) x 1 node(s)"),
    ({"fleet_draft_model_dir": "/models/nowhere"}, "missing on the host: /models/nowhere"),
])
def test_guard_rails_fail_before_the_unit_is_touched(host, extravars, expected):
    before = host.file(UNIT).content_string
    run = run_server(**extravars)
    result = run.hosts[NODES[0]]
    assert run.rc != 0 and result.failed == 1 and result.changed == 0
    assert expected in result.failures[0]["msg"]
    assert host.file(UNIT).content_string == before


# A server that crashes while loading, and a rollout stopped by its first batch, are shown by
# test_sglang_upgrades.py's failing upgrade, which rolls back as well.
@pytest.mark.parametrize("mode,expected", [("garbage", "known-answer check failed")])
def test_the_health_gate_catches_a_bad_server_and_shows_the_journal(host, mode, expected):
    node = host.get_host("podman://" + NODES[0])
    set_mode(node, mode)
    try:
        run = run_playbook(SERVER, INVENTORY, limit=NODES[0],
                           extravars={"sglang_server_extra_args": ["--context-length", "4096"]})
        assert run.rc != 0 and expected in run.hosts[NODES[0]].failures[0]["msg"]
    finally:
        set_mode(node, "healthy")
        assert run_playbook(SERVER, INVENTORY, limit=NODES[0]).rc == 0  # back to the converged unit, healthy


def set_fusion(host, result):
    host.check_output("printf '{\"result\": \"%s\"}\\n' > /etc/lab-gpu/fusion.json" % result)


def fusion_facts(run, node=NODES[0]):
    return run.hosts[node].facts["sglang_server_fusion"]


def test_the_converged_server_runs_fusion_after_a_passing_self_test_that_a_rerun_reads_from_cache(host):
    node = nodes(host)[0]
    assert "--enable-flashinfer-allreduce-fusion" in node.file(UNIT).content_string
    decision = json.loads(node.file("/etc/ansible/facts.d/sglang_server_fusion.fact").content_string)
    assert decision["enabled"] is True and decision["selftest"] == "pass"
    cached = node.check_output("ls /var/lib/sglang-fleet/fusion-selftest").split()
    run = run_playbook(SERVER, INVENTORY, limit=NODES[0])
    assert run.rc == 0 and run.changed == 0
    assert node.check_output("ls /var/lib/sglang-fleet/fusion-selftest").split() == cached  # not repeated
    assert fusion_facts(run)["enabled"] is True


# The hang verdict (the watchdog) is tested around the same fixture in tests/unit/test_fusion_selftest.py.
@pytest.mark.parametrize("result,status", [("fail", "fail")])
def test_auto_serves_without_fusion_when_the_self_test_fails_and_says_why(host, result, status):
    node = nodes(host)[0]
    set_fusion(node, result)
    # A new cache key (another timeout) makes the self-test run again against the failing GPU part.
    extra = {"sglang_server_fusion_selftest_timeout": 5 if result == "hang" else 61}
    try:
        run = run_playbook(SERVER, INVENTORY, limit=NODES[0], extravars=extra)
        assert run.rc == 0, run.hosts[NODES[0]].failures
        fusion = fusion_facts(run)
        assert fusion["enabled"] is False and fusion["selftest"] == status
        assert "--enable-flashinfer-allreduce-fusion" not in node.file(UNIT).content_string
        assert node.service("sglang").is_running
        report = fleet.report(run)
        assert "off: self-test %s" % status in report
        assert "i %s: serves without allreduce fusion: self-test %s" % (NODES[0], status) in report
    finally:
        set_fusion(node, "pass")


def test_on_fails_the_host_before_the_unit_changes_when_the_self_test_fails(host):
    node = nodes(host)[0]
    before = node.file(UNIT).content_string
    set_fusion(node, "fail")
    try:
        run = run_playbook(SERVER, INVENTORY, limit=NODES[0],
                           extravars={"sglang_server_allreduce_fusion": "on", "sglang_server_fusion_selftest_timeout": 62})
        result = run.hosts[NODES[0]]
        assert run.rc != 0 and result.failed == 1
        assert "sglang_server_allreduce_fusion is on, but self-test fail: " in result.failures[0]["msg"]
        assert node.file(UNIT).content_string == before
    finally:
        set_fusion(node, "pass")


def test_auto_serves_without_a_correct_fused_kernel_that_is_not_faster(host):
    """A correct fused kernel that is barely faster than sglang's unfused path is not worth turning on."""
    node = nodes(host)[0]
    node.check_output("printf '{\"result\": \"pass\", \"speedup\": 1.02}\\n' > /etc/lab-gpu/fusion.json")
    try:
        run = run_playbook(SERVER, INVENTORY, limit=NODES[0], extravars={"sglang_server_fusion_selftest_timeout": 63})
        assert run.rc == 0, run.failure_summary
        fusion = fusion_facts(run)
        assert (fusion["enabled"], fusion["selftest"], fusion["speedup"], fusion["cause"]) == (False, "pass", 1.02,
                                                                                               "slower")
        assert "--enable-flashinfer-allreduce-fusion" not in node.file(UNIT).content_string
        report = fleet.report(run)
        assert "off (self-test pass, not faster: 1.02x)" in report
        assert ("i %s: serves without allreduce fusion: self-test pass, not faster: 1.02x at decode "
                "(4, 32, 128, 192 tokens), 1.05x needed (sglang_server_fusion_min_speedup)" % NODES[0]) in report
    finally:
        set_fusion(node, "pass")
        assert run_playbook(SERVER, INVENTORY, limit=NODES[0]).rc == 0  # back to the converged unit


def test_off_runs_no_self_test_and_no_flag(host):
    node = nodes(host)[0]
    set_fusion(node, "hang")  # would stall a self-test: off must not start one
    try:
        run = run_playbook(SERVER, INVENTORY, limit=NODES[0], extravars={"sglang_server_allreduce_fusion": "off"})
        assert run.rc == 0, run.failure_summary
        assert fusion_facts(run) == {"enabled": False, "switch": "off", "selftest": "not run", "speedup": None,
                                     "model_speedup": None, "min_speedup": 1.05, "cause": "switched-off", "refusal": "",
                                     "reason": "switched off (sglang_server_allreduce_fusion: off)"}
        assert "--enable-flashinfer-allreduce-fusion" not in node.file(UNIT).content_string
    finally:
        set_fusion(node, "pass")
        assert run_playbook(SERVER, INVENTORY, limit=NODES[0]).rc == 0  # back to the converged unit
