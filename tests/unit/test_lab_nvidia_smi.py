"""The lab's nvidia-smi prints what the real one prints (compared with an H200 capture),
so the preflight module reads lab nodes through its real parsing path."""
import json
import subprocess
import sys

import pytest

import nvidia_gpu_info
from conftest import FIXTURES, ROOT, load_collector

SMI = FIXTURES / "nvidia-smi"
FAKE = ROOT / "files/lab/nvidia-smi.py"
H200 = {"state": "ok", "driver_version": "580.159.04", "cuda_version": "13.0",
        "gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-5c52a68b-6ea6-dfd8-7182-2b3247b8097e",
                  "pci_bus_id": "00000000:00:06.0", "compute_cap": "9.0", "memory_mib": 143771}]}


@pytest.fixture
def lab_smi(tmp_path, monkeypatch):
    def run(*args, config=H200):
        path = tmp_path / "gpus.json"
        path.write_text(json.dumps(config))
        proc = subprocess.run([sys.executable, str(FAKE), *args], capture_output=True, text=True,
                              env={"LAB_GPU_CONFIG": str(path)})
        return proc.returncode, proc.stdout
    return run


QUERY = "--query-gpu=index,name,uuid,pci.bus_id,compute_cap,memory.total,driver_version"


@pytest.mark.parametrize("fmt,capture", [("csv,noheader,nounits", "h200-query-noheader-nounits.csv"),
                                         ("csv", "h200-query-header.csv")])
def test_query_matches_the_real_capture(lab_smi, fmt, capture):
    assert lab_smi(QUERY, "--format=" + fmt) == (0, (SMI / capture).read_text())


def test_table_matches_the_real_capture_but_for_the_clock_and_sensors(lab_smi):
    rc, out = lab_smi()
    real = (SMI / "h200-table.txt").read_text().splitlines()
    lab = out.splitlines()
    assert rc == 0 and len(lab) == len(real)
    differing = [i for i, (a, b) in enumerate(zip(lab, real)) if a != b]
    assert differing == [0, 9]  # the date line and the temperature/power line


def test_bad_field_is_refused_as_the_real_one_does(lab_smi):
    assert lab_smi("--query-gpu=index,bogus", "--format=csv") == (2, (SMI / "bad-field.txt").read_text())


def test_driver_not_loaded_is_reported_as_the_real_one_does(lab_smi):
    rc, out = lab_smi(QUERY, "--format=csv", config=dict(H200, state="driver-not-loaded"))
    assert rc == 9
    with pytest.raises(nvidia_gpu_info.GpuInfoError, match="driver is not loaded"):
        nvidia_gpu_info.check_nvidia_smi_result(rc, out, "")


X2 = FIXTURES / "hosts/h200x2-driver580"
H200_X2 = dict(H200, p2p="OK", link="NV18", gpus=[
    dict(H200["gpus"][0], index=i, uuid="GPU-%d" % i) for i in range(2)])


@pytest.mark.parametrize("mode", ["r", "w"])
def test_topo_p2p_matches_the_real_2_gpu_capture(lab_smi, mode):
    assert lab_smi("topo", "-p2p", mode, config=H200_X2) == (0, (X2 / ("nvidia-smi-topo-p2p-%s.txt" % mode)).read_text())


def test_topo_m_has_the_real_layout(lab_smi):
    rc, out = lab_smi("topo", "-m", config=H200_X2)
    real = (X2 / "nvidia-smi-topo-m.txt").read_text()
    assert rc == 0
    # The CPU affinity is this machine's; everything else is the real capture's.
    assert [l.split("\t")[:3] for l in out.splitlines()[:3]] == [l.split("\t")[:3] for l in real.splitlines()[:3]]
    assert nvidia_gpu_info.parse_matrix(out) == nvidia_gpu_info.parse_matrix(real)


def test_a_bad_p2p_mode_is_refused_as_the_real_one_does(lab_smi):
    real = (X2 / "topo-p2p-errors.txt").read_text().split("rc=")[0]
    assert lab_smi("topo", "-p2p", "x", config=H200_X2) == (2, real)


# The GPU textfile collector's query (files/monitoring/nvidia_smi_textfile.py), against the H200 capture
# taken with that same field list. The capture's sensor readings are given as the GPU's sensors.
H200_SENSORS = {"temperature.gpu": "39", "temperature.memory": "39", "power.limit": "700.00",
                "clocks.sm": "345", "clocks.mem": "3201", "clocks.max.sm": "1980", "clocks.max.mem": "3201",
                "pstate": "P0"}


@pytest.mark.parametrize("fmt,capture,power", [("csv,noheader,nounits", "h200-monitoring-noheader-nounits.csv", "79.55"),
                                               ("csv", "h200-monitoring-header.csv", "79.54")])
def test_the_collector_s_query_matches_the_real_capture(lab_smi, fmt, capture, power):
    fields = ",".join(load_collector().query_fields())
    gpu = dict(H200["gpus"][0], uuid="GPU-0c5f0f93-4a22-10df-83a5-5950f209c9ac",
               sensors=dict(H200_SENSORS, **{"power.draw": power}))
    assert lab_smi("--query-gpu=" + fields, "--format=" + fmt, config=dict(H200, gpus=[gpu])) == \
        (0, (SMI / capture).read_text())


def test_the_collector_reads_every_gpu_of_a_lab_node(lab_smi, tmp_path):
    """What the collector's timer runs on a lab node: its own command line, the lab's idle readings."""
    collector = load_collector()
    lab = dict(H200, gpus=[dict(H200["gpus"][0], index=i, uuid="GPU-%d" % i) for i in range(8)])
    (tmp_path / "gpus.json").write_text(json.dumps(lab))
    smi = tmp_path / "nvidia-smi"  # installed 0755 on a lab node
    smi.write_text('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, FAKE))
    smi.chmod(0o755)
    out = tmp_path / "nvidia_smi.prom"
    proc = subprocess.run([sys.executable, str(ROOT / "files/monitoring/nvidia_smi_textfile.py"), "--output", str(out),
                           "--nvidia-smi", str(smi), "--expect-gpus", "8", "--kernel-log", "none"],
                          capture_output=True, text=True, env={"LAB_GPU_CONFIG": str(tmp_path / "gpus.json"),
                                                               "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "nvidia_smi_up 1" in text and "nvidia_smi_gpus_visible 8" in text
    assert len(collector.parse_query(lab_smi("--query-gpu=" + ",".join(collector.query_fields()),
                                             "--format=csv,noheader,nounits", config=lab)[1])) == 8
    assert 'nvidia_smi_temperature_gpu_celsius{gpu="7"' in text
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("fmt,capture", [("csv,noheader,nounits", "h100-compute-apps-noheader-nounits.csv"),
                                         ("csv", "h100-compute-apps-header.csv")])
def test_compute_apps_answer_as_the_real_capture_does(lab_smi, fmt, capture):
    """A process holding GPU memory is listed as the H100 host listed one: pid, its full argv[0] (not its
    basename, not the name it sets itself), the memory in the format's units, the GPU's uuid."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={"LAB_GPU_MEMORY_MIB": "4706"})
    try:
        rc, out = lab_smi("--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=" + fmt)
    finally:
        holder.kill()
        holder.wait()
    real = (SMI / capture).read_text().splitlines()
    lab = out.splitlines()
    if fmt == "csv":
        assert lab[0] == real[0]
        lab, real = lab[1:], real[1:]
    _pid, _name, memory, _uuid = real[0].split(", ")  # 620, /opt/torch/.venv/bin/python3, 4706 MiB, GPU-7b93…
    assert rc == 0
    assert [line for line in lab if line.startswith("%d, " % holder.pid)] == [
        ", ".join([str(holder.pid), sys.executable, memory, H200["gpus"][0]["uuid"]])]
