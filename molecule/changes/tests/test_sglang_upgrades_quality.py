"""The canary's quality gate on the lab fleet, after test_sglang_upgrades.py (which leaves the inventory's
release serving everywhere): a new install that answers a fifth of GSM8K wrong is stopped at the first
host, rolled back, and the other host never restarts; a correct new install rolls out to both and becomes
the baseline. That last test leaves the new install serving: only destroy comes after it (`molecule converge`
rolls the inventory's release back out, through its canary, before another `molecule verify`). A rollout
back to an earlier install through its canary is test_sglang_upgrades.py's going-back test: the first test
here starts from the baseline it recorded.

The lab's sgl-kernel stand-in `.degraded` makes the lab server answer a stated fraction of GSM8K wrong
(files/lab/sglang_lab_server.py); the eval, the gate and the rollback are the production ones."""
import json

from conftest import INVENTORY, NODES, RELEASE_2, SITE, STAGES, current, nodes, started_at
from fleet import report, run_playbook

DEGRADED_WHEEL = "/srv/lab-wheelhouse/sgl_kernel-0.3.21+cpu.degraded-cp310-abi3-manylinux2014_x86_64.whl"
BASELINES = "/var/lib/sglang-fleet/quality/baselines.json"
MODEL = "/models/nvidia/Kimi-K2.5-NVFP4"
testinfra_hosts = ["podman://" + NODES[0]]


def baselines(node):
    """The fleet's baselines, on the lock host (the first GPU host: the scenario has no router)."""
    return json.loads(node.check_output("cat %s" % BASELINES))


def test_a_degraded_install_is_stopped_at_the_canary_rolled_back_and_the_other_host_never_restarts(host):
    first, second = nodes(host)
    serving = current(first)
    assert current(second) == serving
    before = baselines(first)
    assert before["current"][MODEL] == serving  # every rollout's canary recorded what it served
    second_started = started_at(second)
    degraded = {**RELEASE_2, "sglang_sgl_kernel_wheel_url": "file://" + DEGRADED_WHEEL,
                "sglang_sgl_kernel_wheel_sha256": first.check_output("sha256sum %s | cut -d' ' -f1" % DEGRADED_WHEEL)}

    run = run_playbook(SITE, INVENTORY, tags=STAGES, extravars=degraded)
    result = run.hosts[NODES[0]]
    new = result.facts["sglang_install_id"]
    assert run.rc != 0 and result.failed == 1 and new != serving, run.failure_summary
    assert "sglang_quality_canary" in result.facts, (run.failure_summary, report(run))
    gate = result.facts["sglang_quality_canary"]
    assert not gate["passed"] and gate["install"] == new and gate["baseline_install"] == serving
    assert gate["host_baseline_install"] == serving  # the canary's own last eval: what it replaces there
    rows = {row["measure"]: row for row in gate["rows"]}
    # About a fifth of the answers wrong: below the floor and far below the baseline; the drafter is fine (the
    # speeds are timed, and a loaded CI machine moves them: their verdict is not asserted).
    assert rows["accuracy"]["baseline"] >= 0.97 and 0.7 <= rows["accuracy"]["canary"] <= 0.85
    assert rows["accuracy"]["ok"] is False and rows["accept_length"]["ok"] is True
    message = result.failures[-1]["msg"]
    assert message.startswith("%s: install %s failed its quality gate and was rolled back: serving the previous "
                              "install, %s, again" % (NODES[0], new, serving)), message
    assert result.facts["sglang_server_state"]["gate"] == "rolled-back"

    # The report: the canary's verdict, then baseline and canary side by side, one measure per row.
    lines = report(run).splitlines()
    heading = next(i for i, line in enumerate(lines) if "quality gate of install " + new in line)
    assert lines[heading].startswith("  ! %s: quality gate of install %s against the baseline of install %s"
                                     % (NODES[0], new, serving))
    assert lines[heading + 1].split() == ["MEASURE", "BASELINE", "OF", "CANARY", "LIMIT"]
    table = {line.split()[0]: line.split() for line in lines[heading + 2:heading + 10] if line.startswith("      ")}
    assert table["accuracy"][-1] == "WORSE" and table["accuracy"][2] == "model"
    assert table["decode_tok_s"][-1] in ("ok", "WORSE") and "host" in table["decode_tok_s"]

    # The canary serves the install before it again; the other host never restarted, nor switched.
    assert current(first) == serving and current(second) == serving
    assert started_at(second) == second_started
    assert baselines(first)["current"][MODEL] == serving
    assert new not in baselines(first)["models"][MODEL]


def test_a_correct_new_install_rolls_out_to_every_host_and_becomes_the_baseline(host):
    first, second = nodes(host)
    serving = current(first)
    run = run_playbook(SITE, INVENTORY, tags=STAGES, extravars=RELEASE_2)
    assert run.rc == 0, run.failure_summary
    new = run.hosts[NODES[0]].facts["sglang_install_id"]
    assert new != serving and current(first) == new and current(second) == new
    gate = run.hosts[NODES[0]].facts["sglang_quality_canary"]
    assert gate["passed"] and gate["baseline_install"] == serving
    # Only the first host is the canary: the second restarted in the next wave without an eval.
    assert "sglang_quality_canary" not in run.hosts[NODES[1]].facts
    stored = baselines(first)
    assert stored["current"][MODEL] == new and serving in stored["models"][MODEL]
    record = stored["models"][MODEL][new]
    assert record["source"] == "canary" and record["hosts"] == [NODES[0]] and record["measures"]["accuracy"] >= 0.97
    assert stored["hosts"][MODEL][NODES[0]]["install"] == new
