"""The cuda_toolkit stage skips its work only on a host that one read shows as asked, and says what is left."""
import os

import pytest
from ansible.errors import AnsibleFilterError

import cuda_toolkit_info
from cuda_toolkit import cuda_toolkit_priority, cuda_toolkit_settled

HOME = "/usr/local/cuda-13.0"


def found(**change):
    """What cuda_toolkit_info reads on a host converged to 13.0 with 12.8 kept (the lab's nodes)."""
    state = {
        "toolkits": [
            {"version": "12.8", "home": "/usr/local/cuda-12.8", "nvcc_release": "12.8", "source": "package"},
            {"version": "13.0", "home": HOME, "nvcc_release": "13.0", "source": "package"},
        ],
        "active": {"version": "13.0", "home": HOME, "nvcc_release": "13.0"},
        "alternative": {"name": "cuda", "link": "/usr/local/cuda", "status": "manual", "value": HOME,
                        "choices": [{"path": "/usr/local/cuda-12.8", "priority": 128},
                                    {"path": HOME, "priority": 130}]},
        "files_differ": [],
    }
    state.update(change)
    return state


def test_a_converged_host_is_settled():
    assert cuda_toolkit_settled(found(), "13.0") == {"settled": True, "pending": []}


@pytest.mark.parametrize("change, reason", [
    ({"toolkits": found()["toolkits"][:1]}, "CUDA 13.0 is not installed"),
    ({"toolkits": [found()["toolkits"][0], dict(found()["toolkits"][1], nvcc_release=None)]},
     "CUDA 13.0 is not installed"),
    ({"active": found()["toolkits"][0]}, "/usr/local/cuda is /usr/local/cuda-12.8, not /usr/local/cuda-13.0"),
    ({"active": None}, "/usr/local/cuda is missing"),
    ({"alternative": None}, "the cuda alternative is not registered"),
    ({"alternative": dict(found()["alternative"], status="auto")}, "the cuda alternative is auto"),
    ({"alternative": dict(found()["alternative"], choices=[{"path": HOME, "priority": 50}])},
     "does not list /usr/local/cuda-13.0 for /usr/local/cuda at priority 130"),
    ({"files_differ": ["/etc/profile.d/cuda.sh"]}, "/etc/profile.d/cuda.sh is not as asked"),
])
def test_each_thing_the_work_would_change_unsettles_the_host_and_is_named(change, reason):
    result = cuda_toolkit_settled(found(**change), "13.0")
    assert not result["settled"]
    assert any(reason in line for line in result["pending"]), result["pending"]


def test_a_toolkit_listed_for_removal_unsettles_the_host():
    result = cuda_toolkit_settled(found(), "13.0", remove_versions=["12.8"])
    assert result == {"settled": False, "pending": ["listed for removal but installed: 12.8"]}


def test_a_managed_driver_is_never_settled_by_the_toolkit_read():
    assert not cuda_toolkit_settled(found(), "13.0", manage_driver=True)["settled"]


def test_the_priority_is_the_release_s_digits_and_a_bad_release_is_named():
    assert (cuda_toolkit_priority("13.0"), cuda_toolkit_priority("12.8")) == (130, 128)
    with pytest.raises(AnsibleFilterError, match="MAJOR.MINOR"):
        cuda_toolkit_priority("13")
    with pytest.raises(AnsibleFilterError, match="cuda_toolkit_info's result"):
        cuda_toolkit_settled({"msg": "failed"}, "13.0")


def test_a_file_differs_when_missing_or_off_in_content_or_mode(tmp_path):
    me, group = os.getuid(), os.getgid()
    import grp
    import pwd
    owner, group = pwd.getpwuid(me).pw_name, grp.getgrgid(group).gr_name
    path = tmp_path / "cuda.conf"
    assert cuda_toolkit_info.file_differs(str(path), "x\n", "0644", owner, group)
    path.write_text("x\n")
    path.chmod(0o644)
    assert not cuda_toolkit_info.file_differs(str(path), "x\n", "0644", owner, group)
    assert cuda_toolkit_info.file_differs(str(path), "y\n", "0644", owner, group)
    assert cuda_toolkit_info.file_differs(str(path), "x\n", "0600", owner, group)
    assert cuda_toolkit_info.file_differs(str(path), "x\n", "0644", "no-such-user-here", group)
