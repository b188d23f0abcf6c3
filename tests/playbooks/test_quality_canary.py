"""The canary's quality gate as the server stage runs it (roles/sglang_quality, entry point canary): the real
eval (sgl-eval 0.1.3, installed by the role into its own venv from the lab's wheelhouse) against the lab
server on loopback, in each of its modes. A correct install passes and becomes the baseline; a degraded,
slow, low-accept or garbage one fails, naming the measure, and leaves the baseline as it was. The key
reaches no command line, task result or file of the run, in any encoding.

The molecule changes scenario runs the same gate inside a real rollout (the rollback, the other host never
restarting): molecule/changes/tests/test_sglang_upgrades_quality.py."""
import json
import subprocess
import sys
import pytest
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests/unit"))
import fleet  # noqa: E402
from leak_scan import leaks  # noqa: E402
from test_lab_server_quality import Lab  # noqa: E402

WHEELHOUSE = ROOT / ".cache/lab-wheelhouse"
# Kept between runs of the suite: the role's pip step then only finds what it asked for.
VENV = ROOT / ".cache/quality-canary-venv"
KEY = "canary-key-5b2e9d"
MODEL = "/models/nvidia/Kimi-K2.5-NVFP4"


@pytest.fixture(scope="module")
def gate(tmp_path_factory, lab_server):
    if not any(WHEELHOUSE.glob("sgl_eval-*.whl")):
        pytest.fail("the lab wheelhouse has no sgl-eval: run `python files/lab/labctl.py wheelhouse` (bin/test does)")
    base = tmp_path_factory.mktemp("canary")
    secrets = base / "sglang.env"
    secrets.write_text("SGLANG_API_KEY=%s\n" % KEY)
    secrets.chmod(0o600)
    playbook = base / "canary.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
        {"name": "The canary passes the quality gate", "ansible.builtin.include_role": {
            "name": "sglang_quality", "tasks_from": "canary"}}]}]))
    servers = []

    # 100 tokens a second a stream: the timed measures are then the simulated decode's sleeps, not this
    # machine's CPU (at 400, two healthy evals under CI's load differed by 21 %, over the 10 % tolerance;
    # at 100, four of them under the changes scenario's load spread by 4 %: docs/performance.md).
    def run(mode, install, speed=100.0):
        servers.append(Lab(lab_server, base, mode, speed, api_key=KEY))
        inventory = base / "hosts.yml"
        inventory.write_text(yaml.safe_dump({"all": {"vars": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
            "fleet_quality_baseline_path": str(base / "baselines/baselines.json"),
            "fleet_pip_find_links": [str(WHEELHOUSE)], "fleet_pip_no_index": True,
            "sglang_quality_venv": str(VENV), "sglang_quality_venv_python": "/usr/bin/python3",
            "sglang_quality_dir": str(base / "runs"), "sglang_quality_secrets_file": str(secrets),
            "sglang_quality_examples": 50, "sglang_quality_latency_requests": 2,
            "sglang_quality_latency_tokens": 32, "sglang_quality_progress_seconds": 2,
            "__sglang_quality_url": servers[-1].url, "__sglang_quality_model": MODEL,
            "__sglang_quality_install": install},
            "children": {"gpu_nodes": {"hosts": {"gpu-1": {}}}}}}))
        result = fleet.run_playbook(playbook, inventory, extra_args=["-v"])
        servers[-1].server.shutdown()
        return result, json.loads((base / "baselines/baselines.json").read_text())

    yield run, base
    for lab in servers:
        lab.server.server_close()


def test_a_correct_install_passes_and_becomes_the_baseline_then_each_bad_mode_is_caught(gate):
    run, base = gate
    first, store = run("healthy", "release-1")
    assert first.rc == 0, first.failure_summary
    verdict = first.hosts["gpu-1"].facts["sglang_quality_canary"]
    assert verdict["passed"] and verdict["baseline_install"] is None  # a new fleet: the floor alone
    assert store["current"][MODEL] == "release-1"
    measures = store["models"][MODEL]["release-1"]["measures"]
    assert measures["accuracy"] == 1.0 and measures["accept_length"] > 2 and measures["decode_tok_s"] > 0
    assert 0 < measures["itl_ms"] and 0 < measures["ttft_ms"]
    # The watch said how far the eval got while it ran.
    (watch,) = [res for task, res in first.hosts["gpu-1"].results if task == "The eval is watched until it ends"]
    rounds = [item["msg"] for item in watch["results"]]
    assert rounds[-1].startswith("done, "), rounds

    second, store = run("healthy", "release-2")
    verdict = second.hosts["gpu-1"].facts["sglang_quality_canary"]
    assert second.rc == 0 and verdict["passed"], second.failure_summary
    assert verdict["baseline_install"] == "release-1" and verdict["host_baseline_install"] == "release-1"
    assert store["current"][MODEL] == "release-2"
    # The eval's venv, settled by the first run, is read by its own python; pip does not run again.
    ran = [task for task, _ in second.hosts["gpu-1"].results]
    assert "What the eval's venv holds is read" in ran
    assert not [task for task in ran if task.startswith("SGLang's accuracy harness is installed")], ran

    for mode, measure in (("degraded", "accuracy"), ("slow", "decode_tok_s"), ("low-accept", "accept_length"),
                          ("garbage", "accuracy floor")):
        caught, after = run(mode, "release-3-" + mode)
        verdict = caught.hosts["gpu-1"].facts["sglang_quality_canary"]
        assert caught.rc != 0 and not verdict["passed"], mode
        failed = {row["measure"] for row in verdict["rows"] if row["ok"] is False}
        assert measure in failed, (mode, failed)
        message = caught.hosts["gpu-1"].failures[-1]["msg"]
        assert message.startswith("quality gate: install release-3-%s on gpu-1 does worse than the baseline, "
                                  "install release-2" % mode), message
        assert after == store, mode  # a failed canary is never the baseline
        rows = {row["measure"]: row for row in verdict["rows"]}
        if mode == "degraded":  # 13 of the 50 questions the seed draws are among the fifth it answers wrong
            # Its drafter is untouched (the speeds are timed, and a loaded CI machine moves them: not asserted).
            assert rows["accuracy"]["canary"] == 0.74 and rows["accept_length"]["ok"]
        if mode == "slow":  # half the speed: every speed measure of this host, not its answers
            assert rows["itl_ms"]["ok"] is False and rows["accuracy"]["ok"]
            # Half on a quiet machine; 0.62 once with three lab fleets on the same two CPUs, where the
            # healthy baseline could not reach its own speed either.
            assert rows["decode_tok_s"]["canary"] < 0.75 * rows["decode_tok_s"]["baseline"]
        if mode == "low-accept":
            assert rows["accept_length"]["canary"] == pytest.approx(0.6 * rows["accept_length"]["baseline"], rel=0.02)

    # The key: nowhere in what the runs said, their results, or the files the eval left.
    for result in (first, second, caught):
        assert not leaks(json.dumps(result.events), KEY)
        assert not leaks(json.dumps({h: r.facts for h, r in result.hosts.items()}), KEY)
    for path in (base / "runs").rglob("*"):
        if path.is_file():
            assert not leaks(path.read_bytes().decode(errors="replace"), KEY), path
    assert not leaks((base / "baselines/baselines.json").read_text(), KEY)
