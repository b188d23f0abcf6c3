"""What the scenario's three test files share: the fleet's names, the upgrade an operator runs, the second
release they roll out, and reads of a node's server and install."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
SITE = ROOT / "site.yml"
NODES = ["chg-gpu-1", "chg-gpu-2"]
UNIT = "/etc/systemd/system/sglang.service"
STAGES = "sglang,flash_attn,patches,server"  # an upgrade, as an operator runs it
# A second release: the same wheels with one patch switched off, which is a new install id.
RELEASE_2 = {"sglang_patches_redact_secrets": False}


def nodes(host):
    return [host.get_host("podman://" + n) for n in NODES]


def started_at(node):
    """When the node's server last started (a restart changes it)."""
    return node.check_output("systemctl show sglang -p ActiveEnterTimestampMonotonic")


def current(node):
    """The install the node's `current` link names."""
    return node.check_output("readlink /opt/sglang/current").split("/")[-1]
