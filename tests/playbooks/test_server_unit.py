"""The production unit, rendered from the role defaults alone, and checked against sglang 0.5.9."""
import json
import shlex
import sys

import pytest
import yaml

from ansible.module_utils.sglang_args import lint, read_flags
from ansible.module_utils.systemd_devices import denied, parse_ls_l
from conftest import H200, ROOT, captured_nodes
from fleet import run_playbook


def render(tmp_path, monkeypatch, hosts, **extravars):
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in hosts}}}}}))
    run = run_playbook(ROOT / "tests/playbooks/render_unit.yml", inventory,
                       extravars={"render_dir": str(tmp_path), **extravars})
    assert run.rc == 0, run.hosts
    return {h: (tmp_path / f"{h}.sglang.service").read_text() for h in hosts}


def test_the_unit_s_name_comes_from_the_fleet_layer_and_the_bench_reads_the_key_the_server_writes(tmp_path, monkeypatch):
    """fleet_server_service names the unit, its gpu-init unit and its files; the bench's key file follows it."""
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"], fleet_server_service="kimi")["gpu-node-01"]
    assert "Requires=kimi-gpu-init.service" in unit.splitlines()
    gpu_init = (tmp_path / "gpu-node-01.sglang-gpu-init.service").read_text()
    assert "Before=kimi.service" in gpu_init.splitlines()
    paths = json.loads((tmp_path / "gpu-node-01.paths.json").read_text())
    assert paths == {"unit": "/etc/systemd/system/kimi.service", "env_file": "/etc/sglang/kimi.env",
                     "config_file": "/etc/sglang/kimi.yaml", "bench_secrets_file": "/etc/sglang/kimi.env",
                     "bench_python": "/opt/sglang/current/bin/python"}


def test_the_server_and_the_bench_run_the_install_in_service_under_the_fleet_s_install_root(tmp_path, monkeypatch):
    """fleet_install_root moves <root>/current for every reader: the unit's python and the bench's."""
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"], fleet_install_root="/srv/sglang",
                  sglang_install_id="0.5.9-abc")["gpu-node-01"]
    assert exec_start(unit)[0] == "/srv/sglang/current/bin/python"
    paths = json.loads((tmp_path / "gpu-node-01.paths.json").read_text())
    assert paths["bench_python"] == "/srv/sglang/current/bin/python"


def device_allow(unit):
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("DeviceAllow=")]


def exec_start(unit):
    """The ExecStart command line as systemd reads it (continuations joined)."""
    text = unit.split("ExecStart=", 1)[1]
    lines = []
    for line in text.splitlines():
        lines.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(lines))


def test_persistence_mode_runs_the_fleet_s_one_nvidia_smi(tmp_path, monkeypatch):
    """The nvidia-smi the preflight ran (fleet_nvidia_smi) is the one the gpu-init unit runs at boot."""
    render(tmp_path, monkeypatch, ["gpu-node-01"], fleet_nvidia_smi="/usr/local/nvidia/bin/nvidia-smi",
           sglang_server_persistence_mode=True)
    gpu_init = (tmp_path / "gpu-node-01.sglang-gpu-init.service").read_text().splitlines()
    assert "ExecStart=/usr/local/nvidia/bin/nvidia-smi --persistence-mode=1" in gpu_init


def test_the_server_s_cuda_home_is_the_fleet_s_toolkit(tmp_path, monkeypatch):
    """fleet_cuda_release, which the cuda stage installs as /usr/local/cuda-<release>, is CUDA_HOME."""
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"], fleet_cuda_release="13.1")["gpu-node-01"]
    assert "Environment=CUDA_HOME=/usr/local/cuda-13.1" in unit.splitlines()


def test_defaults_alone_give_the_production_unit(tmp_path, monkeypatch, site_packages):
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"])["gpu-node-01"]
    argv = exec_start(unit)
    assert argv[:3] == ["/opt/sglang/current/bin/python", "-m", "sglang.launch_server"]
    assert " ".join(argv[3:]) == (
        "--model-path /models/nvidia/Kimi-K2.5-NVFP4 --tp 8 --host 127.0.0.1 --port 30000 --trust-remote-code "
        "--reasoning-parser kimi_k2 --tool-call-parser kimi_k2 --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path /models/lightseekorg/kimi-k2.5-eagle3 --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-flashinfer-allreduce-fusion "
        "--enable-metrics")
    for line in ("Type=exec", "User=sglang", "Restart=on-failure", "TimeoutStartSec=3600", "LimitMEMLOCK=infinity",
                 "Environment=SGLANG_ENABLE_SPEC_V2=1", "Environment=HF_HUB_OFFLINE=1",
                 "Environment=CUDA_HOME=/usr/local/cuda-13.0", "DevicePolicy=closed",
                 "Requires=sglang-gpu-init.service",
                 "RequiresMountsFor=/models/nvidia/Kimi-K2.5-NVFP4 /models/lightseekorg/kimi-k2.5-eagle3",
                 "ProtectSystem=strict", "NoNewPrivileges=yes"):
        assert line in unit.splitlines()
    # torch loads the CUDA libraries it ships; the toolkit's lib64 must not be put in front of them.
    assert "LD_LIBRARY_PATH" not in unit and "EnvironmentFile" not in unit
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


def sglang_reads_config(upstream_sglang, config):
    """The command-line words sglang 0.5.9's own --config reader makes of the file the role writes."""
    sys.path.insert(0, str(upstream_sglang / "sglang/srt"))
    try:
        from server_args_config_parser import ConfigArgumentMerger
    finally:
        sys.path.pop(0)
    return ConfigArgumentMerger(boolean_actions=[]).merge_config_with_args(["--config", str(config)])


def test_the_api_key_reaches_sglang_through_its_config_file_only(tmp_path, monkeypatch, upstream_sglang):
    key = 'k3y-with "quotes", $dollar and : colon'
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"], sglang_server_api_key=key)["gpu-node-01"]
    assert "k3y" not in unit and "--api-key" not in unit
    argv = exec_start(unit)
    assert argv[-2:] == ["--config", "/etc/sglang/sglang.yaml"]
    # sglang 0.5.9's own --config reader turns the file the role writes into --api-key KEY.
    merged = sglang_reads_config(upstream_sglang, tmp_path / "gpu-node-01.yaml")
    assert merged == ["--api-key", key]


def test_the_admin_key_reaches_sglang_beside_the_client_key_in_its_config_file_only(tmp_path, monkeypatch,
                                                                                   upstream_sglang):
    key, admin = "client-k3y", 'adm1n-k3y with "quotes" and : colon'
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"], sglang_server_api_key=key,
                  sglang_server_admin_api_key=admin)["gpu-node-01"]
    assert "k3y" not in unit and "--admin-api-key" not in unit and "--api-key" not in unit
    assert exec_start(unit)[-2:] == ["--config", "/etc/sglang/sglang.yaml"]
    merged = sglang_reads_config(upstream_sglang, tmp_path / "gpu-node-01.yaml")
    assert dict(zip(merged[::2], merged[1::2])) == {"--api-key": key, "--admin-api-key": admin} and len(merged) == 4
    # An admin key alone still gets its --config file (sglang then asks no key of the client routes).
    (tmp_path / "alone").mkdir()
    alone = render(tmp_path / "alone", monkeypatch, ["gpu-node-01"], sglang_server_admin_api_key=admin)["gpu-node-01"]
    assert exec_start(alone)[-2:] == ["--config", "/etc/sglang/sglang.yaml"]
    assert list(json.loads((tmp_path / "alone/gpu-node-01.yaml").read_text())) == ["admin-api-key"]


def test_the_unit_allows_every_nvidia_node_of_a_real_driver_580_host(tmp_path, monkeypatch):
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"])["gpu-node-01"]
    proc_devices = (H200 / "proc-devices.txt").read_text()
    nodes = parse_ls_l((H200 / "ls-dev-nvidia.txt").read_text())
    assert {n[0] for n in nodes} == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                     "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"}
    assert nodes == sorted(n for n in captured_nodes() if "infiniband" not in n[0])
    assert "DevicePolicy=closed" in unit.splitlines()
    assert denied(device_allow(unit), proc_devices, nodes) == []
    # Without RDMA the InfiniBand nodes stay denied.
    assert denied(device_allow(unit), proc_devices, captured_nodes()) == ["/dev/infiniband/rdma_cm"]


def test_the_frontend_group_named_before_driver_550_hides_the_gpus():
    """What the unit allowed before: on a driver-580 host CUDA saw no GPU."""
    old = ["char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw", "char-nvidia-nvswitch rw"]
    nodes = parse_ls_l((H200 / "ls-dev-nvidia.txt").read_text())
    assert denied(old, (H200 / "proc-devices.txt").read_text(), nodes) == ["/dev/nvidia0", "/dev/nvidiactl"]


def test_a_multi_node_group_allows_the_rdma_nodes(tmp_path, monkeypatch):
    unit = render(tmp_path, monkeypatch, ["gpu-a", "gpu-b"], sglang_server_multinode_group="gpu_nodes")["gpu-a"]
    assert device_allow(unit) == ["char-nvidia* rw", "char-infiniband_* rw", "/dev/infiniband/rdma_cm rw"]
    assert denied(device_allow(unit), (H200 / "proc-devices.txt").read_text(), captured_nodes()) == []


def test_the_gpu_nodes_are_created_as_root_before_the_server(tmp_path, monkeypatch):
    render(tmp_path, monkeypatch, ["gpu-node-01"], sglang_server_gpus_per_node=8, sglang_server_persistence_mode=True)
    init = (tmp_path / "gpu-node-01.sglang-gpu-init.service").read_text().splitlines()
    starts = [line.split("=", 1)[1] for line in init if line.startswith("ExecStart=")]
    # The script runs nvidia-modprobe -u -c0, -c1 .. -c7 where it is installed (test_gpu_init_unit.py).
    assert starts == ["/usr/local/lib/sglang-fleet/gpu_init.sh /usr/bin/nvidia-modprobe 8",
                      "/usr/bin/nvidia-smi --persistence-mode=1"]
    assert "Type=oneshot" in init and "RemainAfterExit=yes" in init and "Before=sglang.service" in init
    assert not any(line.startswith(("User=", "NoNewPrivileges")) for line in init)


@pytest.mark.parametrize("word,quoted", [("/models/x", "/models/x"), ("a b", '"a b"'), ("$HOME", '"$$HOME"'),
                                         ('say "hi"', '"say \\"hi\\""'), ("100%", '"100%%"')])
def test_systemd_quoting(word, quoted):
    from systemd_unit import systemd_quote
    assert systemd_quote(word) == quoted


@pytest.mark.parametrize("switch,decided,flag", [("off", None, False), ("on", None, True),
                                                 ("auto", {"enabled": False}, False), ("auto", {"enabled": True}, True)])
def test_the_fusion_flag_follows_the_switch_and_the_self_test(tmp_path, monkeypatch, switch, decided, flag):
    extra = {"sglang_server_allreduce_fusion": switch}
    if decided is not None:
        extra["sglang_server_fusion"] = dict(decided, switch=switch, selftest="x", reason="x")
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"], **extra)["gpu-node-01"]
    assert ("--enable-flashinfer-allreduce-fusion" in exec_start(unit)) is flag
    assert ("FlashInfer allreduce fusion on." in unit) is flag


def test_the_unit_s_path_finds_the_ninja_that_flashinfer_s_jit_runs(tmp_path, monkeypatch, site_packages):
    """flashinfer 0.6.3 runs `ninja` from PATH for every JIT build; the ninja that sglang and flashinfer
    require is a wheel whose executable pip puts in the venv's bin. A real 2xH200 host without that
    directory on PATH failed the build (tests/fixtures/hosts/h200x2-driver580/)."""
    site = site_packages()
    assert 'command = [\n        "ninja",' in (site / "flashinfer/jit/cpp_ext.py").read_text()
    for dist in ("sglang-0.5.9.dist-info", "flashinfer_python-0.6.3.dist-info"):
        assert "Requires-Dist: ninja" in (site / dist / "METADATA").read_text().splitlines()
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"])["gpu-node-01"]
    (path,) = [line.split("=", 2)[2] for line in unit.splitlines() if line.startswith("Environment=PATH=")]
    assert path.split(":")[:2] == ["/opt/sglang/current/bin", "/usr/local/cuda-13.0/bin"]


def unit_environment(unit):
    return dict(shlex.split(line.split("=", 1)[1])[0].split("=", 1)
                for line in unit.splitlines() if line.startswith("Environment="))


def test_the_production_unit_asks_for_nothing_its_system_call_filter_kills(tmp_path, monkeypatch, site_packages):
    from ansible.module_utils.sglang_sandbox import problems
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"])["gpu-node-01"]
    parsed, _ = lint(exec_start(unit)[3:], read_flags(str(site_packages())))
    assert problems(parsed, unit_environment(unit)) == []
    # The flag lint is given the environment the unit renders, from the same variable.
    tasks = yaml.safe_load((ROOT / "roles/sglang_server/tasks/checks.yml").read_text())
    (linted,) = [t["sglang_flag_lint"] for t in tasks if "sglang_flag_lint" in t]
    assert linted["env"] == "{{ __sglang_server_environment }}"
    assert "{% for name, value in __sglang_server_environment | dictsort %}" in \
        (ROOT / "roles/sglang_server/templates/sglang.service.j2").read_text()


def test_an_expandable_segments_setting_reaches_the_lint_as_the_unit_renders_it(tmp_path, monkeypatch, site_packages):
    from ansible.module_utils.sglang_sandbox import problems
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"], sglang_server_env={
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        sglang_server_extra_args=["--moe-a2a-backend", "flashinfer"])["gpu-node-01"]
    parsed, flag_problems = lint(exec_start(unit)[3:], read_flags(str(site_packages())))
    assert flag_problems == []
    assert [p.split(":", 1)[0] for p in problems(parsed, unit_environment(unit))] == [
        "--moe-a2a-backend flashinfer", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments"]
