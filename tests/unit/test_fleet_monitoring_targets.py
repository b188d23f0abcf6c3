"""Prometheus's targets from the inventory: rank 0 of each unit, the routers' exporters, the exporters of
each GPU host, at the addresses other hosts reach them on."""
import pytest
from ansible.errors import AnsibleFilterError

from fleet_monitoring import fleet_monitoring_exporter_address, fleet_monitoring_targets
from fleet_layer import fleet_topology

GROUPS = {"tp_group": ["gpu-2", "gpu-3"]}
HOSTVARS = {
    # serves alone, on its own address
    "gpu-1": {"ansible_host": "10.0.0.11", "fleet_server_host": "10.0.0.11"},
    # rank 0 and rank 1 of a multi-node group, listening on every address
    "gpu-2": {"ansible_host": "10.0.0.12", "fleet_server_host": "0.0.0.0", "fleet_server_port": 31000,
              "sglang_server_multinode_group": "tp_group"},
    "gpu-3": {"ansible_host": "10.0.0.13", "fleet_server_host": "0.0.0.0", "fleet_server_port": 31000,
              "sglang_server_multinode_group": "tp_group"},
    "router-1": {"ansible_host": "gateway-01.example.com", "fleet_router_prometheus_host": "0.0.0.0"},
    "mon-1": {"ansible_host": "10.0.0.2"},
}
SERVERS = ["gpu-1", "gpu-2", "gpu-3"]


def targets(hostvars=None, servers=SERVERS, **kwargs):
    hostvars = hostvars or HOSTVARS
    routers = kwargs.pop("routers", ["router-1"])
    kwargs.setdefault("exporter_hosts", servers)
    kwargs.setdefault("monitoring_host", "mon-1")
    return fleet_monitoring_targets(fleet_topology(servers, hostvars, GROUPS, routers), hostvars, **kwargs)


def test_one_server_target_per_unit_rank_0_only():
    assert targets()["sglang_server"] == [
        {"targets": ["10.0.0.11:30000"], "labels": {"host": "gpu-1", "unit": "gpu-1"}},
        {"targets": ["10.0.0.12:31000"], "labels": {"host": "gpu-2", "unit": "tp_group"}},
    ]


def test_routers_are_scraped_on_their_prometheus_port_at_their_advertised_address():
    assert targets()["sglang_router"] == [
        {"targets": ["gateway-01.example.com:29000"], "labels": {"host": "router-1"}}]


def test_node_exporter_on_every_gpu_host_rank_1_too_and_no_dcgm_unless_asked():
    found = targets()
    assert found["node"] == [{"targets": ["10.0.0.%d:9100" % n], "labels": {"host": "gpu-%d" % (n - 10)}}
                             for n in (11, 12, 13)]
    assert "dcgm" not in found


def test_dcgm_exporter_where_the_site_runs_it():
    found = targets(dcgm_exporter_port=9400)
    assert [t["targets"] for t in found["dcgm"]] == [["10.0.0.11:9400"], ["10.0.0.12:9400"], ["10.0.0.13:9400"]]


def test_a_host_s_own_exporter_address_and_port_win():
    hostvars = dict(HOSTVARS, **{"gpu-1": dict(HOSTVARS["gpu-1"], fleet_monitoring_node_exporter_host="192.0.2.7",
                                              fleet_monitoring_node_exporter_port=9111)})
    assert targets(hostvars)["node"][0]["targets"] == ["192.0.2.7:9111"]
    assert fleet_monitoring_exporter_address("gpu-1", hostvars) == "192.0.2.7"
    assert fleet_monitoring_exporter_address("gpu-2", hostvars) == "10.0.0.12"
    assert fleet_monitoring_exporter_address("mon-1", {"mon-1": {}}) == "mon-1"  # no ansible_host: its name


def test_ipv6_addresses_are_bracketed():
    hostvars = {"v6": {"ansible_host": "fd00::11", "fleet_server_host": "::"}, "mon-1": {}}
    found = targets(hostvars, servers=["v6"], routers=[])
    assert found["sglang_server"][0]["targets"] == ["[fd00::11]:30000"]
    assert found["node"][0]["targets"] == ["[fd00::11]:9100"]


def test_the_roles_defaults_listen_on_loopback_which_another_host_cannot_scrape():
    hostvars = {"gpu-1": {"ansible_host": "10.0.0.11"}, "router-1": {"ansible_host": "10.0.0.5"},
                "mon-1": {"ansible_host": "10.0.0.2"}}
    with pytest.raises(AnsibleFilterError) as error:
        targets(hostvars, servers=["gpu-1"])
    message = str(error.value)
    assert "Prometheus on mon-1 cannot scrape a loopback address of another host" in message
    assert "gpu-1's sglang_server at 127.0.0.1:30000 (set fleet_server_host" in message
    assert "router-1's sglang_router at 127.0.0.1:29000 (set fleet_router_prometheus_host" in message
    assert "node" not in message  # node_exporter listens on the advertised address by default


def test_loopback_is_fine_on_prometheus_s_own_host():
    hostvars = {"box": {}}
    found = targets(hostvars, servers=["box"], routers=["box"], monitoring_host="box")
    assert found["sglang_server"][0]["targets"] == ["127.0.0.1:30000"]
    assert found["sglang_router"][0]["targets"] == ["127.0.0.1:29000"]


def test_the_lab_s_own_addresses_on_one_loopback_are_other_hosts_addresses():
    hostvars = {"lab-gpu-1": {"fleet_server_host": "127.0.1.1", "fleet_monitoring_node_exporter_host": "127.0.1.1"},
                "lab-router-1": {"fleet_router_prometheus_host": "127.0.1.3"},
                "lab-mon-1": {}}
    found = targets(hostvars, servers=["lab-gpu-1"], routers=["lab-router-1"], monitoring_host="lab-mon-1")
    assert [found[job][0]["targets"] for job in ("sglang_server", "sglang_router", "node")] == [
        ["127.0.1.1:30000"], ["127.0.1.3:29000"], ["127.0.1.1:9100"]]


def test_an_unknown_host_is_named():
    with pytest.raises(AnsibleFilterError, match="gpu-9 is not a host of this inventory"):
        targets(servers=["gpu-9"])
