"""The monitoring stage's units: the role's drop-ins over Debian 12's own units of prometheus,
prometheus-alertmanager and prometheus-node-exporter (tests/fixtures/upstream/debian-12-units), and the
GPU collector's service, as systemd reads them (systemd-analyze security --offline): each listens where
the inventory says, is exposed less than the distribution's unit alone, and lets through every system call
its daemon was seen to make."""
import re
import shutil
import sys

import pytest
import yaml

import syscall_sites
from conftest import FIXTURES, ROOT, exposure
from fleet import run_playbook

DEBIAN = FIXTURES / "upstream/debian-12-units"
DISTRO = ["prometheus", "prometheus-alertmanager", "prometheus-node-exporter"]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("units")
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"gpu-1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "ansible_host": "10.0.0.11"}}}}}}))
    run = run_playbook(ROOT / "tests/playbooks/render_monitoring_units.yml", tmp / "hosts.yml",
                       extravars={"render_dir": str(tmp / "root"),
                                  "fleet_monitoring_prometheus_extra_args": ["--web.enable-lifecycle"],
                                  "fleet_monitoring_node_exporter_extra_args": ["--collector.systemd"]})
    assert run.rc == 0, run.hosts
    lib = tmp / "root/lib/systemd/system"
    lib.mkdir(parents=True)
    for unit in DISTRO:
        shutil.copy(DEBIAN / f"{unit}.service", lib)
    return tmp / "root"


def exec_start(text):
    """The command of ExecStart=/..., its continuation lines joined, as systemd reads it."""
    words = []
    for line in ("/" + text.split("ExecStart=/", 1)[1]).splitlines():
        words.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            return " ".join(words)


def test_each_service_listens_on_the_address_the_inventory_gives(rendered):
    units = rendered / "etc/systemd/system"
    prometheus = exec_start((units / "prometheus.service.d/sglang-fleet.conf").read_text())
    assert "--web.listen-address=127.0.0.1:9090" in prometheus and "--storage.tsdb.retention.time=30d" in prometheus
    assert prometheus.endswith("--web.console.templates=/etc/prometheus/consoles --web.enable-lifecycle")
    alertmanager = exec_start((units / "prometheus-alertmanager.service.d/sglang-fleet.conf").read_text())
    assert "--web.listen-address=127.0.0.1:9093" in alertmanager
    assert alertmanager.endswith("--cluster.listen-address=")  # no gossip port on 0.0.0.0:9094
    node = exec_start((units / "prometheus-node-exporter.service.d/sglang-fleet.conf").read_text())
    assert node == ("/usr/bin/prometheus-node-exporter --web.listen-address=10.0.0.11:9100 "
                    "--web.config.file=/etc/sglang/monitoring-web.yml "
                    "--collector.textfile.directory=/var/lib/prometheus/node-exporter --collector.systemd")
    # Each answers only with basic auth (and TLS where set), from its web configuration, and starts only
    # once that file is in place: never without it after apt's start at install.
    for unit, command in (("prometheus", prometheus), ("prometheus-alertmanager", alertmanager),
                          ("prometheus-node-exporter", node)):
        assert "--web.config.file=/etc/sglang/monitoring-web.yml " in command, unit
        conditions = re.findall(r"^ConditionPathExists=(\S+)$",
                                (units / f"{unit}.service.d/sglang-fleet.conf").read_text(), re.M)
        assert "/etc/sglang/monitoring-web.yml" in conditions, unit
    collector = exec_start((units / "nvidia-smi-textfile.service").read_text())
    assert collector == ("/usr/bin/python3 /usr/local/lib/sglang-fleet/nvidia_smi_textfile.py --nvidia-smi "
                         "/usr/bin/nvidia-smi --output /var/lib/prometheus/node-exporter/nvidia_smi.prom "
                         "--expect-gpus 8 --state /var/lib/nvidia-smi-textfile/xid-state.json")
    assert "OnUnitActiveSec=15s" in (units / "nvidia-smi-textfile.timer").read_text()


@pytest.mark.parametrize("unit, at_most", [
    ("prometheus.service", 1.5), ("prometheus-alertmanager.service", 1.5),
    ("prometheus-node-exporter.service", 2.2), ("nvidia-smi-textfile.service", 2.0)])
def test_each_unit_is_hardened(rendered, unit, at_most, tmp_path):
    score = exposure(rendered, unit)
    assert score <= at_most, score
    if unit.startswith("prometheus"):
        alone = tmp_path / "root/lib/systemd/system"
        alone.mkdir(parents=True)
        shutil.copy(DEBIAN / unit, alone)
        assert exposure(tmp_path / "root", unit) > score  # the distribution's unit without the drop-in


@pytest.mark.parametrize("unit", ["prometheus.service", "prometheus-alertmanager.service",
                                  "prometheus-node-exporter.service"])
def test_no_drop_in_asks_for_protect_proc_over_a_unit_with_private_users(rendered, unit):
    """systemd 252 cannot start a unit with both when it runs in a container (systemd #29656): its
    user-namespace helper finds no /proc/PID/uid_map under the unit's hidepid /proc ("Failed to set up
    user namespacing: No such file or directory", status 217/USER). Debian's prometheus.service sets
    PrivateUsers=true; the lab's first run of the stage failed there, with exactly that line."""
    def settings(text):
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    debian = settings((DEBIAN / unit).read_text())
    drop_in = settings((rendered / "etc/systemd/system" / (unit + ".d") / "sglang-fleet.conf").read_text())
    private_users = drop_in.get("PrivateUsers", debian.get("PrivateUsers", "no")).lower() in ("yes", "true", "1")
    assert not (private_users and drop_in.get("ProtectProc", "default") != "default"), (unit, drop_in)


def allowed_calls(drop_in, groups):
    """The calls a unit's SystemCallFilter= lines allow, as systemd reads them: the first line (an allow
    list in every drop-in of the role) makes the list, later ones add to it, `~` lines take from it."""
    allowed = None
    for line in drop_in.splitlines():
        if line.startswith("SystemCallFilter="):
            value = line.split("=", 1)[1]
            names = set()
            for item in value.lstrip("~").split():
                names |= syscall_sites.expand(groups, item) if item.startswith("@") else {item}
            assert allowed is not None or not value.startswith("~"), "a deny list first: " + line
            allowed = (allowed or set()) - names if value.startswith("~") else (allowed or set()) | names
    return allowed


@pytest.mark.parametrize("unit", ["prometheus.service", "prometheus-alertmanager.service",
                                  "prometheus-node-exporter.service"])
def test_every_call_the_daemon_makes_passes_its_drop_in_s_filter(rendered, unit):
    """The calls each of Debian 12's daemons made under strace, started, used and stopped (see the
    captures' headers), against the drop-in's filter as Debian 12's systemd expands its groups. A call
    the filter leaves out kills the daemon with SIGSYS: node_exporter's timex collector calls adjtimex,
    which is @clock's, and the lab's node_exporters died at their first scrape."""
    groups = syscall_sites.filter_groups((DEBIAN / "systemd-252-syscall-filter.txt").read_text())
    made = {line for line in (DEBIAN / "syscalls" / (unit + ".txt")).read_text().splitlines()
            if line and not line.startswith("#")}
    allowed = allowed_calls((rendered / "etc/systemd/system" / (unit + ".d") / "sglang-fleet.conf").read_text(), groups)
    assert allowed is not None and made, unit
    assert sorted(made - allowed) == [], unit


def test_prometheus_never_starts_on_debian_s_own_configuration(rendered):
    """apt starts Prometheus as it installs it, before the role has written its configuration. Debian's own
    (the package's conffile /etc/prometheus/prometheus.yml) scrapes localhost:9100 as job `node`, a target no
    inventory names: a Prometheus that ran on it, then restarted on the role's (no staleness markers on a
    restart), held that target's last `up == 0` for five minutes, and NodeDown fired for "host  (localhost:9100)".
    The drop-in runs it on the role's own file, and only once that file exists."""
    debian_config = yaml.safe_load((DEBIAN / "prometheus.yml.conffile").read_text())
    assert "localhost:9100" in [target for job in debian_config["scrape_configs"] if job["job_name"] == "node"
                                for static in job["static_configs"] for target in static["targets"]]
    conffiles = (DEBIAN / "prometheus.conffiles").read_text().split()
    drop_in = (rendered / "etc/systemd/system/prometheus.service.d/sglang-fleet.conf").read_text()
    (config,) = re.findall(r"--config\.file=(\S+)", exec_start(drop_in))
    assert config not in conffiles, config
    unit = drop_in.split("[Service]")[0]
    assert "[Unit]" in unit and re.findall(r"^ConditionPathExists=(\S+)$", unit, re.M) == [
        config, "/etc/sglang/monitoring-web.yml"], drop_in
