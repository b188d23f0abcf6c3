"""The lab server's quality modes (files/lab/sglang_lab_server.py): it answers the published GSM8K test set
as a model would, right when healthy, a stated fraction wrong when degraded, at half the speed when slow,
with a lower EAGLE-3 accept length when low-accept; and sgl-eval, the harness the quality gate runs, scores
it so (from the lab wheelhouse, in the venv the canary's playbook test keeps too)."""
import json
import os
import random
import re
import statistics
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ROOT

TEST_SET = ROOT / "roles/sglang_quality/files/gsm8k/test.jsonl"
MODEL = "/models/nvidia/Kimi-K2.5-NVFP4"
# sgl-eval 0.1.3's gsm8k prompt: NeMo-Skills' generic/math, without examples.
PROMPT = "Solve the following math problem. Make sure to put the answer (and only answer) inside \\boxed{{}}.\n\n{}"
# The serving command line of the fleet's servers, as far as the accept length reads it.
ARGS = {"model_path": MODEL, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
        "tensor_parallel_size": 8}
WHEELHOUSE = ROOT / ".cache/lab-wheelhouse"
EVAL_VENV = ROOT / ".cache/quality-canary-venv"  # tests/playbooks/test_quality_canary.py's, kept between runs


@pytest.fixture(scope="module")
def eval_python():
    """A python with sgl-eval 0.1.3, installed as the quality role installs it, from the lab's wheelhouse."""
    python = EVAL_VENV / "bin/python"
    if subprocess.run([str(python), "-c", "import sgl_eval"], capture_output=True).returncode if python.exists() else 1:
        if not any(WHEELHOUSE.glob("sgl_eval-0.1.3-*.whl")):
            pytest.fail("the lab wheelhouse has no sgl-eval 0.1.3: run `python files/lab/labctl.py wheelhouse` "
                        "(bin/test does)")
        subprocess.run(["python3", "-m", "venv", str(EVAL_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELHOUSE),
                        "sgl-eval==0.1.3"], check=True, timeout=600)
    return python


def published_test_set():
    """[(question, answer)] of the published test set, the answer as its #### line gives it, commas removed."""
    rows = [json.loads(line) for line in TEST_SET.read_text().splitlines() if line.strip()]
    return [(row["question"], row["answer"].rpartition("####")[2].strip().replace(",", "")) for row in rows]


class Lab:
    """The lab server on a loopback port, built as main() builds it from a server.json with this mode."""

    def __init__(self, lab_server, tmp_path, mode, tokens_per_second, api_key=None):
        config = tmp_path / ("server-%s.json" % mode)
        config.write_text(json.dumps({"mode": mode, "startup_seconds": 0, "tokens_per_second": tokens_per_second}))
        lab_server.CONFIG = str(config)
        settings = lab_server.load_config()
        self.server = s = lab_server.Server(("127.0.0.1", 0), lab_server.Handler)
        s.dummy, s.in_flight, s.streams, s.lock, s.metrics = False, 0, 0, threading.Lock(), None
        s.ready = threading.Event()
        s.ready.set()
        s.model, s.args = MODEL, dict(ARGS)
        # site: no deepseek_v2.py there, so the install counts as one whose EAGLE-3 capture is right.
        for name, value in lab_server.serving_settings(settings, lab_server.installed_mode(settings["mode"]), s.args,
                                                       str(tmp_path), str(TEST_SET)).items():
            setattr(s, name, value)
        s.api_key, s.admin_api_key, s.routes = api_key, None, []
        self.url = "http://127.0.0.1:%d" % s.server_address[1]
        threading.Thread(target=s.serve_forever, daemon=True).start()

    def post(self, path, body):
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def chat(self, content, **extra):
        return self.post("/v1/chat/completions", dict({"model": MODEL, "temperature": 0, "messages": [
            {"role": "user", "content": content}]}, **extra))

    def boxed(self, question):
        """The last \\boxed{} answer to sgl-eval's prompt for the question."""
        text = self.chat(PROMPT.format(question))["choices"][0]["message"]["content"]
        found = re.findall(r"\\boxed\{([^}]*)\}", text)
        return found[-1] if found else None

    def answers(self, questions):
        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(self.boxed, questions))

    def streamed_decode_speed(self, tokens=60):
        """Decode tokens per second of one streamed answer: the tokens after the first over their time."""
        request = urllib.request.Request(self.url + "/v1/chat/completions", data=json.dumps({
            "model": MODEL, "temperature": 0, "stream": True, "max_tokens": tokens,
            "messages": [{"role": "user", "content": "Count."}]}).encode(),
            headers={"Content-Type": "application/json"})
        arrivals = []
        with urllib.request.urlopen(request, timeout=60) as response:
            for line in response:
                if line.startswith(b"data: {"):
                    arrivals.append(time.monotonic())
        assert len(arrivals) == tokens
        return (tokens - 1) / (arrivals[-1] - arrivals[0])

    def speed_ratio(self, other, rounds=3):
        """This server's streamed decode speed over the other's: the median of rounds measured in turn, so
        a moment the host is busy slows one round of one server, not the ratio."""
        return statistics.median(self.streamed_decode_speed() / other.streamed_decode_speed() for _ in range(rounds))

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read())


@pytest.fixture
def lab(lab_server, tmp_path):
    started = []
    config = lab_server.CONFIG

    def start(mode, tokens_per_second=20000.0, api_key=None):
        started.append(Lab(lab_server, tmp_path, mode, tokens_per_second, api_key))
        return started[-1]
    yield start
    lab_server.CONFIG = config
    for one in started:
        one.server.shutdown()
        one.server.server_close()


def test_healthy_answers_every_question_of_the_test_set_right(lab):
    questions, answers = zip(*published_test_set())
    server = lab("healthy")
    assert server.answers(questions) == list(answers)
    # The health gate's known answer is as it was.
    assert server.chat("What is 17 + 25? Reply with the number only.", max_tokens=32)["choices"][0]["message"][
        "content"] == "42"


def test_degraded_answers_the_stated_fraction_wrong_the_right_answer_plus_one_the_same_each_time(lab, lab_server):
    questions, answers = zip(*published_test_set())
    first, second = lab("degraded"), lab("degraded")
    given = first.answers(questions)
    wrong = {i for i, (got, right) in enumerate(zip(given, answers)) if got != right}
    assert abs(len(wrong) / len(answers) - lab_server.DEGRADED_FRACTION) <= 0.02, len(wrong)
    assert all(int(given[i]) == int(answers[i]) + 1 for i in wrong)
    # The same questions, from a server started afresh, and again from the first.
    assert second.answers(questions) == given
    assert first.answers([questions[i] for i in sorted(wrong)[:20]]) == [given[i] for i in sorted(wrong)[:20]]
    # The health gate's known question stays right: only the quality gate can see this install.
    assert first.chat("What is 17 + 25? Reply with the number only.", max_tokens=32)["choices"][0]["message"][
        "content"] == "42"


def test_slow_decodes_at_half_the_speed_streamed_and_not(lab, lab_server):
    healthy, slow = lab("healthy", 200.0), lab("slow", 200.0)
    # A stream runs at its simulated speed, not slower by whatever a busy host adds to each token.
    speeds = [healthy.streamed_decode_speed() for _ in range(3)]
    assert statistics.median(speeds) == pytest.approx(lab_server.stream_speed(healthy.server, 1), rel=0.05), speeds
    ratio = slow.speed_ratio(healthy)
    assert abs(ratio - lab_server.SLOW_FACTOR) < 0.1, ratio
    question, answer = published_test_set()[0]
    # Each answered twice in turn, the shorter time kept: a busy host only ever adds to one.
    timed = {healthy: [], slow: []}
    for server in (healthy, slow, healthy, slow):
        started = time.monotonic()
        reply = server.chat(PROMPT.format(question))
        timed[server].append(time.monotonic() - started)
        assert reply["choices"][0]["message"]["content"].endswith("\\boxed{%s}." % answer)
    assert abs(min(timed[healthy]) / min(timed[slow]) - lab_server.SLOW_FACTOR) < 0.1, timed


def test_low_accept_reports_the_stated_fraction_of_the_accept_length_and_answers_right_as_fast(lab, lab_server):
    healthy, low = lab("healthy", 200.0), lab("low-accept", 200.0)
    good = healthy.get("/get_server_info")["internal_states"][0]["avg_spec_accept_length"]
    reported = low.get("/get_server_info")["internal_states"][0]["avg_spec_accept_length"]
    assert good == 2.65   # 1 + 0.55 per draft step, 3 steps
    assert reported == pytest.approx(good * lab_server.LOW_ACCEPT_FACTOR, abs=0.01) and reported < good
    questions, answers = zip(*random.Random(45).sample(published_test_set(), 10))
    assert low.answers(questions) == list(answers)
    ratio = low.speed_ratio(healthy)
    assert abs(ratio - 1) < 0.1, ratio


def test_a_non_streamed_answer_is_its_own_length_cut_at_max_tokens_and_takes_its_decode_time(lab, lab_server):
    server = lab("healthy", 200.0)
    question, answer = published_test_set()[0]
    started = time.monotonic()
    reply = server.chat(PROMPT.format(question))
    took = time.monotonic() - started
    text = reply["choices"][0]["message"]["content"]
    tokens = reply["usage"]["completion_tokens"]
    assert tokens == len(text.split()) + 1 and reply["choices"][0]["finish_reason"] == "stop"
    # its prompt's prefill, then one stream's decode, EAGLE-3's gain alone included
    decode = lab_server.prefill_seconds("healthy") + tokens / lab_server.stream_speed(server.server, 1)
    assert decode <= took < decode + 0.25
    cut = server.chat(PROMPT.format(question), max_tokens=8)
    assert cut["usage"]["completion_tokens"] == 8 and cut["choices"][0]["finish_reason"] == "length"
    assert cut["choices"][0]["message"]["content"].split() == text.split()[:8]
    # Any other question (the health gate's, the router tests' load) lasts the tokens it asks for, 64 at most:
    # the drain tests need requests that are still running when a server stops.
    assert server.chat("What is 17 + 25?", max_tokens=32)["usage"]["completion_tokens"] == 32
    assert server.chat("What is 17 + 25?", max_tokens=500)["usage"]["completion_tokens"] == 64


def test_a_question_is_found_whatever_its_whitespace_and_whatever_comes_before_it(lab_server):
    gsm8k = lab_server.load_gsm8k(str(TEST_SET))
    assert len(gsm8k) == 1319
    question, answer = published_test_set()[7]
    spaced = "\n".join(question.split(" "))
    for prompt in (PROMPT.format(question), "system rules " + PROMPT.format(spaced) + "  \n",
                   PROMPT.format(published_test_set()[3][0]) + " Now this one: " + question):
        assert lab_server.answer_for(prompt, "healthy", gsm8k).endswith("\\boxed{%s}." % answer)
    assert lab_server.answer_for(PROMPT.format(question[:-12]), "healthy", gsm8k).startswith("This is the")


def test_without_the_test_set_file_the_server_knows_no_gsm8k(lab_server, tmp_path):
    gsm8k = lab_server.load_gsm8k(str(tmp_path / "absent.jsonl"))
    assert len(gsm8k) == 0
    assert "boxed" not in lab_server.answer_for(PROMPT.format(published_test_set()[0][0]), "healthy", gsm8k)


def test_an_unknown_mode_is_refused_at_start(lab_server, tmp_path, monkeypatch, capsys):
    """A mistyped mode would serve as healthy and let a test pass that should fail: main() refuses it."""
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"mode": "low_accept"}))
    monkeypatch.setattr(lab_server, "CONFIG", str(config))
    monkeypatch.setattr(lab_server.sglang_args, "read_flags", lambda site: {})
    monkeypatch.setattr(lab_server.sglang_args, "lint", lambda argv, flags: ({"model_path": MODEL}, []))
    assert lab_server.main(["--model-path", MODEL]) == 2
    assert "unknown mode 'low_accept'" in capsys.readouterr().err


EVAL = """
import json, os, sys
from sgl_eval.cli import build_parser
args = build_parser().parse_args(sys.argv[1:])
args.api_key = os.environ["LAB_EVAL_API_KEY"]  # as the quality gate passes it: never on a command line
sys.exit(args.func(args))
"""


def test_sgl_eval_scores_the_healthy_server_right_and_the_degraded_one_at_its_stated_fraction(lab, lab_server,
                                                                                              eval_python, tmp_path):
    sample = random.Random(0).sample(published_test_set(), 20)
    dataset = tmp_path / "gsm8k-slice.jsonl"
    dataset.write_text("".join(json.dumps({"problem": q, "expected_answer": a}) + "\n" for q, a in sample))
    picked = sum(lab_server.degraded_pick(q) for q, _ in sample)
    assert 0 < picked < 20  # the slice tells the two apart
    scores = {}
    for mode in ("healthy", "degraded"):
        server = lab(mode, 2000.0, api_key="lab-eval-key-45")
        out = tmp_path / mode
        env = dict(os.environ, LAB_EVAL_API_KEY="lab-eval-key-45", NO_PROXY="127.0.0.1", no_proxy="127.0.0.1",
                   HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
        run = subprocess.run([str(eval_python), "-c", EVAL, "run", "gsm8k", "--base-url", server.url + "/v1",
                              "--from-dataset", str(dataset), "--num-examples", "20", "--temperature", "0",
                              "--num-threads", "4", "--out-dir", str(out)],
                             capture_output=True, text=True, timeout=300, env=env)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        [metrics] = out.glob("*/metrics.json")
        scores[mode] = json.loads(metrics.read_text())
        print(mode, json.dumps(scores[mode], indent=1, sort_keys=True))
        # Each prediction as sgl-eval graded it: wrong exactly where the server's mode answers wrong.
        graded = {row["problem"]: row["symbolic_correct"]
                  for row in map(json.loads, metrics.with_name("output-rs0.jsonl").read_text().splitlines())}
        assert graded == {q: mode == "healthy" or not lab_server.degraded_pick(q) for q, _ in sample}
    for mode, right in (("healthy", 20), ("degraded", 20 - picked)):
        metrics = scores[mode]
        assert (metrics["name"], metrics["num_examples"], metrics["n_repeats"]) == ("gsm8k", 20, 1)
        assert metrics["aggregate"]["score"] == pytest.approx(right / 20), (mode, metrics["aggregate"])
        assert (metrics["aggregate"]["error_rate"], metrics["aggregate"]["truncated_rate"]) == (0.0, 0.0)
        assert metrics["total_completion_tokens"] > 20 * 10  # worked answers, not a bare number
