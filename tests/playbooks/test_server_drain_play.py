"""The drain step as a play runs it: a server that is down (crash-looping, as a rerun finds one that
failed its last start) has nothing to drain, and the host goes on to its restart."""
import socket
import sys

import yaml

import fleet


def test_draining_a_server_that_is_down_leaves_the_host_reachable(tmp_path):
    # Ansible reads a result key `unreachable: true` as "the host is unreachable", whatever module
    # returns it: the host would leave the play before the restart that would mend its server.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "The requests in flight have finished", "sglang_server_drain": {
            "url": "http://127.0.0.1:%d" % port, "timeout": 5}, "register": "sglang_drain"},
        {"name": "The host goes on", "ansible.builtin.set_fact": {"sglang_after_drain": "{{ sglang_drain }}"}}]}]
    (tmp_path / "drain.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"node": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    run = fleet.run_playbook(tmp_path / "drain.yml", tmp_path / "hosts.yml")
    assert run.rc == 0, run.failure_summary
    result = run.hosts["node"].facts["sglang_after_drain"]
    assert result["drained"] is True and result["in_flight"] == 0 and result["server_unreachable"] is True
