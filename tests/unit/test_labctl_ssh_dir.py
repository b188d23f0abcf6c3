"""The lab's SSH directory under bin/test's two lanes: scenarios authorize their nodes at the same time."""
import multiprocessing

import labctl


def _record(ssh_dir, index):
    labctl.SSH_DIR, labctl.KNOWN_HOSTS = ssh_dir, ssh_dir / "known_hosts"
    labctl.record_host_key("node-%02d" % index, "ssh-ed25519", "KEY%02d" % index)


def test_nodes_authorized_at_once_all_keep_their_known_hosts_entry(tmp_path):
    ssh_dir = tmp_path / "lab-ssh"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_record, args=(ssh_dir, i)) for i in range(24)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    lines = (ssh_dir / "known_hosts").read_text().splitlines()
    assert sorted(lines) == ["node-%02d ssh-ed25519 KEY%02d" % (i, i) for i in range(24)]


def test_a_node_s_new_key_replaces_its_namesake_s(tmp_path, monkeypatch):
    monkeypatch.setattr(labctl, "SSH_DIR", tmp_path)
    monkeypatch.setattr(labctl, "KNOWN_HOSTS", tmp_path / "known_hosts")
    labctl.record_host_key("a", "ssh-ed25519", "OLD")
    labctl.record_host_key("b", "ssh-ed25519", "B")
    labctl.record_host_key("a", "ssh-ed25519", "NEW")
    assert (tmp_path / "known_hosts").read_text().splitlines() == ["b ssh-ed25519 B", "a ssh-ed25519 NEW"]
