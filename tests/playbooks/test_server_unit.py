"""The production unit, rendered from the role defaults alone, and checked against sglang 0.5.9."""
import shlex
import sys

import pytest
import yaml

from ansible.module_utils.sglang_args import lint, read_flags
from conftest import ROOT
from fleet import run_playbook


def render(tmp_path, monkeypatch, hosts, **extravars):
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in hosts}}}}}))
    run = run_playbook(ROOT / "tests/playbooks/render_unit.yml", inventory,
                       extravars={"render_dir": str(tmp_path), **extravars})
    assert run.rc == 0, run.hosts
    return {h: (tmp_path / f"{h}.service").read_text() for h in hosts}


def exec_start(unit):
    """The ExecStart command line as systemd reads it (continuations joined)."""
    text = unit.split("ExecStart=", 1)[1]
    lines = []
    for line in text.splitlines():
        lines.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(lines))


def test_defaults_alone_give_the_production_unit(tmp_path, monkeypatch, site_packages):
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"])["gpu-node-01"]
    argv = exec_start(unit)
    assert argv[:3] == ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
    assert " ".join(argv[3:]) == (
        "--model-path /models/nvidia/Kimi-K2.5-NVFP4 --tp 8 --host 127.0.0.1 --port 30000 --trust-remote-code "
        "--reasoning-parser kimi_k2 --tool-call-parser kimi_k2 --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path /models/lightseekorg/kimi-k2.5-eagle3 --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-flashinfer-allreduce-fusion")
    for line in ("Type=exec", "User=sglang", "Restart=on-failure", "TimeoutStartSec=3600", "LimitMEMLOCK=infinity",
                 "Environment=SGLANG_ENABLE_SPEC_V2=1", "Environment=HF_HUB_OFFLINE=1",
                 "Environment=CUDA_HOME=/usr/local/cuda-13.0",
                 "Environment=LD_LIBRARY_PATH=/usr/local/cuda-13.0/lib64",
                 "EnvironmentFile=/etc/sglang/sglang.env", "DeviceAllow=char-nvidia-frontend rw",
                 "ProtectSystem=strict", "NoNewPrivileges=yes"):
        assert line in unit.splitlines()
    assert "--enable-torch-symm-mem" not in argv and "--api-key" not in argv
    # Every flag of the production unit is one sglang 0.5.9 itself defines.
    parsed, problems = lint(argv[3:], read_flags(str(site_packages())))
    assert problems == [] and parsed["speculative_algorithm"] == "EAGLE3"


def test_a_multi_node_group_gets_ranks_and_the_first_host_as_rendezvous(tmp_path, monkeypatch):
    units = render(tmp_path, monkeypatch, ["gpu-a", "gpu-b"], sglang_server_multinode_group="gpu_nodes")
    for rank, host in enumerate(["gpu-a", "gpu-b"]):
        argv = exec_start(units[host])
        assert argv[argv.index("--tp") + 1] == "16"
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == str(rank)
        assert argv[argv.index("--dist-init-addr") + 1] == "gpu-a:20000"


def test_the_api_key_stays_a_reference_in_the_unit(tmp_path, monkeypatch):
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"], sglang_server_api_key="s3cret-value")["gpu-node-01"]
    assert "s3cret-value" not in unit
    assert exec_start(unit)[-2:] == ["--api-key", "${SGLANG_API_KEY}"]


@pytest.mark.parametrize("word,quoted", [("/models/x", "/models/x"), ("a b", '"a b"'), ("$HOME", '"$$HOME"'),
                                         ('say "hi"', '"say \\"hi\\""'), ("100%", '"100%%"')])
def test_systemd_quoting(word, quoted):
    from systemd_unit import systemd_quote
    assert systemd_quote(word) == quoted
