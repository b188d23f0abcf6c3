"""The lab server fixture's /metrics (files/lab/sglang_lab_server.py): sglang 0.5.9's own names, help
texts, buckets and labels, read from the real wheel's sources, in an exposition that promtool accepts
and whose values follow the requests a user sends."""
import re
import shutil
import subprocess

import pytest

from conftest import labels_dict_keys

MODEL = "/models/nvidia/Kimi-K2.5-NVFP4"


def samples(text):
    """{(name, labels): value} of an exposition."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, labels, value = re.fullmatch(r"([^{ ]+)(?:\{(.*)\})? (\S+)", line).groups()
            found[(name, labels or "")] = float(value)
    return found


def test_the_served_names_help_texts_and_buckets_are_the_wheel_s_own(lab_server, upstream_sglang):
    collector = (upstream_sglang / "sglang/srt/metrics/collector.py").read_text()
    served = lab_server.served_metrics(upstream_sglang)
    assert set(served) == set(lab_server.KINDS)
    for name, (kind, doc, buckets) in served.items():
        declared = re.search(r'(Gauge|Counter|Histogram)\(\s*name="sglang:%s",\s*documentation="([^"]+)"' % name,
                             collector)
        assert declared, name
        assert (kind, doc) == (declared.group(1).lower(), declared.group(2)), name
    # 0.5.9's default buckets, as its source writes them.
    assert served["time_to_first_token_seconds"][2][:3] == [0.1, 0.2, 0.4]
    assert served["time_to_first_token_seconds"][2][-1] == 400
    assert served["inter_token_latency_seconds"][2][:2] == [0.002, 0.004]
    assert served["inter_token_latency_seconds"][2][-1] == 8


def test_the_labels_are_those_of_sglang_s_scheduler_and_tokenizer(lab_server, upstream_sglang):
    srt = upstream_sglang / "sglang/srt/managers"
    assert list(lab_server.SCHEDULER_LABELS) == labels_dict_keys(srt / "scheduler_metrics_mixin.py", "engine_type")
    assert list(lab_server.TOKENIZER_LABELS) == labels_dict_keys(srt / "tokenizer_manager.py", "model_name")


def test_a_release_that_renamed_a_metric_is_named_at_start(lab_server, upstream_sglang, tmp_path):
    source = (upstream_sglang / "sglang/srt/metrics/collector.py").read_text()
    drifted = tmp_path / "sglang/srt/metrics/collector.py"
    drifted.parent.mkdir(parents=True)
    drifted.write_text(source.replace('name="sglang:num_queue_reqs"', 'name="sglang:num_waiting_reqs"'))
    with pytest.raises(ValueError, match=r"sglang:num_queue_reqs \(a gauge\)"):
        lab_server.served_metrics(tmp_path)


def test_the_exposition_passes_promtool_and_follows_the_requests(lab_server, upstream_sglang):
    metrics = lab_server.Metrics(lab_server.served_metrics(upstream_sglang), MODEL, {"max_running_requests": 2})
    before = metrics.render(0, 0.0)
    metrics.begin(12, 100)
    metrics.begin(12, 100)
    metrics.begin(12, 100)
    during = metrics.render(3, 2.65)
    metrics.tokens(0.35, [0.012] * 15)
    for _ in range(3):
        metrics.end(12, 100)
    after = metrics.render(0, 2.65)

    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: bin/setup installs it (Debian's prometheus package)"
    for text in (before, during, after):
        check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        # sglang's own names carry a colon, which promtool's linter (exit 3) flags; nothing else may be.
        problems = [line for line in (check.stdout + check.stderr).splitlines()
                    if line.strip() and not line.endswith("metric names should not contain ':'")]
        assert check.returncode in (0, 3) and not problems, check.stdout + check.stderr

    sched = 'model_name="%s",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"' % MODEL
    tok = 'model_name="%s"' % MODEL
    before, during, after = samples(before), samples(during), samples(after)
    assert before[("sglang:num_running_reqs", sched)] == 0
    # Three in flight with room for two: two run, one waits; their KV tokens are held.
    assert during[("sglang:num_running_reqs", sched)] == 2 and during[("sglang:num_queue_reqs", sched)] == 1
    assert during[("sglang:token_usage", sched)] == round(3 * 112 / lab_server.KV_TOKENS, 4)
    assert during[("sglang:spec_accept_length", sched)] == 2.65
    assert after[("sglang:token_usage", sched)] == 0 and after[("sglang:prompt_tokens_total", tok)] == 36
    assert after[("sglang:generation_tokens_total", tok)] == 16
    assert after[("sglang:gen_throughput", sched)] == 16 / lab_server.THROUGHPUT_WINDOW
    # One first token at 0.35 s: in the 0.4 bucket and above, not in 0.2.
    ttft = "sglang:time_to_first_token_seconds"
    assert after[(ttft + "_bucket", tok + ',le="0.2"')] == 0
    assert after[(ttft + "_bucket", tok + ',le="0.4"')] == 1
    assert after[(ttft + "_bucket", tok + ',le="+Inf"')] == after[(ttft + "_count", tok)] == 1
    assert after[(ttft + "_sum", tok)] == 0.35
    itl = "sglang:inter_token_latency_seconds"
    assert after[(itl + "_bucket", tok + ',le="0.01"')] == 0
    assert after[(itl + "_bucket", tok + ',le="0.015"')] == after[(itl + "_count", tok)] == 15
