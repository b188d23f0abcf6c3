"""The fusion self-test around its GPU part: processes, watchdog, verdict, cache; and its verdict
on what the real 2xH200 host measured."""
import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

SCRIPT = ROOT / "roles/sglang_server/files/fusion_selftest.py"
X2 = FIXTURES / "hosts/h200x2-driver580"
sys.path.insert(0, str(SCRIPT.parent))
import fusion_selftest  # noqa: E402


@pytest.fixture
def host(tmp_path):
    """A fake nvidia-smi with N GPUs on PATH and the lab fixture as the GPU part."""
    def make(gpus=2, result="pass"):
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        rows = "\n".join("%d, GPU-%d, 580.159.04" % (i, i) for i in range(gpus))
        p2p = (X2 / "nvidia-smi-topo-p2p-r.txt").read_text()
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\ncase \"$*\" in *query-gpu*) printf '%%s\\n' '%s';; *) cat <<'EOF'\n%sEOF\n;; esac\n"
                       % (rows.replace("\n", "' '"), p2p))
        smi.chmod(0o755)
        config = tmp_path / "fusion.json"
        config.write_text(json.dumps({"result": result}))
        return dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), LAB_FUSION_CONFIG=str(config),
                    PYTHONPATH=str(ROOT / "files/lab"), FLASHINFER_WORKSPACE_BASE=str(tmp_path))
    return make


def selftest(env, *args):
    out = subprocess.run([sys.executable, str(SCRIPT), "--worker", "sglang_lab_fusion", *args],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_pass_is_cached_and_not_repeated(host, tmp_path):
    env = host(gpus=2)
    first = selftest(env, "--cache-dir", str(tmp_path / "cache"))
    assert (first["status"], first["cached"], first["world_size"]) == ("pass", False, 2)
    # No server command line: a plain sglang server's ladder (nvidia-smi gave no memory: up to 160), and prefill.
    assert [s["tokens"] for s in first["shapes"]] == [1, 2, 4, 8, 12] + list(range(16, 161, 8)) + [2048]
    again = selftest(env, "--cache-dir", str(tmp_path / "cache"))
    assert again["cached"] is True and again["key"] == first["key"]
    assert len(list((tmp_path / "cache").iterdir())) == 1


EAGLE3_TP8 = ["--model-path", "/models/kimi", "--tp", "8", "--speculative-algorithm", "EAGLE3",
              "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def test_the_server_s_sizes_are_timed_and_the_weighed_ones_marked(host):
    result = selftest(host(gpus=2), "--server-args", json.dumps(EAGLE3_TP8), "--weigh-batches", "1,8,32,48")
    assert result["status"] == "pass" and result["sizes"]["tokens_per_batch"] == 4
    timed = [s["tokens"] for s in result["shapes"]]
    assert timed == result["sizes"]["decode_tokens"] + [2048] and timed[:3] == [4, 8, 12] and timed[-2] == 192
    assert [s["tokens"] for s in result["shapes"] if s["weighs"]] == [4, 32, 128, 192]
    assert [s["tokens"] for s in result["shapes"] if not s["decode"]] == [2048]
    assert result["baseline"] == "lab (simulated)"  # the GPU part names the all-reduce it timed


def test_a_server_whose_sizes_cannot_be_known_is_an_error_that_is_not_cached(host, tmp_path):
    argv = ["--tp", "8", "--speculative-algorithm", "EAGLE3"]  # steps left to sglang, which reads the model
    result = selftest(host(gpus=2), "--server-args", json.dumps(argv), "--cache-dir", str(tmp_path / "cache"))
    assert result["status"] == "error" and "--speculative-num-steps" in result["reason"]
    assert not (tmp_path / "cache").exists()


def test_a_wrong_result_fails_with_the_error_and_the_tolerance(host):
    result = selftest(host(result="fail"))
    assert result["status"] == "fail"
    assert result["reason"] == ("fused result differs from NCCL all-reduce + add + RMSNorm: max error 0.75 at 1 "
                                "tokens (tolerance 0.0625 + 0.0078125 x |ref|)")


def test_a_hang_is_stopped_by_the_watchdog(host):
    result = selftest(host(result="hang"), "--timeout", "3")
    assert result["status"] == "hang" and "within 3 s" in result["reason"]
    assert result["elapsed_s"] < 30


def test_a_jit_that_cannot_find_ninja_is_an_error_and_is_not_cached(host, tmp_path):
    """A real 2xH200 host whose PATH lacked the venv's bin: flashinfer's JIT found no `ninja`, and the
    self-test cached "fail", so the host served without the fusion after the PATH was fixed."""
    real = json.loads((X2 / "selftest-as-service-user-without-venv-bin/selftest.json").read_text())
    assert real["status"] == "fail" and "No such file or directory: 'ninja'" in real["reason"]  # before
    assert json.loads((X2 / "selftest-as-service-user-without-venv-bin/selftest-rerun.json").read_text())["cached"]
    cache = tmp_path / "cache"
    result = selftest(host(result="no-ninja"), "--cache-dir", str(cache))
    assert result["status"] == "error"
    assert "not a verdict on its GPUs" in result["reason"] and "'ninja'" in result["reason"]
    assert not cache.exists() or list(cache.iterdir()) == []
    assert selftest(host(result="pass"), "--cache-dir", str(cache))["status"] == "pass"  # tried again


def test_as_the_service_user_on_the_real_2xh200_the_jit_builds_land_in_its_home():
    """The role's way (tests/device/selftest_as_service_user.sh): user sglang, the venv's bin on PATH."""
    real = json.loads((X2 / "selftest-as-service-user/selftest.json").read_text())
    assert real["status"] == "pass" and real["world_size"] == 2
    built = (X2 / "selftest-as-service-user/jit-built.txt").read_text().split()
    assert built[0] == "sglang" and built[2].startswith("/var/lib/sglang/.cache/flashinfer/0.6.3/")
    assert built[2].endswith("/trtllm_comm.so")
    assert "No such file" in (X2 / "selftest-as-service-user/root-jit.txt").read_text()  # none in root's home
    assert json.loads((X2 / "selftest-as-service-user/selftest-rerun.json").read_text())["cached"] is True


def test_one_gpu_explains_that_there_is_nothing_to_fuse(host):
    result = selftest(host(gpus=1))
    assert result["status"] == "single-gpu"
    assert "nothing to fuse" in result["reason"]


def test_a_changed_gpu_set_is_a_new_key(host, tmp_path):
    a = selftest(host(gpus=2), "--cache-dir", str(tmp_path / "c"))
    b = selftest(host(gpus=3), "--cache-dir", str(tmp_path / "c"))
    assert a["key"] != b["key"] and b["cached"] is False


def test_the_real_2xh200_measurement_passes_and_a_doubled_error_would_not():
    real = json.loads((X2 / "selftest-2gpu-patched.json").read_text())
    tolerance = real["tolerance"]
    status, reason, _ = fusion_selftest.verdict([{"shapes": real["shapes"]}], tolerance)
    assert (status, reason) == ("pass", "max error 0.03125 within tolerance")
    worse = [dict(s, max_abs_err=s["max_abs_err"] * 4) for s in real["shapes"]]
    assert fusion_selftest.verdict([{"shapes": worse}], tolerance)[0] == "fail"
    # What the note reports: fused faster than NCCL + torch at every measured shape.
    assert all(s["fused_us"] < s["unfused_us"] for s in real["shapes"])
    for one in (X2 / "selftest-1gpu.json", FIXTURES / "hosts/h200-driver580/selftest-1gpu.json"):
        assert json.loads(one.read_text())["status"] == "single-gpu"  # CUDA_VISIBLE_DEVICES=0, and the 1-GPU host


def test_bad_settings_are_refused():
    out = subprocess.run([sys.executable, str(SCRIPT), "--tokens", "4096"], capture_output=True, text=True)
    assert out.returncode == 2 and "token counts must lie in 1..--max-tokens" in out.stderr


# A rank under a real seccomp filter that kills sched_setaffinity (x86_64: 203), as the server unit's
# SystemCallFilter= would with ~@resources added; then the lab fixture, which pins itself as NCCL does.
SECCOMP_WORKER = '''
import ctypes, os
import sglang_lab_fusion

class Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

def run(rank, world_size, settings):
    if rank == int(os.environ.get("DENIED_RANK", "1")):
        code = (Filter * 4)((0x20, 0, 0, 0), (0x15, 0, 1, 203), (0x06, 0, 0, 0x80000000), (0x06, 0, 0, 0x7fff0000))
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
        assert libc.prctl(22, 2, ctypes.byref(Program(4, code)), 0, 0) == 0, ctypes.get_errno()  # SECCOMP_MODE_FILTER
    return sglang_lab_fusion.run(rank, world_size, settings)
'''
DENIED_WORKER = '''
import errno, os
def run(rank, world_size, settings):
    raise OSError(int(os.environ["DENIED_ERRNO"]), os.strerror(int(os.environ["DENIED_ERRNO"])), "/dev/nvidia0")
'''


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the filter's system call number is x86_64's")
def test_a_rank_the_seccomp_filter_kills_is_an_error_that_is_not_cached(host, tmp_path):
    (tmp_path / "seccomp_worker.py").write_text(SECCOMP_WORKER)
    env = dict(host(gpus=2), PYTHONPATH="%s:%s" % (tmp_path, ROOT / "files/lab"))
    out = subprocess.run([sys.executable, str(SCRIPT), "--worker", "seccomp_worker", "--cache-dir",
                          str(tmp_path / "cache")], capture_output=True, text=True, env=env, timeout=120)
    result = json.loads(out.stdout)
    assert result["status"] == "error" and result["reason"].startswith(
        "rank 1 was killed by SIGSYS: a system call it made is one this process's seccomp filter kills (not a "
        "verdict on its GPUs, and not cached)")
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


@pytest.mark.parametrize("number", [1, 30, 97])  # EPERM (a device cgroup), EROFS, EAFNOSUPPORT
def test_a_rank_the_sandbox_refuses_is_an_error_with_the_refusal(host, tmp_path, number):
    (tmp_path / "denied_worker.py").write_text(DENIED_WORKER)
    env = dict(host(gpus=2), PYTHONPATH=str(tmp_path), DENIED_ERRNO=str(number))
    out = subprocess.run([sys.executable, str(SCRIPT), "--worker", "denied_worker", "--cache-dir",
                          str(tmp_path / "cache")], capture_output=True, text=True, env=env, timeout=120)
    result = json.loads(out.stdout)
    assert result["status"] == "error" and "[Errno %d] %s: '/dev/nvidia0'" % (number, os.strerror(number)) \
        in result["reason"]
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


def test_the_result_says_what_the_process_ran_under_and_the_sandbox_is_part_of_the_key(host, tmp_path):
    env = host(gpus=2)
    plain = selftest(env, "--cache-dir", str(tmp_path / "c"))
    process = plain["process"]
    with open("/proc/self/status") as handle:
        mine = dict(line.split(":\t", 1) for line in handle.read().splitlines() if ":\t" in line)
    assert process["uid"] == os.getuid() and process["NoNewPrivs"] == mine["NoNewPrivs"].strip()
    assert process["Seccomp"] == mine["Seccomp"].strip() and process["cgroup"]
    hardened = selftest(env, "--cache-dir", str(tmp_path / "c"), "--sandbox=SystemCallFilter=@system-service",
                        "--sandbox=SystemCallFilter=~@privileged")
    assert hardened["key"] != plain["key"] and hardened["cached"] is False
    assert hardened["settings"]["sandbox"] == ["SystemCallFilter=@system-service", "SystemCallFilter=~@privileged"]
