# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet layer's reads: each host's fleet settings, and the topology every role derives from them."""
from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_topology
short_description: The fleet's servers and routers, and how each reaches the others
description:
  - The one place where the fleet's topology is derived, for the server, router and monitoring roles
    alike. Each host's settings are its own C(fleet_*) variables (inventory, facts) over the fleet
    layer's defaults, read from C(roles/fleet/defaults/main.yml) itself, since C(hostvars) holds no
    role defaults for the hosts a play does not run on.
  - A unit of rollout is a host that serves alone, or every rank of a multi-node group (see
    C(sglang_rollout_units)); its worker is rank 0, which alone serves the API.
positional: _input, hostvars, groups, routers
options:
  _input:
    description: The server hosts, in rollout order.
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) variable.
    type: dict
    required: true
  groups:
    description: The C(groups) variable, for the ranks of multi-node groups.
    type: dict
    required: true
  routers:
    description: The router hosts.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Where each router reaches its workers
  ansible.builtin.debug:
    msg: "{{ (groups['gpu_nodes'] | fleet_topology(hostvars, groups, groups['sglang_routers'])).worker_urls }}"
"""

RETURN = r"""
_value:
  description:
    - C(units), in rollout order, each with C(name), C(rank0), C(ranks), C(worker_url) (where a router
      reaches rank 0), C(dist_init_addr) (C(<rank 0's address>:<port>), for a multi-node group only,
      else empty), C(model) (the name it serves the model under, as a router lists it).
    - C(worker_urls), one a unit; C(rank0), each server host's rank 0.
    - C(routers), per router host, C(url) (its API, as called on its own host), C(metrics) (its
      exporter, as another host scrapes it), C(lease_dir) (where its drain leases are) and C(key_file) (the
      file its key is in, on its own host, which is the key it runs with and its worker API asks for).
  type: dict
"""

import difflib
import glob
import importlib.util
import ipaddress
import os
from collections.abc import Mapping

import yaml
from ansible.errors import AnsibleFilterError

HERE = os.path.dirname(os.path.abspath(__file__))
# The fleet role's defaults: the one definition of every fleet setting (roles/ sits beside plugins/
# in the repository and in the collection alike).
ROLES_DIR = os.path.join(HERE, os.pardir, os.pardir, "roles")
DEFAULTS_FILE = os.path.join(ROLES_DIR, "fleet", "defaults", "main.yml")
# What the fleet layer derives from its settings for every role (fleet_served_model, fleet_cuda_home...):
# role vars, which the inventory cannot override, so a site that sets one is told so.
DERIVED_FILE = os.path.join(ROLES_DIR, "fleet", "vars", "main.yml")
# libyaml's loader where it is built (it is with the controller's PyYAML): the roles' argument specs are
# read once in every process that runs the fleet checks, and the pure-Python loader takes ten times as long.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _sibling(name, attribute):
    """A function of another filter file of ours, loaded by path (filter files are not a package)."""
    spec = importlib.util.spec_from_file_location("sglang_fleet_" + name, os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attribute)


http_url = _sibling("http_url", "http_url")
sglang_rollout_units = _sibling("sglang_rollout", "sglang_rollout_units")
held_out_by_acceptance = _sibling("sglang_rollout", "held_out_by_acceptance")
pip_environment = _sibling("pip_environment", "pip_environment")
supply_chain_pin_problems = _sibling("supply_chain", "supply_chain_pin_problems")

# The pins of what the fleet installs from outside, by role (plugins/filter/supply_chain.py): checked with
# the fleet settings, before any stage changes a thing, so a run that would install an unpinned wheel or
# trust an unpinned key stops before it starts. Their defaults are literal, read from each role's file.
PINS = {"sglang": ("sglang_sgl_kernel_wheel_sha256",),
        "flash_attn": ("flash_attn_prebuilt_wheel", "flash_attn_prebuilt_wheel_sha256"),
        "cuda_toolkit": ("cuda_toolkit_repo_key_fingerprint",)}
_pin_defaults = None


def pin_defaults():
    """The role defaults of the settings in PINS."""
    global _pin_defaults
    if _pin_defaults is None:
        found = {}
        for role, names in PINS.items():
            path = os.path.join(ROLES_DIR, role, "defaults", "main.yml")
            try:
                with open(path) as handle:
                    defaults = yaml.load(handle, Loader=_LOADER) or {}
            except (OSError, yaml.YAMLError) as error:
                raise AnsibleFilterError("the defaults of role %s (%s) cannot be read: %s" % (role, path, error))
            found.update({name: defaults.get(name, "") for name in names})
        _pin_defaults = found
    return _pin_defaults

_defaults = None


def fleet_defaults(path=None):
    """The fleet layer's defaults, as the fleet role defines them. A templated value would mean one
    thing to Ansible and another here: it is refused, naming the setting."""
    global _defaults
    if _defaults is not None and path is None:
        return _defaults
    try:
        with open(path or DEFAULTS_FILE) as handle:
            found = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as error:
        raise AnsibleFilterError("the fleet layer's defaults (%s) cannot be read: %s" % (path or DEFAULTS_FILE, error))
    for name, value in found.items():
        if not name.startswith("fleet_"):
            raise AnsibleFilterError("fleet layer default %s: every setting there is named fleet_*" % name)
        text = yaml.safe_dump(value)
        if "{{" in text or "{%" in text:
            raise AnsibleFilterError("fleet layer default %s is templated (%r): the fleet layer's defaults are "
                                     "literal, so that every host reads them alike" % (name, value))
    if path is None:
        _defaults = found
    return found


_derived = None


def fleet_derived():
    """The names of the values the fleet layer derives (its vars/main.yml): not settings, never set."""
    global _derived
    if _derived is None:
        try:
            with open(DERIVED_FILE) as handle:
                _derived = frozenset(yaml.load(handle, Loader=_LOADER) or {})
        except (OSError, yaml.YAMLError) as error:
            raise AnsibleFilterError("the fleet layer's derived values (%s) cannot be read: %s" % (DERIVED_FILE, error))
    return _derived


def _vars(hostvars, host):
    try:
        return hostvars[host]
    except KeyError:
        raise AnsibleFilterError("%s is not a host of this inventory" % host)


class _Settings(Mapping):
    """`host`'s fleet settings, each read from its variables the first time it is asked for. A host's
    variables are all computed at each hostvars[host], and each of its values is templated when read: the
    roles' topology reads a few settings of every host in every task that uses it, not all of them."""

    def __init__(self, host, hostvars):
        self.host, self.found, self._read = host, _vars(hostvars, host), {}

    def __getitem__(self, name):
        if name not in self._read:
            default = fleet_defaults()[name]
            self._read[name] = self.found[name] if name in self.found else default
        return self._read[name]

    def __iter__(self):
        return iter(fleet_defaults())

    def __len__(self):
        return len(fleet_defaults())

    def reached_at(self):
        """Where other hosts reach this host: its ansible_host, else its inventory name."""
        return str(self.found.get("ansible_host") or self.host)


def fleet_settings(host, hostvars):
    """Every fleet setting as it holds for `host`: its own variable where the inventory (or a fact)
    sets one, else the fleet layer's default."""
    return dict(_Settings(host, hostvars))


def reached_at(host, hostvars):
    """Where other hosts reach `host`: its ansible_host, else its inventory name."""
    return _Settings(host, hostvars).reached_at()


def scrape_address(listen, port, advertised):
    """host:port of a listener as another host reaches it (its advertised address where it listens on all)."""
    return http_url(listen, port, advertised)[len("http://"):]


ROUTER_SERVICE_DEFAULT = "sglang-router"


def _router(host, hostvars):
    settings = _Settings(host, hostvars)
    return {"url": http_url(settings["fleet_router_host"], settings["fleet_router_port"]),
            "metrics": scrape_address(settings["fleet_router_prometheus_host"], settings["fleet_router_prometheus_port"],
                                      settings.reached_at()),
            "lease_dir": settings["fleet_router_lease_dir"],
            # The router role's key file (roles/sglang_router/vars/main.yml), named after its service; the
            # default here is that role's own, which tests/unit/test_fleet_layer.py holds the two to.
            "key_file": "%s/%s.key" % (settings["fleet_config_dir"],
                                       settings.found.get("sglang_router_service") or ROUTER_SERVICE_DEFAULT)}


def fleet_topology(hosts, hostvars, groups, routers=()):
    units, rank0 = [], {}
    for unit in sglang_rollout_units(hosts, hostvars, groups):
        settings = _Settings(unit["rank0"], hostvars)
        # How the routers and the other ranks reach rank 0: fleet_server_advertise_host, else as any host.
        advertised = str(settings["fleet_server_advertise_host"] or settings.reached_at())
        unit = dict(unit,
                    worker_url=http_url(settings["fleet_server_host"], settings["fleet_server_port"], advertised),
                    dist_init_addr=("%s:%s" % (advertised, settings["fleet_server_dist_init_port"])
                                    if len(unit["ranks"]) > 1 else ""),
                    # roles/fleet/vars/main.yml's fleet_served_model, for hosts the play may not run on
                    model=settings["fleet_served_model_name"] or settings["fleet_model_dir"])
        units.append(unit)
        rank0.update({rank: unit["rank0"] for rank in unit["ranks"]})
    return {"units": units, "worker_urls": [unit["worker_url"] for unit in units], "rank0": rank0,
            "routers": {router: _router(router, hostvars) for router in routers}}


def fleet_in_service(hosts, hostvars, groups):
    """`hosts` less every unit with a host that failed GPU acceptance in this run (its
    gpu_acceptance_passed is false, the stage's verdict or, in a run without the stage, its record's):
    such a host is never put behind a router, and a multi-node group serves whole or not at all. A host
    with no verdict (never measured) stays."""
    held = {rank for unit in sglang_rollout_units(hosts, hostvars, groups)
            if held_out_by_acceptance(unit, hostvars) for rank in unit["ranks"]}
    return [host for host in hosts if host not in held]


def fleet_units(host, hostvars, groups):
    """How many units (a server, or a multi-node group) the whole fleet has: fleet_gpu_nodes where it names
    the whole fleet (a slice's inventory holds only part of it), else this inventory's gpu_nodes."""
    whole = _Settings(host, hostvars)["fleet_gpu_nodes"] or {}
    if isinstance(whole, dict) and whole:
        return sum(1 for group in whole.values() if not group) + len({group for group in whole.values() if group})
    return len(sglang_rollout_units(groups.get("gpu_nodes") or [], hostvars, groups))


def fleet_unit(topology, host):
    """The unit `host` serves in (a host of a multi-node group: its group's)."""
    for unit in topology["units"]:
        if host in unit["ranks"]:
            return unit
    raise AnsibleFilterError("%s is not one of the fleet's servers (%s)"
                             % (host, ", ".join(u["name"] for u in topology["units"]) or "none"))


def fleet_pip_environment(host, hostvars):
    """The environment of every pip run on `host` (sglang, flash-attn, the router, the bench): the
    fleet's proxy and PIP_* settings, and its index, extra indexes, find-links and no-index."""
    settings = _Settings(host, hostvars)
    base = dict(settings["fleet_proxy_env"] or {}, **(settings["fleet_pip_env"] or {}))
    return pip_environment(base, index_url=settings["fleet_pip_index_url"],
                           extra_index_urls=settings["fleet_pip_extra_index_urls"],
                           find_links=settings["fleet_pip_find_links"],
                           no_index=_bool(settings["fleet_pip_no_index"]))


def _bool(value):
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


PORTS = ("fleet_server_port", "fleet_server_dist_init_port", "fleet_router_port", "fleet_router_prometheus_port")


# Settings that one role had and the fleet layer now holds for every role, each with its new name. An
# inventory that still sets an old name would be silently ignored (the roles read only the new one):
# the fleet checks refuse it instead, naming the setting to rename.
MOVED = {
    "sglang_server_host": "fleet_server_host", "sglang_server_port": "fleet_server_port",
    "sglang_server_advertise_host": "fleet_server_advertise_host",
    "sglang_server_dist_init_port": "fleet_server_dist_init_port", "sglang_server_service": "fleet_server_service",
    "sglang_router_host": "fleet_router_host", "sglang_router_port": "fleet_router_port",
    "sglang_router_prometheus_host": "fleet_router_prometheus_host",
    "sglang_router_prometheus_port": "fleet_router_prometheus_port",
    "sglang_server_model_path": "fleet_model_dir", "sglang_server_draft_model_path": "fleet_draft_model_dir",
    "sglang_server_served_model_name": "fleet_served_model_name",
    "sglang_install_root": "fleet_install_root", "sglang_server_install_root": "fleet_install_root",
    "sglang_pip_index_url": "fleet_pip_index_url", "flash_attn_pip_index_url": "fleet_pip_index_url",
    "sglang_router_pip_index_url": "fleet_pip_index_url",
    "sglang_pip_extra_index_urls": "fleet_pip_extra_index_urls",
    "flash_attn_pip_extra_index_urls": "fleet_pip_extra_index_urls",
    "sglang_router_pip_extra_index_urls": "fleet_pip_extra_index_urls",
    "sglang_pip_find_links": "fleet_pip_find_links", "flash_attn_pip_find_links": "fleet_pip_find_links",
    "sglang_router_pip_find_links": "fleet_pip_find_links",
    "sglang_pip_no_index": "fleet_pip_no_index", "flash_attn_pip_no_index": "fleet_pip_no_index",
    "sglang_router_pip_no_index": "fleet_pip_no_index",
    "sglang_pip_env": "fleet_pip_env", "flash_attn_pip_env": "fleet_pip_env",
    "sglang_proxy_env": "fleet_proxy_env", "cuda_toolkit_proxy_env": "fleet_proxy_env",
    "sglang_model_proxy_env": "fleet_proxy_env", "sglang_router_proxy_env": "fleet_proxy_env",
    "fleet_monitoring_proxy_env": "fleet_proxy_env",
    "gpu_preflight_nvidia_smi": "fleet_nvidia_smi", "cuda_toolkit_nvidia_smi": "fleet_nvidia_smi",
    "sglang_server_nvidia_smi": "fleet_nvidia_smi", "fleet_monitoring_nvidia_smi": "fleet_nvidia_smi",
    "cuda_toolkit_release": "fleet_cuda_release",
    "gpu_preflight_expected_gpu_count": "fleet_gpus_per_host",
    "fleet_monitoring_gpu_expected_count": "fleet_gpus_per_host",
}


# Facts the roles and playbooks set at run time (set_fact, register) under a name like a setting's. The
# fleet checks run in the first stage of a run, but another host's play, or a tasks_from entry point run
# before them, may have set one already: it is no inventory setting, and not refused as one.
# tests/unit/test_unknown_settings.py reads every set_fact and register of the roles and playbooks to keep
# this list whole.
SET_AT_RUN_TIME = frozenset({
    "cuda_toolkit_driver_version", "cuda_toolkit_home", "cuda_toolkit_installed", "cuda_toolkit_version",
    "flash_attn_action", "flash_attn_build_key", "flash_attn_version_installed",
    "fleet_monitoring_status", "fleet_open_listeners", "fleet_run_started",
    "gpu_acceptance_burned", "gpu_acceptance_failures", "gpu_acceptance_fingerprint", "gpu_acceptance_measured",
    "gpu_acceptance_passed", "gpu_acceptance_warnings",
    "gpu_preflight_cuda_archs", "gpu_preflight_cuda_driver_version", "gpu_preflight_driver_version",
    "gpu_preflight_gpu_count", "gpu_preflight_gpus", "gpu_preflight_kernel_module",
    "gpu_preflight_nvidia_modprobe_path", "gpu_preflight_p2p",
    "sglang_bench_fusion_flags", "sglang_bench_results", "sglang_bench_settings", "sglang_bench_simulated_numbers",
    "sglang_changed", "sglang_install_id", "sglang_python", "sglang_site_packages", "sglang_venv_dir",
    "sglang_model_report", "sglang_patches_changed", "sglang_patches_report",
    "sglang_quality_baseline", "sglang_quality_canary", "sglang_quality_result",
    "sglang_router_leases", "sglang_router_state", "sglang_router_workers",
    "sglang_server_fusion", "sglang_server_group", "sglang_server_intent", "sglang_server_leases",
    "sglang_server_min_in_service", "sglang_server_rollout_batches", "sglang_server_rollout_units",
    "sglang_server_router_state", "sglang_server_run_id", "sglang_server_state", "sglang_server_strays",
    "sglang_verify_accept_length", "sglang_verify_keys_shown", "sglang_verify_status",
})

_role_settings = None


def role_settings(roles_dir=None):
    """Every role's settings, by role: the options of each entry point of its argument spec
    (roles/<role>/meta/argument_specs.yml), the one list of what a role takes."""
    global _role_settings
    if _role_settings is not None and roles_dir is None:
        return _role_settings
    found = {}
    for path in sorted(glob.glob(os.path.join(roles_dir or ROLES_DIR, "*", "meta", "argument_specs.yml"))):
        try:
            with open(path) as handle:
                specs = (yaml.load(handle, Loader=_LOADER) or {}).get("argument_specs") or {}
        except (OSError, yaml.YAMLError) as error:
            raise AnsibleFilterError("the argument spec %s cannot be read: %s" % (path, error))
        role = os.path.basename(os.path.dirname(os.path.dirname(path)))
        found[role] = {name for entry in specs.values() for name in (entry.get("options") or {})}
    if not found:
        raise AnsibleFilterError("no role's argument spec found under %s" % (roles_dir or ROLES_DIR))
    if roles_dir is None:
        _role_settings = found
    return found


def unknown_settings(names, roles_dir=None):
    """What is wrong with a host's variables `names`: each one named as a role's setting would be (the
    role's name and _, the project's rule for public names) that no role takes, so that a misspelt setting
    fails before any change, naming the setting meant, instead of being silently ignored. Other names
    (ansible_*, a site's own, a role's internal __*) are the inventory's business; names in MOVED have
    their own message, facts the roles set their own meaning. A value the fleet layer derives (its
    vars/main.yml) is refused too: the roles would read the derived one, whatever the inventory says."""
    settings = role_settings(roles_dir)
    prefixes = tuple(role + "_" for role in settings)
    known = set().union(*settings.values())
    problems = []
    for name in sorted(str(name) for name in names):
        if not name.startswith(prefixes) or name in known or name in MOVED or name in SET_AT_RUN_TIME:
            continue
        if name in fleet_derived():
            problems.append("%s is derived by the fleet layer from its settings (roles/fleet/vars/main.yml), not a "
                            "setting: set the settings it comes from" % name)
            continue
        near = _nearest(name, known)
        problems.append("%s is not a setting of any role: %s" % (
            name, "did you mean %s?" % near if near else "no role's meta/argument_specs.yml names it"))
    return problems


def _nearest(name, known):
    """The setting `name` is a typo of: the nearest by difflib, if at most two letters are wrong (a wrong,
    missing, extra or transposed letter each counts one or two). Settings share long prefixes, so any
    sglang_server_* name is "close" by ratio alone to some setting it was never meant to be."""
    for candidate in difflib.get_close_matches(name, known, n=3, cutoff=0.6):
        same = sum(block.size for block in difflib.SequenceMatcher(None, name, candidate).get_matching_blocks())
        if len(name) + len(candidate) - 2 * same <= 4:
            return candidate
    return None


def _loopback(address):
    """Whether a listener on `address` is reached from this host alone: 127.0.0.0/8, ::1 or localhost. Any
    other address, a name or 0.0.0.0/:: serves other hosts."""
    text = str(address or "").strip().strip("[]")
    if text.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def _router_key(found, hostvars):
    """The key a router asks of its clients: its own sglang_router_api_key, else (the router role's
    default) the one its workers' first host requires."""
    if "sglang_router_api_key" in found:
        return found["sglang_router_api_key"]
    workers = (found.get("groups") or {}).get(found.get("sglang_router_worker_group") or "gpu_nodes") or []
    return (hostvars[workers[0]].get("sglang_server_api_key") if workers and workers[0] in hostvars else "") or ""


def fleet_open_listeners(host, hostvars):
    """The API listeners of `host` that other hosts reach and that ask no key: a server (a gpu_nodes host)
    whose fleet_server_host is off loopback with an empty sglang_server_api_key, a router (an sglang_routers
    host) whose fleet_router_host is with an empty key. Each says where it listens and which setting is empty."""
    settings = _Settings(host, hostvars)
    found = settings.found
    groups = found.get("group_names") or []
    listeners = []
    if "gpu_nodes" in groups and not _loopback(settings["fleet_server_host"]) and not found.get("sglang_server_api_key"):
        listeners.append("the server listens on %s:%s (fleet_server_host) with no sglang_server_api_key"
                     % (settings["fleet_server_host"], settings["fleet_server_port"]))
    if "sglang_routers" in groups and not _loopback(settings["fleet_router_host"]) and not _router_key(found, hostvars):
        listeners.append("the router listens on %s:%s (fleet_router_host) with no sglang_router_api_key (nor its "
                     "workers' sglang_server_api_key)" % (settings["fleet_router_host"], settings["fleet_router_port"]))
    return listeners


def fleet_problems(host, hostvars):
    """What cannot work on `host`: a setting the fleet layer holds now still set under its old name, a
    setting no role takes (a misspelt one), a pin of what is installed from outside that pins nothing
    (PINS), an API that other hosts reach with no key (unless fleet_allow_open_listeners), a port out of
    range, two of the fleet's listeners on one port
    (a GPU host may run a router too), or an nvidia-smi that is not an absolute path (the gpu-init unit
    and the GPU collector's unit run it outside any PATH the preflight saw)."""
    settings = _Settings(host, hostvars)
    found = settings.found
    problems = ["%s is set, but the setting is the fleet layer's now: rename it %s" % (old, new)
                for old, new in MOVED.items() if old in found]
    problems += unknown_settings(found)
    problems += supply_chain_pin_problems({name: (found[name] if name in found else default)
                                           for name, default in pin_defaults().items()})
    if not _bool(settings["fleet_allow_open_listeners"]):
        problems += ["%s: anyone who reaches it may use it; set the key (vault it), listen on 127.0.0.1, or accept "
                     "it with fleet_allow_open_listeners: true" % listener for listener in fleet_open_listeners(host, hostvars)]
    owner = {}
    if not str(settings["fleet_nvidia_smi"]).startswith("/"):
        problems.append("fleet_nvidia_smi is %r, not an absolute path (say /usr/bin/nvidia-smi)"
                        % settings["fleet_nvidia_smi"])
    for name in PORTS:
        try:
            port = int(settings[name])
        except (TypeError, ValueError):
            problems.append("%s is %r, not a port" % (name, settings[name]))
            continue
        if not 0 < port < 65536:
            problems.append("%s is %d, not a port (1-65535)" % (name, port))
        elif port in owner:
            problems.append("%s and %s are both %d: give each its own port" % (owner[port], name, port))
        else:
            owner[port] = name
    return problems


def fleet_slice(host, hostvars, groups):
    """What part of the fleet this run holds, as `host` sees it. A run is a slice when fleet_gpu_nodes
    names GPU hosts that its inventory's gpu_nodes lacks (AWX job slicing; --limit is not one, as its
    inventory keeps every host). The seed is the one host that does the fleet-once steps (the
    flash-attn build, the model's first fetch) for every slice: fleet_seed_host, else the first of
    fleet_gpu_nodes by name, so that every slice names the same one."""
    settings = _Settings(host, hostvars)
    whole = settings["fleet_gpu_nodes"] or {}
    here = list(groups.get("gpu_nodes") or [])
    whole_names = sorted(whole) if isinstance(whole, dict) else []
    outside = [name for name in whole_names if name not in here]
    seed = str(settings["fleet_seed_host"] or (whole_names[0] if whole_names else ""))
    return {"sliced": bool(outside), "seed": seed, "seed_here": seed in here, "outside": outside}


def fleet_whole_problems(host, hostvars, groups, what):
    """Why a stage that must see every GPU host (`what` it does with them: a router registers every
    worker, Prometheus scrapes every target) cannot run in this run: it is a slice of the fleet."""
    found = fleet_slice(host, hostvars, groups)
    if not found["sliced"]:
        return []
    outside = found["outside"]
    return ["%s: this run is a slice of the fleet, without %s%s, so it would leave them out: run this stage in a "
            "job that is not sliced (the AWX workflow's finish job)"
            % (what, ", ".join(outside[:8]), " and %d more" % (len(outside) - 8) if len(outside) > 8 else "")]


def fleet_slice_problems(host, hostvars, groups):
    """What makes this run's part of the fleet unsafe for `host`. fleet_gpu_nodes names every GPU host
    of the whole fleet and each one's multi-node group; a run over a slice of it (AWX job slicing,
    whose inventory holds only the slice's hosts, and groups only their slice's members) must hold
    every rank of each group it holds, since a group's size is the count of its inventory group: a
    split group would start as a smaller, wrong one."""
    whole = _Settings(host, hostvars)["fleet_gpu_nodes"] or {}
    here = list(groups.get("gpu_nodes") or [])
    if not whole or host not in here:
        return []
    if not isinstance(whole, dict):
        return ["fleet_gpu_nodes is %r: name every GPU host of the fleet, each with its multi-node group "
                "(\"\" for a host that serves alone)" % (whole,)]
    if host not in whole:
        return ["%s is not in fleet_gpu_nodes, the whole fleet's GPU hosts: add it there" % host]
    declared = str(whole[host] or "")
    own = str(_vars(hostvars, host).get("sglang_server_multinode_group") or "")
    if own != declared:
        return ["%s: its sglang_server_multinode_group is %r, but fleet_gpu_nodes says %r: make them agree"
                % (host, own, declared)]
    seed = fleet_slice(host, hostvars, groups)["seed"]
    if seed not in whole:
        return ["fleet_seed_host is %s, which is not in fleet_gpu_nodes, the whole fleet's GPU hosts" % seed]
    if not declared:
        return []
    ranks = [name for name in whole if str(whole[name] or "") == declared]
    elsewhere = [name for name in ranks if name not in here]
    if elsewhere:
        return ["multi-node group %s is split across slices: this run holds %s, but not %s; its ranks restart "
                "as one group, so keep every rank of it in one slice, or run its stages in a job that is "
                "not sliced"
                % (declared, ", ".join(name for name in ranks if name in here), ", ".join(elsewhere))]
    return []


class FilterModule(object):
    def filters(self):
        return {"fleet_topology": fleet_topology, "fleet_unit": fleet_unit, "fleet_units": fleet_units,
                "fleet_in_service": fleet_in_service,
                "fleet_settings": fleet_settings, "fleet_problems": fleet_problems,
                "fleet_open_listeners": fleet_open_listeners, "fleet_pip_environment": fleet_pip_environment,
                "fleet_slice": fleet_slice, "fleet_slice_problems": fleet_slice_problems,
                "fleet_whole_problems": fleet_whole_problems}
