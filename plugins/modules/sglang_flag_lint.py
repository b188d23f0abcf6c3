#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a sglang command line against the installed sglang's own argument definitions."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_flag_lint
short_description: Check sglang server flags against the installed release, without a GPU
description:
  - Reads every C(add_argument) call of the installed C(sglang/srt/server_args.py) with the
    C(ast) module (no import of sglang or torch) and checks I(argv) as argparse would, including
    unique-prefix abbreviations, the number of values of each flag and C(choices).
  - Fails naming each bad flag, the installed sglang release and the closest known flags.
  - Also refuses the flags and the environment whose code calls a system call the server unit's
    C(SystemCallFilter=@system-service ~@privileged) kills (SIGSYS), naming the directive;
    C(--moe-a2a-backend flashinfer) and C(--speculative-moe-a2a-backend flashinfer) (flashinfer's
    MoE all-to-all takes its peers' memory with C(pidfd_getfd)), and C(PYTORCH_CUDA_ALLOC_CONF) or
    C(PYTORCH_ALLOC_CONF) with C(expandable_segments:True) (torch opens another process's CUDA
    tensor from an expandable segment with C(pidfd_getfd)). The evidence is in
    C(plugins/module_utils/sglang_sandbox.py).
  - Read-only.
options:
  site_packages:
    description: site-packages of the venv that holds sglang.
    type: path
    required: true
  argv:
    description: The arguments after C(python -m sglang.launch_server).
    type: list
    elements: str
    required: true
  env:
    description: The environment the server unit gives sglang (the unit's C(Environment=)).
    type: dict
    default: {}
  gpus_per_node:
    description: The host's GPUs; C(--tp) must be this times I(nnodes). Unset, C(--tp) is not checked.
    type: int
  nnodes:
    description: Nodes in the server's group.
    type: int
    default: 1
attributes:
  check_mode:
    support: full
    description: In check mode it reports what it would change, and changes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The server flags are known to the installed sglang
  sglang_flag_lint:
    site_packages: /opt/sglang/venv/lib/python3.12/site-packages
    argv: [--model-path, /models/Kimi-K2.5-NVFP4, --tp, "8", --enable-flashinfer-allreduce-fusion]
"""

RETURN = r"""
sglang_version:
  description: The installed sglang release.
  returned: always
  type: str
  sample: 0.5.9
known_flags:
  description: Number of distinct flags the release defines.
  returned: always
  type: int
  sample: 331
parsed:
  description: The argv as argparse would read it, by destination name.
  returned: success
  type: dict
  sample: {model_path: /models/Kimi-K2.5-NVFP4, tensor_parallel_size: "8"}
problems:
  description: What is wrong, one sentence each (the command line's, then what the unit's sandbox would kill).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dist_info import dist_version
from ansible.module_utils.sglang_args import combination_problems, lint, read_flags
from ansible.module_utils.sglang_sandbox import problems as sandbox_problems


def main():
    module = AnsibleModule(
        argument_spec={"site_packages": {"type": "path", "required": True},
                       "argv": {"type": "list", "elements": "str", "required": True},
                       "env": {"type": "dict", "default": {}},
                       "gpus_per_node": {"type": "int"},
                       "nnodes": {"type": "int", "default": 1}},
        supports_check_mode=True,
    )
    site = module.params["site_packages"]
    version = dist_version(site, "sglang")
    try:
        flags = read_flags(site)
    except (OSError, SyntaxError) as exc:
        module.fail_json(msg="cannot read sglang's server_args.py under %s: %s" % (site, exc), sglang_version=version)
    parsed, problems = lint(module.params["argv"], flags)
    if not problems:  # a command line argparse refuses has no combination to judge
        problems = combination_problems(parsed, module.params["env"], module.params["gpus_per_node"],
                                        module.params["nnodes"])
    killed = sandbox_problems(parsed, module.params["env"])
    result = {"sglang_version": version, "known_flags": len({id(f) for f in flags.values()}),
              "problems": problems + killed}
    if problems or killed:
        msg = []
        if problems:
            msg.append("sglang %s does not accept this command line: %s" % (version, "; ".join(problems)))
        if killed:
            msg.append("the server unit's sandbox would kill sglang %s: %s" % (version, "; ".join(killed)))
        module.fail_json(msg=". ".join(msg), **result)
    module.exit_json(changed=False, parsed=parsed, **result)


if __name__ == "__main__":
    main()
