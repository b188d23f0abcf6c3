"""The fleet layer: one definition of what several roles read, the same for the hosts a play runs on
and for those it only reads about, and one derivation of the topology (plugins/filter/fleet_layer.py)."""
import collections
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError

import fleet_layer
from fleet_layer import (fleet_defaults, fleet_pip_environment, fleet_problems, fleet_settings, fleet_slice, fleet_whole_problems,
                         fleet_slice_problems,
                         fleet_in_service, fleet_topology, fleet_unit)
from conftest import ROOT

GROUPS = {"tp": ["b0", "b1"]}
HOSTVARS = {
    "a": {"ansible_host": "10.0.0.1", "fleet_server_host": "0.0.0.0"},
    "b0": {"ansible_host": "10.0.0.2", "fleet_server_host": "10.0.0.2", "fleet_server_port": 31000,
           "sglang_server_multinode_group": "tp"},
    "b1": {"ansible_host": "10.0.0.3", "sglang_server_multinode_group": "tp"},
    "c": {},  # nothing set: every default; no ansible_host: its name
    "gw": {"ansible_host": "gw.example.com", "fleet_router_host": "0.0.0.0",
           "fleet_router_prometheus_host": "0.0.0.0"},
}


def test_the_defaults_are_the_fleet_role_s_own_file():
    assert fleet_defaults() == yaml.safe_load((ROOT / "roles/fleet/defaults/main.yml").read_text())
    assert fleet_defaults()["fleet_server_port"] == 30000


def test_a_host_s_own_setting_wins_over_the_default_and_only_for_that_host():
    assert fleet_settings("b0", HOSTVARS)["fleet_server_port"] == 31000
    assert fleet_settings("c", HOSTVARS)["fleet_server_port"] == 30000
    assert set(fleet_settings("c", HOSTVARS)) == set(fleet_defaults())


def test_the_topology_names_every_unit_s_worker_and_rank_0():
    found = fleet_topology(["a", "b0", "b1", "c"], HOSTVARS, GROUPS, ["gw"])
    assert [(u["name"], u["rank0"], u["worker_url"], u["dist_init_addr"]) for u in found["units"]] == [
        ("a", "a", "http://10.0.0.1:30000", ""),          # listens on all: reached at its ansible_host
        ("tp", "b0", "http://10.0.0.2:31000", "10.0.0.2:20000"),
        ("c", "c", "http://127.0.0.1:30000", ""),         # the default: loopback, for a router on the host
    ]
    assert found["worker_urls"] == [u["worker_url"] for u in found["units"]]
    assert found["rank0"] == {"a": "a", "b0": "b0", "b1": "b0", "c": "c"}
    # A router's API is called on its own host; its exporter is scraped from elsewhere.
    assert found["routers"] == {"gw": {"url": "http://127.0.0.1:30090", "metrics": "gw.example.com:29000",
                                       "lease_dir": "/var/lib/sglang-router/leases",
                                       "key_file": "/etc/sglang/sglang-router.key"}}


def test_a_router_s_key_file_is_where_the_router_role_writes_it():
    """The server stage reads the key a router runs with from the router role's key file: the fleet layer
    names it as that role does, from the router's service name (its default or the host's own)."""
    role_defaults = yaml.safe_load((ROOT / "roles/sglang_router/defaults/main.yml").read_text())
    role_vars = yaml.safe_load((ROOT / "roles/sglang_router/vars/main.yml").read_text())
    assert role_vars["__sglang_router_key_file"] == "{{ fleet_config_dir }}/{{ sglang_router_service }}.key"
    assert fleet_layer.ROUTER_SERVICE_DEFAULT == role_defaults["sglang_router_service"]
    renamed = dict(HOSTVARS, gw=dict(HOSTVARS["gw"], sglang_router_service="gateway", fleet_config_dir="/srv/etc"))
    assert fleet_topology(["a"], renamed, GROUPS, ["gw"])["routers"]["gw"]["key_file"] == "/srv/etc/gateway.key"


def test_a_host_that_failed_gpu_acceptance_is_no_worker_and_takes_its_group_with_it():
    hosts = ["a", "b0", "b1", "c"]
    assert fleet_in_service(hosts, HOSTVARS, GROUPS) == hosts  # no acceptance in this run: all serve
    passed = {h: dict(v, gpu_acceptance_passed=True) for h, v in HOSTVARS.items()}
    assert fleet_in_service(hosts, passed, GROUPS) == hosts
    failed_alone = dict(passed, a=dict(passed["a"], gpu_acceptance_passed=False))
    assert fleet_in_service(hosts, failed_alone, GROUPS) == ["b0", "b1", "c"]
    # Rank 1 of a multi-node group failed: the group serves whole or not at all.
    failed_rank = dict(passed, b1=dict(passed["b1"], gpu_acceptance_passed=False))
    assert fleet_in_service(hosts, failed_rank, GROUPS) == ["a", "c"]
    urls = fleet_topology(fleet_in_service(hosts, failed_rank, GROUPS), failed_rank, GROUPS)["worker_urls"]
    assert urls == ["http://10.0.0.1:30000", "http://127.0.0.1:30000"]
    # Measured nothing (check mode, a host with no GPU): none, not false, and the host stays.
    unjudged = dict(passed, c=dict(passed["c"], gpu_acceptance_passed=None))
    assert fleet_in_service(hosts, unjudged, GROUPS) == hosts


def test_the_advertised_address_moves_the_worker_and_the_dist_init_address():
    hostvars = dict(HOSTVARS, b0=dict(HOSTVARS["b0"], fleet_server_host="0.0.0.0",
                                      fleet_server_advertise_host="192.0.2.20", fleet_server_dist_init_port=21000))
    unit = fleet_unit(fleet_topology(["b0", "b1"], hostvars, GROUPS), "b1")
    assert (unit["worker_url"], unit["dist_init_addr"]) == ("http://192.0.2.20:31000", "192.0.2.20:21000")


def test_a_host_outside_the_servers_is_named():
    with pytest.raises(AnsibleFilterError, match="gw is not one of the fleet's servers"):
        fleet_unit(fleet_topology(["a"], HOSTVARS, GROUPS), "gw")
    with pytest.raises(AnsibleFilterError, match="nowhere is not a host of this inventory"):
        fleet_topology(["nowhere"], HOSTVARS, GROUPS)


def test_a_templated_default_is_refused_naming_it(tmp_path):
    path = tmp_path / "main.yml"
    path.write_text("fleet_server_port: 30000\nfleet_install_root: \"{{ somewhere }}/sglang\"\n")
    with pytest.raises(AnsibleFilterError, match="fleet_install_root is templated"):
        fleet_defaults(str(path))
    path.write_text("sglang_server_port: 30000\n")
    with pytest.raises(AnsibleFilterError, match="sglang_server_port: every setting there is named fleet_"):
        fleet_defaults(str(path))


def test_ports_that_clash_on_one_host_are_named():
    assert fleet_problems("c", HOSTVARS) == []
    hostvars = {"box": {"fleet_router_port": 30000, "fleet_router_prometheus_port": 70000}}
    assert fleet_problems("box", hostvars) == [
        "fleet_server_port and fleet_router_port are both 30000: give each its own port",
        "fleet_router_prometheus_port is 70000, not a port (1-65535)"]
    assert fleet_problems("box", {"box": {"fleet_server_port": "http"}}) == ["fleet_server_port is 'http', not a port"]
    assert fleet_problems("box", {"box": {"fleet_nvidia_smi": "nvidia-smi"}}) == [
        "fleet_nvidia_smi is 'nvidia-smi', not an absolute path (say /usr/bin/nvidia-smi)"]
    assert fleet_problems("box", {"box": {"fleet_nvidia_smi": "/usr/local/nvidia/bin/nvidia-smi"}}) == []


def test_every_pip_run_gets_the_fleet_s_index_wheelhouse_and_proxy():
    hostvars = {"h": {"fleet_pip_find_links": ["/srv/wheels"], "fleet_pip_no_index": "true",
                      "fleet_pip_extra_index_urls": ["https://mirror/a", "https://mirror/b"],
                      "fleet_pip_env": {"PIP_TIMEOUT": "60"}, "fleet_proxy_env": {"https_proxy": "http://proxy:3128"}}}
    assert fleet_pip_environment("h", hostvars) == {
        "https_proxy": "http://proxy:3128", "PIP_TIMEOUT": "60", "PIP_EXTRA_INDEX_URL": "https://mirror/a https://mirror/b",
        "PIP_FIND_LINKS": "/srv/wheels", "PIP_NO_INDEX": "1"}
    assert fleet_pip_environment("c", HOSTVARS) == {}


def test_no_role_keeps_a_copy_of_another_role_s_setting():
    """What two roles read has one home: no role reads a fleet setting under an older name, or falls
    back to a copy of another role's default through hostvars."""
    old = re.compile(r"\b(%s)\b" % "|".join(fleet_layer.MOVED))  # the names the fleet checks refuse
    # Another host's role setting read through hostvars with a fallback: a copy of that role's default.
    # The API keys are the one exception: secrets each server and router holds in the (vaulted)
    # inventory, never a default, and the router refuses servers whose keys differ.
    settings = {name for role in (ROOT / "roles").iterdir()
                for name in (yaml.safe_load((role / "defaults/main.yml").read_text()) or {})
                if (role / "defaults/main.yml").exists()}
    copies = re.compile(r"hostvars\[[^\]]+\]\.(\w+) \| default\(")
    found = []
    for path in sorted((ROOT / "roles").rglob("*")):
        if path.suffix in (".yml", ".j2") and path.is_file():
            for number, line in enumerate(path.read_text().splitlines(), 1):
                copied = [name for name in copies.findall(line) if name in settings and not name.endswith("_api_key")]
                if old.search(line) or copied:
                    found.append("%s:%d: %s" % (path.relative_to(ROOT), number, line.strip()))
    assert found == []


def test_every_role_that_reads_a_fleet_setting_depends_on_the_fleet_role():
    names = set(fleet_defaults())
    for role in sorted(p for p in (ROOT / "roles").iterdir() if p.name != "fleet"):
        text = "\n".join(p.read_text() for p in role.rglob("*.yml") if "meta" not in p.parts)
        reads = {name for name in names if re.search(r"\b%s\b" % name, text)}
        deps = yaml.safe_load((role / "meta/main.yml").read_text()).get("dependencies") or []
        assert not reads or {"role": "fleet"} in [d if isinstance(d, dict) else {"role": d} for d in deps], \
            (role.name, sorted(reads))


class _Counted(dict):
    """A host's variables as hostvars gives them: each value read is templated, which is what costs."""

    def __init__(self, values, reads):
        super().__init__(values)
        self.reads = reads

    def __getitem__(self, name):
        self.reads.append(name)
        return super().__getitem__(name)


class _CountedHostvars(dict):
    """hostvars: every hostvars[host] computes all of that host's variables (VariableManager.get_vars)."""

    def __init__(self, hostvars):
        super().__init__(hostvars)
        self.hosts, self.reads = [], []

    def __getitem__(self, host):
        self.hosts.append(host)
        return _Counted(super().__getitem__(host), self.reads)


def test_the_topology_templates_only_the_settings_it_uses():
    """Every task that uses the topology derives it again, for every host of the fleet: reading all of each
    host's 34 settings (each a template in an inventory like the lab's) cost a fifth of a no-op run's
    controller CPU (docs/performance.md)."""
    hostvars = _CountedHostvars(HOSTVARS)
    plain = fleet_topology(["a", "b0", "b1", "c"], HOSTVARS, GROUPS, ["gw"])
    assert fleet_topology(["a", "b0", "b1", "c"], hostvars, GROUPS, ["gw"]) == plain
    # Once for each unit's rank 0 and each router, beside the rollout units' read of each server's group.
    assert collections.Counter(hostvars.hosts) == {"a": 2, "b0": 2, "b1": 1, "c": 2, "gw": 1}
    assert set(hostvars.reads) <= {"fleet_server_host", "fleet_server_port", "fleet_server_advertise_host",
                                   "fleet_server_dist_init_port", "fleet_served_model_name", "fleet_model_dir",
                                   "fleet_router_host", "fleet_router_port", "fleet_router_prometheus_host",
                                   "fleet_router_prometheus_port", "fleet_router_lease_dir", "fleet_config_dir"}


def test_the_module_reads_the_defaults_once():
    fleet_layer._defaults = None
    first = fleet_defaults()
    assert fleet_defaults() is first


def test_each_unit_names_the_model_it_serves_as_the_router_lists_it():
    hostvars = dict(HOSTVARS, a=dict(HOSTVARS["a"], fleet_served_model_name="kimi-k2.5"),
                    c=dict(fleet_model_dir="/models/lab-org/Kimi-K2.5-NVFP4-lab"))
    found = fleet_topology(["a", "b0", "b1", "c"], hostvars, GROUPS)
    assert [u["model"] for u in found["units"]] == ["kimi-k2.5", "/models/nvidia/Kimi-K2.5-NVFP4",
                                                    "/models/lab-org/Kimi-K2.5-NVFP4-lab"]


WHOLE = {"a": "", "b": "tp", "c": "tp", "d": ""}


def _slice(hosts, whole=WHOLE):
    return {h: {"fleet_gpu_nodes": whole, "sglang_server_multinode_group": whole.get(h, "")} for h in hosts}


def test_a_slice_holding_one_rank_of_a_group_is_refused_naming_the_ranks_elsewhere():
    hostvars = _slice(["a", "b"])
    assert fleet_slice_problems("a", hostvars, {"gpu_nodes": ["a", "b"]}) == []
    problems = fleet_slice_problems("b", hostvars, {"gpu_nodes": ["a", "b"]})
    assert len(problems) == 1 and problems[0].startswith(
        "multi-node group tp is split across slices: this run holds b, but not c;")


def test_a_slice_with_the_whole_group_and_a_run_without_a_whole_fleet_pass():
    assert fleet_slice_problems("b", _slice(["b", "c"]), {"gpu_nodes": ["b", "c"]}) == []
    assert fleet_slice_problems("b", _slice(["b"], whole={}), {"gpu_nodes": ["b"]}) == []
    # A router or monitoring host is no GPU host: nothing of its own to hold.
    assert fleet_slice_problems("r", {"r": {"fleet_gpu_nodes": WHOLE}}, {"gpu_nodes": ["b", "c"]}) == []


def test_a_bad_or_disagreeing_whole_fleet_is_named():
    assert "fleet_gpu_nodes is ['a', 'b']" in fleet_slice_problems(
        "a", {"a": {"fleet_gpu_nodes": ["a", "b"]}}, {"gpu_nodes": ["a"]})[0]
    assert fleet_slice_problems("e", _slice(["e"]), {"gpu_nodes": ["e"]}) == [
        "e is not in fleet_gpu_nodes, the whole fleet's GPU hosts: add it there"]
    hostvars = {"d": {"fleet_gpu_nodes": WHOLE, "sglang_server_multinode_group": "tp"}}
    assert fleet_slice_problems("d", hostvars, {"gpu_nodes": ["d"]}) == [
        "d: its sglang_server_multinode_group is 'tp', but fleet_gpu_nodes says '': make them agree"]


def test_a_slice_knows_the_hosts_outside_it_and_the_one_seed_every_slice_names():
    first = fleet_slice("c", _slice(["c", "d"]), {"gpu_nodes": ["c", "d"]})
    assert first == {"sliced": True, "seed": "a", "seed_here": False, "outside": ["a", "b"]}
    second = fleet_slice("a", _slice(["a", "b"]), {"gpu_nodes": ["b", "a"]})
    assert second == {"sliced": True, "seed": "a", "seed_here": True, "outside": ["c", "d"]}
    whole = fleet_slice("a", _slice(list(WHOLE)), {"gpu_nodes": list(WHOLE)})
    assert whole == {"sliced": False, "seed": "a", "seed_here": True, "outside": []}
    # No whole fleet named: the run is its inventory, and each stage picks its own first host.
    assert fleet_slice("c", _slice(["c"], whole={}), {"gpu_nodes": ["c"]}) == {
        "sliced": False, "seed": "", "seed_here": False, "outside": []}


def test_a_chosen_seed_is_every_slice_s_and_must_be_a_fleet_host():
    hostvars = {h: dict(v, fleet_seed_host="d") for h, v in _slice(["a", "b", "c"]).items()}
    assert fleet_slice("a", hostvars, {"gpu_nodes": ["a", "b", "c"]})["seed"] == "d"
    assert fleet_slice_problems("a", hostvars, {"gpu_nodes": ["a", "b", "c"]}) == []
    hostvars = {h: dict(v, fleet_seed_host="gpu-99") for h, v in _slice(["a"]).items()}
    assert fleet_slice_problems("a", hostvars, {"gpu_nodes": ["a"]}) == [
        "fleet_seed_host is gpu-99, which is not in fleet_gpu_nodes, the whole fleet's GPU hosts"]


def test_a_stage_that_needs_every_gpu_host_is_refused_in_a_slice_naming_those_it_would_miss():
    assert fleet_whole_problems("r", {"r": {"fleet_gpu_nodes": WHOLE}}, {"gpu_nodes": list(WHOLE)}, "x") == []
    assert fleet_whole_problems("r", {"r": {}}, {"gpu_nodes": ["a"]}, "x") == []
    (problem,) = fleet_whole_problems("r", {"r": {"fleet_gpu_nodes": WHOLE}}, {"gpu_nodes": ["b", "c"]},
                                      "the router registers every worker of the fleet")
    assert problem.startswith("the router registers every worker of the fleet: this run is a slice of the fleet, "
                              "without a, d, so it would leave them out")
    many = {"g%02d" % i: "" for i in range(20)}
    (problem,) = fleet_whole_problems("r", {"r": {"fleet_gpu_nodes": many}}, {"gpu_nodes": ["g00"]}, "x")
    assert "without g01, g02, g03, g04, g05, g06, g07, g08 and 11 more," in problem


# A path that climbs out of the role it is written in: role_path, then /.. (in a template string or joined
# with ~ or +), or its dirname.
REACH_OUT = re.compile(r"role_path\s*(?:\}\}\s*|[~+]\s*['\"]\s*)/\.\.|role_path\s*\|\s*dirname")


def test_the_reach_out_of_a_role_is_seen_however_it_is_spelt():
    for text in ("a: \"{{ role_path }}/../../plugins\"", "a: \"{{ (role_path ~ '/../../files/x') | realpath }}\"",
                 "{{ lookup('file', role_path ~ \"/../other/vars/main.yml\") }}", "{{ role_path + '/..' }}",
                 "{{ role_path | dirname }}"):
        assert REACH_OUT.search(text), text
    for text in ("a: \"{{ role_path }}/files/x\"", "{{ role_path ~ '/templates' }}", "{{ __fleet_plugins }}/.."):
        assert not REACH_OUT.search(text), text


def test_only_the_fleet_layer_reaches_outside_its_role():
    """A role that reads another role's files, or the project's plugins/ and files/, through its own
    role_path couples itself to where the others sit: those paths are the fleet layer's (roles/fleet/vars/main.yml),
    named once, and every other role reads them by name."""
    found = []
    for path in sorted((ROOT / "roles").rglob("*")):
        if not path.is_file() or path.is_relative_to(ROOT / "roles/fleet") or "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += ["%s:%d: %s" % (path.relative_to(ROOT), number, line.strip())
                  for number, line in enumerate(text.splitlines(), 1) if REACH_OUT.search(line)]
    assert found == [], "roles reaching outside themselves (name the path in roles/fleet/vars/main.yml):\n" + "\n".join(found)


def test_a_setting_set_under_the_name_it_had_before_the_fleet_layer_is_refused_naming_the_new_one():
    """An inventory written for an earlier release would otherwise be silently ignored."""
    assert fleet_problems("box", {"box": {"cuda_toolkit_release": "13.1", "sglang_server_port": 31000}}) == [
        "sglang_server_port is set, but the setting is the fleet layer's now: rename it fleet_server_port",
        "cuda_toolkit_release is set, but the setting is the fleet layer's now: rename it fleet_cuda_release"]


def test_no_moved_name_is_a_setting_any_role_still_has():
    """A name in the table that a role (re)defines would be refused although it works."""
    defined = set()
    for spec in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            defined |= set(entry.get("options") or {})
    for defaults in (ROOT / "roles").glob("*/defaults/main.yml"):
        defined |= set(yaml.safe_load(defaults.read_text()) or {})
    assert not defined & set(fleet_layer.MOVED), defined & set(fleet_layer.MOVED)
    assert set(fleet_layer.MOVED.values()) <= set(fleet_defaults())


OPEN_FLEET = {
    "gpu-1": {"group_names": ["gpu_nodes"], "fleet_server_host": "0.0.0.0"},
    "gpu-2": {"group_names": ["gpu_nodes"], "fleet_server_host": "10.0.0.2", "sglang_server_api_key": "k"},
    "gpu-3": {"group_names": ["gpu_nodes"], "fleet_server_host": "127.0.3.1"},   # the lab's namespaces
    "gpu-4": {"group_names": ["gpu_nodes"], "fleet_server_host": "::1"},
    "gpu-5": {"group_names": ["gpu_nodes"], "fleet_server_host": "gpu-5.example.com", "fleet_router_host": "0.0.0.0"},
    "gw": {"group_names": ["sglang_routers"], "fleet_router_host": "0.0.0.0",
           "groups": {"gpu_nodes": ["gpu-2", "gpu-1"], "sglang_routers": ["gw"]}},
    "gw-alone": {"group_names": ["sglang_routers"], "fleet_router_host": "[::]", "groups": {"gpu_nodes": ["gpu-1"]}},
}


def test_a_server_or_router_other_hosts_reach_with_no_key_is_refused_naming_the_setting():
    assert fleet_problems("gpu-1", OPEN_FLEET) == [
        "the server listens on 0.0.0.0:30000 (fleet_server_host) with no sglang_server_api_key: anyone who reaches "
        "it may use it; set the key (vault it), listen on 127.0.0.1, or accept it with fleet_allow_open_listeners: true"]
    assert "gpu-5.example.com:30000 (fleet_server_host)" in fleet_problems("gpu-5", OPEN_FLEET)[0]
    # A router with no key of its own asks the key of its workers' first host, as the router role does.
    assert fleet_problems("gw", OPEN_FLEET) == []
    (refused,) = fleet_problems("gw-alone", OPEN_FLEET)
    assert refused.startswith("the router listens on [::]:30090 (fleet_router_host) with no sglang_router_api_key")
    assert fleet_problems("gw-alone", dict(OPEN_FLEET, **{"gw-alone": dict(
        OPEN_FLEET["gw-alone"], sglang_router_api_key="r")})) == []
    # Before any change: the fleet role's checks (the first stage of every run) assert this list is empty.
    checks = yaml.safe_load((ROOT / "roles/fleet/tasks/checks.yml").read_text())
    assert "fleet_problems(hostvars)" in checks[0]["vars"]["__fleet_problems"]


def test_a_key_loopback_or_no_such_listener_on_the_host_passes():
    for host in ("gpu-2", "gpu-3", "gpu-4"):
        assert fleet_problems(host, OPEN_FLEET) == [], host
    # gpu-5's fleet_router_host is off loopback, but it is no router: it listens there for nothing.
    assert [p for p in fleet_problems("gpu-5", OPEN_FLEET) if "router" in p] == []
    assert fleet_problems("box", {"box": {"fleet_server_host": "localhost", "group_names": ["gpu_nodes"]}}) == []


def test_the_opt_out_lets_it_through_and_names_each_open_listener():
    accepted = {name: dict(found, fleet_allow_open_listeners=True) for name, found in OPEN_FLEET.items()}
    assert fleet_problems("gpu-1", accepted) == fleet_problems("gw-alone", accepted) == []
    assert fleet_layer.fleet_open_listeners("gpu-1", accepted) == [
        "the server listens on 0.0.0.0:30000 (fleet_server_host) with no sglang_server_api_key"]
    assert fleet_layer.fleet_open_listeners("gpu-2", accepted) == []
    # As the inventory writes it ("yes", "true") too.
    assert fleet_problems("gpu-1", {"gpu-1": dict(OPEN_FLEET["gpu-1"], fleet_allow_open_listeners="yes")}) == []


def test_roles_read_the_fleet_layer_by_its_public_names_only():
    """The fleet layer's derived values (roles/fleet/vars/main.yml) are public, fleet_*: a role that read a
    private __fleet_* name of it would break when the layer renames what it keeps to itself. A role's own
    internals (__<role>_*, fleet_monitoring's included) are its business."""
    derived = set(yaml.safe_load((ROOT / "roles/fleet/vars/main.yml").read_text()))
    assert derived and all(name.startswith("fleet_") for name in derived), derived
    found = []
    for path in sorted((ROOT / "roles").rglob("*")):
        if not path.is_file() or path.is_relative_to(ROOT / "roles/fleet") or "__pycache__" in path.parts:
            continue
        role = path.relative_to(ROOT / "roles").parts[0]
        for name in set(re.findall(r"\b__fleet_\w+", path.read_text(errors="replace"))):
            if not name.startswith("__%s_" % role):
                found.append("%s: %s" % (path.relative_to(ROOT), name))
    assert found == []
