#!/usr/bin/python3
"""Lab fixture: stands in for `python -m sglang.launch_server` on lab nodes, which have no GPU.

The lab's unit is rendered by the same template and differs only in the module after -m
(`sglang_fleet_lab_server`, this file). It checks its arguments with the same flag lint as the
role, against the sglang installed in the venv that runs it, then serves on loopback the
OpenAI-compatible endpoints the health gate and bench_serving use: /health, /v1/models,
/v1/chat/completions and /v1/completions (streaming too), /get_server_info; and what sglang-router
0.3.2 asks of a worker (/health, /server_info, /model_info, captured in
tests/fixtures/upstream/sglang-router-0.3.2/worker-calls.json) and what a drain reads (/v1/loads,
/get_load). It counts the requests in flight and says how many a stop cut off.

It asks keys as sglang 0.5.9's auth middleware does (srt/utils/auth.py): each route's level read at start
from the installed sglang's @auth_level decorators (srt/entrypoints/http_server.py), so that with
--admin-api-key only the admin key opens an ADMIN_OPTIONAL route and without one the client key does.
Two admin routes are served, past the auth: POST /update_weights_from_disk (which loads nothing and
answers {"success": false, "message": "lab"}) and GET /hicache/storage-backend (the settings it reads).

With --enable-metrics it serves /metrics as sglang 0.5.9 does (unauthenticated, rank 0 only): the
scheduler's gauges and the tokenizer's token counters and TTFT/ITL histograms, under the names, help
texts and default buckets that the installed sglang's srt/metrics/collector.py declares (read at start:
a release that renamed one fails the start, naming it), with the labels of its scheduler and tokenizer
managers. The values are the lab's own: requests in flight, the simulated tokens and their timing.

A multi-node rank (--nnodes > 1) behaves as sglang 0.5.9's ranks do (entrypoints/engine.py): rank 0
waits at --dist-init-addr for every other rank before it loads and serves; a rank >= 1 connects to
it (retrying, as torch's TCPStore client does) and then serves only a dummy /health; and a rank that
loses a peer exits, as the NCCL watchdog ends the real processes.

Behaviour comes from /etc/lab-gpu/server.json (written by files/lab/provision.yml; LAB_SERVER_CONFIG
names another file):
  mode: one of MODES (below); a lab sgl-kernel build's LAB_SERVER_MODE wins over it (labctl builds
    one per mode that only an install can carry: +<tag>.crash, .degraded, .slow, .low_accept)
  startup_seconds: how long "loading the model" takes
  tokens_per_second: simulated decode speed of one stream, per host (for benchmarks)

The modes, each what a test can make one node's install do:
  healthy        answers right, at the configured speed
  never-healthy  never finishes loading (/health answers 503)
  crash          exits while loading
  garbage        answers every prompt with the same garbage
  degraded       answers DEGRADED_FRACTION of the GSM8K test questions wrong (the right answer + 1),
                 the same questions every run (a hash of the question picks them); all else right,
                 the known-answer question of the health gate too
  slow           decodes at SLOW_FACTOR of tokens_per_second and prefills at SLOW_FACTOR of the
                 speed, every request, answers right
  low-accept     reports EAGLE-3's accept length times LOW_ACCEPT_FACTOR (/get_server_info's
                 internal_states, /metrics' spec_accept_length), answers right at the same speed:
                 the accept length alone shows it, as a drafter that lost its capture would

GSM8K: the published test set, /etc/lab-gpu/gsm8k-test.jsonl (LAB_SERVER_GSM8K names another file;
none there, no GSM8K knowledge), read once at start. A prompt that holds one of its questions
(whitespace aside; the last one in the prompt counts, as the question ends an eval's prompt) is
answered with the set's own worked solution, calculator notes dropped, ending in
\\boxed{<its #### answer, commas removed>}: what sgl-eval's gsm8k prompt asks for.

A non-streaming answer is as long as its words plus the end-of-sequence token, cut at max_tokens
(finish_reason "length", as a real server cuts it); that count is usage.completion_tokens and is
decoded at the speed model's pace before the answer is sent. A streamed answer is max_tokens tokens
(bench_serving asks for fixed output lengths).

The speed model is a simulation, shaped like published figures for Kimi on 8x RTX PRO 6000: each
stream slows a little as more run at once, and EAGLE-3 (when the command line asks for it) speeds
a single stream up by about a quarter but costs throughput as concurrency grows (in the lab from
about 3 streams on, where real fleets cross over much later). The first token of every answer waits
PREFILL_SECONDS more (twice that in mode slow), its prompt's prefill. Lab numbers are simulated and say
nothing about real hardware.
"""
import ast
import contextlib
import hashlib
import math
import json
import os
import re
import secrets
import signal
import socket
import sys
import sysconfig
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import sglang_fleet_lab_args as sglang_args

CONFIG = os.environ.get("LAB_SERVER_CONFIG", "/etc/lab-gpu/server.json")
GSM8K = os.environ.get("LAB_SERVER_GSM8K", "/etc/lab-gpu/gsm8k-test.jsonl")
ANSWERS = {"17 + 25": "42"}
GARBAGE = "\u00bf\u00bf\u00bf !!!! ####"
MODES = ("healthy", "never-healthy", "crash", "garbage", "degraded", "slow", "low-accept")
DEGRADED_FRACTION = 0.20   # of the GSM8K test questions that mode degraded answers wrong
SLOW_FACTOR = 0.5          # of tokens_per_second that mode slow decodes at
LOW_ACCEPT_FACTOR = 0.6    # of the EAGLE-3 accept length that mode low-accept reports
# Every answer's first token waits for its prompt's prefill and a scheduler step, as a real server's does.
# Without it the lab's time to first token was one decode step (about 4 ms), and a loaded CI machine's
# scheduling jitter alone (2-3 ms) moved it by more than the quality gate's tolerance.
PREFILL_SECONDS = 0.05
QUESTION_KEY_WORDS = 6     # the words that index a GSM8K question (its first ones)


def load_config():
    try:
        with open(CONFIG) as handle:
            return json.load(handle)
    except OSError:
        return {}


def eagle_gain(streams):
    """Simulated EAGLE-3 speed-up of one stream: 1.25x alone, break-even near 3 streams, 0.8x at 8.

    The lab's concurrencies are small (its CPU plays every stream); the shape is the point."""
    return 1.25 - 0.15 * math.log2(max(1, streams))


def stream_speed(server, streams):
    """Simulated tokens per second of one stream while `streams` run at once."""
    speed = server.tokens_per_second / (1.0 + 0.02 * (max(1, streams) - 1))
    return speed * eagle_gain(streams) if server.speculative else speed


# ServerArgs.from_cli_args renames these argparse destinations (sglang 0.5.9, server_args.py).
SERVER_ARGS_NAMES = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
                     "attention_context_parallel_size": "attn_cp_size", "data_parallel_size": "dp_size",
                     "expert_parallel_size": "ep_size"}


def typed(value):
    """Command-line strings as the server's own /get_server_info types them."""
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
    return value


def degraded_pick(question):
    """Whether mode degraded answers this GSM8K question wrong: the first 8 bytes of the sha256 of the
    question (whitespace normalised), read as a fraction of 2**64, below DEGRADED_FRACTION. The same
    questions every run and on every node: 268 of the 1,319 of the published test set (20.3 %)."""
    digest = hashlib.sha256(" ".join(question.split()).encode()).digest()
    return int.from_bytes(digest[:8], "big") < DEGRADED_FRACTION * 2 ** 64


class Gsm8k:
    """The GSM8K test questions, indexed by their first QUESTION_KEY_WORDS words, each with its worked
    solution and final answer. find() walks the prompt's word starts from its end and looks each up:
    a few dict lookups per word of the prompt, not a substring scan per question."""

    def __init__(self, rows):
        self.by_start = {}
        for row in rows:
            words = tuple(row["question"].split())
            solution, _, answer = row["answer"].rpartition("####")
            answer = answer.strip().replace(",", "")
            worked = re.sub(r"<<[^>]*>>", "", solution).strip()
            self.by_start.setdefault(words[:QUESTION_KEY_WORDS], []).append(
                (words, worked, answer, degraded_pick(row["question"])))
        self.key_lengths = sorted({len(key) for key in self.by_start}, reverse=True)

    def __len__(self):
        return sum(len(entries) for entries in self.by_start.values())

    def find(self, prompt):
        """(worked solution, answer, picked by degraded) of the last test question in the prompt, or None."""
        words = prompt.split()
        for start in range(len(words) - 1, -1, -1):
            for length in self.key_lengths:
                for question, worked, answer, picked in self.by_start.get(tuple(words[start:start + length]), ()):
                    if tuple(words[start:start + len(question)]) == question:
                        return worked, answer, picked
        return None


def load_gsm8k(path):
    """The GSM8K index of the jsonl file at path (openai's format: question, answer "... #### 18"), or
    an empty one where there is no file."""
    try:
        with open(path, encoding="utf-8") as handle:
            return Gsm8k(json.loads(line) for line in handle if line.strip())
    except FileNotFoundError:
        return Gsm8k([])


def wrong_answer(answer):
    """Mode degraded's answer: the right one plus one (GSM8K's answers are integers)."""
    return str(int(answer) + 1)


def answer_for(prompt, mode, gsm8k=None):
    if mode == "garbage":
        return GARBAGE
    for question, answer in ANSWERS.items():
        if question in prompt:
            return answer
    found = gsm8k.find(prompt) if gsm8k else None
    if found:
        worked, answer, picked = found
        if mode == "degraded" and picked:
            answer = wrong_answer(answer)
        return "%s\nThe answer is \\boxed{%s}." % (worked, answer)
    return "This is the sglang-fleet lab server; lab numbers are simulated."


def within_budget(text, max_tokens):
    """(text, completion tokens, finish reason) of an answer decoded under max_tokens (None: no limit):
    its words and the end-of-sequence token, cut at max_tokens as a real server cuts an answer."""
    words = text.split()
    if max_tokens is None or len(words) + 1 <= max_tokens:
        return text, len(words) + 1, "stop"
    return " ".join(words[:max_tokens]), max_tokens, "length"


def decode_speed(config, mode):
    """Tokens per second of one stream alone: the node's, halved (SLOW_FACTOR) in mode slow."""
    speed = float(config.get("tokens_per_second", 200))
    return speed * SLOW_FACTOR if mode == "slow" else speed


def prefill_seconds(mode):
    """Seconds of a prompt's prefill before its first token: PREFILL_SECONDS, over SLOW_FACTOR in mode slow."""
    return PREFILL_SECONDS / SLOW_FACTOR if mode == "slow" else PREFILL_SECONDS


def mode_accept_length(length, mode):
    """The EAGLE-3 accept length a server reports: LOW_ACCEPT_FACTOR of its own in mode low-accept."""
    return round(length * LOW_ACCEPT_FACTOR, 2) if mode == "low-accept" else length


# --- /metrics: sglang 0.5.9's names, the lab's values ------------------------------------------------
# What the lab serves, by collector.py's names less the "sglang:" prefix, and the label keys sglang 0.5.9
# gives them (the scheduler's in managers/scheduler_metrics_mixin.py, the tokenizer's in
# managers/tokenizer_manager.py). tests/unit/test_lab_server_metrics.py checks both against the wheel.
SCHEDULER_GAUGES = ("num_running_reqs", "num_queue_reqs", "token_usage", "gen_throughput", "spec_accept_length")
TOKENIZER_COUNTERS = ("prompt_tokens_total", "generation_tokens_total")
TOKENIZER_HISTOGRAMS = ("time_to_first_token_seconds", "inter_token_latency_seconds")
SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
TOKENIZER_LABELS = ("model_name",)
KINDS = dict([(n, "gauge") for n in SCHEDULER_GAUGES] + [(n, "counter") for n in TOKENIZER_COUNTERS]
             + [(n, "histogram") for n in TOKENIZER_HISTOGRAMS])
KV_TOKENS = 65536       # the lab's simulated KV-cache size, in tokens, when --max-total-tokens is unset
THROUGHPUT_WINDOW = 10  # seconds of generated tokens behind gen_throughput


def declared_metrics(site):
    """{name: (kind, help, buckets)} of every sglang: metric the installed collector.py declares, a
    histogram's buckets being the default list it assigns to the variable its buckets= names."""
    with open(os.path.join(site, "sglang", "srt", "metrics", "collector.py")) as handle:
        tree = ast.parse(handle.read())
    lists, found = {}, {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.List) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            try:
                lists.setdefault(node.targets[0].id, [float(v) for v in ast.literal_eval(node.value)])
            except (ValueError, TypeError):
                pass
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Gauge", "Counter", "Histogram"):
            args = {kw.arg: kw.value for kw in node.keywords}
            name = getattr(args.get("name"), "value", None)
            if isinstance(name, str) and name.startswith("sglang:"):
                found[name[len("sglang:"):]] = (node.func.id.lower(), getattr(args.get("documentation"), "value", ""),
                                                getattr(args.get("buckets"), "id", None))
    return {name: (kind, doc, lists.get(buckets) if buckets else None) for name, (kind, doc, buckets) in found.items()}


def served_metrics(site):
    """The metrics the lab serves, as the installed sglang declares them; a drifted release is named."""
    declared = declared_metrics(site)
    wrong = [name for name, kind in KINDS.items() if declared.get(name, (None,))[0] != kind
             or (kind == "histogram" and not declared[name][2])]
    if wrong:
        raise ValueError("the installed sglang's srt/metrics/collector.py does not declare %s as sglang 0.5.9 does"
                         % ", ".join("sglang:%s (a %s)" % (name, KINDS[name]) for name in wrong))
    return {name: declared[name] for name in KINDS}


def number(value):
    """A sample value as prometheus_client writes it."""
    if value == math.inf:
        return "+Inf"
    return repr(float(value))


class Metrics:
    """What a server's tokenizer counted and what its scheduler sees, under the installed sglang's names."""

    def __init__(self, declared, model, args):
        self.declared, self.lock = declared, threading.Lock()
        self.tokenizer = {"model_name": model}
        self.scheduler = {"model_name": model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
                          "moe_ep_rank": "0"}
        self.kv_tokens = int(args.get("max_total_tokens") or KV_TOKENS)
        self.max_running = int(args.get("max_running_requests") or 0)
        self.counters = dict.fromkeys(TOKENIZER_COUNTERS, 0.0)
        # Per histogram: the count in each bucket (not cumulative, +Inf last) and the sum.
        self.histograms = {name: [[0] * (len(declared[name][2]) + 1), 0.0] for name in TOKENIZER_HISTOGRAMS}
        self.held = 0          # KV tokens of the requests in flight
        self.generated = []    # (monotonic time, tokens) of the last THROUGHPUT_WINDOW seconds

    def begin(self, prompt_tokens, max_tokens):
        with self.lock:
            self.counters["prompt_tokens_total"] += prompt_tokens
            self.held += prompt_tokens + max_tokens

    def end(self, prompt_tokens, max_tokens):
        with self.lock:
            self.held -= prompt_tokens + max_tokens

    def tokens(self, first_token_seconds, gaps):
        """One request's output: the time to its first token and the gaps between the next ones."""
        with self.lock:
            self.observe("time_to_first_token_seconds", first_token_seconds)
            for gap in gaps:
                self.observe("inter_token_latency_seconds", gap)
            self.counters["generation_tokens_total"] += 1 + len(gaps)
            self.generated.append((time.monotonic(), 1 + len(gaps)))

    def observe(self, name, seconds):
        counts, bounds = self.histograms[name][0], self.declared[name][2]
        counts[next((i for i, bound in enumerate(bounds) if seconds <= bound), len(bounds))] += 1
        self.histograms[name][1] += seconds

    def render(self, in_flight, accept_length):
        """The exposition, as prometheus_client's multiprocess collector writes sglang's."""
        with self.lock:
            now = time.monotonic()
            self.generated = [(t, n) for t, n in self.generated if now - t <= THROUGHPUT_WINDOW]
            gauges = {"num_running_reqs": in_flight if not self.max_running else min(in_flight, self.max_running),
                      "num_queue_reqs": max(0, in_flight - self.max_running) if self.max_running else 0,
                      "token_usage": round(min(1.0, self.held / self.kv_tokens), 4),
                      "gen_throughput": sum(n for _t, n in self.generated) / THROUGHPUT_WINDOW,
                      "spec_accept_length": accept_length}
            lines = []

            def family(name, kind):  # a counter's lines carry its _total name in the text format 0.0.4
                lines.extend(["# HELP sglang:%s %s" % (name, self.declared[name][1]), "# TYPE sglang:%s %s" % (name, kind)])

            def sample(name, labels, value):
                text = ",".join('%s="%s"' % (k, str(v).replace("\\", "\\\\").replace('"', '\\"')) for k, v in labels)
                lines.append("sglang:%s{%s} %s" % (name, text, number(value)))

            for name in SCHEDULER_GAUGES:
                family(name, "gauge")
                sample(name, [(k, self.scheduler[k]) for k in SCHEDULER_LABELS], gauges[name])
            labels = [(k, self.tokenizer[k]) for k in TOKENIZER_LABELS]
            for name in TOKENIZER_COUNTERS:
                family(name, "counter")
                sample(name, labels, self.counters[name])
            for name in TOKENIZER_HISTOGRAMS:
                family(name, "histogram")
                counts, total = self.histograms[name]
                running = 0
                for bound, count in zip(self.declared[name][2] + [math.inf], counts):
                    running += count
                    sample(name + "_bucket", labels + [("le", number(bound))], running)
                sample(name + "_count", labels, running)
                sample(name + "_sum", labels, total)
            return "\n".join(lines) + "\n"


# --- Auth: sglang 0.5.9's levels, read from the installed sglang -------------------------------------
ROUTE_DECORATORS = {"get": ["GET"], "post": ["POST"], "put": ["PUT"], "delete": ["DELETE"], "patch": ["PATCH"]}


def route_auth_levels(site):
    """[(methods, path pattern, level)] of every route the installed srt/entrypoints/http_server.py declares
    on `app`, in source order (the order starlette matches them in), each with the AuthLevel its
    @auth_level decorator names (ADMIN_OPTIONAL, ADMIN_FORCE), else NORMAL, as auth.py reads it."""
    with open(os.path.join(site, "sglang", "srt", "entrypoints", "http_server.py")) as handle:
        tree = ast.parse(handle.read())
    routes = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for function in sorted(functions, key=lambda n: n.lineno):
        level, declared = "NORMAL", []
        for decorator in function.decorator_list:
            if not isinstance(decorator, ast.Call):
                continue
            func = decorator.func
            if isinstance(func, ast.Name) and func.id == "auth_level" and decorator.args:
                level = getattr(decorator.args[0], "attr", "NORMAL")
            elif (isinstance(func, ast.Attribute) and getattr(func.value, "id", None) == "app" and decorator.args
                  and isinstance(decorator.args[0], ast.Constant)):
                methods = ROUTE_DECORATORS.get(func.attr)
                if func.attr == "api_route":  # FastAPI's default is GET
                    given = {kw.arg: kw.value for kw in decorator.keywords}.get("methods")
                    methods = ast.literal_eval(given) if given is not None else ["GET"]
                if methods is not None:
                    declared.append((decorator.args[0].value, methods))
        for path, methods in declared:
            methods = {m.upper() for m in methods} | ({"HEAD"} if "GET" in methods else set())  # as starlette
            pattern = re.sub(r"\\\{([^}:]+)(:path)?\\\}", lambda m: ".*" if m.group(2) else "[^/]+", re.escape(path))
            routes.append((methods, re.compile(pattern), level))
    return routes


def auth_level_of(routes, method, path):
    """The level of the route a request matches in full (path and method), else NORMAL: sglang 0.5.9's
    _get_auth_level_from_app_and_scope (srt/utils/auth.py)."""
    for methods, pattern, level in routes:
        if method in methods and pattern.fullmatch(path):
            return level
    return "NORMAL"


def decide_request_auth(method, path, authorization, api_key, admin_api_key, level):
    """(allowed, status when refused) for one request, as sglang 0.5.9's decide_request_auth decides
    (srt/utils/auth.py; tests/unit/test_lab_server_auth.py holds the two side by side): /health* and
    /metrics* are open; ADMIN_FORCE needs the admin key (403 without one configured); ADMIN_OPTIONAL
    needs the admin key where one is set, else the client key where that is set, else nothing; NORMAL
    needs the client key where it is set."""
    if method == "OPTIONS" or path.startswith("/health") or path.startswith("/metrics"):
        return True, None

    def bearer(expected):
        parts = (authorization or "").split(" ", 1)
        return len(parts) == 2 and parts[0].lower() == "bearer" and secrets.compare_digest(parts[1], expected)

    if level == "ADMIN_FORCE":
        if not admin_api_key:
            return False, 403
        return (True, None) if bearer(admin_api_key) else (False, 401)
    expected = (admin_api_key or api_key) if level == "ADMIN_OPTIONAL" else api_key
    if not expected:
        return True, None
    return (True, None) if bearer(expected) else (False, 401)


class Handler(BaseHTTPRequestHandler):
    server_version = "sglang-fleet-lab"

    def log_message(self, fmt, *args):  # into the journal, one line a request
        sys.stderr.write("lab-server: %s\n" % (fmt % args))

    def send_json(self, code, payload):
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_text(self, text):
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self, method):
        """sglang's auth middleware, which answers before any route: each route's level as the installed
        sglang marks it, the decision as its auth.py takes it."""
        path = self.path.split("?", 1)[0]
        allowed, status = decide_request_auth(method, path, self.headers.get("Authorization"), self.server.api_key,
                                              self.server.admin_api_key,
                                              auth_level_of(self.server.routes, method, path))
        if not allowed:
            self.send_json(status, {"error": "Unauthorized" if status == 401 else "Forbidden"})
        return allowed

    def do_GET(self):
        if not self.server.dummy and not self.authorized("GET"):
            return None
        if not self.server.ready.is_set():
            return self.send_json(503, {"error": "loading"})
        path = self.path.split("?", 1)[0]
        if path == "/health":
            return self.send_json(200, {})
        if self.server.dummy:  # a rank >= 1 serves nothing else
            return self.send_json(404, {"error": "not found"})
        if path == "/metrics" and self.server.metrics:  # no key asked, as sglang's auth lets /metrics by
            return self.send_text(self.server.metrics.render(self.server.in_flight, self.server.accept_length
                                                             if self.server.speculative else 0.0))
        if path == "/hicache/storage-backend":  # an admin route that only reads (0.5.9: with an admin key only)
            if not self.server.admin_api_key:
                return self.send_json(400, {"error": "This endpoint requires admin API key, but this server was "
                                                     "started without one (admin-api-key)."})
            return self.send_json(200, {name: self.server.args.get(name) for name in (
                "hicache_storage_backend", "hicache_storage_backend_extra_config",
                "hicache_storage_prefetch_policy", "hicache_write_policy")})
        if path == "/model_info" or path == "/get_model_info":
            return self.send_json(200, {"model_path": self.server.args.get("model_path"),
                                        "tokenizer_path": self.server.args.get("model_path"),
                                        "is_generation": True, "model_type": "kimi_k25"})
        if path == "/v1/loads":
            total = self.server.in_flight
            return self.send_json(200, {"version": "lab", "dp_rank_count": 1, "loads": [
                {"dp_rank": 0, "num_running_reqs": total, "num_waiting_reqs": 0, "num_total_reqs": total}],
                "aggregate": {"total_running_reqs": total, "total_waiting_reqs": 0, "total_reqs": total}})
        if path == "/get_load":
            return self.send_json(200, [{"dp_rank": 0, "num_reqs": self.server.in_flight, "num_waiting_reqs": 0}])
        if self.path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [
                {"id": self.server.model, "object": "model", "owned_by": "sglang"}]})
        if path in ("/get_server_info", "/server_info"):
            info = {SERVER_ARGS_NAMES.get(dest, dest): typed(value) for dest, value in self.server.args.items()}
            info.setdefault("served_model_name", self.server.args.get("model_path"))  # as ServerArgs fills it
            info.setdefault("speculative_algorithm", None)
            info.setdefault("enable_flashinfer_allreduce_fusion", False)
            info["internal_states"] = [{"avg_spec_accept_length": self.server.accept_length}
                                       if self.server.speculative else {}]
            if getattr(self.server, "info_redacted", False):
                info.update({k: "<redacted>" for k in SECRET_ARGS if info.get(k)})
            return self.send_json(200, dict(info, version="lab"))
        return self.send_json(404, {"error": "not found"})

    def do_POST(self):
        if not self.server.dummy and not self.authorized("POST"):
            return None
        if not self.server.ready.is_set() or self.server.dummy:
            return self.send_json(503 if not self.server.dummy else 404, {"error": "not serving"})
        if self.path.split("?", 1)[0] == "/update_weights_from_disk":  # an admin route: past auth, it loads nothing
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            return self.send_json(400, {"success": False, "message": "lab", "num_paused_requests": 0})
        with self.server.lock:
            self.server.in_flight += 1
        try:
            self.generate()
        finally:
            with self.server.lock:
                self.server.in_flight -= 1

    def generate(self):
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/generate":
            prompt = str(request.get("text", ""))
            limit = (request.get("sampling_params") or {}).get("max_new_tokens")
            text, tokens, finish = self.decoded(prompt, limit)
            with self.counted(len(prompt.split()), tokens):
                self.decode_at_once(tokens)
            return self.send_json(200, {"text": text, "meta_info": {"id": "lab", "completion_tokens": tokens,
                                                                    "finish_reason": {"type": finish}}})
        if self.path == "/v1/chat/completions":
            prompt = " ".join(str(m.get("content", "")) for m in request.get("messages", []))
        elif self.path == "/v1/completions":
            prompt = str(request.get("prompt", ""))
        else:
            return self.send_json(404, {"error": "not found"})
        text = answer_for(prompt, self.server.mode, self.server.gsm8k)
        if request.get("stream"):
            max_tokens = int(request.get("max_tokens") or 16)
            with self.counted(len(prompt.split()), max_tokens):
                self.stream_answer(max_tokens)
            return None
        text, tokens, finish = self.decoded(prompt, request.get("max_tokens"))
        with self.counted(len(prompt.split()), tokens):
            self.decode_at_once(tokens)
        if self.path == "/v1/chat/completions":
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
        return self.send_json(200, {"id": "lab", "object": "completion", "model": self.server.model,
                                    "choices": [choice], "usage": {"prompt_tokens": len(prompt.split()),
                                                                    "completion_tokens": tokens}})

    def decoded(self, prompt, limit):
        """(text, tokens, finish reason) of a whole answer. A GSM8K answer is as long as it is, cut at the
        limit; any other (the health gate's, the router tests' load) takes the tokens asked for, 64 at most,
        as it always has: the load tests rely on requests that last (a drain that waits for them)."""
        text = answer_for(prompt, self.server.mode, self.server.gsm8k)
        if self.server.gsm8k and self.server.gsm8k.find(prompt):
            return within_budget(text, None if limit is None else int(limit))
        return text, max(1, min(int(limit or 16), 64)), "stop"

    def stream_answer(self, max_tokens):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        with self.server.lock:
            self.server.streams += 1
        try:
            self.stream(max_tokens)
        finally:
            with self.server.lock:
                self.server.streams -= 1

    @contextlib.contextmanager
    def counted(self, prompt_tokens, max_tokens):
        """A request's tokens held in the KV cache while it runs, for /metrics."""
        metrics = self.server.metrics
        if metrics:
            metrics.begin(prompt_tokens, max_tokens)
        try:
            yield
        finally:
            if metrics:
                metrics.end(prompt_tokens, max_tokens)

    def decode_at_once(self, tokens):
        """A whole answer at once: the simulated decode of its tokens at the pace of one stream among the
        requests in flight, timed token by token."""
        tokens = max(1, tokens)
        gap = 1.0 / stream_speed(self.server, self.server.in_flight)
        time.sleep(self.server.prefill_seconds + tokens * gap)
        if self.server.metrics:
            self.server.metrics.tokens(self.server.prefill_seconds + gap, [gap] * (tokens - 1))

    def stream(self, max_tokens):
        """Tokens sent on a schedule of the decode speed: each is due one gap after the one before was
        due, not after it was sent, so the time a busy host adds to a sleep or a write is not added to
        every token (a stream would run slower than its speed, by however loaded the host is)."""
        started = last = time.monotonic()
        first, gaps = None, []
        due = started + self.server.prefill_seconds
        for i in range(max_tokens):
            due += 1.0 / stream_speed(self.server, self.server.streams)
            time.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            if first is None:
                first = now - started
            else:
                gaps.append(now - last)
            last = now
            piece = {"index": 0, "finish_reason": None}
            if self.path == "/v1/chat/completions":
                piece["delta"] = {"content": "tok "}
            else:
                piece["text"] = "tok "
            self.wfile.write(b"data: " + json.dumps({"id": "lab", "choices": [piece]}).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        if self.server.metrics and first is not None:
            self.server.metrics.tokens(first, gaps)


class Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: more concurrent clients than that lose their
    # SYN and retry a second later, which a benchmark would read as the server's latency.
    request_queue_size = 256
    daemon_threads = True
    prefill_seconds = PREFILL_SECONDS  # serving_settings' for the server's mode


def merge_config(argv, site, flags):
    """argv with its --config FILE merged in by the installed sglang's own ConfigArgumentMerger."""
    if "--config" not in argv:
        return argv
    import importlib.util
    try:
        import yaml  # noqa: F401
    except ImportError:
        # The lab venv's sglang is installed without dependencies, PyYAML among them. The role
        # writes the file as JSON, which is YAML: json reads it the same.
        import types
        sys.modules["yaml"] = types.SimpleNamespace(safe_load=json.load)
    path = os.path.join(site, "sglang", "srt", "server_args_config_parser.py")
    spec = importlib.util.spec_from_file_location("sglang_lab_config_parser", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    booleans = sorted({flag.dest for flag in flags.values() if flag.nargs == 0})
    return module.ConfigArgumentMerger(boolean_actions=booleans).merge_config_with_args(argv)


# sglang-fleet's patch that makes EAGLE-3 read reduced states under allreduce fusion (sglang_patches).
CAPTURE_MARKER = "# BEGIN sglang-fleet patch eagle3_fused_allreduce_capture"
# sglang-fleet's patch that keeps the keys out of /server_info's answer (sglang_patches).
SERVER_INFO_MARKER = "# BEGIN sglang-fleet patch server_info_redact_secrets"
SECRET_ARGS = ("api_key", "admin_api_key")


def server_info_is_redacted(site):
    """Whether the installed http_server.py answers /server_info without the keys: our block in it.
    Unpatched, 0.5.9 answers with every ServerArgs field, the keys as they are."""
    try:
        with open(os.path.join(site, "sglang/srt/entrypoints/http_server.py")) as handle:
            return SERVER_INFO_MARKER in handle.read()
    except OSError:
        return False


def capture_is_right(site):
    """Whether EAGLE-3's aux states are the reduced ones under fusion: our block in the installed
    deepseek_v2.py, or a release that captures inside the layer as upstream's fix does."""
    try:
        with open(os.path.join(site, "sglang/srt/models/deepseek_v2.py")) as handle:
            text = handle.read()
    except OSError:
        return True
    return CAPTURE_MARKER in text or "captured_last_layer_outputs" in text


def accept_length(args, site):
    """Simulated average EAGLE-3 accept length. Like the real defect, it falls when fusion at tp > 1
    hands the drafter one rank's partial sums (every token stays right: the target verifies them)."""
    steps = int(args.get("speculative_num_steps") or 3)
    good = 1 + 0.55 * steps
    fused = bool(args.get("enable_flashinfer_allreduce_fusion")) and int(args.get("tensor_parallel_size") or 1) > 1
    return round(good if not fused or capture_is_right(site) else 1 + 0.2 * steps, 2)


def serving_settings(config, mode, args, site, gsm8k=None):
    """What a server serves by, from the node's configuration, its mode and its command line: the
    mode, its decode and prefill speeds, whether it speculates, the accept length it reports, and the GSM8K test
    set it knows (the file at gsm8k, else GSM8K)."""
    return {"mode": mode, "tokens_per_second": decode_speed(config, mode), "prefill_seconds": prefill_seconds(mode),
            "speculative": bool(args.get("speculative_algorithm")),
            "accept_length": mode_accept_length(accept_length(args, site), mode),
            "gsm8k": load_gsm8k(gsm8k or GSM8K)}


def installed_mode(mode):
    """A lab sgl-kernel build may carry its own mode (labctl's crashing build): a release whose
    kernels fail to load, which only the install that holds it shows."""
    try:
        import sgl_kernel
    except ImportError:
        return mode
    return getattr(sgl_kernel, "LAB_SERVER_MODE", None) or mode


def main(argv):
    site = sysconfig.get_paths()["purelib"]
    flags = sglang_args.read_flags(site)
    parsed, problems = sglang_args.lint(merge_config(argv, site, flags), flags)
    if problems:
        sys.stderr.write("lab-server: the installed sglang rejects: %s\n" % "; ".join(problems))
        return 2
    config = load_config()
    mode = installed_mode(config.get("mode", "healthy"))
    if mode not in MODES:
        sys.stderr.write("lab-server: unknown mode %r (one of %s)\n" % (mode, ", ".join(MODES)))
        return 2
    if mode == "crash":
        sys.stderr.write("lab-server: simulated crash while loading the model\n")
        return 1
    host, port = parsed.get("host", "127.0.0.1"), int(parsed.get("port", 30000))
    nnodes, rank = int(parsed.get("nnodes") or 1), int(parsed.get("node_rank") or 0)
    if nnodes > 1 and rank >= 1:
        # As sglang's rank >= 1: no API until the group has formed, then only a dummy /health.
        join_group(parsed["dist_init_addr"], rank)
    server = Server((host, port), Handler)
    server.dummy = nnodes > 1 and rank >= 1
    server.in_flight = 0
    server.ready = threading.Event()
    server.model = parsed.get("served_model_name") or parsed.get("model_path")
    server.args = parsed
    try:
        for name, value in serving_settings(config, mode, parsed, site).items():
            setattr(server, name, value)
    except (OSError, ValueError, KeyError) as error:
        sys.stderr.write("lab-server: %s: %s\n" % (GSM8K, error))
        return 2
    server.api_key, server.admin_api_key = parsed.get("api_key"), parsed.get("admin_api_key")
    server.info_redacted = server_info_is_redacted(site)
    try:
        server.routes = route_auth_levels(site)
    except (OSError, SyntaxError, ValueError) as error:
        sys.stderr.write("lab-server: the installed sglang's routes and their auth levels: %s\n" % error)
        return 2
    server.streams, server.lock = 0, threading.Lock()
    server.metrics = None
    if parsed.get("enable_metrics") and not server.dummy:
        try:
            server.metrics = Metrics(served_metrics(site), server.model, parsed)
        except (OSError, ValueError, SyntaxError) as error:
            sys.stderr.write("lab-server: --enable-metrics: %s\n" % error)
            return 2
    RUNNING["server"] = server
    signal.signal(signal.SIGTERM, lambda *_: stop(server))
    if server.dummy:
        server.ready.set()
    elif mode != "never-healthy":
        def load():
            if nnodes > 1:
                await_ranks(parsed["dist_init_addr"], nnodes)
            time.sleep(float(config.get("startup_seconds", 1)))
            server.ready.set()
        threading.Thread(target=load, daemon=True).start()
    sys.stderr.write("lab-server: %s on %s:%d (mode %s, %d GSM8K questions known%s)\n" % (
        server.model, host, port, mode, len(server.gsm8k), ", rank %d of %d" % (rank, nnodes) if nnodes > 1 else ""))
    server.serve_forever()
    return 0


def stop(server):
    """SIGTERM: what a drain should have made zero is said, for the tests to count."""
    sys.stderr.write("lab-server: stopping with %d request(s) in flight\n" % server.in_flight)
    sys.stderr.flush()
    os._exit(0)


RUNNING = {}  # the server, once it exists: what a lost group cuts off is said


def lost(who):
    in_flight = getattr(RUNNING.get("server"), "in_flight", 0)
    sys.stderr.write("lab-server: lost %s: the group is broken, exiting with %d request(s) in flight, as the "
                     "NCCL watchdog would\n" % (who, in_flight))
    sys.stderr.flush()
    os._exit(1)


def watch(connection, who):
    """The peer's end closing means its process is gone."""
    def run():
        while connection.recv(64):
            pass
        lost(who)
    threading.Thread(target=run, daemon=True).start()


def split_addr(addr):
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def await_ranks(dist_init_addr, nnodes):
    """Rank 0: listen at --dist-init-addr until every other rank has joined."""
    listener = socket.create_server(split_addr(dist_init_addr), reuse_port=False)
    joined = {}
    sys.stderr.write("lab-server: rank 0 waits at %s for %d rank(s)\n" % (dist_init_addr, nnodes - 1))
    while len(joined) < nnodes - 1:
        connection, _ = listener.accept()
        line = connection.recv(64).decode().strip()
        if line.startswith("rank "):
            joined[int(line.split()[1])] = connection
            connection.sendall(b"ok\n")
            watch(connection, "rank %s" % line.split()[1])
    sys.stderr.write("lab-server: every rank joined (%s)\n" % ", ".join(str(r) for r in sorted(joined)))


def join_group(dist_init_addr, rank, timeout=900):
    """Rank >= 1: connect to rank 0, retrying until it listens (torch's TCPStore client retries too)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection = socket.create_connection(split_addr(dist_init_addr), timeout=5)
            connection.sendall(b"rank %d\n" % rank)
            if connection.recv(64).startswith(b"ok"):
                break
            connection.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            sys.stderr.write("lab-server: rank %d found no rank 0 at %s\n" % (rank, dist_init_addr))
            sys.exit(1)
        time.sleep(1)
    connection.settimeout(None)
    sys.stderr.write("lab-server: rank %d joined the group at %s\n" % (rank, dist_init_addr))
    watch(connection, "rank 0")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
