"""One quality run against the server on this host: accuracy, speed and EAGLE-3's accept length.

Runs in the eval's own venv (sgl-eval and its dependencies), started by the sglang_quality role:

  1. A fixed slice of the GSM8K test set (--examples questions drawn with --seed from the published
     file, whose sha256 is checked first) through SGLang's own accuracy harness, sgl-eval, at temperature
     0 and --concurrency requests at a time: the accuracy and the decode throughput at that concurrency.
  2. --latency-requests streamed requests, one at a time, of --latency-tokens tokens each: time to the
     first token and the time per token after it (one stream, as the seed's 92.6 tok/s was measured).
  3. EAGLE-3's average accept length since the server started, from /get_server_info.

The API key comes from the environment (SGLANG_API_KEY, which the role's wrapper reads from the server's
root-only env file): never a command-line argument. sgl-eval runs in this process, its client given the
key here, because its own command line takes the key as an argument. /get_server_info returns every server
argument, the keys among them: only the accept length is kept from it, and nothing of it is printed.

Progress goes to --progress as JSON while it runs; the result to --result as JSON. Exit 0 with a result,
2 with a finding on standard error (the dataset's digest, the server unreachable, sgl-eval failing).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

LATENCY_PROMPT = "Count upwards from one, one number per line, and do not stop."


def gsm8k_answer(answer: str):
    """The number after '####' in a GSM8K answer, as NeMo-Skills' gsm8k/prepare.py reads it (sgl-eval's)."""
    value = float(answer.split("####")[-1].strip().replace(",", ""))
    return int(value) if int(value) == value else value


def gsm8k_slice(dataset: Path, sha256: str, examples: int, seed: int) -> list[dict]:
    """`examples` questions of the published test set, drawn with `seed`, in the order of the file,
    in the shape sgl-eval's --from-dataset reads ({id, problem, expected_answer})."""
    data = dataset.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise SystemExit("the GSM8K test set %s has sha256 %s, not the pinned %s" % (dataset, digest, sha256))
    rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    if not 0 < examples <= len(rows):
        raise SystemExit("examples must be between 1 and %d (the test set's questions), not %d" % (len(rows), examples))
    chosen = sorted(random.Random(seed).sample(range(len(rows)), examples))
    return [{"id": "gsm8k-test-%d" % i, "problem": rows[i]["question"],
             "expected_answer": gsm8k_answer(rows[i]["answer"])} for i in chosen]


class Progress:
    """Writes how far the run got to a JSON file (atomically), for the role's watch."""

    def __init__(self, path: Path | None, total: int):
        self.path, self.total, self.started = path, total, time.monotonic()
        self.state = {"phase": "starting", "answered": 0, "total": total}

    def update(self, **changes):
        self.state.update(changes, elapsed_s=round(time.monotonic() - self.started, 1))
        if self.path:
            partial = self.path.with_suffix(".part")
            partial.write_text(json.dumps(self.state))
            os.replace(partial, self.path)


def run_sgl_eval(args, key: str, slice_file: Path, progress: Progress) -> dict:
    """sgl-eval's gsm8k over the slice, in this process; its metrics.json, read back."""
    from sgl_eval.cli import build_parser  # the eval venv's

    out = Path(args.out_dir)
    argv = ["run", "gsm8k", "--base-url", args.base_url.rstrip("/") + "/v1", "--model", args.model,
            "--from-dataset", str(slice_file), "--num-examples", str(args.examples),
            "--num-threads", str(args.concurrency), "--temperature", "0", "--seed", str(args.seed),
            "--out-dir", str(out)]
    if args.max_tokens:
        argv += ["--max-tokens", str(args.max_tokens)]
    for pair in args.chat_template_kwarg:
        argv += ["--chat-template-kwarg", pair]
    parsed = build_parser().parse_args(argv)
    parsed.api_key = key or "EMPTY"
    before = set(out.glob("sgl_eval_gsm8k_*"))
    progress.update(phase="eval")
    watcher = threading.Thread(target=watch_predictions, args=(out, before, progress), daemon=True)
    watcher.start()
    # sgl-eval prints its summary and progress bars: into the run's log, not the task's output.
    with open(out / "sgl-eval.log", "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        rc = parsed.func(parsed)
    runs = sorted(set(out.glob("sgl_eval_gsm8k_*")) - before)
    if rc != 0 or not runs or not (runs[-1] / "metrics.json").is_file():
        raise SystemExit("sgl-eval ended with %s and no metrics.json; its log: %s" % (rc, out / "sgl-eval.log"))
    return json.loads((runs[-1] / "metrics.json").read_text())


def watch_predictions(out: Path, before: set, progress: Progress):
    """Counts the answers sgl-eval has scored so far (its predictions file, a line each)."""
    while progress.state["phase"] == "eval":
        answered = 0
        for run in set(out.glob("sgl_eval_gsm8k_*")) - before:
            for predictions in run.glob("output-rs*.jsonl"):
                with contextlib.suppress(OSError):
                    answered += sum(1 for _ in predictions.open())
        if answered != progress.state["answered"]:
            progress.update(answered=answered)
        time.sleep(1)


def request(url: str, key: str, body: dict | None = None, timeout: float = 600):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = json.dumps(body).encode() if body is not None else None
    return urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=timeout)


def one_stream(args, key: str) -> dict:
    """One streamed request of exactly --latency-tokens tokens: its TTFT and time per token after it.
    Tokens are counted from the usage the server sends last, not from chunks: EAGLE-3 sends several
    tokens in one chunk when a draft is accepted."""
    body = {"model": args.model, "messages": [{"role": "user", "content": LATENCY_PROMPT}], "temperature": 0,
            "max_tokens": args.latency_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.monotonic()
    first = last = None
    tokens = 0
    with request(args.base_url.rstrip("/") + "/v1/chat/completions", key, body) as response:
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if any((choice.get("delta") or {}).get("content") for choice in event.get("choices") or []):
                last = time.monotonic()
                first = first or last
            tokens = (event.get("usage") or {}).get("completion_tokens") or tokens
    if first is None:
        raise SystemExit("the latency request streamed no token")
    tokens = tokens or args.latency_tokens
    per_token = (last - first) / (tokens - 1) if tokens > 1 and last > first else None
    return {"ttft_s": first - started, "per_token_s": per_token, "tokens": tokens}


def accept_length(args, key: str):
    """EAGLE-3's average accept length, from /get_server_info's internal_states; None without EAGLE-3.
    Nothing else of the answer (every server argument, the keys among them) leaves this function."""
    with request(args.base_url.rstrip("/") + "/get_server_info", key, timeout=60) as response:
        info = json.load(response)
    states = info.get("internal_states") or [{}]
    value = (states[0] or {}).get("avg_spec_accept_length")
    return round(float(value), 3) if value is not None else None


def measure(args, key: str) -> dict:
    progress = Progress(Path(args.progress) if args.progress else None, args.examples)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = gsm8k_slice(Path(args.dataset), args.dataset_sha256, args.examples, args.seed)
    slice_file = out / "gsm8k-slice.jsonl"
    slice_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    started = time.monotonic()
    metrics = run_sgl_eval(args, key, slice_file, progress)
    eval_seconds = time.monotonic() - started
    progress.update(phase="latency", answered=args.examples)
    streams = [one_stream(args, key) for _ in range(args.latency_requests)]
    per_token = [s["per_token_s"] for s in streams if s["per_token_s"]]
    aggregate = metrics.get("aggregate") or {}
    if metrics.get("partial") or "score" not in aggregate:
        raise SystemExit("sgl-eval's run was partial or has no score: %s" % sorted(aggregate))
    result = {
        "accuracy": round(float(aggregate["score"]), 4),
        "questions": int(metrics["num_examples"]),
        "error_rate": aggregate.get("error_rate"),
        "decode_tok_s": round(float(metrics["output_throughput_tps"]), 1),
        "ttft_ms": round(statistics.median(s["ttft_s"] for s in streams) * 1000, 1) if streams else None,
        "itl_ms": round(statistics.median(per_token) * 1000, 2) if per_token else None,
        "accept_length": accept_length(args, key),
        "eval_seconds": round(eval_seconds, 1),
        "concurrency": args.concurrency,
        "seed": args.seed,
        "dataset_sha256": args.dataset_sha256,
        "sgl_eval_version": metrics.get("sgl_eval_version"),
    }
    result["single_stream_tok_s"] = round(1000 / result["itl_ms"], 1) if result["itl_ms"] else None
    progress.update(phase="done")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True, help="the server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--dataset", required=True, help="the published GSM8K test.jsonl")
    parser.add_argument("--dataset-sha256", required=True)
    parser.add_argument("--examples", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--max-tokens", type=int, default=0)
    parser.add_argument("--chat-template-kwarg", action="append", default=[], metavar="K=V")
    parser.add_argument("--latency-requests", type=int, default=4)
    parser.add_argument("--latency-tokens", type=int, default=128)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--progress", default="")
    parser.add_argument("--result", required=True)
    args = parser.parse_args(argv)
    key = os.environ.pop("SGLANG_API_KEY", "")
    try:
        result = measure(args, key)
    except (urllib.error.URLError, OSError) as error:
        sys.stderr.write("the server at %s: %s\n" % (args.base_url, error))
        return 2
    except SystemExit as finding:
        if finding.code in (None, 0):
            raise
        sys.stderr.write("%s\n" % finding.code)
        return 2
    Path(args.result).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
