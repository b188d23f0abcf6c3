"""EAGLE-3's aux states under allreduce fusion at TP 2, computed by sglang 0.5.9's own code on the CPU.

`DeepseekV2Model.forward` and `DeepseekV2DecoderLayer.forward` are taken from the real
`srt/models/deepseek_v2.py` (pristine, or with the eagle3_fused_allreduce_capture block put where
blockinfile puts it) and run for two simulated ranks in two threads. What they call is stubbed the
way sglang behaves at TP 2: attention and MLP are row-parallel (each rank holds a partial sum), the
attention output is all-reduced before the post-attention RMSNorm, and the MLP's all-reduce is either
done in the MLP (fusion off) or left to the next layer's fused all-reduce + add + RMSNorm (fusion on).
The all-reduce works in place and hands back its input, as sglang's NCCL path does
(`GroupCoordinator.all_reduce`: `inplace_all_reduce(input_, ...)`, `return input_`), so a deferral flag
left set on a reduced tensor is still there for the next layer to act on.
"""
import ast
import threading

import numpy as np
import pytest

import sglang_patch_probe as probe_mod
from conftest import inserted

RANKS, TOKENS, HIDDEN, LAYERS = 2, 4, 16, 8
DEFAULT_CAPTURED = [2, LAYERS // 2, LAYERS - 3]  # sglang's default EAGLE-3 layers for an 8-layer model
# Layer 0 cannot be captured (its residual is None); layer 1 is the first a deferred sum reaches, and
# the last layer is the last one handed a deferred sum (it defers nothing itself: it has no next).
EDGE_CAPTURED = [1, LAYERS - 1]
CAPTURES = pytest.mark.parametrize("captured", [DEFAULT_CAPTURED, EDGE_CAPTURED], ids=["sglang-default", "edges"])
FLAG = "_sglang_needs_allreduce_fusion"
PATCH = "eagle3_fused_allreduce_capture"


class Tensor(np.ndarray):
    """A float64 array that takes attributes (sglang marks deferred all-reduces on the tensor)."""
    device = "cpu"


def tensor(values):
    return np.asarray(values, dtype=np.float64).view(Tensor)


class Ranks:
    """Two ranks' all-reduce, in place: each deposits a copy of its tensor, and each tensor is overwritten
    with the sum in rank order and handed back (the same object, attributes and all)."""

    def __init__(self):
        self.slots, self.barrier, self.local = [None] * RANKS, threading.Barrier(RANKS, timeout=30), threading.local()
        self.calls = 0
        self.fused = 0  # fused all-reduce + add + RMSNorm branches taken in prepare_attn, rank 0's count

    def all_reduce(self, x):
        rank = self.local.rank
        self.slots[rank] = np.array(x)
        self.barrier.wait()
        x[...] = sum(self.slots)
        self.barrier.wait()
        if rank == 0:
            self.calls += 1
        return x


def rms_norm(x):
    return tensor(x / np.sqrt((np.asarray(x) ** 2).mean(axis=-1, keepdims=True) + 1e-6))


class Communicator:
    """sglang's LayerCommunicator at TP 2, reduced to what the decoder layer asks of it."""

    def __init__(self, ranks, fuse):
        self.ranks, self.fuse = ranks, fuse

    def prepare_attn(self, hidden_states, residual, forward_batch, quant_format=""):
        if residual is not None and getattr(hidden_states, FLAG, False):
            if self.ranks.local.rank == 0:
                self.ranks.fused += 1
            hidden_states = self.ranks.all_reduce(hidden_states)  # the fused kernel: all-reduce, add, RMSNorm
        residual = hidden_states if residual is None else tensor(hidden_states + residual)
        return rms_norm(residual), residual

    def prepare_mlp(self, hidden_states, residual, forward_batch):
        residual = tensor(self.ranks.all_reduce(hidden_states) + residual)
        return rms_norm(residual), residual

    def should_fuse_mlp_allreduce_with_next_layer(self, forward_batch):
        return self.fuse

    def should_use_reduce_scatter(self, forward_batch):
        return False

    def postprocess_layer(self, hidden_states, residual, forward_batch):
        return hidden_states, residual


class RowParallel:
    """A row-parallel projection: this rank's partial sum, all-reduced by the MLP unless fusion defers it."""

    def __init__(self, weight, ranks=None, partials=None):
        self.weight, self.ranks, self.partials = weight, ranks, partials

    def __call__(self, hidden_states, forward_batch=None, should_allreduce_fusion=False, *rest, **kw):
        partial = tensor(np.asarray(hidden_states) @ self.weight)
        if self.ranks is None:
            return partial
        self.partials.append(np.array(partial))
        return partial if should_allreduce_fusion else self.ranks.all_reduce(partial)


def source_functions(text):
    """DeepseekV2Model.forward and DeepseekV2DecoderLayer.forward from the file's own AST."""
    tree = ast.parse(text)
    return [probe_mod.find_function(probe_mod.find_class(tree, cls).body, "forward")
            for cls in ("DeepseekV2Model", "DeepseekV2DecoderLayer")]


def run_model(text, fuse, captured=DEFAULT_CAPTURED):
    """Both ranks through the real forward: per rank, the aux states and each layer's MLP partials; the
    number of all-reduces; the number of fused branches prepare_attn took (both per rank)."""
    model_forward, layer_forward = source_functions(text)
    ranks = Ranks()
    rng = np.random.default_rng(7)
    embeds = tensor(rng.standard_normal((TOKENS, HIDDEN)))
    weights = [[(rng.standard_normal((HIDDEN, HIDDEN)) / 4, rng.standard_normal((HIDDEN, HIDDEN)) / 4)
                for _ in range(RANKS)] for _ in range(LAYERS)]

    class Null:
        def __init__(self, **kw):
            self.__dict__.update(kw)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    namespace = {
        "torch": Null(float32="float32"), "BumpAllocator": lambda **kw: None, "nullcontext": Null,
        "nsa_use_prefill_cp": lambda forward_batch: False, "_get_llama_4_scaling": None,
        "get_global_server_args": lambda: Null(enable_piecewise_cuda_graph=True),
        "get_global_expert_distribution_recorder": None, "tensor_model_parallel_all_gather": None,
        "tensor_model_parallel_all_reduce": ranks.all_reduce, "model_forward_maybe_tbo": None,
        "PPProxyTensors": None, "cp_split_and_rebuild_data": None, "cp_split_and_rebuild_position": None,
        "cp_all_gather_rerange_output": None, "_is_gfx95_supported": False, "DeepseekV2MLP": RowParallel,
    }
    model_forward.name, layer_forward.name = "model_forward", "layer_forward"
    module = ast.Module(body=[ast.ImportFrom(module="__future__", names=[ast.alias("annotations")], level=0),
                              model_forward, layer_forward], type_ignores=[])
    code = compile(ast.fix_missing_locations(module), "deepseek_v2.py", "exec")
    exec(code, namespace)
    model_fn, layer_fn = namespace["model_forward"], namespace["layer_forward"]

    results, failures = [None] * RANKS, []

    def rank_main(rank):
        try:
            run_rank(rank)
        except BaseException as exc:  # a stub sglang's code asks for and this test lacks, say
            failures.append(exc)
            ranks.barrier.abort()

    def run_rank(rank):
        ranks.local.rank = rank
        partials = []

        class Layer:
            def __init__(self, i):
                self.layer_communicator = Communicator(ranks, fuse and i < LAYERS - 1)  # the last has no next
                self.self_attn = RowParallel(weights[i][rank][0])
                self.mlp = RowParallel(weights[i][rank][1], ranks, partials)
                self.nsa_enable_prefill_cp = False

            def __call__(self, *args):
                return layer_fn(self, *args)

        model = Null(start_layer=0, end_layer=LAYERS, first_k_dense_replace=0, enable_a2a_moe=False,
                     layers_to_capture=list(captured), llama_4_scaling_config=None, layers=[Layer(i) for i in
                                                                                            range(LAYERS)],
                     pp_group=Null(is_first_rank=True, is_last_rank=True),
                     norm=lambda h, residual=None: (rms_norm(h + residual), None))
        batch = Null(can_run_tbo=False, forward_mode=Null(is_idle=lambda: False))
        hidden, aux = model_fn(model, None, None, batch, input_embeds=embeds)
        results[rank] = {"hidden": np.array(hidden), "aux": [np.array(a) for a in aux], "partials": partials}

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(RANKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if failures:
        raise failures[0]
    assert all(r is not None for r in results), "a rank did not finish within 60 s"
    return results, ranks.calls, ranks.fused


@pytest.fixture
def deepseek(site_packages):
    """The real 0.5.9 deepseek_v2.py, and the same file with the patch's block where blockinfile puts it."""
    site = site_packages()
    entry = next(p for p in probe_mod.probe(str(site), [PATCH], {})[0]["patches"] if p["name"] == PATCH)
    assert entry["status"] == "apply", entry["reason"]
    begin, end = (entry["marker"].replace("{mark}", m) for m in ("BEGIN", "END"))
    pristine = open(entry["path"]).read()
    return pristine, inserted(entry, "%s\n%s\n%s\n" % (begin, entry["block"], end))


@CAPTURES
def test_pristine_0_5_9_hands_the_drafter_one_ranks_partial_sum_under_fusion(deepseek, captured):
    pristine, _ = deepseek
    unfused, _, _ = run_model(pristine, fuse=False, captured=captured)
    fused, _, fused_branches = run_model(pristine, fuse=True, captured=captured)
    assert fused_branches == LAYERS - 1  # every layer after the first takes the fused kernel
    for rank in range(RANKS):
        np.testing.assert_allclose(fused[rank]["hidden"], unfused[0]["hidden"], rtol=1e-12)  # tokens stay right
        for k, layer in enumerate(captured):
            other = fused[1 - rank]["partials"][layer - 1]  # what the previous layer's MLP left on the other rank
            np.testing.assert_allclose(unfused[rank]["aux"][k] - fused[rank]["aux"][k], other, rtol=1e-9, atol=1e-12)
            assert np.abs(other).max() > 0.1


@CAPTURES
def test_patched_0_5_9_captures_what_the_unfused_path_captures(deepseek, captured):
    pristine, patched = deepseek
    unfused, unfused_calls, unfused_branches = run_model(patched, fuse=False, captured=captured)
    fused, fused_calls, fused_branches = run_model(patched, fuse=True, captured=captured)
    for rank in range(RANKS):
        np.testing.assert_allclose(fused[rank]["hidden"], unfused[rank]["hidden"], rtol=1e-12)
        assert len(fused[rank]["aux"]) == len(captured)
        for k in range(len(captured)):
            np.testing.assert_array_equal(fused[rank]["aux"][k], unfused[rank]["aux"][k])
    # Fusion off is untouched by the block; with fusion on, the captured layers' all-reduce happens
    # once, in the block, instead of in the fused kernel: the same number of all-reduces in all.
    pristine_unfused, pristine_calls, _ = run_model(pristine, fuse=False, captured=captured)
    np.testing.assert_array_equal(pristine_unfused[0]["aux"][0], unfused[0]["aux"][0])
    assert unfused_calls == pristine_calls == fused_calls == 2 * LAYERS
    # Only the captured layers give up the fused kernel; every other layer after the first keeps it.
    assert unfused_branches == 0
    assert fused_branches == (LAYERS - 1) - len(captured)
