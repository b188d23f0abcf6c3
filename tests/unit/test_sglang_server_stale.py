"""Whether a running server is older than its files (sglang_server_stale), read from the host."""
import os
import subprocess
import sys
import time

from sglang_server_stale import inputs, newer_than, process_started


def test_a_process_s_start_is_read_from_proc_as_the_clock_sees_it():
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = process_started(child.pid)
    finally:
        child.kill()
        child.wait()
    # /proc's start is in clock ticks after boot, and boot time in whole seconds: within about a second.
    assert before - 1.5 < started < time.time() + 1.5


def test_a_file_written_after_the_start_makes_the_server_stale_and_names_it(tmp_path):
    unit, key = tmp_path / "sglang.service", tmp_path / "sglang.yaml"
    dropins = tmp_path / "sglang.service.d"
    dropins.mkdir()
    unit.write_text("[Service]\n")
    key.write_text("api-key: one\n")
    (tmp_path / "venvs-a").mkdir()
    os.symlink("venvs-a", tmp_path / "current")
    started = time.time() + 0.05
    time.sleep(0.2)
    found = inputs([str(unit), str(key), str(tmp_path / "current"), str(tmp_path / "missing")], [str(dropins)])
    assert sorted(found) == sorted([str(unit), str(key), str(tmp_path / "current")])
    assert newer_than(started, found) == []  # all older than the process
    key.write_text("api-key: two\n")  # a rotated key, the run then killed
    (dropins / "override.conf").write_text("[Service]\nNice=5\n")
    os.unlink(tmp_path / "current")
    os.symlink("venvs-b", tmp_path / "current")  # an install switched in
    late = newer_than(started, inputs([str(unit), str(key), str(tmp_path / "current")], [str(dropins)]))
    assert sorted(entry.split(" ")[0] for entry in late) == sorted(
        [str(key), str(dropins / "override.conf"), str(tmp_path / "current")])
    assert all("s after the server started)" in entry for entry in late)


def test_a_mode_change_counts_as_a_change_and_a_same_tick_write_does_not(tmp_path):
    path = tmp_path / "sglang.yaml"
    path.write_text("x")
    changed = os.lstat(path).st_ctime
    assert newer_than(changed - 0.005, {str(path): changed}) == []
    time.sleep(0.05)
    os.chmod(path, 0o600)
    assert newer_than(changed + 0.02, {str(path): os.lstat(path).st_ctime}) != []
