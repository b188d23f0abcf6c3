"""The flag lint refuses what would meet the server unit's system-call filter, on the evidence of the
pinned stack's code and of a run on the H200 host."""
import ast
import json

import pytest

from ansible.module_utils.sglang_args import lint, read_flags
from ansible.module_utils.sglang_sandbox import DIRECTIVE, problems
from conftest import FIXTURES, H200

FILTER = FIXTURES / "syscall-filter"
KILLED = {int(n): name for n, name in json.loads((FILTER / "killed-systemd-252-x86_64.json").read_text()).items()}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    import conftest
    return conftest._extracted("sglang", "0.5.9"), conftest._extracted("flashinfer-python", "0.6.3")


@pytest.fixture(scope="module")
def flags(site):
    return read_flags(str(site[0]))


def sites_by_wheel():
    """{wheel: {file: [call site line, ...]}} of tools/syscall_sites.py's scan of the pinned wheels."""
    wheels, wheel, current = {}, None, None
    for line in (FILTER / "sites.txt").read_text().splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("== "):
            wheel = line[3:].split()[0]
            wheels[wheel] = {}
        elif not line.startswith(" "):
            current = wheels[wheel].setdefault(line, [])
        else:
            current.append(line.strip())
    return wheels


def test_the_filter_kills_pidfd_getfd_and_lets_pidfd_open_and_fd_passing_through():
    assert KILLED[438] == "pidfd_getfd" and 434 not in KILLED  # pidfd_open is in @process
    assert {"ptrace", "perf_event_open", "bpf", "open_by_handle_at", "memfd_secret", "mseal",
            "map_shadow_stack", "cachestat"} <= set(KILLED.values())  # the other calls seen killed
    assert {"sendmsg", "recvmsg", "mbind", "sched_setaffinity", "io_uring_setup"}.isdisjoint(KILLED.values())


def test_the_unit_has_the_filter_the_rules_were_read_against(tmp_path):
    """The unit as the role renders it (the H200 capture, which tests/unit/test_units_under_systemd.py holds to
    the role's render; its sandbox comes from plugins/filter/systemd_sandbox.py)."""
    unit = (H200 / "units-under-systemd/sglang.service").read_text().splitlines()
    lines = [line.split("=", 1)[1] for line in unit if line.startswith("SystemCallFilter=")]
    assert "SystemCallFilter=" + " ".join(lines) == DIRECTIVE
    assert "SystemCallArchitectures=native" in unit


def test_flashinfer_s_moe_all_to_all_takes_its_peers_memory_with_pidfd_getfd(site, flags):
    sglang, flashinfer = site
    tree = ast.parse((flashinfer / "flashinfer/comm/mnnvl.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MnnvlMemory"]
    (func,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "open_mnnvl_memory"]
    numbers = {t.id: n.value.value for n in ast.walk(func) if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    assert numbers["SYS_pidfd_getfd"] == 438 and numbers["SYS_pidfd_open"] == 434
    calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "syscall"]
    assert [c.args[0].id for c in calls] == ["SYS_pidfd_open", "SYS_pidfd_getfd"]
    # MoeAlltoAll's workspace is an MnnvlMemory; sglang's flashinfer dispatcher builds a MoeAlltoAll.
    assert "mnnvl_mem = MnnvlMemory(mapping, workspace_size_per_rank)" in \
        (flashinfer / "flashinfer/comm/trtllm_moe_alltoall.py").read_text()
    dispatcher = (sglang / "sglang/srt/layers/moe/token_dispatcher/flashinfer.py").read_text()
    assert "from flashinfer.comm import MoeAlltoAll" in dispatcher and "self.moe_a2a = MoeAlltoAll(" in dispatcher
    for flag in ("--moe-a2a-backend", "--speculative-moe-a2a-backend"):
        assert "flashinfer" in flags[flag].choices


def test_no_other_comm_path_of_flashinfer_or_sglang_calls_pidfd_getfd(site):
    """Only mnnvl.py names it among the Python and C++ sources of sglang 0.5.9 and flashinfer 0.6.3
    (flashinfer's JIT builds its kernels from the C++ ones)."""
    named = sorted(str(p.relative_to(root)) for root in site for p in root.rglob("*")
                   if p.suffix in (".py", ".cu", ".cuh", ".h", ".cpp", ".cc") and p.is_file()
                   and ("pidfd_getfd" in p.read_text(errors="replace") or "438" in p.read_text(errors="replace")
                        and "syscall" in p.read_text(errors="replace")))
    assert named == ["flashinfer/comm/mnnvl.py"]


def test_the_pinned_binaries_call_pidfd_getfd_in_torch_s_ipc_import_only():
    wheels = sites_by_wheel()
    assert {w.split("-")[0] for w in wheels} == {"sgl_kernel", "torch", "nvidia_nccl_cu12", "nvidia_nccl_cu13",
                                                 "nvidia_nvshmem_cu12", "triton", "apache_tvm_ffi",
                                                 "torch_memory_saver", "py_spy"}
    assert {w for w in wheels if w.startswith("nvidia_nccl")} == {
        "nvidia_nccl_cu12-2.27.5-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "nvidia_nccl_cu13-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "nvidia_nccl_cu13-2.28.9-py3-none-manylinux_2_18_x86_64.whl"}
    pidfd = [(wheel, f, s) for wheel, files in wheels.items() for f, lines in files.items() for s in lines
             if "pidfd_getfd" in s]
    assert len(pidfd) == 1
    wheel, path, line = pidfd[0]
    assert wheel.startswith("torch-2.9.1-") and path == "torch/lib/libc10_cuda.so"
    assert "CUDACachingAllocator" in line and "MemHandleCacheEntry" in line
    # NCCL (every pin torch 2.9.1 and sglang 0.5.9 meet), sgl-kernel (custom all-reduce, mscclpp): none at all.
    for wheel, files in wheels.items():
        if wheel.startswith(("nvidia_nccl", "sgl_kernel", "nvidia_nvshmem", "torch_memory_saver")):
            assert files == {}, wheel


def test_on_the_h200_host_only_an_expandable_segment_s_ipc_import_was_killed():
    probe = json.loads((H200 / "syscall-filter/syscall-filter-probe.json").read_text())
    assert probe["gpu"] == "NVIDIA H200" and probe["killed_calls"] == len(KILLED) and probe["pidfd_getfd_killed"]
    cases = {(c["expandable_segments"], c["service_user"], c["filter"]): c for c in probe["cases"]}
    assert len(cases) == 6
    for (expandable, service_user, with_filter), case in cases.items():
        if expandable and with_filter:
            assert case["consumer"] == {"exitcode": -31, "signal": "SIGSYS"} and not case["ok"]
        else:  # the same hand-over works without the filter, as root or as the service's user
            assert case["ok"] and case["consumer"]["exitcode"] == 0 and case["producer"]["exitcode"] == 0
    # The driver's libcuda and the host's NCCL make no killed call; its torch's allocator does.
    assert any("libcuda.so" in f for f in probe["scanned"]) and any("libnccl" in f for f in probe["scanned"])
    assert [line for line in probe["sites"] if not line.startswith(" ")] == [
        f for f in probe["scanned"] if f.endswith("libc10_cuda.so")]


@pytest.mark.parametrize("argv", [["--moe-a2a-backend", "flashinfer"], ["--moe-a2a-backend=flashinfer"],
                                  ["--moe-a2a-b", "flashinfer"], ["--speculative-moe-a2a-backend", "flashinfer"]])
def test_flashinfer_s_moe_all_to_all_is_refused_naming_the_directive(flags, argv):
    parsed, flag_problems = lint(["--model-path", "/m"] + argv, flags)
    assert flag_problems == []
    (problem,) = problems(parsed, {})
    assert problem.startswith("--%s flashinfer: flashinfer 0.6.3's MoE all-to-all"
                              % ("speculative-moe-a2a-backend" if "speculative" in argv[0] else "moe-a2a-backend"))
    assert "MnnvlMemory.open_mnnvl_memory" in problem
    assert problem.endswith("which the server unit's SystemCallFilter=@system-service ~@privileged kills (SIGSYS)")


@pytest.mark.parametrize("backend", ["none", "deepep"])
def test_other_all_to_all_backends_pass(flags, backend):
    parsed, _ = lint(["--moe-a2a-backend", backend, "--enable-mscclpp"], flags)
    assert problems(parsed, {}) == []


@pytest.mark.parametrize("name", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
@pytest.mark.parametrize("conf,refused", [("expandable_segments:True", True),
                                          ("max_split_size_mb:512, expandable_segments:True", True),
                                          ("expandable_segments:False", False), ("max_split_size_mb:512", False)])
def test_expandable_segments_are_refused_in_either_variable(name, conf, refused):
    found = problems({}, {name: conf, "CUDA_HOME": "/usr/local/cuda-13.0"})
    assert bool(found) is refused
    if refused:
        assert found[0].startswith(f"{name}={conf}: torch opens a CUDA tensor another process shared from an "
                                   "expandable segment with pidfd_getfd")
        assert DIRECTIVE in found[0]


def test_the_module_fails_naming_the_directive(monkeypatch, capsys, site):
    import sglang_flag_lint as mod
    from ansible.module_utils.testing import patch_module_args
    args = {"site_packages": str(site[0]), "argv": ["--model-path", "/m", "--moe-a2a-backend", "flashinfer"],
            "env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and len(result["problems"]) == 2
    assert result["msg"].startswith("the server unit's sandbox would kill sglang 0.5.9: --moe-a2a-backend flashinfer")
    assert result["msg"].count(DIRECTIVE) == 2
