"""The progress watches of the model copy and the flash-attn build follow a job to its end, however long.

Each role runs its long step as an async job and watches it in rounds: one module call that waits
up to the role's progress interval, then one progress line. The watch used to include itself once per
round, and ansible-core 2.19 dies of a RecursionError between 200 and 250 nested includes
("Exceeded maximum object depth ... maximum recursion depth exceeded"): a long copy ended the whole
run mid-way. These runs drive the roles' real watch task files (include_role, tasks_from: watch.yml)
and real modules through Ansible's real async wrapper, against fake jobs that end only after more
rounds than that, in 10 ms rounds.

The host's Python is a shim that counts module runs: each round is one, so a fake job knows how
many rounds the watch has made and ends after the number it was given."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from watch_rounds import watch_rounds

ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
ROUND = 0.01         # seconds a round waits: the role variable a fleet sets to 30 or 60
LONG = 310           # rounds: past the 200 to 250 nested includes ansible-core 2.19 survives
# The build's watch is the same loop (tests/unit/test_task_includes.py holds every task file to including
# no file that includes it back): its long run would cost as much CPU again, so it runs for fewer rounds.
BUILD_ROUNDS = 40
REPO = "lab-org/Kimi-K2.5-NVFP4-lab"
GB = 10 ** 9

# A fetch as sglang_model_sync runs one: progress written with its Progress class, then its result.
FAKE_FETCH = r'''
import os, time
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.model_sync import Progress


def rounds_file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def main():
    module = AnsibleModule(argument_spec=dict(
        progress_file=dict(type="path", required=True), counter=dict(type="path", required=True),
        rounds=dict(type="int", required=True), total=dict(type="int", required=True),
        crash_after=dict(type="int", default=0), pid_file=dict(type="path", required=True)))
    p = module.params
    with open(p["pid_file"], "w") as handle:
        handle.write(str(os.getpid()))
    base, seen = rounds_file_size(p["counter"]), -1
    progress = Progress(p["progress_file"], p["total"], "fetching")
    give_up = time.monotonic() + 600
    while time.monotonic() < give_up:
        rounds = rounds_file_size(p["counter"]) - base
        if rounds != seen:
            seen = rounds
            done = min(rounds, p["rounds"]) * p["total"] // p["rounds"] if p["rounds"] else 0
            progress.add(done - progress.done, "model-%05d-of-00119.safetensors" % (1 + 118 * done // p["total"]),
                         force=True)
            if p["crash_after"] and rounds >= p["crash_after"]:
                raise ConnectionResetError("the source hung up at %d bytes" % progress.done)
            if p["rounds"] and rounds >= p["rounds"]:
                module.exit_json(changed=True, state="fetched", fetched_bytes=p["total"], hashed_bytes=p["total"],
                                 rounds_seen=rounds)
        time.sleep(0.003)
    module.fail_json(msg="no watcher came")


main()
'''

# A build as build.yml's script runs one: its start time, then ninja's [n/total] lines in its log.
FAKE_BUILD = r'''
import os, sys, time

counter, log, started, rounds, pid_file = sys.argv[1:6]
rounds = int(rounds)
with open(pid_file, "w") as handle:
    handle.write(str(os.getpid()))
with open(started, "w") as handle:
    handle.write("%d\n" % time.time())
size = lambda: os.path.getsize(counter) if os.path.exists(counter) else 0
base, seen, give_up = size(), -1, time.monotonic() + 600
with open(log, "a") as out:
    out.write("Building wheel for flash-attn (setup.py): started\n")
    while time.monotonic() < give_up:
        n = size() - base
        if n != seen:
            seen = n
            out.write("  [%d/%d] /usr/local/cuda-13.0/bin/nvcc -c csrc/flash_attn/src/flash_fwd_hdim%d_bf16_sm120.cu\n"
                      % (min(n, rounds), rounds, n))
            out.flush()
            if n >= rounds:
                sys.exit(0)
        time.sleep(0.003)
sys.exit(1)
'''


class Host:
    """A local host whose every module run appends one byte to `counter`."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.counter = tmp_path / "module-runs"
        self.shim = tmp_path / "python"
        self.shim.write_text('#!/bin/sh\nprintf . >> %s\nexec %s "$@"\n' % (self.counter, sys.executable))
        self.shim.chmod(0o755)
        (tmp_path / "library").mkdir()
        (tmp_path / "library/fake_model_fetch.py").write_text(FAKE_FETCH)
        (tmp_path / "fake_build.py").write_text(FAKE_BUILD)
        (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"gpu-1": {
            "ansible_connection": "local", "ansible_python_interpreter": str(self.shim)}}}}))
        self.pid_file = tmp_path / "job.pid"

    def start(self, tasks, extravars=None):
        """ansible-playbook over this host, as an operator runs it, in the background."""
        (self.dir / "play.yml").write_text(yaml.safe_dump(
            [{"name": "A background job is watched", "hosts": "all", "gather_facts": False, "tasks": tasks}],
            sort_keys=False))
        env = {"PATH": os.environ["PATH"], "HOME": str(self.dir), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
               "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
               "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(self.dir / "facts"),
               # as ansible.cfg pipelines its ssh connections: one process per module run
               "ANSIBLE_PIPELINING": "true"}
        self.started = time.monotonic()
        return subprocess.Popen([ANSIBLE_PLAYBOOK, "-i", str(self.dir / "hosts.yml"), str(self.dir / "play.yml"),
                                 "-e", json.dumps(extravars or {})],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=self.dir, env=env)

    def wait(self, run):
        """(rc, what the operator saw, seconds)."""
        try:
            out, _ = run.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            run.kill()
            raise
        return run.returncode, out, time.monotonic() - self.started

    def stop_job(self):
        """The fake job, if a test left it running: the pid it wrote, if that is still a fake job."""
        try:
            pid = int(self.pid_file.read_text())
            if re.search(rb"fake_model_fetch|fake_build", Path("/proc/%d/cmdline" % pid).read_bytes()):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


@pytest.fixture
def make_host(tmp_path):
    made = []

    def make(name="gpu-1"):
        (tmp_path / name).mkdir()
        made.append(Host(tmp_path / name))
        return made[-1]
    yield make
    for host in made:
        host.stop_job()


@pytest.fixture
def host(make_host):
    return make_host()


def model_watch(host, rounds, async_s=600, crash_after=0, total=54 * GB, **role_vars):
    """The fake fetch in the background, then the sglang_model role's own watch of it: the running play."""
    progress = str(host.dir / "run/model.progress")
    tasks = [
        {"name": "A fetch runs in the background", "fake_model_fetch": {
            "progress_file": progress, "counter": str(host.counter), "rounds": rounds, "total": total,
            "crash_after": crash_after, "pid_file": str(host.pid_file)},
         "async": async_s, "poll": 0, "register": "__sglang_model_now"},
        {"name": "The role watches it", "ansible.builtin.include_role": {
            "name": "sglang_model", "tasks_from": "watch.yml"},
         "vars": {"__sglang_model": {"repo_id": REPO}, "__sglang_model_progress": progress,
                  "__sglang_model_run_fetch": True}},
        {"name": "What the role kept", "ansible.builtin.copy": {
            "content": "{{ {'watched': __sglang_model_watched, 'job_file': __sglang_model_now.results_file}"
                       " | to_json }}",
            "dest": str(host.dir / "watched.json"), "mode": "0644"}},
    ]
    # The timeout only sizes the watch (the fake job's own limit is async_s): a day of 10 ms rounds
    # would be 8.6 million of them to list, so a few minutes' worth is given here.
    role_vars = {"sglang_model_progress_interval": ROUND, "sglang_model_fetch_timeout_hours": 0.05, **role_vars}
    return host.start(tasks, role_vars)


def build_watch(host, rounds):
    """A fake compile in the background, then the flash_attn role's own watch of it: the running play."""
    log, started = str(host.dir / "build.log"), str(host.dir / "build.started")
    tasks = [
        {"name": "A compile runs in the background", "ansible.builtin.command": {
            "argv": [sys.executable, str(host.dir / "fake_build.py"), str(host.counter), log, started, str(rounds),
                     str(host.pid_file)]},
         "async": 600, "poll": 0, "changed_when": True, "register": "__flash_attn_build_job"},
        {"name": "The role watches it", "ansible.builtin.include_role": {
            "name": "flash_attn", "tasks_from": "watch.yml"},
         "vars": {"__flash_attn_log": log, "__flash_attn_started": started}},
        {"name": "What the role kept", "ansible.builtin.copy": {
            "content": "{{ __flash_attn_watched | to_json }}", "dest": str(host.dir / "watched.json"),
            "mode": "0644"}},
    ]
    # As for the model: a few minutes of timeout, not the default three hours of 10 ms rounds.
    return host.start(tasks, {"flash_attn_progress_interval": ROUND, "flash_attn_build_timeout_minutes": 3})


def progress_lines(out, pattern):
    """The watch's lines, one per round: `ok:` while the job runs, `changed:` for the round it ended in."""
    return re.findall(r"^(?:ok|changed): \[gpu-1\] => \(item=(%s.*)\)$" % pattern, out, re.MULTILINE)


def test_a_copy_of_more_than_300_rounds_and_a_build_are_watched_to_their_end_one_line_a_round(make_host, capsys):
    model, build = make_host("model"), make_host("build")
    runs = model_watch(model, LONG), build_watch(build, BUILD_ROUNDS)   # side by side
    (rc, out, seconds), (build_rc, build_out, _) = model.wait(runs[0]), build.wait(runs[1])
    with capsys.disabled():
        print("\n    rounds of %.2f s: the model copy watched for %d in %.1f s, the flash-attn build for %d"
              % (ROUND, LONG, seconds, BUILD_ROUNDS))
    for text in (out, build_out):
        assert "recursion" not in text.lower() and "Unexpected Exception" not in text
    assert rc == 0, out[-3000:]
    assert build_rc == 0, build_out[-3000:]

    # The copy: one line per round, as it happens, saying how far it got.
    lines = progress_lines(out, re.escape(REPO + ": fetching"))
    assert len(lines) > 300, out[-3000:]
    percents = [int(p) for p in re.findall(r"\((\d+)%\)", " ".join(lines))]
    assert percents == sorted(percents) and percents[0] < 5 and percents[-1] == 100
    assert re.search(r"fetching 2[0-9]\.\d GB of 54\.0 GB \(\d+%\), model-000[45]\d-of-00119\.safetensors, ", out)
    # Its last round is the summary, and carries the job's own result.
    kept = json.loads((model.dir / "watched.json").read_text())
    watched = kept["watched"]
    assert watched["finished"] and watched["rounds"] == len(lines)
    assert watched["result"]["state"] == "fetched" and watched["result"]["rounds_seen"] >= LONG
    assert watched["msg"].startswith("fetching 54.0 GB of 54.0 GB (100%)") and watched["msg"].endswith("finished")
    assert "%s: %s (%d progress rounds)" % (REPO, watched["msg"], len(lines)) in " ".join(out.split())
    # The job's results file is read once and removed, as the async wrapper leaves it for its reader.
    assert not Path(kept["job_file"]).exists()

    # The build: ninja's count, one line per round, and how far it got in its last.
    lines = progress_lines(build_out, r"compiled \d+/%d objects" % BUILD_ROUNDS)
    assert len(lines) >= BUILD_ROUNDS - 1, build_out[-3000:]
    compiled = [int(n) for n in re.findall(r"compiled (\d+)/", " ".join(lines))]
    assert compiled == sorted(compiled) and compiled[0] < 10
    watched = json.loads((build.dir / "watched.json").read_text())
    assert watched["finished"] and watched["rounds"] == len(progress_lines(build_out, ""))
    assert re.fullmatch(r"build ended after \dm\d\ds, %d/%d objects compiled" % (BUILD_ROUNDS, BUILD_ROUNDS),
                        watched["msg"])
    assert progress_lines(build_out, re.escape(watched["msg"]))
    assert watched["log_tail"][-1].strip().startswith("[%d/%d] " % (BUILD_ROUNDS, BUILD_ROUNDS))


def test_a_crashed_copy_fails_with_its_reason_and_where_it_got_to(host):
    rc, out, _ = host.wait(model_watch(host, LONG, crash_after=4))
    assert rc == 2, out[-3000:]
    assert re.search(r"the fetch of %s on gpu-1 failed: it crashed: the source hung up at \d+ bytes "
                     r"\(last progress: fetching \d+\.\d MB of 54\.0 GB \(1%%\), model-00002-of-00119\."
                     r"safetensors, " % re.escape(REPO), out), out[-3000:]
    assert "What the role kept" not in out  # the host stopped at the watch


def test_a_copy_stopped_at_its_time_limit_fails_saying_so(host):
    # The async wrapper kills the job at its `async:` limit (the role's sglang_model_fetch_timeout_hours).
    rc, out, _ = host.wait(model_watch(host, 0, async_s=2))
    assert rc == 2, out[-3000:]
    assert ("the fetch of %s on gpu-1 failed: it ran past its time limit and was stopped (last progress: "
            "fetching 0 B of 54.0 GB (0%%), model-00001-of-00119.safetensors, " % REPO in out), out[-3000:]


def test_a_copy_whose_wrapper_is_gone_fails_when_its_rounds_run_out_naming_the_timeout(host):
    # A job the wrapper never reports on (the host restarted): the rounds of 0.1 s of timeout run out.
    rc, out, _ = host.wait(model_watch(host, 0, sglang_model_fetch_timeout_hours=0.1 / 3600))
    assert rc == 2, out[-3000:]
    flat = " ".join(out.split())
    assert ("%s on gpu-1: the job did not end within %s h (sglang_model_fetch_timeout_hours)" % (REPO, 0.1 / 3600)
            in flat), out[-3000:]
    rounds = watch_rounds(0.1 / 3600 * 3600, ROUND)  # as the role reckons them, one more than fit
    assert "Last progress after %d rounds: fetching 0 B of 54.0 GB (0%%)" % rounds in flat, out[-3000:]


def test_a_failed_build_says_whether_it_timed_out_lost_its_wrapper_or_failed_with_the_last_progress(tmp_path):
    """build.yml's verdict after the watch, for what the watch and async_status return in each case."""
    tasks = yaml.safe_load((ROOT / "roles/flash_attn/tasks/build.yml").read_text())
    (verdict,) = [t for entry in tasks for t in entry.get("block", []) if t["name"] == "The build succeeded"]
    tail = ["  [57/73] /usr/local/cuda-13.0/bin/nvcc -c csrc/flash_attn/src/flash_bwd_hdim256_bf16_sm120.cu"]
    last = {"finished": True, "msg": "build ended after 61m10s, 57/73 objects compiled", "log_tail": tail}
    cases = {
        "stopped": ({"finished": 1, "failed": True, "msg": "Timeout exceeded", "child_pid": 4242}, last),
        "orphaned": ({"finished": 0, "started": 1}, dict(last, finished=False,
                                                         msg="compiled 57/73 objects (78%), 183m10s elapsed")),
        "oom": ({"finished": 1, "rc": 137, "msg": "non-zero return code"},
                dict(last, log_tail=tail + ["Killed signal terminated program cicc"])),
    }
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "__flash_attn_build_result": result, "__flash_attn_watched": watched}
             for name, (result, watched) in cases.items()}
    role = {"flash_attn_build_timeout_minutes": 180, "__flash_attn_jobs": 27,
            "__flash_attn_log": "/var/cache/sglang-fleet/flash_attn/build-ddabe0ba14fe.log"}
    inventory = {"all": {"hosts": hosts, "vars": role}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [verdict]}]))
    out = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                         capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ANSIBLE_NOCOLOR": "1",
                              "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                              "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")}).stdout
    flat = " ".join(out.split())
    assert flat.count("failed=1") == 3, out
    assert ("The flash-attn build on stopped ran past flash_attn_build_timeout_minutes (180) and was stopped. "
            "Full log: /var/cache/sglang-fleet/flash_attn/build-ddabe0ba14fe.log Last progress: build ended after "
            "61m10s, 57/73 objects compiled" in flat), out
    assert ("The flash-attn build on orphaned did not end within flash_attn_build_timeout_minutes (180), and its "
            "async wrapper, which stops it then, left no verdict either; its compilers were stopped." in flat), out
    assert "Last progress: compiled 57/73 objects (78%), 183m10s elapsed" in flat, out
    assert "The flash-attn build on oom failed: non-zero return code." in flat, out
    assert "The compiler was killed, most likely out of memory: lower flash_attn_max_jobs (it was 27)." in flat, out
