"""Upgrades with a way back, on the lab fleet: each install a venv of its own beside the one in
service, switched in by the server stage and switched back when its server fails the health gate;
retention; and the later stages finding the install in a run without the sglang stage.

The tests run in file order and end where they began: the inventory's release serving everywhere."""
import json
import shlex

from conftest import INVENTORY, NODES, RELEASE_2, SITE, STAGES, UNIT, nodes, started_at
from fleet import describe_server, report, run_playbook

ADDRESSES = ["127.0.1.1", "127.0.1.2"]
# A third release, whose sgl-kernel build (labctl's crashing stand-in) kills the server while it loads,
# with a changed unit as well: the rollback must put back both.
CRASH_WHEEL = "/srv/lab-wheelhouse/sgl_kernel-0.3.21+cpu.crash-cp310-abi3-manylinux2014_x86_64.whl"
REDACT_FILE = "sglang/srt/server_args.py"
REDACT_MARKER = "sglang-fleet patch server_args_redact_secrets"
testinfra_hosts = ["podman://" + NODES[0]]


def links(node):
    return {name: node.run("readlink /opt/sglang/" + name).stdout.strip() for name in ("current", "previous")}


def installs(node):
    return set(node.check_output("ls /opt/sglang/venvs").split())


def digest(node, install):
    """One sha256 over every file of an install, with its path: byte-identical or not."""
    return node.check_output("cd /opt/sglang/venvs/%s && find . -type f -print0 | sort -z | xargs -0 sha256sum "
                             "| sha256sum" % install)


def known_answer(node, index):
    secret = "lab-secret-%s-4f9c" % NODES[index]
    body = json.dumps({"model": "/models/nvidia/Kimi-K2.5-NVFP4", "temperature": 0,
                       "messages": [{"role": "user", "content": "What is 17 + 25?"}]})
    out = node.check_output("curl -sf -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' "
                            "-d '%s' http://%s:30000/v1/chat/completions" % (secret, body, ADDRESSES[index]))
    return json.loads(out)["choices"][0]["message"]["content"]


def patched(node, install):
    path = "/opt/sglang/venvs/%s/lib/python3.11/site-packages/%s" % (install, REDACT_FILE)
    return REDACT_MARKER in node.file(path).content_string


def test_an_upgrade_is_checked_then_built_beside_the_install_in_service_and_switched_in(host):
    first, _ = nodes(host)
    release_1 = links(first)["current"].split("/")[-1]
    before = installs(first)

    check = run_playbook(SITE, INVENTORY, tags=STAGES, limit=NODES[0], check=True, extravars=RELEASE_2)
    release_2 = check.hosts[NODES[0]].facts["sglang_install_id"]
    said = [res["msg"] for task, res in check.hosts[NODES[0]].results if task == "What would be switched is said"]
    assert check.rc == 0, check.failure_summary
    assert release_2 != release_1
    assert said == ["%s: would switch %s -> %s once the sglang stage has built it, then restart and gate"
                    % (NODES[0], release_1, release_2)]
    assert installs(first) == before and links(first)["current"] == "venvs/" + release_1

    served = digest(first, release_1)
    run = run_playbook(SITE, INVENTORY, tags=STAGES, limit=NODES[0], extravars=RELEASE_2)
    facts = run.hosts[NODES[0]].facts
    assert run.rc == 0, run.failure_summary
    assert facts["sglang_install_id"] == release_2
    assert facts["sglang_server_state"]["gate"] == "passed"
    assert links(first) == {"current": "venvs/" + release_2, "previous": "venvs/" + release_1}
    assert installs(first) == before | {release_2}
    # The new install was patched before it served; the one in service was never written.
    assert patched(first, release_1) and not patched(first, release_2)
    assert digest(first, release_1) == served
    assert known_answer(first, 0) == "42"


def test_a_failing_upgrade_rolls_back_by_itself_and_stops_the_rollout(host):
    first, second = nodes(host)
    release_2, release_1 = (link.split("/")[-1] for link in links(first).values())
    unit, served, second_started = first.file(UNIT).content, digest(first, release_2), started_at(second)
    crash = {**RELEASE_2, "sglang_sgl_kernel_wheel_url": "file://" + CRASH_WHEEL,
             "sglang_sgl_kernel_wheel_sha256": first.check_output("sha256sum %s | cut -d' ' -f1" % CRASH_WHEEL),
             "sglang_server_env": {"LAB_RELEASE": "3"}, "sglang_server_health_timeout": 15}

    run = run_playbook(SITE, INVENTORY, tags=STAGES, extravars=crash)
    result = run.hosts[NODES[0]]
    release_3 = result.facts["sglang_install_id"]
    assert run.rc != 0 and result.failed == 1 and release_3 not in (release_1, release_2)
    assert result.facts["sglang_server_state"]["gate"] == "rolled-back"
    assert describe_server(result.facts) == "rolled back to " + release_2
    message = result.failures[-1]["msg"]
    assert message.startswith("%s: install %s failed its health gate and was rolled back: serving the previous "
                              "install, %s, again (healthy, known answer right in " % (NODES[0], release_3, release_2))
    assert "simulated crash while loading the model" in message  # the failed start's journal
    lines = report(run).splitlines()
    assert "rolled back to " + release_2 in next(line for line in lines if line.startswith("  " + NODES[0]))
    assert sum(line.startswith("  ! " + NODES[0]) for line in lines) == 1

    # Serving the old install again, its unit and venv byte-identical to before.
    assert links(first) == {"current": "venvs/" + release_2, "previous": "venvs/" + release_1}
    assert first.file(UNIT).content == unit and digest(first, release_2) == served
    assert known_answer(first, 0) == "42"
    # The rollout stopped: the other node built the new install (the stages before the server's run
    # fleet-wide) but still serves the inventory's release, never restarted.
    assert release_3 in installs(second) and links(second)["current"] == "venvs/" + release_1
    assert started_at(second) == second_started and known_answer(second, 1) == "42"


def test_going_back_to_a_kept_install_builds_nothing_and_retention_removes_only_what_is_beyond_the_limit(host):
    first, second = nodes(host)
    release_2, release_1 = (link.split("/")[-1] for link in links(first).values())
    release_3 = (installs(first) - {release_1, release_2}).pop()

    run = run_playbook(SITE, INVENTORY, tags=STAGES)  # the inventory's own release again
    assert run.rc == 0, run.failure_summary
    changed = run.hosts[NODES[0]].changed_tasks
    assert not [task for task in changed if task.startswith(("The install's venv exists", "The pinned"))], changed
    # sglang_venv_keep is 2: the install in service and the one before it; the failed one goes.
    said = [res["msg"] for task, res in run.hosts[NODES[0]].results if task == "The install is announced"]
    assert said == ["install %s: built; in service: %s, removed %s" % (release_1, release_2, release_3)]
    assert installs(first) == {release_1, release_2}
    assert links(first) == {"current": "venvs/" + release_1, "previous": "venvs/" + release_2}
    assert patched(first, release_1) and known_answer(first, 0) == "42"
    # The other node never left the inventory's release; the failed build is within its limit of 2.
    assert installs(second) == {release_1, release_3} and links(second)["current"] == "venvs/" + release_1


def test_later_stages_find_the_install_without_the_sglang_stage(host):
    """A reinstall that wiped the patches, healed by `--tags patches,server` alone: the install is
    found from the sglang stage's record, and only the damaged node is patched and restarted."""
    first, second = nodes(host)
    first.check_output("/opt/sglang/current/bin/pip install -q --force-reinstall --no-deps --no-index "
                       "--find-links /srv/lab-wheelhouse sglang==0.5.9")
    assert not patched(first, links(first)["current"].split("/")[-1])
    healed = run_playbook(SITE, INVENTORY, tags="patches,server")
    assert healed.rc == 0 and healed.hosts[NODES[1]].changed == 0, healed.hosts[NODES[1]].changed_tasks
    assert {"The patches are in the files (or reverted)",
            "The server runs, restarted when its unit, environment, install or patches changed"} \
        <= set(healed.hosts[NODES[0]].changed_tasks)
    # `--tags server` alone is playbooks/server.yml alone, which test_sglang_server.py runs throughout
    # (its reruns change nothing); `--tags flash_attn` likewise in test_flash_attn.py.
    run = run_playbook(SITE, INVENTORY, tags="patches")
    assert run.rc == 0 and run.changed == 0, {h: r.changed_tasks for h, r in run.hosts.items()}
    assert known_answer(first, 0) == "42"



def test_a_settled_install_runs_no_pip_step_and_a_package_off_its_pin_is_repaired(host):
    """A rerun over settled installs reads each install's python in the prune's call and runs no venv or
    pip step; a package taken out of the install in service is put back by the pip steps, on that node
    alone."""
    first, _ = nodes(host)
    rerun = run_playbook(SITE, INVENTORY, tags="sglang")
    assert rerun.rc == 0 and rerun.changed == 0, {h: r.changed_tasks for h, r in rerun.hosts.items()}
    for node in NODES:
        results = dict(rerun.hosts[node].results)
        read = results["Installs beyond sglang_venv_keep are removed (never the current, the previous or this one)"]
        assert read["report"]["packages"]["sglang"]["version"] == "0.5.9" and read["report_error"] == ""
        assert not [task for task in results if task.startswith(("The pinned", "The CUDA build",
                                                                  "The install's venv exists"))], list(results)
    first.check_output("/opt/sglang/current/bin/pip uninstall -y -q sgl-kernel")
    repaired = run_playbook(SITE, INVENTORY, tags="sglang")
    assert repaired.rc == 0, repaired.failure_summary
    assert [task for task in repaired.hosts[NODES[0]].changed_tasks if task.startswith("The CUDA build of sgl-kernel")]
    assert repaired.hosts[NODES[1]].changed == 0, repaired.hosts[NODES[1]].changed_tasks
    first.check_output("/opt/sglang/current/bin/python -c 'import importlib.metadata as m; m.version(\"sgl-kernel\")'")

# A host set up before versioned installs: one venv at /opt/sglang/venv, made there (its scripts'
# shebangs name that path), and a unit that runs its python.
MAKE_LEGACY = r"""set -e
cd /opt/sglang
id=$(readlink current | cut -d/ -f2)
for other in venvs/*; do [ "$other" = "venvs/$id" ] || rm -rf "$other"; done
rm -f current previous venv /etc/ansible/facts.d/sglang.fact "venvs/$id/.sglang-fleet-install.json"
mv "venvs/$id" venv && rmdir venvs
grep -rl "/opt/sglang/venvs/$id" venv/bin venv/pyvenv.cfg | xargs -r sed -i "s|/opt/sglang/venvs/$id|/opt/sglang/venv|g"
sed -i 's|/opt/sglang/current/bin|/opt/sglang/venv/bin|g' /etc/systemd/system/sglang.service
systemctl daemon-reload
systemctl restart sglang
echo "$id"
"""


def test_a_host_from_before_versioned_installs_is_taken_over_without_a_reinstall(host):
    _, second = nodes(host)
    release_1 = second.check_output("bash -c " + shlex.quote(MAKE_LEGACY))
    assert second.file("/opt/sglang/venv").is_directory and "/opt/sglang/venv/bin/python" in second.file(UNIT).content_string
    run = run_playbook(SITE, INVENTORY, tags=STAGES, limit=NODES[1])
    result = run.hosts[NODES[1]]
    assert run.rc == 0, run.failure_summary
    assert result.facts["sglang_install_id"] == release_1
    said = [res["msg"] for task, res in result.results if task == "The install is announced"]
    assert said == ["install %s: taken over from /opt/sglang/venv; in service: none" % release_1]
    assert not [task for task in result.changed_tasks if task.startswith(("The install's venv exists", "The pinned"))]
    assert installs(second) == {release_1} and links(second)["current"] == "venvs/" + release_1
    assert second.file("/opt/sglang/venv").linked_to == "/opt/sglang/venvs/" + release_1
    assert "ExecStart=/opt/sglang/current/bin/python" in second.file(UNIT).content_string
    assert result.facts["sglang_server_state"]["gate"] == "passed" and known_answer(second, 1) == "42"
