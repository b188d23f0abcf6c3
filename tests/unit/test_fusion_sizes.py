"""The decode sizes the fusion self-test times: the server's own, derived as sglang 0.5.9 derives them.

server_sizes (roles/sglang_server/files/fusion_selftest.py) is checked against sglang's own code, run
from the real wheel: ServerArgs._handle_gpu_memory_settings's choice of --cuda-graph-max-bs,
ServerArgs._generate_cuda_graph_batch_sizes's ladder (srt/server_args.py) and
get_batch_sizes_to_capture (srt/model_executor/cuda_graph_runner.py), which keeps it to the request pool.
"""
import ast
import sys
from types import SimpleNamespace as NS

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "roles/sglang_server/files"))
from fusion_selftest import server_sizes  # noqa: E402

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "4"]
RTX_PRO_6000_MIB = 97887  # 96 GB (the fleet's GPU); any size from 90 to 160 GiB takes the same default
H200_MIB = 143771          # tests/fixtures/hosts/h200-driver580's


def _function(path, name, cls=None):
    tree = ast.parse(path.read_text())
    scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body if cls else tree.body
    return next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.fixture
def sglang(upstream_sglang):
    """sglang's three steps, compiled from its own source."""
    server_args = upstream_sglang / "sglang/srt/server_args.py"
    runner = upstream_sglang / "sglang/srt/model_executor/cuda_graph_runner.py"
    memory = _function(server_args, "_handle_gpu_memory_settings", "ServerArgs")
    choice = next(n for n in memory.body if isinstance(n, ast.If) and "gpu_mem" in ast.unparse(n.test))
    memory.body = [choice]  # its choice of chunked_prefill_size and cuda_graph_max_bs, not what follows
    ladder = _function(server_args, "_generate_cuda_graph_batch_sizes", "ServerArgs")
    capture = _function(runner, "get_batch_sizes_to_capture")
    namespace = {"require_gathered_buffer": lambda args: False, "get_attention_cp_size": lambda: 1}
    future = ast.ImportFrom(module="__future__", names=[ast.alias("annotations")], level=0)
    module = ast.Module(body=[future, memory, ladder, capture], type_ignores=[])
    exec(compile(ast.fix_missing_locations(module), "sglang", "exec"), namespace)
    return namespace


def sglang_decode_tokens(sglang, gpu_mem, tp, speculative, tokens_per_bs, max_running, max_bs=None, padding=True):
    """The token counts sglang's CUDA graphs are captured at, by sglang's own functions."""
    args = NS(chunked_prefill_size=None, cuda_graph_max_bs=max_bs, tp_size=tp, disable_cuda_graph_padding=not padding,
              speculative_algorithm="EAGLE3" if speculative else None)
    sglang["_handle_gpu_memory_settings"](args, gpu_mem)
    args.cuda_graph_bs = sglang["_generate_cuda_graph_batch_sizes"](args)
    args.enable_two_batch_overlap = args.enable_torch_compile = False
    runner = NS(server_args=args, req_to_token_pool=NS(size=max_running))
    capture_bs, _ = sglang["get_batch_sizes_to_capture"](runner, tokens_per_bs)
    return [bs * tokens_per_bs for bs in capture_bs if bs * tokens_per_bs <= 2048]


@pytest.mark.parametrize("gpu_mem", [RTX_PRO_6000_MIB, H200_MIB, 81559, 40000, 24000, 16000, 200000])
@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("max_running", [None, 128, 1024])
def test_eagle3_sizes_are_sglang_s(sglang, gpu_mem, tp, max_running):
    argv = ["--tp", str(tp)] + EAGLE3 + (["--max-running-requests", str(max_running)] if max_running else [])
    sizes = server_sizes(argv, gpu_mem)
    assert sizes["tokens_per_batch"] == 4
    # EAGLE's pool is 48 requests unless --max-running-requests says otherwise (ServerArgs, speculative).
    assert sizes["decode_tokens"] == sglang_decode_tokens(sglang, gpu_mem, tp, True, 4, max_running or 48)


@pytest.mark.parametrize("max_bs", [8, 60, 160, 512])
@pytest.mark.parametrize("padding", [True, False])
def test_sizes_without_speculation_and_with_a_given_max_bs_are_sglang_s(sglang, max_bs, padding):
    argv = ["--tp", "8", "--cuda-graph-max-bs", str(max_bs)] + ([] if padding else ["--disable-cuda-graph-padding"])
    sizes = server_sizes(argv, RTX_PRO_6000_MIB)
    assert sizes["tokens_per_batch"] == 1 and sizes["max_bs_from"] == "--cuda-graph-max-bs"
    assert sizes["decode_tokens"] == sglang_decode_tokens(sglang, RTX_PRO_6000_MIB, 8, False, 1, 4096, max_bs, padding)


def test_the_weighed_sizes_are_the_captured_sizes_a_step_is_padded_to():
    sizes = server_sizes(["--tp", "8"] + EAGLE3, RTX_PRO_6000_MIB, weigh_batches=[1, 9, 33, 48, 200])
    assert sizes["batch_sizes"][-4:] == [32, 40, 44, 48]
    assert sizes["weighed_batches"] == [1, 10, 40, 48]   # 9 runs in the graph for 10; 200 in the largest, 48
    assert sizes["weighed_tokens"] == [4, 40, 160, 192]


def test_topk_1_verifies_num_steps_plus_one_tokens_whatever_the_draft_tokens_say():
    """sglang sets num_draft_tokens to num_steps + 1 at topk 1 (ServerArgs, speculative)."""
    argv = ["--tp", "8", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    assert server_sizes(argv, RTX_PRO_6000_MIB)["tokens_per_batch"] == 6


def test_sizes_are_capped_at_the_fusion_workspace():
    argv = ["--tp", "8", "--max-running-requests", "1024"] + EAGLE3
    sizes = server_sizes(argv, RTX_PRO_6000_MIB, workspace_tokens=1024)
    assert max(sizes["decode_tokens"]) == 1024 and sizes["batch_sizes"][-1] == 256


def test_the_comm_flags_are_read_and_other_flags_are_left_alone():
    argv = ["--model-path", "/models/k", "--tp", "8", "--disable-custom-all-reduce", "--enable-mscclpp",
            "--served-model-name", "--tp-like-name", "--enable-torch-symm-mem"] + EAGLE3
    assert server_sizes(argv, RTX_PRO_6000_MIB)["comm"] == {
        "disable_custom_all_reduce": True, "enable_mscclpp": True, "enable_torch_symm_mem": True,
        "enable_symm_mem": False}


def test_speculation_left_to_sglang_is_refused_with_what_to_give():
    with pytest.raises(ValueError, match="--speculative-num-steps"):
        server_sizes(["--tp", "8", "--speculative-algorithm", "EAGLE3"], RTX_PRO_6000_MIB)


def test_the_h200_graph_timing_was_taken_at_the_sizes_server_sizes_gives_and_graphs_beat_eager():
    """tests/fixtures/hosts/h200-driver580/fusion/: the self-test's timing code on the real H200 (world size 1)."""
    import json
    from conftest import FIXTURES
    real = json.loads((FIXTURES / "hosts/h200-driver580/fusion/fusion-graph-timing.json").read_text())
    sizes = server_sizes(real["server_args"], H200_MIB, 2048, [1, 8, 32, 48])
    assert real["sizes"] == sizes
    assert [s["tokens"] for s in real["shapes"]] == sizes["decode_tokens"] + [2048]
    decode = [s for s in real["shapes"] if s["decode"]]
    assert all(s["unfused_us"] * 3 < s["unfused_eager_us"] for s in decode)  # launch gaps, not work
    assert [s["tokens"] for s in decode if s["weighs"]] == [4, 32, 128, 192]
