# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus's scrape targets from the inventory, as file-based service discovery files."""
from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_monitoring_targets
short_description: The fleet's scrape targets, one file_sd list per Prometheus job
description:
  - C(sglang_server) holds one target per unit of rollout, a host that serves alone or rank 0 of a
    multi-node group (ranks >= 1 serve no C(/metrics)), at its worker address, where the routers
    reach it (the fleet layer's C(fleet_topology)).
  - C(sglang_router) holds each router's Prometheus exporter (C(fleet_router_prometheus_host),
    C(fleet_router_prometheus_port)), C(node) node_exporter on each exporter host, C(dcgm) dcgm-exporter
    there when I(dcgm_exporter_port) is set.
  - Every target is labelled C(host) (the inventory name); a server also C(unit) (its group, or its host).
  - A target on a loopback address of another host than Prometheus's cannot be scraped, so it fails,
    naming each one and the variable that moves it.
positional: _input, hostvars
options:
  _input:
    description: The fleet's topology, from C(fleet_topology) (its units and its routers).
    type: dict
    required: true
  hostvars:
    description: The C(hostvars) variable.
    type: dict
    required: true
  exporter_hosts:
    description: The hosts that run node_exporter (and dcgm-exporter).
    type: list
    elements: str
    default: []
  monitoring_host:
    description: The host Prometheus runs on; loopback targets are only allowed on it.
    type: str
  node_exporter_port:
    description: node_exporter's port where a host does not set C(fleet_monitoring_node_exporter_port).
    type: int
    default: 9100
  dcgm_exporter_port:
    description: dcgm-exporter's port on the exporter hosts; 0 for none.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: The target files' content is known
  ansible.builtin.set_fact:
    targets: >-
      {{ groups['gpu_nodes'] | fleet_topology(hostvars, groups, groups['sglang_routers'] | default([]))
         | fleet_monitoring_targets(hostvars,
                                    exporter_hosts=groups['gpu_nodes'], monitoring_host=inventory_hostname) }}
"""

RETURN = r"""
_value:
  description: >-
    A dict of job name to a file_sd list: C([{"targets": ["10.0.0.11:30000"], "labels": {"host": "gpu-1",
    "unit": "gpu-1"}}]).
  type: dict
"""

import importlib.util
import os

from ansible.errors import AnsibleFilterError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _load_fleet_layer():
    """The fleet layer's filter file (plugins/filter/fleet_layer.py): how a host is named and reached."""
    spec = importlib.util.spec_from_file_location("sglang_fleet_fleet_layer",
                                                  os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                               "fleet_layer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fleet = _load_fleet_layer()
_vars = _fleet._vars
_address = _fleet.scrape_address


def _advertised(hostvars, host):
    return _fleet.reached_at(host, hostvars)


def fleet_monitoring_exporter_address(host, hostvars):
    """The address node_exporter listens on and is scraped at: fleet_monitoring_node_exporter_host, else
    the host's advertised address."""
    return str(_vars(hostvars, host).get("fleet_monitoring_node_exporter_host") or _advertised(hostvars, host))


def fleet_monitoring_targets(topology, hostvars, exporter_hosts=(), monitoring_host=None,
                             node_exporter_port=9100, dcgm_exporter_port=0):
    jobs = {"sglang_server": [], "sglang_router": [], "node": []}
    loopback = []

    def add(job, host, address, labels, fix):
        if address.rsplit(":", 1)[0].strip("[]") in LOOPBACK and host != monitoring_host:
            loopback.append("%s's %s at %s (%s)" % (host, job, address, fix))
        jobs.setdefault(job, []).append({"targets": [address], "labels": dict({"host": host}, **labels)})

    for unit in topology["units"]:
        add("sglang_server", unit["rank0"], unit["worker_url"][len("http://"):], {"unit": unit["name"]},
            "set fleet_server_host to an address Prometheus reaches, or 0.0.0.0")
    for router, found in topology["routers"].items():
        add("sglang_router", router, found["metrics"], {},
            "set fleet_router_prometheus_host to an address Prometheus reaches, or 0.0.0.0")
    for host in exporter_hosts:
        address = fleet_monitoring_exporter_address(host, hostvars)
        port = _vars(hostvars, host).get("fleet_monitoring_node_exporter_port", node_exporter_port)
        add("node", host, _address(address, port, _advertised(hostvars, host)), {},
            "set fleet_monitoring_node_exporter_host to its address")
        if int(dcgm_exporter_port or 0):
            add("dcgm", host, _address(address, dcgm_exporter_port, _advertised(hostvars, host)), {},
                "set fleet_monitoring_node_exporter_host to its address")
    if loopback:
        raise AnsibleFilterError("Prometheus on %s cannot scrape a loopback address of another host: %s"
                                 % (monitoring_host or "the monitoring host", "; ".join(loopback)))
    return jobs


class FilterModule(object):
    def filters(self):
        return {
            "fleet_monitoring_targets": fleet_monitoring_targets,
            "fleet_monitoring_exporter_address": fleet_monitoring_exporter_address,
        }
