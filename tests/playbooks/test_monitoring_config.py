"""The monitoring stage's files from an inventory: target files with rank 0 of each unit only, the alert
rules and Prometheus's configuration, written by the role's own tasks, checked by promtool; --check --diff
shows a change of the inventory in the target files; site.yml's monitoring stage does nothing without the
group monitoring."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import bcrypt
import pytest
import yaml

from conftest import ROOT

PLAYBOOK = ROOT / "tests/playbooks/render_monitoring.yml"
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
PASSWORD = "test-monitoring-secret-91c4"


def inventory(tmp_path, servers, monitoring=True, routers=None, **group_vars):
    hosts = {"gpu_nodes": {"hosts": servers}, "tp_group": {"hosts": {"gpu-2": None, "gpu-3": None}}}
    if routers:
        hosts["sglang_routers"] = {"hosts": routers}
    if monitoring:
        hosts["monitoring"] = {"hosts": {"mon-1": dict(LOCAL, ansible_host="10.0.0.2")}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": hosts, "vars": group_vars}}))
    return path


SERVERS = {
    "gpu-1": {"ansible_host": "10.0.0.11", "fleet_server_host": "10.0.0.11"},
    "gpu-2": {"ansible_host": "10.0.0.12", "fleet_server_host": "0.0.0.0", "sglang_server_multinode_group": "tp_group"},
    "gpu-3": {"ansible_host": "10.0.0.13", "fleet_server_host": "0.0.0.0", "sglang_server_multinode_group": "tp_group"},
}
ROUTERS = {"gateway-1": {"ansible_host": "10.0.0.5", "fleet_router_prometheus_host": "10.0.0.5"}}


def playbook(tmp_path, inv, path=PLAYBOOK, *args, **extravars):
    for tool, package in (("promtool", "prometheus"), ("amtool", "prometheus-alertmanager")):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: bin/setup installs it (Debian's {package} package)")
    out = tmp_path / "out"
    extravars = dict({"__fleet_monitoring_dir": str(out / "sglang-fleet"),
                      "__fleet_monitoring_prometheus_config": str(out / "prometheus.yml"),
                      "__fleet_monitoring_alertmanager_config": str(out / "alertmanager.yml"),
                      "__fleet_monitoring_web_config": str(out / "monitoring-web.yml"),
                      "fleet_monitoring_web_password": PASSWORD}, **extravars)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(path),
                           "-e", json.dumps(extravars), *args], capture_output=True, text=True, cwd=ROOT, env=env)


def test_targets_rules_and_config_pass_promtool(tmp_path):
    run = playbook(tmp_path, inventory(tmp_path, SERVERS, routers=ROUTERS))
    assert run.returncode == 0, run.stdout + run.stderr
    out = tmp_path / "out/sglang-fleet"
    targets = {p.stem: json.loads(p.read_text()) for p in (out / "targets").glob("*.json")}
    assert targets == {
        "sglang_server": [{"targets": ["10.0.0.11:30000"], "labels": {"host": "gpu-1", "unit": "gpu-1"}},
                          {"targets": ["10.0.0.12:30000"], "labels": {"host": "gpu-2", "unit": "tp_group"}}],
        "sglang_router": [{"targets": ["10.0.0.5:29000"], "labels": {"host": "gateway-1"}}],
        "node": [{"targets": ["10.0.0.%d:9100" % n], "labels": {"host": "gpu-%d" % (n - 10)}} for n in (11, 12, 13)],
    }
    assert sorted(p.name for p in (out / "rules").iterdir()) == sorted(
        p.name for p in (ROOT / "files/monitoring/rules").glob("*.yml"))
    config = yaml.safe_load((tmp_path / "out/prometheus.yml").read_text())
    assert [job["job_name"] for job in config["scrape_configs"]] == [
        "prometheus", "alertmanager", "sglang_server", "sglang_router", "node"]
    assert config["scrape_configs"][2]["file_sd_configs"] == [{"files": [str(out / "targets/sglang_server.json")]}]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    # Prometheus, Alertmanager and node_exporter with basic auth, the password from its file; the servers
    # and routers as before.
    auth = {"username": "fleet", "password_file": "/etc/sglang/monitoring-web.password"}
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {name: (job.get("scheme"), job.get("basic_auth")) for name, job in jobs.items()} == {
        "prometheus": ("http", auth), "alertmanager": ("http", auth), "node": ("http", auth),
        "sglang_server": (None, None), "sglang_router": (None, None)}
    assert config["alerting"]["alertmanagers"][0]["basic_auth"] == auth
    # Each daemon's web configuration: a bcrypt hash of the password, never the password.
    web = (tmp_path / "out/monitoring-web.yml").read_text()
    assert PASSWORD not in web and oct((tmp_path / "out/monitoring-web.yml").stat().st_mode & 0o777) == "0o640"
    users = yaml.safe_load(web)
    assert list(users) == ["basic_auth_users"] and users["basic_auth_users"]["fleet"].startswith("$2b$")
    assert bcrypt.checkpw(PASSWORD.encode(), users["basic_auth_users"]["fleet"].encode())
    checked = subprocess.run(["promtool", "check", "web-config", str(tmp_path / "out/monitoring-web.yml")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    checked = subprocess.run(["promtool", "check", "config", str(tmp_path / "out/prometheus.yml")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 3 rule files found" in checked.stdout + checked.stderr
    # Alertmanager's, as the role's defaults say, through amtool check-config (the task's validate).
    written = (tmp_path / "out/alertmanager.yml").read_text()
    assert written.startswith("# Ansible managed")
    defaults = yaml.safe_load((ROOT / "roles/fleet_monitoring/defaults/main.yml").read_text())
    assert yaml.safe_load(written) == defaults["fleet_monitoring_alertmanager_config"]


def test_dcgm_exporter_is_a_job_where_its_port_is_set_and_gone_when_unset(tmp_path):
    run = playbook(tmp_path, inventory(tmp_path, SERVERS), fleet_monitoring_dcgm_exporter_port=9400)
    assert run.returncode == 0, run.stdout + run.stderr
    targets = tmp_path / "out/sglang-fleet/targets"
    assert [t["targets"] for t in json.loads((targets / "dcgm.json").read_text())] == [
        ["10.0.0.11:9400"], ["10.0.0.12:9400"], ["10.0.0.13:9400"]]
    assert "dcgm" in [job["job_name"] for job in yaml.safe_load((tmp_path / "out/prometheus.yml").read_text())[
        "scrape_configs"]]
    assert json.loads((targets / "sglang_router.json").read_text()) == []  # no router group: an empty job
    run = playbook(tmp_path, inventory(tmp_path, SERVERS))
    assert run.returncode == 0, run.stdout + run.stderr
    assert not (targets / "dcgm.json").exists()


def test_check_diff_shows_an_inventory_change_in_the_target_files_and_writes_nothing(tmp_path):
    assert playbook(tmp_path, inventory(tmp_path, SERVERS)).returncode == 0
    before = (tmp_path / "out/sglang-fleet/targets/sglang_server.json").read_text()
    more = dict(SERVERS, **{"gpu-4": {"ansible_host": "10.0.0.14", "fleet_server_host": "10.0.0.14"}})
    run = playbook(tmp_path, inventory(tmp_path, more), PLAYBOOK, "--check", "--diff")
    assert run.returncode == 0, run.stdout + run.stderr
    assert '+            "10.0.0.14:30000"' in run.stdout
    assert "changed=1" in run.stdout.split("PLAY RECAP")[1] or "changed=2" in run.stdout.split("PLAY RECAP")[1]
    assert (tmp_path / "out/sglang-fleet/targets/sglang_server.json").read_text() == before
    rerun = playbook(tmp_path, inventory(tmp_path, SERVERS))
    assert "changed=0" in rerun.stdout.split("PLAY RECAP")[1], rerun.stdout


def test_servers_on_loopback_cannot_be_scraped_from_another_host(tmp_path):
    run = playbook(tmp_path, inventory(tmp_path, {"gpu-1": {"ansible_host": "10.0.0.11"}}))
    assert run.returncode != 0
    assert "gpu-1's sglang_server at 127.0.0.1:30000 (set fleet_server_host" in run.stdout


def test_the_stage_does_nothing_without_the_group_monitoring(tmp_path):
    servers = {name: dict(vars_, **LOCAL) for name, vars_ in SERVERS.items()}
    run = playbook(tmp_path, inventory(tmp_path, servers, monitoring=False), ROOT / "playbooks/monitoring.yml")
    assert run.returncode == 0, run.stdout + run.stderr
    recap = [line for line in run.stdout.split("PLAY RECAP")[1].splitlines() if " : " in line]
    assert len(recap) == 3 and all("ok=0" in line and "changed=0" in line and "skipped=1" in line
                                   for line in recap), recap
    assert "skipping: no hosts matched" in run.stdout


def test_site_yml_ends_with_the_monitoring_stage():
    stages = yaml.safe_load((ROOT / "site.yml").read_text())
    # The last stage; after it only the play that leaves the fleet run lock.
    assert stages[-2:] == [{"name": "Monitoring", "ansible.builtin.import_playbook": "playbooks/monitoring.yml"},
                           {"name": "Run unlock", "ansible.builtin.import_playbook": "playbooks/run_unlock.yml"}]
    plays = yaml.safe_load((ROOT / "playbooks/monitoring.yml").read_text())
    assert [(p["hosts"], p["tags"]) for p in plays] == [("gpu_nodes", ["monitoring"]), ("monitoring", ["monitoring"])]


@pytest.mark.parametrize("password, says", [
    ("", "fleet_monitoring_web_password is empty"),
    (" " + PASSWORD, "fleet_monitoring_web_password starts or ends with whitespace"),
])
def test_without_a_usable_password_the_stage_stops_before_any_change_naming_it(tmp_path, password, says):
    """Auth is always on: a run without a usable password fails on every GPU host at the exporters' first
    task after the fleet checks, before anything is installed or written, naming the setting; the
    monitoring host's play is never reached. The password is in no line of the output."""
    servers = {name: dict(vars_, **LOCAL) for name, vars_ in SERVERS.items()}
    run = playbook(tmp_path, inventory(tmp_path, servers), ROOT / "playbooks/monitoring.yml",
                   fleet_monitoring_web_password=password, fleet_allow_open_listeners=True)
    assert run.returncode != 0
    recap = [line for line in run.stdout.split("PLAY RECAP")[1].splitlines() if " : " in line]
    assert len(recap) == 3 and all("changed=0" in line and "failed=1" in line for line in recap), run.stdout
    for host in SERVERS:
        assert "Action failed: %s: %s" % (host, says) in run.stdout, run.stdout
    assert not password or password.strip() not in run.stdout + run.stderr


def test_with_a_certificate_all_three_serve_tls_and_prometheus_checks_it(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("")  # promtool checks that the file is there; Prometheus reads it at its first scrape
    run = playbook(tmp_path, inventory(tmp_path, SERVERS), fleet_monitoring_web_tls_cert_file="/etc/ssl/mon/cert.pem",
                   fleet_monitoring_web_tls_key_file="/etc/ssl/mon/key.pem", fleet_monitoring_web_tls_ca_file=str(ca))
    assert run.returncode == 0, run.stdout + run.stderr
    web = yaml.safe_load((tmp_path / "out/monitoring-web.yml").read_text())
    assert web["tls_server_config"] == {"cert_file": "/etc/ssl/mon/cert.pem", "key_file": "/etc/ssl/mon/key.pem"}
    config = yaml.safe_load((tmp_path / "out/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for job in (jobs["prometheus"], jobs["alertmanager"], jobs["node"], config["alerting"]["alertmanagers"][0]):
        assert (job["scheme"], job["tls_config"]) == ("https", {"ca_file": str(ca)}), job
    assert "scheme" not in jobs["sglang_server"]
