"""nvidia_gpu_info against real nvidia-smi output (captured on an H200 host) and its failure modes."""
import json

import pytest
import yaml

import nvidia_gpu_info as mod
from conftest import FIXTURES, ROOT

SMI = FIXTURES / "nvidia-smi"
H200_QUERY = (SMI / "h200-query-noheader-nounits.csv").read_text()
H200_TABLE = (SMI / "h200-table.txt").read_text()
H200_PROC = SMI / "h200-proc-driver-nvidia-version.txt"


def fake_runner(query=(0, H200_QUERY, ""), table=(0, H200_TABLE, "")):
    calls = []

    def run(args):
        calls.append(args)
        return query if any(a.startswith("--query-gpu=") for a in args) else table

    run.calls = calls
    return run


def test_real_h200_capture_is_parsed():
    info = mod.gather(fake_runner(), "nvidia-smi", str(H200_PROC))
    assert info["gpus"] == [{
        "index": 0, "name": "NVIDIA H200", "uuid": "GPU-5c52a68b-6ea6-dfd8-7182-2b3247b8097e",
        "pci_bus_id": "00000000:00:06.0", "compute_capability": "9.0", "memory_total_mib": 143771}]
    assert info["gpu_count"] == 1
    assert info["cuda_archs"] == ["90"]
    assert info["driver_version"] == "580.159.04"
    assert info["cuda_driver_version"] == "13.0"
    assert info["kernel_module"] == "open"


def test_query_asks_for_the_fields_it_parses():
    run = fake_runner()
    mod.gather(run, "nvidia-smi", str(H200_PROC))
    assert run.calls[0] == ["nvidia-smi",
                            "--query-gpu=index,name,uuid,pci.bus_id,compute_cap,memory.total,driver_version",
                            "--format=csv,noheader,nounits"]


def test_the_issue_capture_field_order_is_a_different_query():
    # The 5-field capture is not what the module asks for: it must be refused, not misread.
    with pytest.raises(mod.GpuInfoError, match="expected 7 fields"):
        mod.parse_query((SMI / "h200-query-issue.csv").read_text())


def test_eight_blackwell_gpus_give_one_arch():
    lines = "".join("%d, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-%d, 00000000:%02X:00.0, 12.0, 97887, 580.95.05\n"
                    % (i, i, i + 1) for i in reversed(range(8)))
    gpus = mod.parse_query(lines)
    assert [g["index"] for g in gpus] == list(range(8))
    assert mod.cuda_archs(gpus) == ["120"]


def test_mixed_capabilities_sort_numerically():
    gpus = [{"compute_capability": c} for c in ("12.0", "9.0", "10.0")]
    assert mod.cuda_archs(gpus) == ["90", "100", "120"]


@pytest.mark.parametrize("rc,out,message", [
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n", "driver is not loaded"),
    (6, "No devices were found\n", "found no GPUs"),
    (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n",
     "a reboot is required"),
    (2, 'Field "bogus" is not a valid field to query.\n\n', "exit code 2: Field \"bogus\""),
    (0, "", "found no GPUs"),
])
def test_failures_are_named(rc, out, message):
    with pytest.raises(mod.GpuInfoError, match=message.replace("(", r"\(")):
        mod.gather(fake_runner(query=(rc, out, "")), "nvidia-smi", str(H200_PROC))


def test_malformed_numbers_are_refused():
    bad = H200_QUERY.replace(", 9.0,", ", [N/A],")
    with pytest.raises(mod.GpuInfoError, match="line 1.*compute_cap '\\[N/A\\]'"):
        mod.parse_query(bad)


def test_table_without_cuda_version_is_refused():
    with pytest.raises(mod.GpuInfoError, match="CUDA Version"):
        mod.gather(fake_runner(table=(0, "garbage\n", "")), "nvidia-smi", str(H200_PROC))


def test_several_driver_versions_are_refused():
    two = H200_QUERY + H200_QUERY.replace("0, NVIDIA", "1, NVIDIA").replace("580.159.04", "575.57.08")
    with pytest.raises(mod.GpuInfoError, match="several driver versions: 575.57.08, 580.159.04"):
        mod.gather(fake_runner(query=(0, two, "")), "nvidia-smi", str(H200_PROC))


@pytest.mark.parametrize("text,flavour", [
    (H200_PROC.read_text(), "open"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Release Build\n", "proprietary"),
    ("", "unknown"),
])
def test_kernel_module_flavour(text, flavour):
    assert mod.kernel_module_flavour(text) == flavour


def test_missing_version_file_is_unknown(tmp_path):
    info = mod.gather(fake_runner(), "nvidia-smi", str(tmp_path / "absent"))
    assert info["kernel_module"] == "unknown"


def run_module(capsys, args):
    from ansible.module_utils.testing import patch_module_args
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def test_module_fails_clearly_without_nvidia_smi(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_module(capsys, {"nvidia_smi": "nvidia-smi-absent"})
    assert result["failed"] is True
    assert "nvidia-smi not found" in result["msg"]


def test_a_missing_absolute_path_names_the_host_s_own_nvidia_smi(monkeypatch, capsys, tmp_path):
    """The real H200 host's nvidia-smi is /usr/local/nvidia/bin's, not the packaged /usr/bin one."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_module(capsys, {"nvidia_smi": str(tmp_path / "absent/nvidia-smi")})
    assert result["failed"] is True
    assert result["msg"] == "nvidia-smi is not at %s, but this host has one at %s: set fleet_nvidia_smi to it" % (
        tmp_path / "absent/nvidia-smi", smi)


def test_module_runs_the_binary_end_to_end(monkeypatch, capsys, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$1\" in --query-gpu=*) cat %s ;; *) cat %s ;; esac\n"
                   % (SMI / "h200-query-noheader-nounits.csv", SMI / "h200-table.txt"))
    smi.chmod(0o755)
    result = run_module(capsys, {"nvidia_smi": str(smi), "driver_version_file": str(H200_PROC),
                                              "_ansible_check_mode": True})
    assert result["changed"] is False
    assert result["gpu_count"] == 1 and result["cuda_driver_version"] == "13.0"


def host_tools(tmp_path, monkeypatch, *tools):
    """A host's PATH holding the fake nvidia-smi, and its driver tool directory holding `tools`."""
    path, tool_dir = tmp_path / "path", tmp_path / "usr-local-nvidia-bin"
    for directory in (path, tool_dir):
        directory.mkdir()
    smi = path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$1\" in --query-gpu=*) exec /bin/cat %s ;; *) exec /bin/cat %s ;; esac\n"
                   % (SMI / "h200-query-noheader-nounits.csv", SMI / "h200-table.txt"))
    for tool in (smi,) + tuple(tool_dir / name for name in tools):
        tool.write_text(tool.read_text() if tool.exists() else "#!/bin/sh\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.setattr(mod, "TOOL_DIRS", [str(tool_dir)])
    return tool_dir


def test_a_host_without_nvidia_modprobe_says_so(monkeypatch, capsys, tmp_path):
    """The H200 host: `command -v nvidia-modprobe` found nothing (exit 127), nvidia-persistenced is in
    /usr/local/nvidia/bin."""
    from conftest import H200
    assert (H200 / "nvidia-modprobe.txt").read_text() == ""
    assert "nvidia-modprobe.txt 127" in (H200 / "exit-codes.txt").read_text().splitlines()
    persistenced = (H200 / "nvidia-persistenced.txt").read_text().split()[0]
    host_tools(tmp_path, monkeypatch, persistenced.rsplit("/", 1)[1])
    result = run_module(capsys, {"driver_version_file": str(H200_PROC)})
    assert result.get("gpu_count") == 1 and result["nvidia_modprobe"] == "", result


def test_nvidia_modprobe_is_found_where_the_driver_s_tools_are(monkeypatch, capsys, tmp_path):
    tool_dir = host_tools(tmp_path, monkeypatch, "nvidia-modprobe")
    result = run_module(capsys, {"driver_version_file": str(H200_PROC)})
    assert result["nvidia_modprobe"] == str(tool_dir / "nvidia-modprobe")
    # An explicit path is taken as it is, and reported only when it is there.
    assert run_module(capsys, {"nvidia_modprobe": str(tmp_path / "absent")})["nvidia_modprobe"] == ""


def test_the_real_host_read_its_driver_with_the_fleet_s_default_nvidia_smi_and_with_its_own():
    """Captured on the H200 host with today's default: a changed default must be taken there again."""
    capture = json.loads((FIXTURES / "hosts/h200-driver580/preflight/nvidia-smi.json").read_text())
    fleet = yaml.safe_load((ROOT / "roles/fleet/defaults/main.yml").read_text())
    assert capture["fleet_nvidia_smi_default"] == fleet["fleet_nvidia_smi"]
    assert capture["default"] == {"failed": False, "msg": ""}
    assert capture["given"] == {"failed": False, "gpu_count": 1, "driver_version": "580.159.04"}
