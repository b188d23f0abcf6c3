"""A lab node after `--tags sglang,patches`: the pinned venv and a verified, compiling patched tree."""
import json

NODE = "fleet-gpu-1"
VENV = "/opt/sglang/current"  # the install in service
testinfra_hosts = ["podman://" + NODE]

CHECK = r"""
import ast, json, sys, sysconfig
from importlib.metadata import version
site = sysconfig.get_paths()["purelib"]
def tree(rel):
    src = open(site + "/" + rel).read()
    compile(src, rel, "exec")
    return ast.parse(src)
kimi = next(n for n in tree("sglang/srt/models/kimi_k25.py").body
            if isinstance(n, ast.ClassDef) and n.name == "KimiK25ForConditionalGeneration")
table = next(n for n in tree("sglang/srt/distributed/device_communicators/all_reduce_utils.py").body
             if isinstance(n, ast.Assign) and n.targets[0].id == "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES")
print(json.dumps({"versions": [version("sglang"), version("flashinfer-python")],
                  "kimi_methods": [n.name for n in kimi.body if isinstance(n, ast.FunctionDef)],
                  "symm_mem_caps": [k.value for k in table.value.keys],
                  "comm": "supported_major_versions=[9, 10, 12]" in open(site + "/flashinfer/jit/comm.py").read()}))
"""


def test_the_venv_holds_the_pinned_wheels_and_a_patched_tree(host):
    out = json.loads(host.check_output("%s/bin/python -c '%s'" % (VENV, CHECK.replace("'", "'\"'\"'"))))
    assert out["versions"] == ["0.5.9", "0.6.3"]
    for name in ("get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"):
        assert out["kimi_methods"].count(name) == 1
    assert out["symm_mem_caps"] == [12, 9, 10]
    assert out["comm"] is True


def test_sgl_kernel_came_from_its_pinned_url_as_upstream_packages_it(host):
    """METADATA says 0.3.21, the file name 0.3.21+cpu: pip took it by URL, and recorded where from."""
    out = host.check_output("%s/bin/python -c 'from importlib.metadata import distribution as d; "
                            "x = d(\"sgl-kernel\"); print(x.version); print(x.read_text(\"direct_url.json\"))'" % VENV)
    version, origin = out.split("\n", 1)
    origin = json.loads(origin)
    assert version == "0.3.21"
    assert origin["url"] == "file:///srv/lab-wheelhouse/sgl_kernel-0.3.21+cpu-cp310-abi3-manylinux2014_x86_64.whl"
    assert origin["archive_info"]["hashes"]["sha256"] == \
        "5e331783c2b618c37ba5193ed9cb7213f5daa02cec5172a16af4be8fdcecf28e"
    # From an index, pip refuses such a wheel: the lab reproduces what a real host sees.
    refused = host.run("%s/bin/pip download --no-deps --no-index --find-links /srv/lab-wheelhouse -d /tmp/x "
                       "sgl-kernel==0.3.21+cpu" % VENV)
    assert refused.rc != 0 and "inconsistent version" in refused.stdout + refused.stderr


def test_the_patch_report_is_a_local_fact(host):
    report = json.loads(host.file("/etc/ansible/facts.d/sglang_patches.fact").content_string)
    assert report["sglang_version"] == "0.5.9"
    assert {p["name"]: p["status"] for p in report["patches"]} == {
        "kimi_k25_eagle3": "applied", "sm120_symm_mem_max_sizes": "applied", "sm120_symm_mem_multimem": "applied",
        "sm120_allreduce_fusion_gate": "applied", "sm120_flashinfer_trtllm_comm": "applied",
        "server_args_redact_secrets": "applied", "server_info_redact_secrets": "applied",
        "eagle3_fused_allreduce_capture": "applied"}


# A rerun of both stages, and one under --check, change nothing: test_site.py's rerun and
# --check --diff of the whole site.yml require zero changes on each host.
