#!/usr/bin/python3
"""Lab load loop: chat requests through the router at a fixed concurrency, bounded in count and time.

    router_load.py --url URL --out FILE [--key-file F] [--model M] [--concurrency 4]
                   [--max-requests 5000] [--max-seconds 600] [--stop-file F]

Runs on a lab node (the router's), so every request stays on the pod's loopback. Stops at the first
of: --max-requests sent, --max-seconds passed, --stop-file present. Meanwhile it reads the router's
worker list four times a second, to tell which workers were ever registered. Writes a JSON summary:
requests sent, answered right, failed (with the first errors), rekeyed (refused with the old key after
the key file changed, then answered right with the new one), and the worker lists it saw.
"""
import argparse
import json
import os
import threading
import time
import urllib.error
import urllib.request

PROMPT = "What is 17 + 25? Reply with the number only."


def call(url, key, payload=None, timeout=60):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--key-file", default="")
    parser.add_argument("--model", default="/models/nvidia/Kimi-K2.5-NVFP4")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-requests", type=int, default=5000)
    parser.add_argument("--max-seconds", type=float, default=600)
    parser.add_argument("--stop-file", default="")
    args = parser.parse_args()
    def read_key():
        return open(args.key_file).read().strip() if args.key_file else ""
    keys = {"now": read_key()}
    # rekeyed: answered 401, and answered right when sent again with the key file's new key, as a client
    # does whose key is rotated under it (a key rotation's router restart); never more than once a request.
    lock, stats = threading.Lock(), {"sent": 0, "ok": 0, "failed": 0, "rekeyed": 0, "errors": []}
    seen, lists = set(), []
    start = time.monotonic()

    def done():
        return (time.monotonic() - start > args.max_seconds
                or (args.stop_file and os.path.exists(args.stop_file)))

    def client():
        payload = {"model": args.model, "temperature": 0, "max_tokens": 32,
                   "messages": [{"role": "user", "content": PROMPT}]}
        while not done():
            with lock:
                if stats["sent"] >= args.max_requests:
                    return
                stats["sent"] += 1
            rekeyed, sent = False, keys["now"]
            try:
                try:
                    answer = call(args.url + "/v1/chat/completions", sent, payload)
                except urllib.error.HTTPError as exc:
                    # Against the key this request was sent with: another thread may have read the new
                    # key already, after its own 401.
                    fresh = read_key()
                    if exc.code != 401 or fresh == sent:
                        raise
                    keys["now"], rekeyed = fresh, True
                    answer = call(args.url + "/v1/chat/completions", fresh, payload)
                answer = answer["choices"][0]["message"]["content"]
                good, error = "42" in answer, "wrong answer %r" % answer[:80]
            except Exception as exc:  # HTTP errors, resets, timeouts: each one a failed request
                good, error = False, "%s: %s" % (type(exc).__name__, exc)
            with lock:
                stats["ok" if good else "failed"] += 1
                stats["rekeyed"] += int(rekeyed and good)
                if not good:  # when the failures began and ended, in seconds from the start
                    at = round(time.monotonic() - start, 2)
                    stats["failed_between"] = [stats.get("failed_between", [at])[0], at]
                    if len(stats["errors"]) < 10:
                        stats["errors"].append("%.1fs %s" % (at, error))

    def watcher():
        while not done() and any(t.is_alive() for t in clients):
            try:
                urls = sorted(w["url"] for w in call(args.url + "/workers", keys["now"], timeout=5)["workers"])
            except Exception as exc:
                urls = ["unreadable: %s" % exc]
            with lock:
                seen.update(urls)
                if not lists or lists[-1][1] != urls:
                    lists.append((round(time.monotonic() - start, 2), urls))
            time.sleep(0.25)

    clients = [threading.Thread(target=client) for _ in range(args.concurrency)]
    for thread in clients:
        thread.start()
    watch = threading.Thread(target=watcher)
    watch.start()
    for thread in clients + [watch]:
        thread.join()
    summary = dict(stats, seconds=round(time.monotonic() - start, 1), concurrency=args.concurrency,
                   workers_seen=sorted(seen), worker_lists=lists)
    with open(args.out + ".part", "w") as handle:
        json.dump(summary, handle, indent=1)
    os.replace(args.out + ".part", args.out)


if __name__ == "__main__":
    main()
