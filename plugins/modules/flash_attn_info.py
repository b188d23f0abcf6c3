#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read what a flash-attn build on this host would depend on, and what is installed."""
from __future__ import annotations

DOCUMENTATION = r"""
module: flash_attn_info
short_description: What a flash-attn build on this host depends on, and the installed flash-attn
description:
  - Asks the venv's own interpreter for its Python version, its wheel platform and the installed
    versions of torch and flash-attn (package metadata only, nothing is imported).
  - Asks the toolkit's nvcc for its CUDA release.
  - Reads the host's available memory and usable cores, which size the compile.
  - Changes nothing; reports null for what is missing (no venv yet, no torch, no nvcc), so the
    caller can tell a host not ready yet under check mode from a broken one.
options:
  venv_dir:
    description: The venv flash-attn is built for.
    type: path
    required: true
  cuda_home:
    description: The CUDA toolkit whose C(bin/nvcc) compiles it.
    type: path
    required: true
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The build inputs of this host are known
  flash_attn_info:
    venv_dir: /opt/sglang/venv
    cuda_home: /usr/local/cuda-13.0
  register: flash_attn_host
"""

RETURN = r"""
python:
  description: The venv's Python release, or null without a venv.
  type: str
  returned: always
  sample: "3.12"
platform:
  description: The venv's wheel platform tag.
  type: str
  returned: always
  sample: linux_x86_64
torch:
  description: The installed torch version, with its local label, or null.
  type: str
  returned: always
  sample: 2.9.1+cu130
flash_attn:
  description: The installed flash-attn version, or null.
  type: str
  returned: always
  sample: 2.8.3+build.1c0ffee12345
cuda_release:
  description: The release nvcc reports, or null without nvcc.
  type: str
  returned: always
  sample: "13.0"
cuda_version:
  description: nvcc's full version, or null.
  type: str
  returned: always
  sample: 13.0.88
mem_available_mb:
  description: MemAvailable from /proc/meminfo.
  type: int
  returned: always
  sample: 1031712
cpus:
  description: Cores this process may run on.
  type: int
  returned: always
  sample: 128
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.nvcc import parse_nvcc

# Run by the venv's interpreter: its version and platform, and two installed versions.
VENV_PROBE = r"""
import json, sys, sysconfig
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
print(json.dumps({"python": "%d.%d" % sys.version_info[:2],
                  "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
                  "torch": version("torch"), "flash_attn": version("flash-attn")}))
"""


def mem_available_mb(path="/proc/meminfo"):
    with open(path) as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv_dir=dict(type="path", required=True),
            cuda_home=dict(type="path", required=True),
        ),
        supports_check_mode=True,
    )
    result = dict(changed=False, python=None, platform=None, torch=None, flash_attn=None,
                  cuda_release=None, cuda_version=None)

    python = os.path.join(module.params["venv_dir"], "bin", "python")
    if os.access(python, os.X_OK):
        rc, out, err = module.run_command([python, "-c", VENV_PROBE])
        if rc != 0:
            module.fail_json(msg="%s could not report its packages: %s" % (python, err.strip()), **result)
        result.update(json.loads(out))

    nvcc = os.path.join(module.params["cuda_home"], "bin", "nvcc")
    if os.access(nvcc, os.X_OK):
        rc, out, _ = module.run_command([nvcc, "--version"])
        if rc == 0:
            result["cuda_release"], result["cuda_version"] = parse_nvcc(out)

    result["mem_available_mb"] = mem_available_mb()
    result["cpus"] = usable_cpus()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
