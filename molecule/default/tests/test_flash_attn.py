"""flash_attn in the lab: one build per build key for the fleet, the controller's cache, reruns that do nothing."""
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fleet import awx_sliced_inventories, run_playbook

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
CACHE = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "flash-attn-wheels"
PLAYBOOK = ROOT / "playbooks/flash_attn.yml"
NODES = ["fleet-gpu-1", "fleet-gpu-2"]
VENV_PYTHON = "/opt/sglang/current/bin/python"  # the install in service
LAB_BUILD_ENV = {"FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"}
# Another build key: one more variable for setup.py is enough to make a different wheel.
OTHER_KEY = {"flash_attn_build_env": {**LAB_BUILD_ENV, "NVCC_APPEND_FLAGS": "-lineinfo"}}
testinfra_hosts = ["podman://" + NODES[0]]


def nodes(host):
    return [host.get_host("podman://" + n) for n in NODES]


def installed(node):
    return node.check_output(VENV_PYTHON + " -c \"from importlib.metadata import version; print(version('flash-attn'))\"")


def actions(run):
    return sorted(result.facts.get("flash_attn_action") for result in run.hosts.values())


def builders(run):
    """Hosts on which this run started a compile, read from each host's changed tasks."""
    return [name for name, result in run.hosts.items()
            if any(task.startswith("The compile starts in the background") for task in result.changed_tasks)]


def cache_entries():
    return {path.parent.name: json.loads(path.read_text()) for path in CACHE.glob("*/key.json")}


def test_both_nodes_run_the_one_wheel_built_for_their_build_key(host):
    entries = cache_entries()
    assert len(entries) == 1
    (key_id, entry), = entries.items()
    assert entry["key"]["source"] == "flash-attn==2.8.3"
    assert entry["key"]["torch"] == "2.13.0+cpu" and entry["key"]["cuda_archs"] == "120"
    assert (CACHE / key_id / entry["wheel"]).is_file()
    assert {installed(node) for node in nodes(host)} == {"2.8.3+build." + key_id}
    # The build happened on one node only: its log is there and nowhere else.
    logs = [node.file("/var/cache/sglang-fleet/flash_attn/build-%s.log" % key_id).exists for node in nodes(host)]
    assert logs == [name == entry["built_on"] for name in NODES]


def test_a_rerun_and_a_check_run_change_nothing():
    for check in (False, True):
        run = run_playbook(PLAYBOOK, INVENTORY, check=check)
        assert run.rc == 0 and run.changed == 0, run.hosts
        assert actions(run) == ["current", "current"]
        assert builders(run) == []


def test_a_changed_build_key_builds_once_for_the_fleet_and_installs_everywhere(host):
    before = cache_entries()
    versions_before = [installed(node) for node in nodes(host)]

    planned = run_playbook(PLAYBOOK, INVENTORY, check=True, extravars=OTHER_KEY)
    assert planned.rc == 0 and actions(planned) == ["would build", "would install"]
    assert cache_entries() == before and [installed(node) for node in nodes(host)] == versions_before

    run = run_playbook(PLAYBOOK, INVENTORY, extravars=OTHER_KEY)
    assert run.rc == 0, run.hosts
    assert len(builders(run)) == 1
    assert actions(run) == ["built", "installed from cache"]
    new = {k: v for k, v in cache_entries().items() if k not in before}
    assert len(new) == 1
    (key_id, entry), = new.items()
    assert entry["built_on"] == builders(run)[0]
    assert entry["key"]["build_env"]["NVCC_APPEND_FLAGS"] == "-lineinfo"
    assert {installed(node) for node in nodes(host)} == {"2.8.3+build." + key_id}

    rerun = run_playbook(PLAYBOOK, INVENTORY, extravars=OTHER_KEY)
    assert rerun.rc == 0 and rerun.changed == 0 and builders(rerun) == []


def test_a_forced_rebuild_builds_once_and_reinstalls_everywhere(host):
    before = cache_entries()
    run = run_playbook(PLAYBOOK, INVENTORY, extravars={**OTHER_KEY, "flash_attn_force_rebuild": "true"})  # as -e gives it
    assert run.rc == 0 and len(builders(run)) == 1
    assert actions(run) == ["built", "installed from cache"]
    assert cache_entries().keys() == before.keys()


# AWX job slicing: two slices of one host each, the scenario's group_vars and host_vars kept, the
# inventory's variables naming the whole fleet; fleet-gpu-1 is the seed.
# A build key of this test run's own (a rerun of the tests must build again), and a controller cache
# that does not exist yet, as on a site's first sliced run.
SLICED_CACHE = CACHE.with_name("flash-attn-wheels-sliced")  # emptied first, removed by the scenario's destroy
SLICE_KEY = {"flash_attn_build_env": {**LAB_BUILD_ENV, "NVCC_APPEND_FLAGS": "-Xptxas=-v",
                                      "LAB_SLICED_RUN": str(time.time_ns())},
             "flash_attn_progress_interval": 2, "flash_attn_cache_dir": str(SLICED_CACHE)}


def slices(directory):
    whole = {"fleet_gpu_nodes": {name: "" for name in NODES}, "lab_hosts": NODES}
    return awx_sliced_inventories(INVENTORY, NODES, 2, directory, whole)


def rounds_waited(run, host):
    return [len(result.get("results") or []) for task, result in run.hosts[host].results
            if (task or "").startswith("The seed's wheel is awaited")]


def test_sliced_as_awx_does_the_seed_builds_once_and_the_other_slice_waits_for_its_wheel(host, tmp_path):
    seed_slice, other_slice = slices(tmp_path)
    shutil.rmtree(SLICED_CACHE, ignore_errors=True)
    with ThreadPoolExecutor(2) as pool:
        # The other slice starts first: it finds no wheel and no word from the seed, and waits.
        waiting = pool.submit(run_playbook, PLAYBOOK, other_slice, extravars=SLICE_KEY)
        time.sleep(5)
        seeding = pool.submit(run_playbook, PLAYBOOK, seed_slice, extravars=SLICE_KEY)
        waited, seeded = waiting.result(), seeding.result()
    assert seeded.rc == 0, seeded.failure_summary
    assert waited.rc == 0, waited.failure_summary
    assert builders(seeded) == ["fleet-gpu-1"] and builders(waited) == []
    assert seeded.hosts["fleet-gpu-1"].facts["flash_attn_action"] == "built"
    assert waited.hosts["fleet-gpu-2"].facts["flash_attn_action"] == "installed from cache"
    assert rounds_waited(waited, "fleet-gpu-2")[0] >= 2, "the other slice did not wait for the seed"
    (entry,) = [json.loads(path.read_text()) for path in SLICED_CACHE.glob("*/key.json")]
    assert entry["built_on"] == "fleet-gpu-1"
    assert {installed(node) for node in nodes(host)} == {"2.8.3+build." + entry["id"]}
    # One compile in the fleet: its log is on the seed alone.
    logs = [node.file("/var/cache/sglang-fleet/flash_attn/build-%s.log" % entry["id"]).exists for node in nodes(host)]
    assert logs == [True, False]
    assert json.loads((SLICED_CACHE / "seed-fleet-gpu-1.json").read_text())["state"] == "built"


def test_a_slice_whose_key_the_seed_does_not_build_fails_at_once_and_a_slice_never_rebuilds(host, tmp_path):
    seed_slice, other_slice = slices(tmp_path)
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        # The seed's slice serves the last test's key (its wheel is in the cache); the other asks for another.
        seeding = pool.submit(run_playbook, PLAYBOOK, seed_slice, extravars=SLICE_KEY)
        waiting = pool.submit(run_playbook, PLAYBOOK, other_slice, extravars=OTHER_KEY_SLICED)
        seeded, refused = seeding.result(), waiting.result()
    assert seeded.rc == 0 and seeded.changed == 0, seeded.failure_summary
    assert refused.rc != 0 and refused.changed == 0
    assert "fleet-gpu-1, the seed, builds build key" in refused.failure_summary
    assert "a slice builds nothing itself" in refused.failure_summary
    assert time.monotonic() - started < 60  # no waiting out the build timeout
    forced = run_playbook(PLAYBOOK, other_slice, extravars={**SLICE_KEY, "flash_attn_force_rebuild": "true"})
    assert forced.rc != 0 and forced.changed == 0
    assert "flash_attn_force_rebuild in a run over a slice of the fleet (it lacks fleet-gpu-1)" in forced.failure_summary


# Another key, and rounds of 2 s: the other slice may start before the seed's says which key it serves.
OTHER_KEY_SLICED = {"flash_attn_build_env": {**LAB_BUILD_ENV, "NVCC_APPEND_FLAGS": "-O2"},
                    "flash_attn_progress_interval": 2, "flash_attn_cache_dir": str(SLICED_CACHE)}


def test_a_prebuilt_wheel_is_installed_everywhere_without_a_build(host):
    original = next(entry for entry in cache_entries().values() if "NVCC_APPEND_FLAGS" not in entry["key"]["build_env"])
    wheel = CACHE / original["id"] / original["wheel"]
    run = run_playbook(PLAYBOOK, INVENTORY, extravars={"flash_attn_prebuilt_wheel": str(wheel),
                                                       "flash_attn_prebuilt_wheel_sha256": original["sha256"]})
    assert run.rc == 0 and builders(run) == []
    assert actions(run) == ["installed prebuilt", "installed prebuilt"]
    assert {installed(node) for node in nodes(host)} == {"2.8.3+build." + original["id"]}
    # That wheel is also the one the default build key names: back to the converged state.
    assert run_playbook(PLAYBOOK, INVENTORY).changed == 0


def test_a_host_without_the_venv_or_with_bad_input_fails_before_any_change(host):
    run = run_playbook(PLAYBOOK, INVENTORY, extravars={"flash_attn_venv_dir": "/opt/nowhere"})
    assert run.rc != 0 and run.changed == 0
    messages = [f["msg"] for result in run.hosts.values() for f in result.failures]
    assert all("no venv at /opt/nowhere (run the sglang stage first)" in m for m in messages) and messages

    run = run_playbook(PLAYBOOK, INVENTORY, extravars={"flash_attn_max_jobs": "many"})
    assert run.rc != 0 and run.changed == 0
    assert "flash_attn_max_jobs" in json.dumps([r.failures for r in run.hosts.values()])


def test_the_flash_attn_tag_alone_finds_the_preflight_s_arch_list_through_a_stale_fact_cache():
    """Cached facts gathered before the preflight wrote its local fact hold no arch list."""
    cache = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "facts"
    run_playbook(PLAYBOOK, INVENTORY)  # fills the cache
    for name in NODES:
        (path,) = cache.glob("*" + name)  # ansible.cfg's fact_caching_prefix comes first
        facts = json.loads(path.read_text())
        facts["ansible_local"] = {}
        path.write_text(json.dumps(facts))
    run = run_playbook(ROOT / "site.yml", INVENTORY, tags="flash_attn")
    assert run.rc == 0 and run.changed == 0, run.hosts
    assert actions(run) == ["current", "current"]
