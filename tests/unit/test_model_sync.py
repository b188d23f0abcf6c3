"""The model stage's host side (module_utils/model_sync.py, the sglang_model_sync module, the copy
server) against the lab's Hub, which is itself held to the real huggingface_hub client below."""
import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

import hub_fixture
import sglang_model_sync
from ansible.module_utils import model_sync
from conftest import ROOT

KIMI = "lab-org/Kimi-K2.5-NVFP4-lab"
GATED = "lab-org/gated-lab"
SHARD = "model-00001-of-00002.safetensors"
WHEELHOUSE = ROOT / ".cache/lab-wheelhouse"


@pytest.fixture(scope="module")
def hub():
    """The lab Hub on 127.0.0.1, unthrottled; .stats counts what it served."""
    state = hub_fixture.Hub(0, None)
    server = ThreadingHTTPServer(("127.0.0.1", 0), hub_fixture.make_handler(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = "http://127.0.0.1:%d" % server.server_address[1]
    yield state
    server.shutdown()


def served(hub, repo=KIMI):
    return hub.stats["by_repo"].get(repo, 0)


def truth(hub, repo=KIMI):
    """What the Hub holds, hashed here, independently of model_sync."""
    return {path: hashlib.sha256(data).hexdigest() for path, data in hub_fixture.REPOS[repo].items()}


def params(hub, dest, repo=KIMI, **extra):
    revision = hub.repos[repo].commit if repo in hub.repos else "1" * 40
    base = dict(repo_id=repo, revision=revision, dest=str(dest), manifest=None, source="hub",
                endpoint=hub.url, token=None, source_dir=None, ignore_patterns=[], verify="quick", fetch=True,
                progress_file=None, free_margin_bytes=0, timeout=10)
    base.update(extra)
    return base


# --- the lab Hub speaks what huggingface_hub 0.36 (sglang 0.5.9's pin) asks ------------------------

@pytest.fixture(scope="module")
def real_hf_client(tmp_path_factory):
    """huggingface_hub from the lab wheelhouse (the version sglang 0.5.9 resolves to), in a private dir."""
    wheels = sorted(WHEELHOUSE.glob("huggingface_hub-*.whl"))
    if not wheels:
        pytest.fail("no huggingface_hub wheel in .cache/lab-wheelhouse: run files/lab/labctl.py wheelhouse")
    target = tmp_path_factory.mktemp("hf-client")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELHOUSE),
                    "--target", str(target), "huggingface_hub"], check=True)
    return target


def hf(real_hf_client, hub, code):
    env = dict(os.environ, PYTHONPATH=str(real_hf_client), HF_ENDPOINT=hub.url, HF_HUB_DISABLE_TELEMETRY="1",
               HF_HOME=str(real_hf_client / "home"), HF_HUB_DISABLE_PROGRESS_BARS="1")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_the_real_client_downloads_a_pinned_snapshot_from_the_lab_hub(real_hf_client, hub, tmp_path):
    revision = hub.repos[KIMI].commit
    run = hf(real_hf_client, hub, f"""
import huggingface_hub, json
info = huggingface_hub.HfApi().model_info({KIMI!r}, revision={revision!r}, files_metadata=True)
print(json.dumps({{s.rfilename: [s.size, s.lfs.sha256 if s.lfs else None, s.blob_id] for s in info.siblings}}))
huggingface_hub.snapshot_download({KIMI!r}, revision={revision!r}, local_dir={str(tmp_path / 'snap')!r})
print(huggingface_hub.__version__)
""")
    assert run.returncode == 0, run.stderr
    siblings = json.loads(run.stdout.splitlines()[0])
    expected = truth(hub)
    assert set(siblings) == set(expected)
    for path, (size, sha256, blob_id) in siblings.items():
        data = hub_fixture.REPOS[KIMI][path]
        assert size == len(data)
        assert sha256 == (expected[path] if path.endswith(".safetensors") else None)
        assert blob_id  # the git oid, LFS pointer's for LFS files
    for path, digest in expected.items():
        assert hashlib.sha256((tmp_path / "snap" / path).read_bytes()).hexdigest() == digest
    assert run.stdout.splitlines()[1].startswith("0.36")


def test_the_real_client_sees_the_lab_hub_s_errors_as_the_hub_s(real_hf_client, hub):
    run = hf(real_hf_client, hub, f"""
import huggingface_hub as h
from huggingface_hub.utils import GatedRepoError, RevisionNotFoundError
try:
    h.hf_hub_download({GATED!r}, "config.json", revision={hub.repos[GATED].commit!r})
except GatedRepoError:
    print("gated")
try:
    h.HfApi().model_info({KIMI!r}, revision="0" * 40)
except RevisionNotFoundError:
    print("no revision")
""")
    assert run.stdout.split() == ["gated", "no", "revision"], run.stderr


# --- fetch, verify, repair -----------------------------------------------------------------------

def test_a_first_fetch_learns_the_manifest_and_lands_whole(hub, tmp_path):
    dest = tmp_path / "models/Kimi"
    before = served(hub)
    result = sglang_model_sync.run(params(hub, dest), check_mode=False)
    assert result["state"] == "fetched" and result["changed"]
    assert {f["path"]: f["sha256"] for f in result["manifest"]["files"]} == truth(hub)
    assert result["manifest"]["total_size"] == sum(len(d) for d in hub_fixture.REPOS[KIMI].values())
    assert served(hub) - before == result["manifest"]["total_size"]
    assert not (tmp_path / "models/.Kimi.partial").exists()
    for path, digest in truth(hub).items():
        assert hashlib.sha256((dest / path).read_bytes()).hexdigest() == digest
    assert oct((dest / SHARD).stat().st_mode & 0o777) == "0o644"


def test_a_rerun_fetches_nothing_and_hashes_nothing(hub, tmp_path):
    dest = tmp_path / "Kimi"
    manifest = sglang_model_sync.run(params(hub, dest), check_mode=False)["manifest"]
    before = served(hub)
    again = sglang_model_sync.run(params(hub, dest, manifest=manifest), check_mode=False)
    assert (again["state"], again["changed"], again["hashed_bytes"], again["fetched_bytes"]) == ("verified", False, 0, 0)
    assert served(hub) == before
    full = sglang_model_sync.run(params(hub, dest, manifest=manifest, verify="full"), check_mode=False)
    assert full["hashed_bytes"] == manifest["total_size"] and not full["changed"]


def flip_a_byte(path, offset=1000):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def test_a_flipped_byte_is_found_and_only_that_file_fetched_again(hub, tmp_path):
    dest = tmp_path / "Kimi"
    manifest = sglang_model_sync.run(params(hub, dest), check_mode=False)["manifest"]
    flip_a_byte(dest / SHARD)
    checked = sglang_model_sync.run(params(hub, dest, manifest=manifest, fetch=False), check_mode=False)
    assert checked["problems"] == {SHARD: "sha256 mismatch"} and not checked["changed"]
    assert checked["hashed_bytes"] == len(hub_fixture.REPOS[KIMI][SHARD])  # only the file whose mtime moved
    in_check_mode = sglang_model_sync.run(params(hub, dest, manifest=manifest), check_mode=True)
    assert in_check_mode["changed"] and in_check_mode["state"] == "incomplete"
    assert hashlib.sha256((dest / SHARD).read_bytes()).hexdigest() != truth(hub)[SHARD]  # check mode wrote nothing
    before = served(hub)
    repaired = sglang_model_sync.run(params(hub, dest, manifest=manifest), check_mode=False)
    assert repaired["state"] == "repaired" and repaired["problems"] == {SHARD: "sha256 mismatch"}
    assert served(hub) - before == len(hub_fixture.REPOS[KIMI][SHARD])
    assert hashlib.sha256((dest / SHARD).read_bytes()).hexdigest() == truth(hub)[SHARD]


def test_a_flip_that_kept_size_and_mtime_is_found_by_a_full_verify_only(hub, tmp_path):
    dest = tmp_path / "Kimi"
    manifest = sglang_model_sync.run(params(hub, dest), check_mode=False)["manifest"]
    stat = (dest / SHARD).stat()
    flip_a_byte(dest / SHARD)
    os.utime(dest / SHARD, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sglang_model_sync.run(params(hub, dest, manifest=manifest, fetch=False), check_mode=False)["problems"] == {}
    full = sglang_model_sync.run(params(hub, dest, manifest=manifest, fetch=False, verify="full"), check_mode=False)
    assert full["problems"] == {SHARD: "sha256 mismatch"}


def test_an_interrupted_fetch_leaves_nothing_at_the_path_and_resumes(hub, tmp_path):
    dest = tmp_path / "Kimi"
    manifest = sglang_model_sync.run(params(hub, tmp_path / "first"), check_mode=False)["manifest"]
    staging = tmp_path / ".Kimi.partial"
    staging.mkdir()
    half = len(hub_fixture.REPOS[KIMI][SHARD]) // 2
    (staging / SHARD).write_bytes(hub_fixture.REPOS[KIMI][SHARD][:half])
    assert not dest.exists()
    before = served(hub)
    result = sglang_model_sync.run(params(hub, dest, manifest=manifest), check_mode=False)
    assert result["state"] == "fetched"
    assert served(hub) - before == manifest["total_size"] - half  # the rest of the shard, by Range
    assert hashlib.sha256((dest / SHARD).read_bytes()).hexdigest() == truth(hub)[SHARD]


def test_a_source_that_serves_wrong_bytes_fails_naming_the_file(hub, tmp_path):
    manifest = sglang_model_sync.run(params(hub, tmp_path / "first"), check_mode=False)["manifest"]
    bad = json.loads(json.dumps(manifest))
    next(f for f in bad["files"] if f["path"] == "config.json")["sha256"] = "0" * 64
    with pytest.raises(model_sync.ModelError, match=r"config.json from .* failed verification twice: sha256"):
        sglang_model_sync.run(params(hub, tmp_path / "Kimi", manifest=bad), check_mode=False)
    assert not (tmp_path / "Kimi").exists()


# --- clear errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    (dict(revision="0" * 40), "revision 0{40} of lab-org/Kimi-K2.5-NVFP4-lab does not exist on the Hub"),
    (dict(revision="main"), "'main' .* is not a commit id .*pin the commit"),
    (dict(repo_id=GATED), "gated or private and no token was given: set sglang_model_hf_token"),
    (dict(repo_id=GATED, token="hf_wrong"), "the token was refused for lab-org/gated-lab"),
    (dict(repo_id="lab-org/nothing-here"), "repository lab-org/nothing-here does not exist"),
    (dict(endpoint="http://127.0.0.1:9"), "cannot reach http://127.0.0.1:9"),
])
def test_bad_input_fails_with_a_message_that_says_what_to_do(hub, tmp_path, change, message):
    p = params(hub, tmp_path / "m", repo=change.pop("repo_id", KIMI), **change)
    with pytest.raises(model_sync.ModelError, match=message):
        sglang_model_sync.run(p, check_mode=False)
    assert not (tmp_path / "m").exists()


def test_a_gated_repo_with_its_token_is_fetched(hub, tmp_path):
    result = sglang_model_sync.run(params(hub, tmp_path / "g", repo=GATED, token=hub_fixture.GATED_TOKEN),
                                   check_mode=False)
    assert result["state"] == "fetched"


def test_the_token_follows_a_redirect_on_the_hub_but_not_to_another_host():
    handler = model_sync._DropAuthOnOtherHost()
    request = urllib.request.Request("https://huggingface.co/o/r/resolve/x/f", headers={"Authorization": "Bearer s"})
    cdn = handler.redirect_request(request, None, 302, "Found", {}, "https://cdn-lfs.hf.co/o/r/abc")
    same = handler.redirect_request(request, None, 302, "Found", {}, "https://huggingface.co/_cdn/abc")
    assert not cdn.has_header("Authorization") and same.get_header("Authorization") == "Bearer s"


def test_a_full_disk_is_refused_before_a_byte_is_fetched(hub, tmp_path):
    manifest = sglang_model_sync.run(params(hub, tmp_path / "first"), check_mode=False)["manifest"]
    before = served(hub)
    source = model_sync.Source("hub", KIMI, manifest["revision"], endpoint=hub.url)
    wanted = {f["path"] for f in manifest["files"]}
    with pytest.raises(model_sync.ModelError, match=r"not enough disk for .*: 0.1 GB to fetch .* 0.0 GB free"):
        model_sync.fetch(source, manifest, str(tmp_path / "Kimi"), wanted, free=lambda path: 10_000_000)
    assert served(hub) == before and not (tmp_path / "Kimi").exists()


# --- host to host --------------------------------------------------------------------------------

@pytest.fixture
def peer(tmp_path, hub):
    """The role's copy server over a verified copy, on 127.0.0.1, with its credentials as systemd passes them."""
    source = tmp_path / "source"
    manifest = sglang_model_sync.run(params(hub, source), check_mode=False)["manifest"]
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "token").write_text("peer-token-0123456789")  # a file beside what it serves, that it must not serve
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {"address": "127.0.0.1", "port": port, "dir": str(source), "files": [f["path"] for f in manifest["files"]]}
    env = dict(os.environ, SGLANG_MODEL_PEER_TOKEN="peer-token-0123456789",
               SGLANG_MODEL_PEER_CONFIG=base64.b64encode(json.dumps(config).encode()).decode())
    proc = subprocess.Popen([sys.executable, str(ROOT / "roles/sglang_model/files/sglang_model_peer.py")], env=env,
                            stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d" % port
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/config.json", timeout=1)
        except urllib.error.HTTPError:
            break
        except OSError:
            time.sleep(0.05)
    yield url, manifest, source
    proc.terminate()
    proc.wait()


def test_a_host_copies_from_a_peer_with_the_run_s_token_only(peer, hub, tmp_path):
    url, manifest, source = peer
    before = served(hub)
    result = sglang_model_sync.run(params(hub, tmp_path / "copy", source="peer", endpoint=url, token="peer-token-0123456789",
                                          manifest=manifest), check_mode=False)
    assert result["state"] == "fetched" and served(hub) == before
    with pytest.raises(model_sync.ModelError, match="HTTP 401"):
        sglang_model_sync.run(params(hub, tmp_path / "nope", source="peer", endpoint=url, token="guess",
                                     manifest=manifest), check_mode=False)
    for path in ("../creds/token", "%2e%2e/creds/token", ".sglang-fleet-model.json"):
        request = urllib.request.Request(url + "/" + path, headers={"Authorization": "Bearer peer-token-0123456789"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 404


def test_a_copy_from_a_directory_learns_its_manifest_by_hashing_it(hub, tmp_path):
    shared = tmp_path / "shared"
    manifest = sglang_model_sync.run(params(hub, shared), check_mode=False)["manifest"]
    result = sglang_model_sync.run(params(hub, tmp_path / "local", source="path", source_dir=str(shared)),
                                   check_mode=False)
    assert result["state"] == "fetched" and result["manifest"]["files"] == manifest["files"]


# --- who copies from whom --------------------------------------------------------------------------

from model_distribution import sglang_model_slice_problems, sglang_model_waves  # noqa: E402


def test_the_fleet_fetches_once_and_spreads_in_a_widening_tree():
    hosts = ["h%d" % i for i in range(1, 9)]
    waves = sglang_model_waves(hosts, [], "fleet", 2)
    assert waves[0] == {"h1": "origin"}
    assert sum(1 for wave in waves for source in wave.values() if source == "origin") == 1
    assert sorted(h for wave in waves for h in wave) == sorted(hosts)
    have = set()
    for wave in waves:
        assert all(source == "origin" or source in have for source in wave.values())
        assert all(list(wave.values()).count(source) <= 2 for source in set(wave.values()) - {"origin"})
        have |= set(wave)
    assert len(waves) == 3  # 1, then 2, then 5 of the 6 that 3 sources can serve


def test_hosts_that_hold_a_verified_copy_are_the_first_sources_and_per_host_fetches_everywhere():
    (wave,) = sglang_model_waves(["h3"], ["h1", "h2", "h4"], "fleet", 2)
    assert list(wave) == ["h3"] and wave["h3"] in ("h1", "h2", "h4")
    assert sglang_model_waves([], ["h1"], "fleet", 2) == []
    assert sglang_model_waves(["h1", "h2"], [], "per_host", 2) == [{"h1": "origin", "h2": "origin"}]


def test_the_fleet_s_seed_makes_the_one_fetch_from_the_source():
    assert sglang_model_waves(["h1", "h2", "h3"], [], "fleet", 2, seed="h3")[0] == {"h3": "origin"}
    assert sglang_model_waves(["h1", "h2"], [], "fleet", 2, seed="elsewhere")[0] == {"h1": "origin"}


MODEL = {"repo_id": "nvidia/Kimi-K2.5-NVFP4", "revision": "a" * 40}
OUTSIDE = {"sliced": True, "seed": "g1", "seed_here": False, "outside": ["g1", "g2"]}
WITH_SEED = {"sliced": True, "seed": "g1", "seed_here": True, "outside": ["g3"]}


def test_a_slice_never_fetches_from_the_source_but_on_the_seed():
    # Not a slice: anything goes.
    assert sglang_model_slice_problems({"sliced": False}, MODEL, False) == []
    assert sglang_model_slice_problems({"sliced": False}, MODEL, True, [{"h1": "origin", "h2": "origin"}]) == []
    # Without the seed's manifest, a slice without the seed stops before its check.
    (early,) = sglang_model_slice_problems(OUTSIDE, MODEL, False)
    assert early.startswith("nvidia/Kimi-K2.5-NVFP4@aaaaaaaaaaaa: this slice has no manifest of it yet, and only g1, "
                            "the seed, in another slice, fetches it")
    assert sglang_model_slice_problems(OUTSIDE, MODEL, True) == []
    assert sglang_model_slice_problems(WITH_SEED, MODEL, False) == []
    # After the check: the seed may fetch; a slice spreads its own verified copies; nobody else fetches.
    assert sglang_model_slice_problems(WITH_SEED, MODEL, False, [{"g1": "origin"}, {"g2": "g1"}]) == []
    assert sglang_model_slice_problems(OUTSIDE, MODEL, True, [{"g4": "g3"}]) == []
    assert sglang_model_slice_problems(OUTSIDE, MODEL, True, []) == []
    (late,) = sglang_model_slice_problems(OUTSIDE, MODEL, True, [{"g3": "origin"}, {"g4": "g3"}])
    assert "so g3 would fetch it from the source again (only g1, the seed, does, once for the fleet)" in late
    # per_host: every host fetches from the source, as asked.
    assert sglang_model_slice_problems(OUTSIDE, MODEL, False, mode="per_host") == []
    assert sglang_model_slice_problems(OUTSIDE, MODEL, True, [{"g3": "origin"}], mode="per_host") == []


def test_progress_goes_to_a_directory_that_need_not_exist_yet(hub, tmp_path):
    progress = tmp_path / "run/sglang-fleet-model/kimi.progress"
    sglang_model_sync.run(params(hub, tmp_path / "Kimi", progress_file=str(progress)), check_mode=False)
    done = json.loads(progress.read_text())
    assert done["done"] == done["total"] == sum(len(d) for d in hub_fixture.REPOS[KIMI].values())
    assert oct(progress.parent.stat().st_mode & 0o777) == "0o700"


# --- on a real host ----------------------------------------------------------------------------------

REAL = ROOT / "tests/fixtures/hosts/h200-driver580/model-sync"


def real_run(name):
    run = json.loads((REAL / name / "model_sync.json").read_text())
    return run, {s["step"].split(" (")[0]: s for s in run["steps"]}


def test_on_a_real_host_the_stamp_spares_the_hashing_and_a_flipped_byte_is_found_and_named():
    run, steps = real_run("four-at-a-time")
    assert run["python"].startswith("3.12") and run["model_bytes"] > 10e9
    assert run["quick_verify"] == {"problems": {}, "hashed_bytes": 0}
    assert steps["verify by stamp"]["seconds"] < 0.5
    assert run["full_verify"]["problems"] == {} and run["full_verify"]["hashed_bytes"] >= run["model_bytes"]
    assert run["flipped"]["problems"] == {run["flipped"]["file"]: "sha256 mismatch"}
    assert run["flipped"]["hashed_bytes"] < run["model_bytes"] / 4  # only the file whose mtime moved
    assert run["peer_refused_without_token"] and run["stamp"]


def test_on_a_real_host_four_files_at_a_time_verify_and_copy_faster_than_one():
    _, one = real_run("one-file-at-a-time")
    _, four = real_run("four-at-a-time")
    assert model_sync.WORKERS == 4
    for name in ("verify by hashing", "fetch from a peer over HTTP", "fetch from the directory, verified"):
        assert four[name]["gb_per_s"] > 2 * one[name]["gb_per_s"], name
