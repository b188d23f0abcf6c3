"""host_footprint: one read says whether a host holds a stage's files, user, packages, venv packages and
units; each difference is a phrase naming the path or unit, never what a file holds."""
import grp
import hashlib
import json
import os
import pwd
import subprocess

import pytest

import host_footprint as mod
from ansible.module_utils import host_footprint as fp
from conftest import FIXTURES

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name
SHOW = (FIXTURES / "systemd/show-active-inactive-missing.txt").read_text()


def real_run(argv):
    done = subprocess.run(argv, capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def mine(**want):
    return {"owner": ME, "group": MY_GROUP, **want}


def test_a_file_is_held_only_with_its_content_mode_and_owner(tmp_path):
    path = tmp_path / "unit.service"
    want = mine(path=str(path), content="[Unit]\n", mode="0644")
    assert fp.path_differs(want) == "%s is missing" % path
    path.write_text("[Unit]\n")
    path.chmod(0o644)
    assert fp.path_differs(want) is None
    assert fp.path_differs({**want, "content": "[Unit]\nX=1\n"}) == "%s differs" % path
    assert fp.path_differs({**want, "mode": "0600"}) == "%s has mode 0644, not 0600" % path
    assert fp.path_differs({**want, "owner": "nobody", "group": "nogroup"}) == "%s is not owned by nobody:nogroup" % path
    assert fp.path_differs({**want, "owner": "no-such-user-sglang"}) == \
        "%s is not owned by no-such-user-sglang:%s" % (path, MY_GROUP)


def test_a_secret_file_is_compared_by_its_sha256_alone(tmp_path):
    path = tmp_path / "router.key"
    path.write_text("s3cret\n")
    want = mine(path=str(path), sha256=hashlib.sha256(b"s3cret\n").hexdigest())
    assert fp.path_differs(want) is None
    assert fp.path_differs({**want, "sha256": hashlib.sha256(b"other\n").hexdigest()}) == "%s differs" % path


def test_directories_and_absent_paths(tmp_path):
    assert fp.path_differs(mine(path=str(tmp_path), state="directory")) is None
    assert fp.path_differs(mine(path=str(tmp_path), state="file")) == "%s is not a regular file" % tmp_path
    stray = tmp_path / "old.key"
    assert fp.path_differs({"path": str(stray), "state": "absent"}) is None
    stray.write_text("x")
    assert fp.path_differs({"path": str(stray), "state": "absent"}) == "%s is still there" % stray
    assert fp.path_differs(mine(path=str(stray), state="directory")) == "%s is not a directory" % stray


def test_a_link_is_held_only_where_it_names_the_target_as_the_venvs_switch_writes_it(tmp_path):
    """The server's install to serve: <root>/current as sglang_venvs' switch points it (venvs/<id>)."""
    import sglang_venvs
    want = {"path": str(tmp_path / "current"), "state": "link", "target": "venvs/0.5.9-b"}
    assert fp.path_differs(want) == "%s is missing" % want["path"]
    sglang_venvs.point(str(tmp_path), "current", "0.5.9-a")
    assert fp.path_differs(want) == "%s points to venvs/0.5.9-a, not venvs/0.5.9-b" % want["path"]
    sglang_venvs.point(str(tmp_path), "current", "0.5.9-b")
    assert fp.path_differs(want) is None
    (tmp_path / "current").unlink()
    (tmp_path / "current").mkdir()
    assert fp.path_differs(want) == "%s is not a symlink" % want["path"]


def test_a_user_must_exist_with_its_home_and_shell():
    me = pwd.getpwuid(os.getuid())
    assert fp.user_differs({"name": me.pw_name, "home": me.pw_dir, "shell": me.pw_shell}) is None
    assert fp.user_differs({"name": me.pw_name, "shell": "/bin/false-not"}) == \
        "user %s has shell %s, not /bin/false-not" % (me.pw_name, me.pw_shell)
    assert fp.user_differs({"name": "no-such-user-sglang"}) == "user no-such-user-sglang is missing"


def test_a_venv_must_hold_the_pinned_version(tmp_path):
    venv = tmp_path / "venv"
    want = {"venv": str(venv), "name": "sglang-router", "version": "0.3.2"}
    assert fp.venv_package_differs(want) == "no venv at %s" % venv
    site = venv / "lib/python3.11/site-packages"
    (site / "sglang_router-0.3.1.dist-info").mkdir(parents=True)
    (site / "sglang_router-0.3.1.dist-info/METADATA").write_text("Name: sglang-router\nVersion: 0.3.1\n")
    (venv / "bin").mkdir()
    (venv / "bin/python").symlink_to("/usr/bin/python3")
    assert fp.venv_package_differs(want) == "%s holds sglang-router 0.3.1, not 0.3.2" % venv
    (site / "sglang_router-0.3.1.dist-info").rename(site / "sglang_router-0.3.2.dist-info")
    (site / "sglang_router-0.3.2.dist-info/METADATA").write_text("Name: sglang-router\nVersion: 0.3.2\n")
    assert fp.venv_package_differs(want) is None


def test_packages_are_read_from_this_machine_s_real_dpkg():
    if not os.path.exists("/usr/bin/dpkg-query"):
        pytest.fail("the controller is Debian or Ubuntu (bin/setup needs apt): dpkg-query is missing")
    assert fp.packages_missing(real_run, ["dpkg", "no-such-package-sglang"]) == \
        ["package no-such-package-sglang is not installed"]
    assert fp.packages_missing(real_run, []) == []
    assert fp.packages_missing(lambda argv: (127, "", "dpkg-query not found"), ["python3-venv"]) == \
        ["dpkg-query is not available to read python3-venv"]


def test_units_are_read_from_systemd_252_s_own_output():
    units = ["sglang-router.service", "sglang-router-healer.timer", "no-such-unit.service"]
    asked = []
    found = fp.units_not_running(lambda argv: asked.append(argv) or (0, SHOW, ""), units)
    assert asked == [["systemctl", "show", "--property=Id,ActiveState,UnitFileState", "--"] + units]
    assert found == ["sglang-router-healer.timer is inactive and enabled, not active and enabled",
                     "no-such-unit.service is inactive and not installed, not active and enabled"]
    assert fp.units_not_running(lambda argv: (1, "", "System has not been booted with systemd\n"), units[:1]) == \
        ["systemd cannot say how sglang-router.service stand (System has not been booted with systemd)"]


def run_module(capsys, args):
    from ansible.module_utils.testing import patch_module_args
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def test_the_module_says_settled_only_when_nothing_differs_and_never_echoes_a_content(tmp_path, capsys):
    path = tmp_path / "healer.json"
    path.write_text('{"lease_dir": "/var/lib/x"}\n')
    path.chmod(0o644)
    held = run_module(capsys, {"files": [mine(path=str(path), content='{"lease_dir": "/var/lib/x"}\n', mode="0644")]})
    assert held["settled"] is True and held["pending"] == [] and held["changed"] is False
    wanted = "a-long-wanted-content-that-is-secret-7d1e\n"
    short = run_module(capsys, {"files": [mine(path=str(path), content=wanted)],
                                "users": [{"name": "no-such-user-sglang"}]})
    assert short["settled"] is False
    assert short["pending"] == ["%s differs" % path, "user no-such-user-sglang is missing"]
    assert "a-long-wanted-content" not in json.dumps(short)


REAL = FIXTURES / "hosts/h200-driver580/footprint"


def test_the_real_ubuntu_host_s_dpkg_answer_names_the_missing_package_alone():
    record = json.loads((REAL / "footprint.json").read_text())["dpkg_query"]
    captured = (REAL / "dpkg-query.txt").read_text()
    # dpkg-query exits 1 when one name matches nothing, and still lists the others.
    assert fp.packages_missing(lambda argv: (record["rc"], captured, record["err"]), record["packages"]) == \
        ["package no-such-package-sglang is not installed"]


def test_the_real_host_s_systemd_252_says_which_units_are_off():
    captured = (REAL / "systemctl-show.txt").read_text()
    assert fp.units_not_running(lambda argv: (0, captured, ""), ["fp-running.service", "fp-stopped.service",
                                                                 "fp-missing.service"]) == \
        ["fp-stopped.service is inactive and enabled, not active and enabled",
         "fp-missing.service is inactive and not installed, not active and enabled"]


def test_on_the_real_host_the_module_settles_what_is_as_asked_and_names_every_difference():
    record = json.loads((REAL / "footprint.json").read_text())
    assert record["as_asked"]["result"]["settled"] is True, record["as_asked"]["result"]
    off = record["off"]["result"]["pending"]
    assert len(off) == 8 and not record["off"]["result"]["settled"]
    # The units' and packages' phrases there are the ones this code derives from the raw captures.
    captured = (REAL / "systemctl-show.txt").read_text()
    assert off[-2:] == fp.units_not_running(lambda argv: (0, captured, ""), record["off"]["args"]["units"])
    # Without systemd (the host has none of its own) the read says so instead of failing.
    assert record["without_systemd"]["pending"] == ["systemd cannot say how fp-running.service stand (systemctl not found)"]
    # What a file must hold never leaves the module: its log shows the no_log mask.
    assert {f.get("content") for f in record["off"]["result"]["invocation"]["module_args"]["files"]} <= \
        {"", "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}
