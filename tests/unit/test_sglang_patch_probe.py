"""The probe against the real sglang 0.5.9 / flashinfer 0.6.3 sources (and sglang 0.5.10)."""
import ast

import pytest

import sglang_patch_probe as probe_mod
from conftest import inserted

SETTINGS = {"symm_mem_max_sizes_mib": {2: 64, 4: 64, 6: 128, 8: 128}, "multimem_world_sizes": []}
ALL = list(probe_mod.ALL_PATCHES)


def plan(site, names=ALL, **kw):
    return probe_mod.probe(str(site), names, SETTINGS, **kw)


def by_name(result):
    return {p["name"]: p for p in result["patches"]}


def test_everything_needs_patching_on_0_5_9(site_packages):
    result, errors = plan(site_packages())
    assert errors == []
    assert (result["sglang_version"], result["flashinfer_version"]) == ("0.5.9", "0.6.3")
    assert {p["status"] for p in result["patches"]} == {"apply"}


def test_0_5_10_already_has_the_kimi_delegation(site_packages):
    result, errors = plan(site_packages("0.5.10"))
    assert errors == []
    patches = by_name(result)
    assert patches["kimi_k25_eagle3"]["status"] == "upstream"
    assert patches["sm120_symm_mem_max_sizes"]["status"] == "apply"


def test_only_the_missing_methods_are_added(site_packages):
    site = site_packages()
    path = site / "sglang/srt/models/kimi_k25.py"
    text = path.read_text().replace("    def load_weights(self, weights", "    def get_embed_and_head(self):\n"
                                    "        return None\n\n    def load_weights(self, weights", 1)
    path.write_text(text)
    block = by_name(plan(site)[0])["kimi_k25_eagle3"]["block"]
    assert "def get_embed_and_head" not in block
    assert "def set_embed_and_head" in block and "def set_eagle3_layers_to_capture" in block


def test_the_blocks_compile_where_they_go(site_packages):
    site = site_packages()
    for entry in plan(site)[0]["patches"]:
        compile(inserted(entry, entry["block"] + "\n"), entry["path"], "exec")


def write_blocks(site, settings=SETTINGS):
    """Every block written as blockinfile writes it (markers, block, newline), at its anchor."""
    for entry in probe_mod.probe(str(site), ALL, settings)[0]["patches"]:
        if entry["status"] != "apply":  # upstream already has it (0.5.10's KimiK25 methods)
            continue
        block = "".join(line + "\n" for line in [entry["marker"].replace("{mark}", "BEGIN"), entry["block"],
                                                 entry["marker"].replace("{mark}", "END")])
        text = inserted(entry, block)
        open(entry["path"], "w").write(text)


def test_a_block_in_place_is_applied_and_one_from_other_settings_is_rewritten(site_packages):
    """Applied means nothing to write: the role's blockinfile loop runs only for apply and remove."""
    site = site_packages()
    write_blocks(site)
    assert {p["status"] for p in plan(site)[0]["patches"]} == {"applied"}
    other = dict(SETTINGS, symm_mem_max_sizes_mib={8: 256})
    patches = by_name(probe_mod.probe(str(site), ALL, other)[0])
    assert patches["sm120_symm_mem_max_sizes"]["status"] == "apply"
    assert patches["sm120_symm_mem_max_sizes"]["reason"] == "our block there is out of date"
    assert patches["kimi_k25_eagle3"]["status"] == "applied"


def test_the_table_entry_uses_the_configured_sizes(site_packages):
    settings = dict(SETTINGS, symm_mem_max_sizes_mib={8: 256, 2: 32})
    result, _ = probe_mod.probe(str(site_packages()), ALL, settings)
    assert "12: {2: 32 * MiB, 8: 256 * MiB}," in by_name(result)["sm120_symm_mem_max_sizes"]["block"]


def test_the_flashinfer_block_reuses_upstream_sources(site_packages):
    block = by_name(plan(site_packages())[0])["sm120_flashinfer_trtllm_comm"]["block"]
    assert "supported_major_versions=[9, 10, 12]" in block
    assert "trtllm_moe_allreduce_fusion.cu" in block


def test_missing_anchor_is_named_with_the_file(site_packages):
    site = site_packages()
    path = site / "sglang/srt/distributed/device_communicators/all_reduce_utils.py"
    path.write_text(path.read_text().replace("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {",
                                             "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = {  # per capability"))
    result, errors = plan(site)
    assert errors == ["sm120_symm_mem_max_sizes: anchor /^TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES = \\{$/ matches 0 lines "
                      "in %s, expected exactly one" % path]


def test_a_changed_table_is_drift(site_packages):
    site = site_packages()
    path = site / "sglang/srt/distributed/device_communicators/torch_symm_mem.py"
    path.write_text(path.read_text().replace("    _WORLD_SIZES_MULTIMEM = {", "    _WORLD_SIZES_MULTIMEM: dict = {"))
    _, errors = plan(site)
    assert errors == ["sm120_symm_mem_multimem: upstream drifted in %s (anchor /^    _WORLD_SIZES_MULTIMEM = \\{$/): "
                      "TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM is no longer a dict literal" % path]


def test_missing_kimi_file_names_the_release(site_packages):
    site = site_packages()
    (site / "sglang/srt/models/kimi_k25.py").unlink()
    _, errors = plan(site)
    assert errors == ["kimi_k25_eagle3: KimiK25 is not in sglang 0.5.9 (no sglang/srt/models/kimi_k25.py): this "
                      "release cannot serve Kimi-K2.5; set sglang_patches_kimi_k25_eagle3: false if this fleet "
                      "serves another model"]
    _, errors = plan(site, names=[n for n in ALL if n != "kimi_k25_eagle3"])
    assert errors == []


def test_a_gate_flag_read_elsewhere_is_drift(site_packages):
    site = site_packages()
    path = site / "sglang/srt/layers/communicator.py"
    path.write_text(path.read_text() + "\n\ndef other():\n    return _is_sm100_supported\n")
    _, errors = plan(site)
    assert len(errors) == 1 and "also read on line" in errors[0]


def test_verify_fails_on_an_unpatched_tree(site_packages):
    _, errors = plan(site_packages(), mode="verify")
    assert len(errors) == len(ALL) == 8 and all(e.endswith("not applied") for e in errors)


def test_methods_at_module_level_are_not_in_effect():
    tree = ast.parse("class KimiK25ForConditionalGeneration:\n    def __init__(self):\n        self.language_model = 1\n"
                     "EntryClass = [KimiK25ForConditionalGeneration]\n"
                     "def get_embed_and_head(self):\n    pass\n")
    assert probe_mod.KimiK25Eagle3().in_effect(tree, SETTINGS).startswith("KimiK25ForConditionalGeneration lacks")


def test_the_startup_log_of_server_args_shows_no_key(site_packages):
    """The patched ServerArgs.__repr__, as sglang 0.5.9's engine logs it: f"{server_args=}"."""
    import dataclasses
    site = site_packages()
    entry = by_name(plan(site)[0])["server_args_redact_secrets"]
    lines = open(entry["path"]).read().splitlines(True)
    at = probe_mod.find_anchor("".join(lines), entry["insertbefore"])[0] - 1
    patched = "".join(lines[:at]) + entry["block"] + "\n" + "".join(lines[at:])
    compile(patched, entry["path"], "exec")
    # The patched class's own __repr__, on a dataclass with ServerArgs's secret fields.
    cls = probe_mod.find_class(ast.parse(patched), "ServerArgs")
    method = probe_mod.find_function(cls.body, "__repr__")
    namespace = {"dataclasses": dataclasses}
    exec(compile(ast.Module(body=[method], type_ignores=[]), "server_args.py", "exec"), namespace)
    ServerArgs = dataclasses.dataclass(type("ServerArgs", (), {
        "__annotations__": {"model_path": str, "api_key": str, "admin_api_key": str},
        "__repr__": namespace["__repr__"], "admin_api_key": None}))
    server_args = ServerArgs(model_path="/models/kimi", api_key="s3cret")
    logged = f"{server_args=}"
    assert "s3cret" not in logged
    assert logged == "server_args=ServerArgs(model_path='/models/kimi', api_key='<redacted>', admin_api_key=None)"
    assert probe_mod.PATCHES["server_args_redact_secrets"].in_effect(ast.parse(patched), SETTINGS) is None


CAPTURE = "eagle3_fused_allreduce_capture"


def test_the_eagle3_capture_is_patched_on_0_5_9_and_0_5_10_and_then_applied(site_packages):
    for version in ("0.5.9", "0.5.10"):
        site = site_packages(version)
        entry = by_name(plan(site, names=[CAPTURE])[0])[CAPTURE]
        assert (entry["status"], entry["insertbefore"]) == ("apply", r"^                if i in self\.layers_to_capture:$")
        assert "hidden_states = tensor_model_parallel_all_reduce(hidden_states)" in entry["block"]
        write_blocks(site)
        assert by_name(plan(site)[0])[CAPTURE]["status"] == "applied"
        _, errors = plan(site, mode="verify")
        assert errors == []


def test_0_5_23_captures_after_the_fused_kernel_itself(site_packages):
    """Upstream's fix (PR #28343): the layer captures inside, from the fused kernel's residual output."""
    result, errors = plan(site_packages("0.5.23"), names=[CAPTURE])
    entry = by_name(result)[CAPTURE]
    assert (entry["status"], entry["block"]) == ("upstream", "")
    assert entry["reason"].startswith("not needed: upstream already provides it")
    assert CAPTURE not in " ".join(errors)


def test_an_unknown_capture_shape_is_refused_naming_the_file(site_packages):
    site = site_packages()
    path = site / "sglang/srt/models/deepseek_v2.py"
    before = path.read_text().replace("aux_hidden_states.append(hidden_states + residual)",
                                      "aux_hidden_states.append(self.capture(hidden_states, residual))")
    path.write_text(before)
    result, errors = plan(site, names=[CAPTURE])
    assert errors == ["%s: upstream drifted in %s (anchor /^                if i in self\\.layers_to_capture:$/): the "
                      "capture no longer appends `hidden_states + residual`" % (CAPTURE, path)]
    assert by_name(result)[CAPTURE]["block"] == "" and path.read_text() == before


def test_verify_finds_a_capture_block_placed_after_the_capture(site_packages):
    site = site_packages()
    entry = by_name(plan(site, names=[CAPTURE])[0])[CAPTURE]
    text = open(entry["path"]).read()
    lines = text.splitlines(True)
    anchor = probe_mod.find_anchor(text, entry["insertbefore"])[0]
    tree = ast.parse("".join(lines[:anchor + 7]) + entry["block"] + "\n" + "".join(lines[anchor + 7:]))
    assert probe_mod.PATCHES[CAPTURE].in_effect(tree, SETTINGS) == \
        "the reduction comes after the capture in DeepseekV2Model.forward"


class _App:
    """What the patched module uses of FastAPI: app.get(path) registers a route, app.router.routes lists them."""

    def __init__(self):
        self.router = type("Router", (), {"routes": []})()

    def get(self, path):
        def register(endpoint):
            self.router.routes.append(type("Route", (), {"path": path, "endpoint": staticmethod(endpoint)})())
            return endpoint
        return register


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10"])
def test_server_info_answers_without_the_keys_on_both_routes(site_packages, version):
    """sglang's own server_info and get_server_info, with the patch's block where the role writes it, run
    against a server with both keys: neither route's answer holds either key; every other field is kept."""
    import asyncio
    import dataclasses
    import logging
    import typing
    site = site_packages(version)
    write_blocks(site)
    path = site / "sglang/srt/entrypoints/http_server.py"
    tree = ast.parse(path.read_text())
    assert probe_mod.PATCHES["server_info_redact_secrets"].in_effect(tree, SETTINGS) is None
    # The routes and the block, in the file's order; the rest of the module (FastAPI, the scheduler) is faked.
    begin = next(i for i, n in enumerate(tree.body) if isinstance(n, ast.AsyncFunctionDef) and n.name == "get_server_info")
    end = next(i for i, n in enumerate(tree.body) if ast.unparse(n) == "app.get('/server_info')(server_info)")
    module = ast.Module(body=tree.body[begin:end + 1], type_ignores=[])

    @dataclasses.dataclass
    class ServerArgs:
        model_path: str = "/models/kimi"
        api_key: str = "client-s3cret"
        admin_api_key: str = "admin-s3cret"

    async def internal_state():
        return [{"avg_spec_accept_length": 2.65}]
    manager = type("TokenizerManager", (), {"server_args": ServerArgs(), "get_internal_state": staticmethod(internal_state)})
    state = type("GlobalState", (), {"tokenizer_manager": manager, "scheduler_info": {"max_total_num_tokens": 4096}})
    namespace = {"app": _App(), "_global_state": state, "dataclasses": dataclasses, "logger": logging.getLogger("t"),
                 "__version__": version, "List": typing.List, "Dict": typing.Dict, "Any": typing.Any}
    exec(compile(module, str(path), "exec"), namespace)
    routes = {r.path: r.endpoint for r in namespace["app"].router.routes}
    assert [r.path for r in namespace["app"].router.routes].count("/server_info") == 1
    for route in ("/server_info", "/get_server_info"):
        answer = asyncio.run(routes[route]())
        assert "s3cret" not in repr(answer), route
        assert (answer["api_key"], answer["admin_api_key"]) == ("<redacted>", "<redacted>")
        assert answer["model_path"] == "/models/kimi" and answer["max_total_num_tokens"] == 4096
        assert answer["internal_states"] == [{"avg_spec_accept_length": 2.65}] and answer["version"] == version
    manager.server_args = ServerArgs(api_key=None, admin_api_key=None)
    assert asyncio.run(routes["/server_info"]())["api_key"] is None  # no key: nothing to redact, None as before


def test_server_info_redaction_refuses_a_file_whose_route_moved(site_packages):
    site = site_packages()
    path = site / "sglang/srt/entrypoints/http_server.py"
    text = path.read_text()
    path.write_text(text.replace('@app.get("/get_load")', '@app.get("/load_moved")', 1))
    _, errors = plan(site, names=["server_info_redact_secrets"])
    assert errors and "server_info_redact_secrets" in errors[0] and "http_server.py" in errors[0]
