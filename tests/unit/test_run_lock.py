"""The fleet run lock's rules (plugins/module_utils/run_lock.py), by the lock host's clock."""
import json

import pytest

from ansible.module_utils.run_lock import LockHeld, acquire, release

ME = {"controller": "ctl-1", "pid": 100, "user": "ops"}
OTHER_HERE = {"controller": "ctl-1", "pid": 200, "user": "ana"}
ELSEWHERE = {"controller": "ctl-2", "pid": 100, "user": "bo"}


def test_a_live_holder_of_another_run_refuses_the_run_and_the_file_is_left_as_it_was(tmp_path):
    path = str(tmp_path / "run.lock")
    acquire(path, "run-a", ELSEWHERE, 600, live_pids=[], now=1000)
    before = (tmp_path / "run.lock").read_text()
    with pytest.raises(LockHeld, match=r"run run-a, held by bo \(pid 100 on ctl-2\) since 1970-01-01T00:16:40Z"):
        acquire(path, "run-b", ME, 600, live_pids=[100], now=1500)
    assert (tmp_path / "run.lock").read_text() == before


def test_a_holder_whose_time_is_up_is_dropped_with_a_warning(tmp_path):
    path = str(tmp_path / "run.lock")
    acquire(path, "run-a", ELSEWHERE, 600, live_pids=[], now=1000)
    changed, lock, warnings = acquire(path, "run-b", ME, 600, live_pids=[100], now=1600)
    assert lock["run"] == "run-b" and [h["user"] for h in lock["holders"]] == ["ops"]
    assert warnings == ["took the fleet run lock over from a run whose time ran out: run run-a, held by bo "
                        "(pid 100 on ctl-2) since 1970-01-01T00:16:40Z, until 1970-01-01T00:26:40Z"]


def test_only_a_holder_on_this_controller_can_be_found_dead_by_its_pid(tmp_path):
    path = str(tmp_path / "run.lock")
    acquire(path, "run-a", OTHER_HERE, 600, live_pids=[200], now=1000)
    with pytest.raises(LockHeld):
        acquire(path, "run-b", ME, 600, live_pids=[100, 200], now=1001)  # alive here
    _, _, warnings = acquire(path, "run-b", ME, 600, live_pids=[100], now=1002)  # pid 200 is gone
    assert warnings and "a run that died on this controller: run run-a" in warnings[0]
    acquire(str(tmp_path / "other.lock"), "run-a", ELSEWHERE, 600, live_pids=[], now=1000)
    with pytest.raises(LockHeld):  # pid 100 lives here, but the holder ran on ctl-2: unknowable from here
        acquire(str(tmp_path / "other.lock"), "run-b", {**ME, "pid": 300}, 600, live_pids=[300], now=1001)


def test_the_operator_names_a_dead_run_to_take_over_and_no_other(tmp_path):
    path = str(tmp_path / "run.lock")
    acquire(path, "run-a", ELSEWHERE, 600, live_pids=[], now=1000)
    with pytest.raises(LockHeld):
        acquire(path, "run-b", ME, 600, live_pids=[100], takeover="run-z", now=1001)
    _, lock, warnings = acquire(path, "run-b", ME, 600, live_pids=[100], takeover="run-a", now=1002)
    assert lock["run"] == "run-b" and "as fleet_run_lock_takeover asks" in warnings[0]


def test_holders_of_one_run_share_it_and_the_last_to_leave_removes_it(tmp_path):
    path = str(tmp_path / "run.lock")
    acquire(path, "awx-workflow-7", ME, 600, live_pids=[100], now=1000)
    acquire(path, "awx-workflow-7", ELSEWHERE, 600, live_pids=[], now=1001)
    assert len(json.loads((tmp_path / "run.lock").read_text())["holders"]) == 2
    assert release(path, "awx-workflow-7", ME) == (True, {"run": "awx-workflow-7", "holders": [
        dict(ELSEWHERE, since=1001, expires=1601)]})
    assert release(path, "run-other", ELSEWHERE) == (False, json.loads((tmp_path / "run.lock").read_text()))
    assert release(path, "awx-workflow-7", ELSEWHERE) == (True, None)
    assert not (tmp_path / "run.lock").exists()


def test_check_mode_refuses_as_the_run_would_and_writes_nothing(tmp_path):
    path = str(tmp_path / "locks" / "run.lock")
    changed, lock, _ = acquire(path, "run-a", ME, 600, live_pids=[100], check_mode=True, now=1000)
    assert lock["run"] == "run-a" and not (tmp_path / "locks").exists()
    acquire(path, "run-a", ELSEWHERE, 600, live_pids=[], now=1000)
    before = sorted(p.name for p in (tmp_path / "locks").iterdir())
    with pytest.raises(LockHeld):
        acquire(path, "run-b", ME, 600, live_pids=[100], check_mode=True, now=1001)
    assert release(path, "run-a", ELSEWHERE, check_mode=True) == (True, None)
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == before and (tmp_path / "locks/run.lock").exists()


def test_the_lock_s_own_directory_is_root_only_and_the_one_above_it_is_left_to_the_stages(tmp_path):
    """The stages' state directory holds what the service user reads (the fusion self-test's cache): the
    lock makes only its own directory 0700, never the one above it."""
    path = str(tmp_path / "sglang-fleet" / "run-lock" / "run.lock")
    acquire(path, "run-a", ME, 600, live_pids=[100], now=1000)
    assert (tmp_path / "sglang-fleet" / "run-lock").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "sglang-fleet").stat().st_mode & 0o055 == 0o055  # others may still traverse and read it
    assert (tmp_path / "sglang-fleet" / "run-lock" / "run.lock").stat().st_mode & 0o777 == 0o600
