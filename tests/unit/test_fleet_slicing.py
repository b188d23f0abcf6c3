"""tools/fleet.py's AWX slicing: the hosts each slice gets, and a slice's inventory as AWX hands it to
its job (only its hosts, each group with its members there, the inventory's variables kept)."""
import pytest
import yaml

from fleet import ROOT, awx_sliced_inventories, awx_slices, load_awx_workflow, slice_inventory

INVENTORY = {"all": {"vars": {"ansible_user": "ubuntu"},
                     "hosts": {"g1": {"ansible_host": "127.0.1.1"}, "g2": {"ansible_host": "127.0.1.2"},
                               "r1": {}},
                     "children": {"gpu_nodes": {"hosts": {"g1": {}, "g2": {}},
                                                "children": {"tp_a": {"hosts": {"g2": {"rank": 0}}}}},
                                  "sglang_routers": {"hosts": {"r1": {}}}}}}


def test_awx_deals_every_count_th_host_by_name():
    assert awx_slices(["g3", "g1", "g2", "g4", "g5"], 2) == [["g1", "g3", "g5"], ["g2", "g4"]]
    assert awx_slices(["g1"], 3) == [["g1"], [], []]
    with pytest.raises(ValueError, match="at least one slice"):
        awx_slices(["g1"], 0)


def test_a_slice_keeps_its_hosts_their_groups_and_the_inventory_s_variables(tmp_path):
    source = tmp_path / "inventory.yml"
    source.write_text(yaml.safe_dump(INVENTORY))
    dest = slice_inventory(source, ["g2"], tmp_path / "slice-1.yml", {"fleet_gpu_nodes": {"g1": "", "g2": ""}})
    got = yaml.safe_load(dest.read_text())
    assert got["all"]["hosts"] == {"g2": {"ansible_host": "127.0.1.2"}}
    assert got["all"]["vars"] == {"ansible_user": "ubuntu", "fleet_gpu_nodes": {"g1": "", "g2": ""}}
    assert got["all"]["children"]["gpu_nodes"]["hosts"] == {"g2": {}}
    assert got["all"]["children"]["gpu_nodes"]["children"]["tp_a"]["hosts"] == {"g2": {"rank": 0}}
    assert got["all"]["children"]["sglang_routers"]["hosts"] == {}


def test_a_host_the_inventory_lacks_is_named(tmp_path):
    source = tmp_path / "inventory.yml"
    source.write_text(yaml.safe_dump(INVENTORY))
    with pytest.raises(ValueError, match="has no host g9"):
        slice_inventory(source, ["g1", "g9"], tmp_path / "slice.yml")


def test_the_sliced_inventories_keep_the_group_vars_and_host_vars_beside_the_inventory(tmp_path):
    source = tmp_path / "inventory" / "hosts.yml"
    (tmp_path / "inventory" / "group_vars").mkdir(parents=True)
    (tmp_path / "inventory" / "group_vars" / "all.yml").write_text("lab: true\n")
    source.write_text(yaml.safe_dump(INVENTORY))
    first, second = awx_sliced_inventories(source, ["g1", "g2"], 2, tmp_path / "slices")
    assert [list(yaml.safe_load(p.read_text())["all"]["hosts"]) for p in (first, second)] == [["g1"], ["g2"]]
    assert (tmp_path / "slices" / "group_vars" / "all.yml").read_text() == "lab: true\n"
    assert not (tmp_path / "slices" / "host_vars").exists()


def test_the_documented_workflow_prepares_unsliced_rolls_out_in_slices_and_finishes_unsliced():
    jobs = load_awx_workflow(ROOT / "docs/awx-workflow.yml")
    assert [(job["name"], job["job_slice_count"] > 1) for job in jobs] == [
        ("prepare", False), ("rollout", True), ("finish", False)]
    tags = [job["job_tags"].split(",") for job in jobs]
    # Every stage of site.yml runs once, and those that orchestrate the whole fleet are not sliced.
    assert sorted(t for job in tags for t in job) == sorted([
        "preflight", "model", "cuda", "sglang", "flash_attn", "patches", "acceptance", "server", "router", "verify",
        "monitoring"])
    assert {"model", "server", "router", "monitoring"}.isdisjoint(tags[1])


@pytest.mark.parametrize("text, message", [
    ("[]", "a workflow is a list of job templates"),
    ("- {name: a, playbook: site.yml, job_tags: x}", "job 1 (a): give exactly name, playbook, job_tags, job_slice_count"),
    ("- {name: a, playbook: site.yml, job_tags: x, job_slice_count: '3'}", "job_slice_count is '3', not a int"),
    ("- {name: a, playbook: site.yml, job_tags: x, job_slice_count: 0}", "job_slice_count is 0; 1 runs unsliced"),
    ("- {name: a, playbook: nowhere.yml, job_tags: x, job_slice_count: 1}", "playbook nowhere.yml is not a file"),
])
def test_a_malformed_workflow_is_refused_naming_the_job_and_the_field(tmp_path, text, message):
    (tmp_path / "w.yml").write_text(text)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_awx_workflow(tmp_path / "w.yml")
