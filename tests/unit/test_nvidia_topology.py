"""Peer-to-peer and link matrices, parsed from real hosts' nvidia-smi (driver 580)."""
import pytest

import nvidia_gpu_info as mod
from conftest import FIXTURES

X2 = FIXTURES / "hosts/h200x2-driver580"
ONE = FIXTURES / "hosts/h200-driver580"


def summary(host, write=True):
    return mod.p2p_summary((host / "nvidia-smi-topo-p2p-r.txt").read_text(),
                           (host / "nvidia-smi-topo-p2p-w.txt").read_text() if write else None,
                           (host / "nvidia-smi-topo-m.txt").read_text())


def test_two_h200s_on_nvlink_have_p2p_both_ways():
    assert summary(X2) == {"p2p_pairs": [{"gpus": [0, 1], "read": "OK", "write": "OK", "link": "NV18"}],
                           "p2p_all_ok": True, "p2p_problems": []}


def test_one_gpu_has_no_pair():
    assert summary(ONE) == {"p2p_pairs": [], "p2p_all_ok": True, "p2p_problems": []}


def test_a_pcie_host_without_p2p_names_each_pair():
    """The real 2-GPU matrix with the status a PCIe host without P2P prints (as on SM120 consumer parts)."""
    real = (X2 / "nvidia-smi-topo-p2p-r.txt").read_text()
    blocked = real.replace("X\tOK", "X\tCNS").replace("OK\tX", "CNS\tX")
    links = (X2 / "nvidia-smi-topo-m.txt").read_text().replace("NV18", "SYS")
    result = mod.p2p_summary(blocked, None, links)
    assert result["p2p_all_ok"] is False
    assert result["p2p_pairs"] == [{"gpus": [0, 1], "read": "CNS", "write": None, "link": "SYS"}]
    assert result["p2p_problems"] == ["GPU0-GPU1 read: CNS (Chipset not supported)"]


def test_an_unreadable_matrix_is_a_problem_not_a_crash():
    def run(args):
        if args[1:] == ["topo", "-p2p", "r"]:
            return 2, "Invalid p2p capability index specified at the command-line\n", ""
        return 0, "", ""
    result = mod.topology(run, "nvidia-smi")
    assert result["p2p_all_ok"] is False
    assert result["p2p_problems"] == ["nvidia-smi topo -p2p r failed (2): Invalid p2p capability index specified at "
                                      "the command-line"]


def test_garbage_is_refused_with_what_was_read():
    with pytest.raises(mod.GpuInfoError, match="no GPU0 header"):
        mod.parse_matrix("Failed to initialize NVML: Unknown Error\n")
