"""The alert rules (files/monitoring/rules/) pass promtool, fire in its unit tests over real-shaped series,
and read only metric names their real sources serve."""
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import FIXTURES, ROOT

RULES = ROOT / "files/monitoring/rules"
RULE_FILES = sorted(RULES.glob("*.yml"))
TEST_FILES = sorted((RULES / "tests").glob("*.yml"))
ROUTER_CAPTURES = sorted((FIXTURES / "upstream/sglang-router-0.3.2/metrics").glob("metrics-*.txt"))
# dcgm-exporter's etc/default-counters.csv (NVIDIA/dcgm-exporter): the fields the rules read where a
# site runs it; DCGM_FI_DEV_ECC_DBE_VOL_TOTAL is in that file, commented out by default.
DCGM_FIELDS = {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
               "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}


def promtool(*args, cwd=None):
    path = shutil.which("promtool")
    if not path:
        pytest.fail("promtool is missing: bin/setup installs it (Debian's prometheus package)")
    return subprocess.run([path, *args], capture_output=True, text=True, cwd=cwd)


def rules():
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            yield from group["rules"]


def expressions():
    return " ".join(rule["expr"] for rule in rules())


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_checks_each_rules_file(path):
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path):
    done = promtool("test", "rules", path.name, cwd=path.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_rules_file_is_tested_and_every_alert_is_seen_firing():
    tested, fired = set(), set()
    for path in TEST_FILES:
        spec = yaml.safe_load(path.read_text())
        tested.update((path.parent / name).resolve().name for name in spec["rule_files"])
        for test in spec["tests"]:
            for case in test.get("alert_rule_test", []):
                if case.get("exp_alerts"):
                    fired.add(case["alertname"])
    assert tested == {path.name for path in RULE_FILES}
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert "SglangServerDown" in alerts  # the name the lab scenario waits for
    assert alerts - fired == set()


def test_a_wrong_expectation_fails_promtool(tmp_path):
    """The unit tests above can fail: the server-down case, expected a minute too early."""
    spec = yaml.safe_load((RULES / "tests/sglang_test.yml").read_text())
    spec["rule_files"] = [str(RULES / "sglang.yml")]
    down = spec["tests"][0]["alert_rule_test"]
    down[0]["exp_alerts"] = down[1]["exp_alerts"]  # firing at 75 s, after 45 s down
    (tmp_path / "wrong.yml").write_text(yaml.safe_dump(spec))
    done = promtool("test", "rules", "wrong.yml", cwd=tmp_path)
    assert done.returncode != 0 and "SglangServerDown" in done.stdout + done.stderr


def test_rules_read_both_spellings_of_every_sglang_metric():
    text = expressions()
    assert not re.search(r"sglang:[a-z]", re.sub(r"instance:sglang_|job:sglang_", "", text)), \
        "a raw sglang:NAME selector misses the sglang_NAME spelling"
    assert set(re.findall(r'sglang\[:_\]([a-z_]+)', text)) == {"num_queue_reqs", "token_usage", "spec_accept_length"}


def test_sglang_names_are_sglang_0_5_9_s_own(upstream_sglang):
    collector = (upstream_sglang / "sglang/srt/metrics/collector.py").read_text()
    served = set(re.findall(r'name="sglang:([a-z_]+)"', collector))
    assert set(re.findall(r'sglang\[:_\]([a-z_]+)', expressions())) - served == set()


def test_router_names_are_what_sglang_router_0_3_2_serves():
    served = set()
    for path in ROUTER_CAPTURES:
        served.update(re.findall(r"^(smg_[a-z_]+)[{ ]", path.read_text(), re.M))
    used = set(re.findall(r"\b(smg_[a-z_]+)", expressions()))
    assert used and used - served == set()
    # the three states the two worker alerts tell apart, as the real router writes them
    health = [re.findall(r'^smg_worker_health\{worker="[^"]+"\} (-?\d+)$', path.read_text(), re.M)
              for path in ROUTER_CAPTURES]
    assert {value for values in health for value in values} == {"1", "0", "-1"}


def test_gpu_names_are_what_the_textfile_collector_writes():
    import importlib.util
    spec = importlib.util.spec_from_file_location("nvidia_smi_textfile",
                                                  ROOT / "files/monitoring/nvidia_smi_textfile.py")
    collector = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collector)
    gpus = collector.parse_query((FIXTURES / "nvidia-smi/h200-monitoring-noheader-nounits.csv").read_text())
    text = collector.render(gpus, 0, 8, {"0000:00:06|79": 1}, ("journalctl", True))
    written = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    used = set(re.findall(r"\b(nvidia_smi_[a-z_]+)", expressions()))
    # what the H200 does not report ([N/A]) is not written there, but is a field of the collector's
    assert used - written == {"nvidia_smi_retired_pages_pending"}
    assert "nvidia_smi_retired_pages_pending" in {field[1] for field in collector.FIELDS}
    assert set(re.findall(r"\b(DCGM_FI_[A-Z_]+)", expressions())) - DCGM_FIELDS == set()
