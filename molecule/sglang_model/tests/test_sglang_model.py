"""The model stage over four lab nodes and the lab Hub, read through ansible-runner's per-host results
and the Hub's own byte counts."""
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet import awx_sliced_inventories, report, run_playbook

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "files/lab"))
import hub_fixture  # noqa: E402

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
MANIFESTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "models"
HOSTS = ["model-gpu-%d" % i for i in range(1, 5)]
HUB = "sglang-fleet-molecule-sglang_model-hub"
PLAYBOOK = ROOT / "playbooks/model.yml"
DIRS = {"lab-org/Kimi-K2.5-NVFP4-lab": "/models/lab-org/Kimi-K2.5-NVFP4-lab",
        "lab-org/kimi-k2.5-eagle3-lab": "/models/lab-org/kimi-k2.5-eagle3-lab"}
SHARD = "model-00001-of-00002.safetensors"
SHARD_PATH = DIRS["lab-org/Kimi-K2.5-NVFP4-lab"] + "/" + SHARD
SIZES = {repo: sum(len(data) for data in hub_fixture.REPOS[repo].values()) for repo in DIRS}


def sh(node, script):
    return subprocess.run(["podman", "exec", node, "sh", "-c", script], capture_output=True, text=True)


def hub_served():
    stats = json.loads(subprocess.run(["podman", "exec", HUB, "cat", "/run/hub-stats.json"], check=True,
                                      capture_output=True, text=True).stdout)
    return {repo: stats["by_repo"].get(repo, 0) for repo in DIRS}


def truth(repo):
    return {path: hashlib.sha256(data).hexdigest() for path, data in hub_fixture.REPOS[repo].items()}


def on_disk(node, directory):
    out = sh(node, "cd %s && sha256sum -- *" % directory).stdout
    return {line.split(None, 1)[1].strip().lstrip("*"): line.split()[0] for line in out.splitlines()}


def sync_results(run, host):
    """sglang_model_sync's results: its own task's, or a background job's as the last round of its
    watch (a loop, one result per round) returned it."""
    found = []
    for _, task in run.hosts[host].results:
        for res in task.get("results") or [task]:
            res = res["result"] if isinstance(res.get("result"), dict) and res["result"] else res
            if "hashed_bytes" in res:
                found.append(res)
    return found


def messages(run, host, task):
    return [res.get("msg", "") for name, res in run.hosts[host].results if name == task]


def test_the_converge_fetched_each_model_once_for_the_whole_fleet_and_every_host_verified_it(capsys):
    served = hub_served()
    with capsys.disabled():
        print("\n    converge over %d nodes: the Hub served %s; the models hold %s" % (len(HOSTS), served, SIZES))
    assert served == SIZES  # the Hub sent each model's bytes exactly once, for four hosts
    for repo, directory in DIRS.items():
        for node in HOSTS:
            assert on_disk(node, directory) == truth(repo), node
            assert sh(node, "test -f %s/.sglang-fleet-model.json" % directory).returncode == 0
        saved = json.loads((MANIFESTS / ("%s@%s.json" % (repo.replace("/", "--"), hub_fixture.Hub(0, None)
                                                           .repos[repo].commit))).read_text())
        assert {f["path"]: f["sha256"] for f in saved["files"]} == truth(repo)
        assert saved["total_size"] == SIZES[repo]


def test_a_rerun_copies_nothing_and_hashes_nothing():
    before = hub_served()
    run = run_playbook(PLAYBOOK, INVENTORY)
    assert run.rc == 0, run.failure_summary
    for node in HOSTS:
        assert run.hosts[node].changed == 0, run.hosts[node].changed_tasks
        results = sync_results(run, node)
        assert len(results) == 2
        assert all(r["state"] == "verified" and r["hashed_bytes"] == 0 and r["fetched_bytes"] == 0 for r in results)
    assert hub_served() == before
    assert "verified 2" in report(run)


def test_check_mode_finds_a_flipped_byte_and_writes_nothing():
    flip = "python3 -c \"f=open('%s','r+b'); f.seek(4096); b=f.read(1); f.seek(4096); f.write(bytes([b[0]^255]))\""
    assert sh("model-gpu-3", flip % SHARD_PATH).returncode == 0
    corrupted = on_disk("model-gpu-3", DIRS["lab-org/Kimi-K2.5-NVFP4-lab"])[SHARD]
    assert corrupted != truth("lab-org/Kimi-K2.5-NVFP4-lab")[SHARD]
    before = hub_served()
    run = run_playbook(PLAYBOOK, INVENTORY, check=True, diff=True)
    assert run.rc == 0, run.failure_summary
    assert run.hosts["model-gpu-3"].changed > 0
    assert [run.hosts[n].changed for n in HOSTS if n != "model-gpu-3"] == [0, 0, 0]
    assert on_disk("model-gpu-3", DIRS["lab-org/Kimi-K2.5-NVFP4-lab"])[SHARD] == corrupted
    assert sh("model-gpu-3", "ls -A /models/lab-org").stdout.split() == ["Kimi-K2.5-NVFP4-lab", "kimi-k2.5-eagle3-lab"]
    assert hub_served() == before
    for node in HOSTS:  # no host served its copy
        assert sh(node, "systemctl is-active sglang-fleet-model-peer.service").stdout.strip() != "active"


def test_the_flipped_byte_is_repaired_from_a_peer_and_the_run_says_which_file(capsys):
    before = hub_served()
    run = run_playbook(PLAYBOOK, INVENTORY)
    assert run.rc == 0, run.failure_summary
    (repaired,) = [r for r in sync_results(run, "model-gpu-3") if r["state"] == "repaired"]
    assert repaired["state"] == "repaired" and repaired["problems"] == {SHARD: "sha256 mismatch"}
    assert repaired["fetched_bytes"] == len(hub_fixture.REPOS["lab-org/Kimi-K2.5-NVFP4-lab"][SHARD])
    said = " ".join(messages(run, "model-gpu-3", "What is missing or wrong is said, file by file"))
    assert SHARD + ": sha256 mismatch" in said
    text = report(run)
    assert "model-gpu-3: lab-org/Kimi-K2.5-NVFP4-lab: %s was sha256 mismatch; fetched again from model-gpu-" % SHARD \
        in text
    assert hub_served() == before  # copied from a peer, not from the Hub
    with capsys.disabled():
        print("\n    repair: " + next(line.strip() for line in text.splitlines() if "fetched again" in line)
              + "; %d bytes copied, the Hub served 0" % repaired["fetched_bytes"])
    assert on_disk("model-gpu-3", DIRS["lab-org/Kimi-K2.5-NVFP4-lab"]) == truth("lab-org/Kimi-K2.5-NVFP4-lab")
    for node in HOSTS:  # the copy server is gone, and its token with it
        assert sh(node, "systemctl is-active sglang-fleet-model-peer.service").stdout.strip() != "active"
        assert sh(node, "test -e /run/sglang-fleet-model-peer.env").returncode != 0


def test_a_gated_model_with_its_token_is_fetched_and_the_token_is_nowhere_in_the_output(tmp_path):
    gated = {"repo_id": "lab-org/gated-lab", "revision": hub_fixture.Hub(0, None).repos["lab-org/gated-lab"].commit,
             "dir": "/models/lab-org/gated"}
    extra = tmp_path / "vars.json"  # the token reaches ansible-playbook in a file, as a vaulted variable would
    extra.write_text(json.dumps({"sglang_model_models": [gated], "sglang_model_hf_token": hub_fixture.GATED_TOKEN,
                                 "sglang_model_manifest_dir": str(tmp_path / "manifests")}))
    # Two nodes: one fetches from the Hub with the token, the other copies from it with the run's own.
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-vvv", "-i", INVENTORY,
                          "--limit", "model-gpu-1,model-gpu-2", "-e", "@" + str(extra), str(PLAYBOOK)],
                         capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    try:
        assert run.returncode == 0, run.stdout[-3000:]
        assert "lab-org/gated-lab fetched" in run.stdout and "bytes from model-gpu-1" in run.stdout
        assert hub_fixture.GATED_TOKEN not in run.stdout + run.stderr
        for node in HOSTS[:2]:
            assert on_disk(node, gated["dir"]) == truth("lab-org/gated-lab")
            journal = sh(node, "journalctl --no-pager -o cat; ps -eo args").stdout
            assert hub_fixture.GATED_TOKEN not in journal
    finally:
        for node in HOSTS:
            sh(node, "rm -rf %s" % gated["dir"])


BAD = "/models/lab-org/bad"


@pytest.mark.parametrize("model, extra, message", [
    ({"repo_id": "lab-org/Kimi-K2.5-NVFP4-lab", "revision": "0" * 40}, {},
     "revision 0000000000000000000000000000000000000000 of lab-org/Kimi-K2.5-NVFP4-lab does not exist on the Hub"),
    ({"repo_id": "lab-org/Kimi-K2.5-NVFP4-lab", "revision": "main"}, {},
     'revision "main" is not a commit id (40 hex digits); pin the commit you validated'),
    ({"repo_id": "lab-org/gated-lab", "revision": hub_fixture.Hub(0, None).repos["lab-org/gated-lab"].commit}, {},
     "lab-org/gated-lab is gated or private and no token was given: set sglang_model_hf_token"),
    ({"repo_id": "lab-org/Kimi-K2.5-NVFP4-lab", "revision": "91478695b0600d7b2a2610b592a4333187ac85c2"},
     {"sglang_model_free_margin_gb": 1000000}, "not enough disk for lab-org/Kimi-K2.5-NVFP4-lab"),
], ids=["missing-revision", "branch-not-commit", "gated-without-token", "disk-full"])
def test_bad_input_fails_with_a_clear_message_and_writes_no_model(model, extra, message, tmp_path):
    before = hub_served()
    # A fresh manifest directory: the learning path, which is the one that meets the source first.
    # The first host meets the source first (it learns the manifest): the others would only wait for it.
    run = run_playbook(PLAYBOOK, INVENTORY, limit="model-gpu-1",
                       extravars=dict(extra, sglang_model_models=[dict(model, dir=BAD)],
                                      sglang_model_manifest_dir=str(tmp_path)))
    assert run.rc != 0
    said = " ".join(f["msg"] for h in run.hosts.values() for f in h.failures)
    assert message in said, said
    for node in HOSTS:
        assert sh(node, "ls -A /models/lab-org").stdout.split() == ["Kimi-K2.5-NVFP4-lab", "kimi-k2.5-eagle3-lab"]
    assert hub_served() == before
    assert list(tmp_path.iterdir()) == []


KIMI = "lab-org/Kimi-K2.5-NVFP4-lab"


def spread(distribution, capsys):
    """The target model (the larger) to four emptied nodes; the drafter stays where it is."""
    for node in HOSTS:
        assert sh(node, "rm -rf %s" % DIRS[KIMI]).returncode == 0
    before = hub_served()[KIMI]
    started = time.monotonic()
    run = run_playbook(PLAYBOOK, INVENTORY, extravars={
        "sglang_model_distribution": distribution,
        "sglang_model_models": [{"repo_id": KIMI, "revision": hub_fixture.Hub(0, None).repos[KIMI].commit,
                                 "dir": DIRS[KIMI]}]})
    seconds = time.monotonic() - started
    assert run.rc == 0, run.failure_summary
    served = hub_served()[KIMI] - before
    for node in HOSTS:
        assert on_disk(node, DIRS[KIMI]) == truth(KIMI), node
    with capsys.disabled():
        print("\n    %s (%d bytes) to %d emptied nodes, %s: %.1f s, the Hub served %d bytes (%.0fx the model)"
              % (KIMI, SIZES[KIMI], len(HOSTS), distribution, seconds, served, served / SIZES[KIMI]))
    return run, served


def test_the_fleet_spread_fetches_once_where_independent_downloads_fetch_four_times(capsys):
    fleet, fleet_served = spread("fleet", capsys)
    assert fleet_served == SIZES[KIMI]
    sources = [res.get("msg", "") for h in HOSTS for name, res in fleet.hosts[h].results if name == "What changed is said"]
    assert sum("from http://127.0.2.1:8080" in m for m in sources) == 1  # one host from the Hub
    assert sum(" from model-gpu-" in m for m in sources) == len(HOSTS) - 1  # the others from peers
    # The watch's loop, one result per round (not run.yml's include of it, which has the same name
    # without the model's).
    progress = [round_["msg"] for h in HOSTS for name, res in fleet.hosts[h].results
                if name.startswith("The job is watched until it ends, ") for round_ in res.get("results", [])]
    assert any("fetching" in m and "%)" in m and "(100%)" not in m for m in progress), progress
    per_host, per_host_served = spread("per_host", capsys)
    assert per_host_served == SIZES[KIMI] * len(HOSTS)


def test_sliced_as_awx_does_only_the_seed_fetches_from_the_hub_and_a_slice_spreads_its_own_copies(tmp_path):
    # Two slices: model-gpu-1 (the seed) and -3, then -2 and -4, which hold no seed.
    seeded, other = awx_sliced_inventories(INVENTORY, HOSTS, 2, tmp_path,
                                           {"fleet_gpu_nodes": {name: "" for name in HOSTS}, "lab_hosts": HOSTS})
    for node in ("model-gpu-2", "model-gpu-3", "model-gpu-4"):
        assert sh(node, "rm -rf %s" % DIRS[KIMI]).returncode == 0
    before = hub_served()
    refused = run_playbook(PLAYBOOK, other)
    assert refused.rc != 0 and refused.changed == 0
    assert "this slice holds no verified copy to copy from, so model-gpu-2 would fetch it from the source " \
           "again (only model-gpu-1, the seed, does, once for the fleet)" in refused.failure_summary, \
        refused.failure_summary
    # The seed's slice spreads the seed's verified copy: nothing from the Hub.
    run = run_playbook(PLAYBOOK, seeded)
    assert run.rc == 0, run.failure_summary
    assert on_disk("model-gpu-3", DIRS[KIMI]) == truth(KIMI)
    # Without the seed's manifest, a slice without the seed stops before its check.
    manifest = next(MANIFESTS.glob(KIMI.replace("/", "--") + "@*.json"))
    kept = manifest.read_bytes()
    manifest.unlink()
    try:
        early = run_playbook(PLAYBOOK, other)
    finally:
        manifest.write_bytes(kept)
    assert early.rc != 0 and early.changed == 0
    assert "this slice has no manifest of it yet, and only model-gpu-1, the seed, in another slice, fetches it" \
        in early.failure_summary
    assert hub_served() == before
    # Back to the whole fleet: the unsliced run copies from peers, never from the Hub.
    restored = run_playbook(PLAYBOOK, INVENTORY)
    assert restored.rc == 0, restored.failure_summary
    assert hub_served() == before
    for node in HOSTS:
        assert on_disk(node, DIRS[KIMI]) == truth(KIMI), node
