"""The GPU textfile collector on real nvidia-smi output: an H200 host, driver 580.159.04.

The captures (tests/fixtures/nvidia-smi/h200-monitoring-*, h200-help-query-gpu.txt, h200-kernel-log.txt)
were taken on that host with the collector's own field list (`--print-query`); the kernel log there
held NVRM lines but no XID, so the XID lines below are written in the driver's format
("NVRM: Xid (PCI:0000:3b:00): 79, ...") and put among the real ones."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT, load_collector

SCRIPT = ROOT / "files/monitoring/nvidia_smi_textfile.py"
SMI = FIXTURES / "nvidia-smi"
QUERY = (SMI / "h200-monitoring-noheader-nounits.csv").read_text()
HEADER = (SMI / "h200-monitoring-header.csv").read_text()
KERNEL_LOG = (SMI / "h200-kernel-log.txt").read_text()
UUID = "GPU-0c5f0f93-4a22-10df-83a5-5950f209c9ac"
GPU = 'gpu="0",uuid="%s",name="NVIDIA H200"' % UUID

collector = load_collector()


def promtool():
    path = shutil.which("promtool")
    if not path:
        pytest.fail("promtool is missing: bin/setup installs it (Debian's prometheus package)")
    return path


def check_metrics(text):
    done = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True)
    return done.returncode, (done.stdout + done.stderr).strip()


def values(text):
    """{'name{labels}': value} of a textfile."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[series] = float(value)
    return out


def fake_smi(tmp_path, body):
    """An nvidia-smi on PATH: a shell script with the given body."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + body)
    smi.chmod(0o755)
    return smi


# --- the query is the one the capture answered -------------------------------------------------------
def test_the_query_is_the_captured_one_field_for_field():
    header = [re.sub(r" \[.*\]$", "", name.strip()) for name in HEADER.splitlines()[0].split(",")]
    # nvidia-smi's header spells three of the fields the query names by their long names
    aliases = {"clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
               "clocks.max.mem": "clocks.max.memory"}
    assert [aliases.get(field, field) for field in collector.query_fields()] == header
    printed = subprocess.run([sys.executable, str(SCRIPT), "--print-query"], capture_output=True, text=True)
    assert printed.stdout.strip() == ",".join(collector.query_fields())


def test_every_field_is_one_driver_580_knows_and_each_answered_alone():
    help_text = (SMI / "h200-help-query-gpu.txt").read_text()
    known = set(re.findall(r'^"([^"]+)"', help_text, re.M)) | set(re.findall(r' or "([^"]+)"', help_text))
    assert set(collector.query_fields()) - known == set()
    assert set(collector.query_fields(old_names=True)) - known == set()  # the pre-R535 names, still taken
    answered = dict(line.split(" rc=", 1) for line in (SMI / "h200-monitoring-fields.txt").read_text().splitlines())
    assert all(answered[field].startswith("0 ") for field in collector.query_fields())


# --- parsing the real capture ---------------------------------------------------------------------------
def test_the_real_capture_is_parsed_with_its_units():
    [gpu] = collector.parse_query(QUERY)
    assert gpu["labels"] == {"gpu": "0", "uuid": UUID, "name": "NVIDIA H200"}
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    got = dict(gpu["samples"])
    assert got["memory.total"] == 143771 * 1024 * 1024
    assert got["power.draw"] == 79.55 and got["power.limit"] == 700.0
    assert got["clocks.sm"] == 345e6 and got["clocks.mem"] == 3201e6 and got["clocks.max.sm"] == 1980e6
    assert got["utilization.gpu"] == 0.0 and got["temperature.gpu"] == 39.0
    assert got["pstate"] == 0
    assert got["clocks_event_reasons.active"] == 1  # 0x0000000000000001: idle
    assert got["clocks_event_reasons.gpu_idle"] == 1 and got["clocks_event_reasons.sw_power_cap"] == 0
    assert got["ecc.mode.current"] == 1 and got["ecc.errors.uncorrected.aggregate.total"] == 0
    assert got["remapped_rows.pending"] == 0 and got["remapped_rows.failure"] == 0


def test_fields_the_gpu_does_not_report_are_left_out_not_zero():
    assert "[N/A]" in QUERY  # fan.speed and retired_pages.pending on this H200
    [gpu] = collector.parse_query(QUERY)
    got = dict(gpu["samples"])
    assert "fan.speed" not in got and "retired_pages.pending" not in got
    text = collector.render([gpu], 0)
    assert "nvidia_smi_fan_speed_ratio{" not in text and "nvidia_smi_retired_pages_pending{" not in text


@pytest.mark.parametrize("text", ["[N/A]", "N/A", "[Not Supported]", "[Unknown Error]",
                                  "[Insufficient Permissions]", "[GPU requires reset]", "", "garbage"])
def test_any_unreadable_value_is_skipped(text):
    for kind in ("number", "percent", "mib", "mhz", "hex", "active", "yes", "enabled", "pstate"):
        if kind == "hex" and text == "garbage":
            continue
        assert collector.convert(kind, text) is None, (kind, text)


def test_a_row_nvidia_smi_could_not_complete_is_dropped_the_others_kept():
    broken = QUERY.replace("0, GPU-", "1, GPU-", 1).split(", P0,")[0] + "\n"  # index 1, cut short
    gpus = collector.parse_query(QUERY + broken + "Unable to determine the device handle for GPU1\n")
    assert [g["labels"]["gpu"] for g in gpus] == ["0"]


def test_the_rendered_capture_parses_with_promtool_and_holds_every_family():
    [gpu] = collector.parse_query(QUERY)
    counts, _ = collector.count_xids(KERNEL_LOG.splitlines(), {})
    text = collector.render([gpu], 0, 8, counts, ("dmesg", True), 0.05)
    assert check_metrics(text) == (0, "")
    got = values(text)
    assert got["nvidia_smi_up"] == 1 and got["nvidia_smi_gpus_visible"] == 1 and got["nvidia_smi_gpus_expected"] == 8
    assert got['nvidia_smi_gpu_info{%s,pci_bus_id="00000000:00:06.0"}' % GPU] == 1
    assert got["nvidia_smi_memory_total_bytes{%s}" % GPU] == 150754820096
    assert got["nvidia_smi_memory_used_bytes{%s}" % GPU] == 0
    assert got["nvidia_smi_temperature_memory_celsius{%s}" % GPU] == 39
    assert got["nvidia_smi_clock_memory_hertz{%s}" % GPU] == 3201e6
    assert got["nvidia_smi_clocks_event_reasons_active{%s}" % GPU] == 1
    assert got['nvidia_smi_clocks_event_reason_active{%s,reason="gpu_idle"}' % GPU] == 1
    assert got['nvidia_smi_clocks_event_reason_active{%s,reason="hw_thermal_slowdown"}' % GPU] == 0
    for severity in ("corrected", "uncorrected"):
        for scope in ("volatile", "aggregate"):
            assert got['nvidia_smi_ecc_errors_total{%s,kind="%s",scope="%s"}' % (GPU, severity, scope)] == 0
    assert got['nvidia_smi_remapped_rows_total{%s,kind="uncorrectable"}' % GPU] == 0
    assert got['nvidia_smi_kernel_log_readable{source="dmesg"}'] == 1
    assert "# TYPE nvidia_smi_xid_errors_total counter" in text  # declared, no XID on this host
    assert not [series for series in got if series.startswith("nvidia_smi_xid_errors_total")]


def test_promtool_would_catch_a_broken_textfile():
    """The check the test above passes is a real one."""
    rc, said = check_metrics("# TYPE nvidia_smi_up gauge\nnvidia_smi_up{gpu=0} 1\n")
    assert rc != 0, said


# --- XID errors from the kernel log ----------------------------------------------------------------------
XID_LINES = [
    "[ 5012.118402] NVRM: Xid (PCI:0000:00:06): 79, pid=2041, name=python3, GPU has fallen off the bus.",
    "[ 5012.118950] NVRM: Xid (PCI:0000:00:06): 79, pid=2041, name=python3, GPU has fallen off the bus.",
    "[ 6100.000001] NVRM: Xid (PCI:0000:3b:00): 48, pid=2041, name=python3, An uncorrectable double bit error",
]


def test_xid_lines_are_counted_per_gpu_and_xid_among_the_real_kernel_log(monkeypatch):
    monkeypatch.setattr(collector, "boot_id", lambda: "boot-a")
    lines = KERNEL_LOG.splitlines()[:2] + XID_LINES[:2] + KERNEL_LOG.splitlines()[2:] + XID_LINES[2:]
    counts, state = collector.count_xids(lines, {})
    assert counts == {"0000:00:06|79": 2, "0000:3b:00|48": 1}
    assert state == {"boot_id": "boot-a", "last": 6100.000001, "counts": counts}
    [gpu] = collector.parse_query(QUERY)
    text = collector.render([gpu], 0, None, counts, ("journalctl", True))
    assert check_metrics(text) == (0, "")
    got = values(text)
    # the H200's 00000000:00:06.0 is the kernel's 0000:00:06; 3b:00 is no GPU nvidia-smi still lists
    assert got['nvidia_smi_xid_errors_total{%s,pci_bus_id="0000:00:06",xid="79"}' % GPU] == 2
    assert got['nvidia_smi_xid_errors_total{gpu="",uuid="",name="",pci_bus_id="0000:3b:00",xid="48"}'] == 1


def test_journalctl_short_monotonic_lines_are_read_too(monkeypatch):
    monkeypatch.setattr(collector, "boot_id", lambda: "boot-a")
    line = "[ 5012.118402] gpu-node-01 kernel: NVRM: Xid (PCI:0000:00:06): 13, pid=2041, name=python3, Graphics Exception"
    assert collector.count_xids([line], {})[0] == {"0000:00:06|13": 1}


def test_a_line_counted_once_is_not_counted_again_until_the_next_boot(monkeypatch):
    monkeypatch.setattr(collector, "boot_id", lambda: "boot-a")
    counts, state = collector.count_xids(XID_LINES[:2], {})
    assert counts == {"0000:00:06|79": 2}
    # the next run sees the same lines (and one new one): only the new one counts
    counts, state = collector.count_xids(XID_LINES, state)
    assert counts == {"0000:00:06|79": 2, "0000:3b:00|48": 1}
    # the ring buffer wrapped: the old lines are gone, the counts stay (a counter never goes down)
    counts, state = collector.count_xids(XID_LINES[2:], state)
    assert counts == {"0000:00:06|79": 2, "0000:3b:00|48": 1}
    # after a reboot the log starts again at 0 s: its lines are new
    monkeypatch.setattr(collector, "boot_id", lambda: "boot-b")
    counts, state = collector.count_xids(XID_LINES[:1], state)
    assert counts == {"0000:00:06|79": 3, "0000:3b:00|48": 1}


# --- the whole run, with an nvidia-smi that answers as the real one did ------------------------------------
def run_collector(tmp_path, smi_body, *extra):
    smi = fake_smi(tmp_path, smi_body)
    out = tmp_path / "textfile" / "nvidia_smi.prom"
    out.parent.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, str(SCRIPT), "--nvidia-smi", str(smi), "--output", str(out), *extra],
                          capture_output=True, text=True, env=dict(os.environ, PATH="%s:%s" % (smi.parent, os.environ["PATH"])))
    return done, out


def test_a_run_writes_the_textfile_atomically_and_keeps_its_state(tmp_path):
    (tmp_path / "query.csv").write_text(QUERY)
    (tmp_path / "kernel.log").write_text(KERNEL_LOG + XID_LINES[0] + "\n")
    fake_smi(tmp_path, 'cat "%s"\n' % (tmp_path / "query.csv"))
    dmesg = tmp_path / "bin/dmesg"
    dmesg.write_text('#!/bin/sh\ncat "%s"\n' % (tmp_path / "kernel.log"))
    dmesg.chmod(0o755)
    state = tmp_path / "state.json"
    done, out = run_collector(tmp_path, 'cat "%s"\n' % (tmp_path / "query.csv"), "--expect-gpus", "1",
                              "--kernel-log", "dmesg", "--state", str(state))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["nvidia_smi.prom"]  # no .tmp left behind
    assert oct(out.stat().st_mode & 0o777) == "0o644"  # node_exporter runs as another user
    text = out.read_text()
    assert check_metrics(text) == (0, "")
    assert values(text)['nvidia_smi_xid_errors_total{%s,pci_bus_id="0000:00:06",xid="79"}' % GPU] == 1
    again, out = run_collector(tmp_path, 'cat "%s"\n' % (tmp_path / "query.csv"), "--kernel-log", "dmesg",
                               "--state", str(state))
    assert values(out.read_text())['nvidia_smi_xid_errors_total{%s,pci_bus_id="0000:00:06",xid="79"}' % GPU] == 1


def test_a_driver_that_knows_only_the_throttle_names_is_asked_with_those(tmp_path):
    (tmp_path / "query.csv").write_text(QUERY)
    # the real message and exit code for a field the driver does not know (tests/fixtures/nvidia-smi/bad-field.txt)
    done, out = run_collector(tmp_path, 'case "$1" in *clocks_event_reasons*)\n'
                              '  echo \'Field "clocks_event_reasons.active" is not a valid field to query.\'; echo; exit 2;;\n'
                              'esac\necho "$1" > "%s"\ncat "%s"\n' % (tmp_path / "asked", tmp_path / "query.csv"),
                              "--kernel-log", "none")
    assert done.returncode == 0, done.stderr
    asked = (tmp_path / "asked").read_text()
    assert "clocks_throttle_reasons.active" in asked and "clocks_event_reasons" not in asked
    assert values(out.read_text())["nvidia_smi_clocks_event_reasons_active{%s}" % GPU] == 1


def test_a_driver_nvidia_smi_cannot_reach_still_writes_the_textfile_saying_so(tmp_path):
    # the lab's nvidia-smi prints the real text for this state (files/lab/nvidia-smi.py)
    done, out = run_collector(tmp_path, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the "
                              "NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\"\n"
                              "exit 9\n", "--expect-gpus", "8", "--kernel-log", "none")
    assert done.returncode == 1 and "couldn't communicate" in done.stderr
    text = out.read_text()
    assert check_metrics(text) == (0, "")
    got = values(text)
    assert got["nvidia_smi_up"] == 0 and got["nvidia_smi_gpus_visible"] == 0 and got["nvidia_smi_gpus_expected"] == 8


def test_an_unreadable_kernel_log_is_said_not_hidden(tmp_path, monkeypatch):
    monkeypatch.setattr(collector, "KERNEL_LOGS", {"journalctl": ["false"], "dmesg": ["false"]})
    assert collector.read_kernel_log("auto") == (None, [])
    text = collector.render([], 0, None, {}, (None, False))
    assert values(text)['nvidia_smi_kernel_log_readable{source="none"}'] == 0


RUN_ON_HOST = FIXTURES / "hosts/h200-driver580/monitoring"


@pytest.mark.parametrize("name", ["h200-textfile.prom", "h200-textfile-second.prom"])
def test_what_the_collector_wrote_on_the_real_host_parses_and_says_the_gpu_is_there(name):
    """The collector run on the H200 host itself (not on a capture of its nvidia-smi): promtool reads its
    file, and the file says one GPU answered, as the inventory expects, with the kernel log readable."""
    text = (RUN_ON_HOST / name).read_text()
    assert check_metrics(text) == (0, "")
    samples = values(text)
    assert samples["nvidia_smi_up"] == 1
    assert samples["nvidia_smi_gpus_visible"] == samples["nvidia_smi_gpus_expected"] == 1
    assert samples['nvidia_smi_kernel_log_readable{source="dmesg"}'] == 1
    (info,) = [k for k in samples if k.startswith("nvidia_smi_gpu_info{")]
    assert 'name="NVIDIA H200"' in info and samples[info] == 1
    assert next(v for k, v in samples.items() if k.startswith("nvidia_smi_memory_total_bytes{")) > 140e9
