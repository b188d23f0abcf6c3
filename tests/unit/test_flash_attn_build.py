"""The flash-attn build: its key, its compile sizing, who builds, and how a running build is reported."""

import pytest
from ansible.errors import AnsibleFilterError

import json

from flash_attn_build import (flash_attn_build_key, flash_attn_builders, flash_attn_is_wanted, flash_attn_max_jobs,
                              flash_attn_seed_announcement, flash_attn_seed_state)
import flash_attn_build_watch as watch
from conftest import FIXTURES

HOST = {"python": "3.12", "platform": "linux_x86_64", "torch": "2.9.1+cu130", "cuda_release": "13.0"}


def key(**changes):
    info = {**HOST, **{k: v for k, v in changes.items() if k in HOST}}
    return flash_attn_build_key(info, changes.get("source", "flash-attn==2.8.3"),
                                changes.get("archs", "120"), changes.get("env"))


# --- the build key -------------------------------------------------------------------------------

def test_the_key_names_everything_that_changes_the_wheel():
    result = key()
    assert result["key"] == {"source": "flash-attn==2.8.3", "torch": "2.9.1+cu130", "cuda": "13.0",
                             "python": "3.12", "platform": "linux_x86_64", "cuda_archs": "120", "build_env": {}}
    assert len(result["id"]) == 12 and result["label"] == "build." + result["id"]


@pytest.mark.parametrize("change", [
    {"source": "flash-attn==2.8.2"},
    {"source": "git+https://github.com/Dao-AILab/flash-attention.git@v2.8.3"},
    {"torch": "2.9.0+cu130"},
    {"torch": "2.9.1+cu128"},
    {"cuda_release": "13.1"},
    {"python": "3.11"},
    {"platform": "linux_aarch64"},
    {"archs": "90;120"},
    {"env": {"NVCC_APPEND_FLAGS": "-lineinfo"}},
])
def test_any_input_of_the_build_gives_another_key(change):
    assert key(**change)["id"] != key()["id"]


def test_the_same_inputs_written_differently_give_the_same_key():
    assert key(archs="120;90")["id"] == key(archs=" 90 ; 120 ")["id"] == key(archs="90,120")["id"]
    assert key(archs="120;90")["key"]["cuda_archs"] == "90;120"
    assert key(env={"B": "1", "A": 2})["id"] == key(env={"A": "2", "B": "1"})["id"]


def test_the_label_is_a_valid_local_version():
    from packaging.version import Version
    label = key()["label"]
    assert str(Version("2.8.3+" + label)) == "2.8.3+" + label


def test_a_host_without_torch_or_nvcc_has_no_key():
    with pytest.raises(AnsibleFilterError, match="torch"):
        flash_attn_build_key({**HOST, "torch": None}, "flash-attn==2.8.3", "120")
    with pytest.raises(AnsibleFilterError, match="cuda_release"):
        flash_attn_build_key({**HOST, "cuda_release": None}, "flash-attn==2.8.3", "120")
    with pytest.raises(AnsibleFilterError, match="architecture"):
        flash_attn_build_key(HOST, "flash-attn==2.8.3", " ; ")


# --- MAX_JOBS ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mem_gb, cpus, threads, expected, why", [
    (1024, 128, 4, 32, "a big build host: the cores bound it (128 / 4 threads)"),
    (256, 128, 4, 27, "the memory bounds it: (256 - 8) GB / 9 GB"),
    (64, 64, 4, 6, "(64 - 8) / 9 = 6.2"),
    (16, 16, 4, 1, "(16 - 8) / 9 < 1: still one job"),
    (4, 2, 4, 1, "never below one"),
    (256, 128, 8, 13, "8 threads: 18 GB a job, 16 by cores"),
    (256, 128, 2, 55, "2 threads: 4.5 GB a job, 64 by cores"),
])
def test_max_jobs_is_bounded_by_cores_and_by_available_memory(mem_gb, cpus, threads, expected, why):
    assert flash_attn_max_jobs(mem_gb * 1024, cpus, threads) == expected, why


def test_max_jobs_follows_the_per_job_budget_and_the_reserve():
    assert flash_attn_max_jobs(100 * 1024, 128, 4, gb_per_job=9, reserve_gb=10) == 10
    assert flash_attn_max_jobs(100 * 1024, 128, 4, gb_per_job=5, reserve_gb=0) == 20
    with pytest.raises(AnsibleFilterError):
        flash_attn_max_jobs("lots", 8)
    with pytest.raises(AnsibleFilterError):
        flash_attn_max_jobs(1024, 8, gb_per_job=0)


# --- who builds ----------------------------------------------------------------------------------

def plan(host, key_id, needs=True, ready=True):
    return {"host": host, "id": key_id, "needs": needs, "ready": ready}


def test_the_first_host_of_each_needed_key_builds():
    plans = [plan("a", "k1"), plan("b", "k1"), plan("c", "k2"), plan("d", "k2")]
    assert flash_attn_builders(plans) == {"k1": "a", "k2": "c"}


def test_a_key_no_host_needs_is_not_built():
    plans = [plan("a", "k1", needs=False), plan("b", "k1", needs=False), plan("c", "k2", needs=False),
             plan("d", "k2")]
    assert flash_attn_builders(plans) == {"k2": "c"}


def test_the_named_build_host_builds_for_its_own_key_even_when_current_itself():
    plans = [plan("a", "k1"), plan("b", "k1", needs=False), plan("c", "k2")]
    assert flash_attn_builders(plans, "b") == {"k1": "b", "k2": "c"}
    assert flash_attn_builders(plans, "not-in-play") == {"k1": "a", "k2": "c"}


def test_hosts_not_ready_take_no_part():
    plans = [plan("a", None, ready=False), plan("b", "k1")]
    assert flash_attn_builders(plans, "a") == {"k1": "b"}


def test_in_a_slice_only_the_fleet_s_seed_builds_and_for_its_own_key_even_when_current():
    plans = [plan("a", "k1", needs=False), plan("b", "k1"), plan("c", "k2")]
    assert flash_attn_builders(plans, seed="a") == {"k1": "a"}
    # A slice without the seed builds nothing: its hosts wait for the seed's wheel.
    assert flash_attn_builders(plans, "b", seed="z") == {}


# --- a slice waits for the seed's wheel ---------------------------------------------------------

def announce(cache, seed, key_id, state, since=1000):
    (cache / ("seed-%s.json" % seed)).write_text(json.dumps(flash_attn_seed_announcement(seed, key_id, state, since)))


def test_a_slice_waits_while_the_seed_is_silent_or_building_and_installs_once_key_json_is_there(tmp_path):
    state = flash_attn_seed_state(tmp_path, "g1", "k1", now=1000)
    assert state["state"] == "waiting" and "g1, the seed, has not started a build yet" in state["msg"]
    announce(tmp_path, "g1", "k1", "building")
    assert flash_attn_seed_state(tmp_path, "g1", "k1", now=1000 + 7 * 60 + 5) == {
        "state": "waiting", "msg": "g1, the seed, has been building key k1 for 7 min"}
    (tmp_path / "k1").mkdir()
    (tmp_path / "k1" / "key.json").write_text("{}")
    assert flash_attn_seed_state(tmp_path, "g1", "k1")["state"] == "ready"


def test_a_wait_no_time_can_end_stops_at_once_saying_why(tmp_path):
    announce(tmp_path, "g1", "k2", "building")
    other = flash_attn_seed_state(tmp_path, "g1", "k1")
    assert other["state"] == "other_key" and "builds build key k2, not this host's k1" in other["msg"]
    announce(tmp_path, "g1", "k1", "failed")
    assert flash_attn_seed_state(tmp_path, "g1", "k1", now=1000 + 120)["msg"] == (
        "the build of key k1 on g1, the seed, failed 2 min ago: its job's log says why")
    # Built, yet not in this cache: the slices do not share one.
    announce(tmp_path, "g1", "k1", "built")
    unshared = flash_attn_seed_state(tmp_path, "g1", "k1")
    assert unshared["state"] == "unshared" and "must be one store that every slice's controller sees" in unshared["msg"]
    # An earlier run's word is not this run's: the seed's slice has yet to say which key it builds.
    announce(tmp_path, "g1", "k2", "built", since=1000)
    assert flash_attn_seed_state(tmp_path, "g1", "k1", run_started=2000, now=2000 + 300) == {
        "state": "waiting", "msg": "g1, the seed, has not reached its flash-attn stage in this run yet (its last "
                                   "word, 21 min old, is an earlier run's)"}
    assert flash_attn_seed_state(tmp_path, "g1", "k1", run_started=1000)["state"] == "other_key"
    with pytest.raises(AnsibleFilterError, match="state 'done'"):
        flash_attn_seed_announcement("g1", "k1", "done")


# --- is the installed one the wanted one --------------------------------------------------------

def test_the_installed_build_is_wanted_only_with_the_key_s_label_and_the_pinned_version():
    label = key()["label"]
    assert flash_attn_is_wanted("2.8.3+" + label, label, "2.8.3")
    assert not flash_attn_is_wanted("2.8.2+" + label, label, "2.8.3")
    assert not flash_attn_is_wanted("2.8.3", label, "2.8.3")           # an upstream wheel
    assert not flash_attn_is_wanted("2.8.3+build.0123456789ab", label, "2.8.3")
    assert not flash_attn_is_wanted(None, label, "2.8.3")              # not installed
    assert flash_attn_is_wanted("2.9.0+" + label, label, "")           # a git ref: the label decides


def test_a_prebuilt_wheel_is_wanted_as_a_whole_version():
    assert flash_attn_is_wanted("2.8.3+cu13torch2.9", "build.x", "2.8.3", exact="2.8.3+cu13torch2.9")
    assert not flash_attn_is_wanted("2.8.3+build.x", "build.x", "2.8.3", exact="2.8.3+cu13torch2.9")


# --- watching the build --------------------------------------------------------------------------

NINJA_LOG = """\
Building wheel for flash-attn (setup.py): started
[1/73] /usr/local/cuda-13.0/bin/nvcc --generate-dependencies-with-compile -c csrc/flash_attn/src/flash_fwd_hdim32_fp16_sm80.cu
[2/73] /usr/local/cuda-13.0/bin/nvcc --generate-dependencies-with-compile -c csrc/flash_attn/src/flash_fwd_hdim32_bf16_sm80.cu
[57/73] /usr/local/cuda-13.0/bin/nvcc --generate-dependencies-with-compile -c csrc/flash_attn/src/flash_bwd_hdim256_bf16_sm80.cu
"""


def test_progress_is_read_from_ninja_s_last_step():
    assert watch.progress(NINJA_LOG) == (57, 73)
    # pip --verbose indents the build's output: a real log, from a build on an H200 host (sm_90).
    real = (FIXTURES / "flash-attn/build-h200-sm90.log").read_text()
    assert watch.progress(real) == (8, 73)
    assert watch.progress("Preparing metadata (setup.py): started\n") == (None, None)
    assert watch.describe(57, 73, 1390, "", False) == "compiled 57/73 objects (78%), 23m10s elapsed"
    assert watch.describe(None, None, 65, "Collecting flash-attn", False) == (
        "1m05s elapsed, no compile step yet: Collecting flash-attn")
    assert watch.describe(73, 73, 3600, "", True) == "build ended after 60m00s, 73/73 objects compiled"
    assert watch.describe(41, 73, 3600, "", True) == "build ended after 60m00s, 41/73 objects compiled"


def _task(path, name_start):
    import yaml
    from conftest import ROOT
    tasks = yaml.safe_load((ROOT / path).read_text())
    flat = [t for entry in tasks for t in entry.get("block", [entry])]
    return next(t for t in flat if t["name"].startswith(name_start))


def test_the_wheel_is_fetched_without_become_so_fetch_need_not_slurp_it():
    task = _task("roles/flash_attn/tasks/build.yml", "The wheel is stored in the controller's cache")
    assert task["vars"]["ansible_become"] is False  # a task-level become: false loses to the inventory's


def test_the_gpu_kernel_check_runs_only_after_this_run_built_or_installed():
    """On a serving host GPU 0 is the server's: verify.yml, which holds the kernel check, is included only
    where this run installed a wheel, never in check mode; a host that needed nothing runs none of it."""
    assert _task("roles/flash_attn/tasks/verify.yml", "A tiny attention on the first GPU")
    included = _task("roles/flash_attn/tasks/main.yml", "The flash-attn this run installed is checked")
    assert included["ansible.builtin.include_tasks"] == "verify.yml"
    assert included["when"] == "__flash_attn_plan.needs and not ansible_check_mode"
