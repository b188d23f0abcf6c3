"""The fusion self-test's systemd-run command line, as the role builds it, against the unit it renders: the same
user, home, environment and sandbox, line for line, from one list."""
import json
import shlex
import sys

from conftest import ROOT
from test_server_unit import exec_start, render

sys.path.insert(0, str(ROOT / "roles/sglang_server/files"))
from fusion_selftest import server_sizes  # noqa: E402

# The [Service] lines that are not the process's sandbox: how it starts, what it runs, who it runs as
# (the self-test's --uid, --gid, --working-directory and --setenv carry those), how it restarts.
NOT_SANDBOX = {"Type", "User", "Group", "WorkingDirectory", "Environment", "ExecStart", "Restart", "RestartSec",
               "TimeoutStartSec", "TimeoutStopSec", "KillMode"}
CACHE = "/var/lib/sglang-fleet/fusion-selftest"
RTX_PRO_6000_MIB = 97887  # the fleet's 96 GB GPUs: sglang's default --cuda-graph-max-bs is 512 at tp >= 4


def service_lines(unit):
    """(directive, value) of every [Service] line, continuations joined, comments left out."""
    section, lines, pending = None, [], ""
    for raw in unit.splitlines():
        if raw.startswith("[") and raw.endswith("]"):
            section = raw[1:-1]
            continue
        if section != "Service" or not raw.strip() or raw.lstrip().startswith("#"):
            continue
        pending += raw.rstrip("\\")
        if raw.endswith("\\"):
            continue
        directive, _, value = pending.partition("=")
        lines.append((directive.strip(), value))
        pending = ""
    return lines


def rendered(tmp_path, monkeypatch, **extravars):
    unit = render(tmp_path, monkeypatch, ["gpu-node-01"], **extravars)["gpu-node-01"]
    argv = json.loads((tmp_path / "gpu-node-01.selftest-argv.json").read_text())
    return unit, argv


def options(argv, name):
    runner = argv[:argv.index("--")]
    return [word.split("=", 1)[1] for word in runner if word.startswith(name + "=")]


def test_every_sandbox_line_of_the_unit_is_a_property_of_the_self_test_and_nothing_else(tmp_path, monkeypatch):
    unit, argv = rendered(tmp_path, monkeypatch)
    sandbox = ["%s=%s" % line for line in service_lines(unit) if line[0] not in NOT_SANDBOX]
    assert len(sandbox) == 29 and "SystemCallFilter=~@privileged" in sandbox and "DeviceAllow=char-nvidia* rw" in sandbox
    # In the unit's order (two SystemCallFilter= lines mean what they mean only in that order), then the one
    # path the self-test writes beside the home: its verdicts.
    assert options(argv, "--property") == sandbox + ["ReadWritePaths=" + CACHE]
    runner = argv[:argv.index("--")]
    assert runner[:5] == ["systemd-run", "--wait", "--pipe", "--collect", "--unit=sglang-fusion-selftest"]
    assert {word.split("=", 1)[0] for word in runner[5:]} == {"--uid", "--gid", "--working-directory", "--setenv",
                                                             "--property"}
    # The self-test is told each property: they are part of its cache key.
    assert [w.split("=", 1)[1] for w in argv[argv.index("--") + 1:] if w.startswith("--sandbox=")] == \
        options(argv, "--property")


def test_the_self_test_runs_as_the_unit_s_user_in_its_home_with_its_environment(tmp_path, monkeypatch):
    unit, argv = rendered(tmp_path, monkeypatch, sglang_server_env={"NCCL_NVLS_ENABLE": "0"},
                          sglang_server_python="/opt/sglang/venvs/new/bin/python",
                          sglang_server_install_id="new")
    service = dict((d, v) for d, v in service_lines(unit) if d in ("User", "Group", "WorkingDirectory"))
    assert options(argv, "--uid") == [service["User"]] == ["sglang"]
    assert options(argv, "--gid") == [service["Group"]]
    assert options(argv, "--working-directory") == [service["WorkingDirectory"]] == ["/var/lib/sglang"]
    unit_env = dict(shlex.split(v)[0].split("=", 1) for d, v in service_lines(unit) if d == "Environment")
    env = dict(word.split("=", 1) for word in options(argv, "--setenv"))
    # The same environment but for PATH: the install to serve, which `current` may not point to yet.
    assert {k: v for k, v in env.items() if k != "PATH"} == {k: v for k, v in unit_env.items() if k != "PATH"}
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["HOME"] == "/var/lib/sglang"
    assert env["PATH"].split(":")[0] == "/opt/sglang/venvs/new/bin" != unit_env["PATH"].split(":")[0]
    assert env["PATH"].split(":")[1:] == unit_env["PATH"].split(":")[1:]
    assert argv[argv.index("--") + 1:][:2] == ["/opt/sglang/venvs/new/bin/python",
                                                "/usr/local/lib/sglang-fleet/fusion_selftest.py"]


def test_an_extra_hardening_line_lands_in_the_unit_and_in_the_self_test(tmp_path, monkeypatch):
    unit, argv = rendered(tmp_path, monkeypatch, sglang_server_hardening_extra=["SystemCallFilter=~@resources",
                                                                                "InaccessiblePaths=/srv"])
    assert unit.endswith("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK\n"
                         "# sglang_server_hardening_extra:\nSystemCallFilter=~@resources\nInaccessiblePaths=/srv\n\n"
                         "[Install]\nWantedBy=multi-user.target\n")
    assert options(argv, "--property")[-3:] == ["SystemCallFilter=~@resources", "InaccessiblePaths=/srv",
                                                "ReadWritePaths=" + CACHE]


def selftest_server_args(argv):
    """What the self-test is told of the server: its --server-args and --weigh-batches."""
    command = argv[argv.index("--") + 1:]
    return json.loads(command[command.index("--server-args") + 1]), \
        [int(b) for b in command[command.index("--weigh-batches") + 1].split(",")]


def test_the_self_test_times_the_decode_sizes_the_rendered_server_captures(tmp_path, monkeypatch):
    """EAGLE-3 at tp 8 on 96 GB GPUs, from the role's defaults: sglang's ladder kept to EAGLE's 48 requests,
    each verifying 4 tokens; the decision weighs 1, 8, 32 and 48 requests."""
    unit, argv = rendered(tmp_path, monkeypatch, sglang_server_tp=8)
    server_args, weigh = selftest_server_args(argv)
    assert exec_start(unit)[3:3 + len(server_args)] == server_args  # the unit's own command line
    sizes = server_sizes(server_args, RTX_PRO_6000_MIB, 2048, weigh)
    assert sizes["tokens_per_batch"] == 4 and sizes["max_running_requests"] == 48
    assert sizes["decode_tokens"] == [4 * bs for bs in list(range(1, 9)) + list(range(10, 33, 2)) + [40, 44, 48]]
    assert sizes["weighed_tokens"] == [4, 32, 128, 192]
    assert sizes["comm"] == dict.fromkeys(("disable_custom_all_reduce", "enable_mscclpp", "enable_torch_symm_mem",
                                           "enable_symm_mem"), False)


def test_the_server_s_comm_flags_and_sizes_reach_the_self_test_whatever_sets_them(tmp_path, monkeypatch):
    _, argv = rendered(tmp_path, monkeypatch, sglang_server_tp=8, sglang_server_cuda_graph_max_bs=64,
                       sglang_server_torch_symm_mem=True, sglang_server_fusion_decode_batches=[2, 64],
                       sglang_server_extra_args=["--disable-custom-all-reduce", "--enable-mscclpp",
                                                 "--max-running-requests", 256])
    server_args, weigh = selftest_server_args(argv)
    sizes = server_sizes(server_args, RTX_PRO_6000_MIB, 2048, weigh)
    assert sizes["comm"] == {"disable_custom_all_reduce": True, "enable_mscclpp": True, "enable_torch_symm_mem": True,
                             "enable_symm_mem": False}
    assert sizes["max_bs_from"] == "--cuda-graph-max-bs" and sizes["decode_tokens"][-1] == 4 * 64
    assert sizes["weighed_tokens"] == [8, 256]
