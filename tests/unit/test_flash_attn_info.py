"""flash_attn_info: what the venv's own interpreter and the host report."""
import json
import subprocess
import sys

import flash_attn_info


def test_the_venv_probe_reports_python_platform_and_installed_versions():
    out = subprocess.run([sys.executable, "-c", flash_attn_info.VENV_PROBE], capture_output=True, text=True,
                         check=True).stdout
    found = json.loads(out)
    assert found["python"] == "%d.%d" % sys.version_info[:2]
    assert found["platform"] == "linux_x86_64" or found["platform"].startswith("linux_")
    assert found["flash_attn"] is None  # not installed in the controller's venv
    assert set(found) == {"python", "platform", "torch", "flash_attn"}


def test_available_memory_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       131809680 kB\nMemFree:        120000000 kB\n"
                       "MemAvailable:   131463240 kB\nBuffers:           10000 kB\n")
    # The H200 host's reading: 131463240 kB available.
    assert flash_attn_info.mem_available_mb(str(meminfo)) == 128382
    assert flash_attn_info.usable_cpus() >= 1
