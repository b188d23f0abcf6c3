"""sglang_venvs: the versioned installs under /opt/sglang, the current/previous links, prune, adopt."""
import json
import os
import sys
import time
from pathlib import Path

import pytest

import sglang_venvs as mod


def run_module(capsys, args):
    from ansible.module_utils.testing import patch_module_args
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def build(root, install, complete=True, age=0.0):
    """A fake install: a venv directory with a python and, once complete, the sglang role's marker."""
    venv = root / "venvs" / install
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/python").write_text("#!/bin/sh\n")
    stamp = time.time() - age
    if complete:
        (venv / mod.MARKER).write_text(json.dumps({"id": install}))
        os.utime(venv / mod.MARKER, (stamp, stamp))
    os.utime(venv, (stamp, stamp))
    return venv


def tree(path):
    """Every file under path with its bytes: to prove a venv was left alone."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_switch_points_current_at_the_install_and_previous_at_the_one_before(tmp_path, capsys):
    build(tmp_path, "0.5.9-aaaa", age=20)
    build(tmp_path, "0.5.9-bbbb", age=10)
    first = run_module(capsys, {"root": str(tmp_path), "state": "switch", "id": "0.5.9-aaaa"})
    assert (first["changed"], first["current"], first["previous"]) == (True, "0.5.9-aaaa", "")
    second = run_module(capsys, {"root": str(tmp_path), "state": "switch", "id": "0.5.9-bbbb"})
    assert (second["changed"], second["current"], second["previous"]) == (True, "0.5.9-bbbb", "0.5.9-aaaa")
    assert os.readlink(tmp_path / "current") == "venvs/0.5.9-bbbb"
    assert (tmp_path / "current/bin/python").exists()
    again = run_module(capsys, {"root": str(tmp_path), "state": "switch", "id": "0.5.9-bbbb"})
    assert (again["changed"], again["previous"]) == (False, "0.5.9-aaaa")
    assert not list(tmp_path.glob(".*partial"))


def test_a_rollback_puts_both_links_back_as_they_were(tmp_path, capsys):
    for n, install in enumerate(["a", "b", "c"]):
        build(tmp_path, install, age=30 - n)
    run_module(capsys, {"root": str(tmp_path), "state": "switch", "id": "a"})
    run_module(capsys, {"root": str(tmp_path), "state": "switch", "id": "b"})
    run_module(capsys, {"root": str(tmp_path), "state": "switch", "id": "c"})  # the upgrade that fails
    back = run_module(capsys, {"root": str(tmp_path), "state": "switch", "id": "b", "previous": "a"})
    assert (back["current"], back["previous"]) == ("b", "a")


def test_switch_refuses_an_install_the_sglang_stage_did_not_finish(tmp_path, capsys):
    build(tmp_path, "half", complete=False)
    result = run_module(capsys, {"root": str(tmp_path), "state": "switch", "id": "half"})
    assert result["failed"] and "venvs/half is not a complete install" in result["msg"]
    assert not (tmp_path / "current").exists()


def test_check_mode_says_what_the_switch_would_do_and_writes_nothing(tmp_path, capsys):
    build(tmp_path, "a")
    result = run_module(capsys, {"root": str(tmp_path), "state": "switch", "id": "a", "_ansible_check_mode": True})
    assert (result["changed"], result["current"]) == (True, "a")
    assert not os.path.lexists(tmp_path / "current")


def test_prune_keeps_current_and_previous_first_then_the_newest(tmp_path, capsys):
    for n, install in enumerate(["oldest", "old", "served-before", "newest", "serving"]):
        build(tmp_path, install, age=50 - n * 10)
    (tmp_path / "current").symlink_to("venvs/serving")
    (tmp_path / "previous").symlink_to("venvs/served-before")
    kept_tree = tree(tmp_path / "venvs/serving")
    result = run_module(capsys, {"root": str(tmp_path), "state": "prune", "keep": 3})
    assert result["changed"] and sorted(result["removed"]) == ["old", "oldest"]
    assert sorted(p.name for p in (tmp_path / "venvs").iterdir()) == ["newest", "served-before", "serving"]
    assert tree(tmp_path / "venvs/serving") == kept_tree
    assert run_module(capsys, {"root": str(tmp_path), "state": "prune", "keep": 3})["changed"] is False


def test_prune_never_removes_current_previous_or_what_is_being_built_even_past_the_limit(tmp_path, capsys):
    for n, install in enumerate(["a", "b", "c"]):
        build(tmp_path, install, complete=install != "c", age=30 - n)
    (tmp_path / "current").symlink_to("venvs/b")
    (tmp_path / "previous").symlink_to("venvs/a")
    result = run_module(capsys, {"root": str(tmp_path), "state": "prune", "keep": 1, "protect": ["c"]})
    assert result["removed"] == [] and result["changed"] is False


def test_prune_in_check_mode_names_what_it_would_remove_and_removes_nothing(tmp_path, capsys):
    build(tmp_path, "a", age=10)
    build(tmp_path, "b")
    (tmp_path / "current").symlink_to("venvs/b")
    result = run_module(capsys, {"root": str(tmp_path), "state": "prune", "keep": 1, "_ansible_check_mode": True})
    assert result["removed"] == ["a"] and (tmp_path / "venvs/a").is_dir()


def test_adopt_moves_the_old_venv_in_and_leaves_a_link_for_what_still_runs_from_it(tmp_path, capsys):
    legacy = tmp_path / "venv"
    (legacy / "bin").mkdir(parents=True)
    (legacy / "bin/python").write_text("#!/bin/sh\n")
    (legacy / "bin/pip").write_text("#!%s/bin/python\n" % legacy)
    before = tree(legacy)
    found = run_module(capsys, {"root": str(tmp_path), "legacy": str(legacy)})
    assert found["legacy"] == str(legacy) and found["installs"] == []
    result = run_module(capsys, {"root": str(tmp_path), "state": "adopt", "id": "0.5.9-aaaa", "legacy": str(legacy)})
    assert result["changed"] and result["legacy"] == ""
    assert os.readlink(legacy) == "venvs/0.5.9-aaaa"
    assert tree(tmp_path / "venvs/0.5.9-aaaa") == before
    # Not complete until the sglang role has checked it and written its marker.
    assert result["installs"] == [{"id": "0.5.9-aaaa", "complete": False, "built": result["installs"][0]["built"],
                                   "recorded": ""}]
    again = run_module(capsys, {"root": str(tmp_path), "state": "adopt", "id": "0.5.9-aaaa", "legacy": str(legacy)})
    assert again["changed"] is False


def test_prune_removes_the_compatibility_link_with_the_install_it_names(tmp_path, capsys):
    legacy = tmp_path / "venv"
    legacy.mkdir()
    run_module(capsys, {"root": str(tmp_path), "state": "adopt", "id": "legacy", "legacy": str(legacy),
                        "complete": True})
    build(tmp_path, "new")
    (tmp_path / "current").symlink_to("venvs/new")
    result = run_module(capsys, {"root": str(tmp_path), "state": "prune", "keep": 1, "legacy": str(legacy)})
    assert result["removed"] == ["legacy"] and not os.path.lexists(legacy)


@pytest.mark.parametrize("args,message", [
    ({"state": "switch", "id": "../etc"}, "'../etc' is not an install id"),
    ({"state": "prune", "keep": 0}, "keep must be at least 1"),
    ({"state": "switch", "id": "missing"}, "venvs/missing is not a complete install"),
])
def test_bad_input_fails_clearly_and_changes_nothing(tmp_path, capsys, args, message):
    result = run_module(capsys, {"root": str(tmp_path), **args})
    assert result["failed"] and message in result["msg"]
    assert list(tmp_path.iterdir()) == []


# The sglang role's own probe: a settled host's one call reads the interpreter and the install with it.
PROBE = (Path(__file__).resolve().parents[2] / "roles/sglang/files/venv_report.py").read_text()


def real_venv(root, install, complete=True):
    """An install whose python is a real one (this interpreter), as a venv's is."""
    venv = build(root, install, complete=complete)
    (venv / "bin/python").unlink()
    (venv / "bin/python").symlink_to(sys.executable)
    return venv


def test_one_call_reads_the_interpreter_lists_prunes_and_reads_the_install_to_use(tmp_path, capsys):
    real_venv(tmp_path, "0.5.9-new")
    build(tmp_path, "0.5.9-old", age=50)
    build(tmp_path, "0.5.9-older", age=100)
    (tmp_path / "current").symlink_to("venvs/0.5.9-old")
    result = run_module(capsys, {"root": str(tmp_path), "state": "prune", "keep": 2, "protect": ["0.5.9-new"],
                                 "probe": PROBE, "interpreter": sys.executable, "report": "0.5.9-new"})
    assert result["interpreter"]["python"] == sys.implementation.cache_tag
    assert result["removed"] == ["0.5.9-older"] and result["current"] == "0.5.9-old"
    assert result["report"]["python"] == sys.implementation.cache_tag and result["report_error"] == ""
    assert set(result["report"]["packages"]) >= {"sglang", "sgl-kernel", "torch"}


def test_an_unfinished_or_broken_install_gives_no_report_and_says_why(tmp_path, capsys):
    real_venv(tmp_path, "unfinished", complete=False)
    broken = build(tmp_path, "broken")
    (broken / "bin/python").write_text("#!/bin/sh\necho 'No module named encodings' >&2\nexit 1\n")
    (broken / "bin/python").chmod(0o755)
    for install, why in [("unfinished", "venvs/unfinished is no complete install"),
                         ("broken", "exited 1: No module named encodings"),
                         ("missing", "venvs/missing is no complete install")]:
        result = run_module(capsys, {"root": str(tmp_path), "probe": PROBE, "report": install})
        assert not result.get("failed") and result["report"] is None and why in result["report_error"], result


def test_an_interpreter_that_does_not_run_fails_before_anything_changes(tmp_path, capsys):
    build(tmp_path, "a", age=20)
    build(tmp_path, "b", age=10)
    build(tmp_path, "c")
    before = tree(tmp_path)
    result = run_module(capsys, {"root": str(tmp_path), "state": "prune", "keep": 1, "probe": PROBE,
                                 "interpreter": str(tmp_path / "no-python3")})
    assert result["failed"] and "the interpreter that makes the venvs: " in result["msg"]
    assert "no-python3 did not run" in result["msg"] and tree(tmp_path) == before


def test_a_report_without_the_probe_is_refused(tmp_path, capsys):
    result = run_module(capsys, {"root": str(tmp_path), "report": "a"})
    assert result["failed"] and "probe" in result["msg"]


def test_each_complete_install_says_the_id_its_marker_records(tmp_path, capsys):
    """An install an earlier release built under another id for the same inputs records today's id
    (the sglang role's sglang_install_pick finds it by that); an unreadable marker records none."""
    build(tmp_path, "0.5.9-0ld0ld0ld0ld", age=30)
    (tmp_path / "venvs/0.5.9-0ld0ld0ld0ld" / mod.MARKER).write_text(json.dumps(
        {"id": "0.5.9-new000000000", "inputs": {}, "built_as": "0.5.9-0ld0ld0ld0ld"}))
    build(tmp_path, "0.5.9-aaaa", age=20)
    build(tmp_path, "0.5.9-bbbb", age=10)
    (tmp_path / "venvs/0.5.9-bbbb" / mod.MARKER).write_text("{half a marker")
    build(tmp_path, "0.5.9-cccc", complete=False)
    found = run_module(capsys, {"root": str(tmp_path)})
    assert {i["id"]: i["recorded"] for i in found["installs"]} == {
        "0.5.9-cccc": "", "0.5.9-bbbb": "", "0.5.9-aaaa": "0.5.9-aaaa", "0.5.9-0ld0ld0ld0ld": "0.5.9-new000000000"}
