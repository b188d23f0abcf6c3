"""The flag lint against the real sglang 0.5.9 server_args.py."""
import pytest

from ansible.module_utils.sglang_args import lint, read_flags


@pytest.fixture(scope="module")
def flags(tmp_path_factory):
    import conftest
    return read_flags(str(conftest._extracted("sglang", "0.5.9")))


def test_every_add_argument_is_read(flags):
    assert len({id(f) for f in flags.values()}) > 300
    assert flags["--tp-size"] is flags["--tensor-parallel-size"]
    assert "--tp" not in flags  # sglang 0.5.9 takes --tp as argparse's abbreviation of --tp-size


def test_choices_are_resolved_through_constants_and_imported_class_maps(flags):
    assert "modelopt_fp4" in flags["--quantization"].choices
    assert "unquant" in flags["--speculative-draft-model-quantization"].choices   # [*QUANTIZATION_CHOICES, "unquant"]
    assert "kimi_k2" in flags["--reasoning-parser"].choices                      # ReasoningParser.DetectorMap.keys()
    assert "kimi_k2" in flags["--tool-call-parser"].choices                      # a local of add_cli_args


def test_the_production_command_line_is_accepted(flags):
    argv = ("--model-path /m --tp 8 --trust-remote-code --reasoning-parser kimi_k2 --tool-call-parser kimi_k2 "
            "--speculative-algorithm EAGLE3 --speculative-draft-model-path /d --speculative-num-steps 3 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-flashinfer-allreduce-fusion "
            "--cuda-graph-bs 1 2 4 8 --port=30000").split()
    parsed, problems = lint(argv, flags)
    assert problems == []
    assert parsed["cuda_graph_bs"] == ["1", "2", "4", "8"] and parsed["port"] == "30000"
    assert parsed["enable_flashinfer_allreduce_fusion"] is True


@pytest.mark.parametrize("argv,problem", [
    ("--enable-flashinfer-allreduce-fusiom", "unknown flag --enable-flashinfer-allreduce-fusiom (closest: "
                                             "--enable-flashinfer-allreduce-fusion"),
    ("--speculative-algorithm EAGLE4", "--speculative-algorithm EAGLE4: not one of the choices (EAGLE, EAGLE3,"),
    ("--reasoning-parser kimi_k3", "--reasoning-parser kimi_k3: not one of the choices"),
    ("--spec 3", "ambiguous: --spec could be --speculative-"),
    ("--tp", "--tp (--tp-size) expects 1 value(s)"),
    ("--trust-remote-code=yes", "--trust-remote-code takes no value (got 'yes')"),
])
def test_bad_flags_are_named(flags, argv, problem):
    _, problems = lint(argv.split(), flags)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_unique_prefixes_are_accepted_as_argparse_does(flags):
    parsed, problems = lint(["--enable-flashinfer-allreduce", "--speculative-algo", "EAGLE3", "--tp", "8"], flags)
    assert problems == []
    assert parsed == {"enable_flashinfer_allreduce_fusion": True, "speculative_algorithm": "EAGLE3",
                      "tensor_parallel_size": "8"}


PRODUCTION = ("--model-path /m --tp 8 --quantization modelopt_fp4 --speculative-algorithm EAGLE3 "
              "--speculative-draft-model-path /d --speculative-draft-model-quantization unquant "
              "--speculative-eagle-topk 1").split()
SPEC_V2 = {"SGLANG_ENABLE_SPEC_V2": "1"}


def combinations(flags, argv, environment=SPEC_V2, gpus_per_node=8, nnodes=1):
    from ansible.module_utils.sglang_args import combination_problems
    parsed, problems = lint(argv, flags)
    assert problems == []
    return combination_problems(parsed, environment, gpus_per_node, nnodes)


def test_the_production_combination_runs(flags):
    assert combinations(flags, PRODUCTION) == []


def test_an_nvfp4_target_needs_an_unquantized_drafter(flags):
    argv = [a for a in PRODUCTION if a not in ("--speculative-draft-model-quantization", "unquant")]
    assert combinations(flags, argv) == [
        "--quantization modelopt_fp4 with EAGLE-3 needs --speculative-draft-model-quantization unquant, or the BF16 "
        "drafter inherits modelopt_fp4 and fails to load"]
    assert combinations(flags, "--model-path /m --tp 8 --quantization modelopt_fp4".split()) == []  # no drafter


def test_spec_v2_needs_topk_1(flags):
    argv = PRODUCTION[:-1] + ["4"]
    assert combinations(flags, argv) == ["SGLANG_ENABLE_SPEC_V2 needs --speculative-eagle-topk 1, not 4"]
    assert combinations(flags, argv, environment={}) == []


def test_tp_must_cover_every_gpu_of_the_group(flags):
    assert combinations(flags, PRODUCTION, gpus_per_node=8, nnodes=2) == ["--tp 8 does not match 8 GPU(s) x 2 node(s)"]
    assert combinations(flags, PRODUCTION[:2] + ["--tp-size=16"] + PRODUCTION[4:], gpus_per_node=8, nnodes=2) == []
    assert combinations(flags, PRODUCTION, gpus_per_node=None) == []
