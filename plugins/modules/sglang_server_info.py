#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ask a running sglang server for its own view of its configuration and compare it with the intent."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_server_info
short_description: Compare a running sglang server's own configuration with what was asked for
description:
  - Reads C(/get_server_info) of the server, that is the server arguments it actually runs with
    (after its own defaults and adjustments) and its internal state (the speculative accept length).
  - Fails, naming every difference, when a key of I(expect) differs from what the server reports.
  - Names the key fields (C(api_key), C(admin_api_key)) that the answer holds as they are, not as
    C(<redacted>). sglang 0.5.9 hands them to every holder of the client key unless sglang_patches'
    C(server_info_redact_secrets) is applied. Their values are never returned.
  - Changes nothing.
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: The server's API key, if it has one.
    type: str
    default: ""
  expect:
    description: Server argument names and the values they must have (null for "off").
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for the answer.
    type: int
    default: 30
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The server runs what the inventory asked for
  sglang_server_info:
    api_key: "{{ sglang_server_api_key }}"
    expect:
      tp_size: 8
      speculative_algorithm: EAGLE3
      enable_flashinfer_allreduce_fusion: true
"""

RETURN = r"""
server_args:
  description: The keys of I(expect) as the server reports them, plus its version.
  type: dict
  returned: always
  sample: {"tp_size": 8, "speculative_algorithm": "EAGLE3", "version": "0.5.9"}
accept_length:
  description: The server's average speculative accept length so far, or null.
  type: float
  returned: always
  sample: 2.65
keys_shown:
  description: The names of the key fields the answer holds in the clear (their values are not returned).
  type: list
  elements: str
  returned: always
  sample: [api_key]
mismatches:
  description: One line for each expected key the server reports otherwise.
  type: list
  elements: str
  returned: always
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url


def same(expected, found):
    """True when the server's value is the asked one; numbers and booleans compare as values."""
    if expected is None or expected == "":
        return found in (None, "", False)
    if isinstance(expected, bool):
        return found is expected
    try:
        return float(expected) == float(found)
    except (TypeError, ValueError):
        return str(expected) == str(found)


def compare(expect, info):
    return ["%s: asked for %s, the server runs %s" % (key, json.dumps(value), json.dumps(info.get(key)))
            for key, value in sorted(expect.items()) if not same(value, info.get(key))]


SECRET_FIELDS = ("api_key", "admin_api_key")


def keys_shown(info):
    """The key fields the answer holds as they are: set, and not sglang's or our patch's placeholder."""
    return [k for k in SECRET_FIELDS if isinstance(info.get(k), str) and info[k] not in ("", "<redacted>")]


def accept_length(info):
    states = info.get("internal_states") or []
    value = states[0].get("avg_spec_accept_length") if states and isinstance(states[0], dict) else None
    return float(value) if value is not None else None


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:30000"},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "expect": {"type": "dict", "default": {}},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    headers = {"Authorization": "Bearer " + p["api_key"]} if p["api_key"] else {}
    try:
        response = open_url(p["url"].rstrip("/") + "/get_server_info", headers=headers, timeout=p["timeout"])
        info = json.loads(response.read())
    except Exception as exc:  # any transport or JSON error is the same answer for the operator
        module.fail_json(msg="%s/get_server_info did not answer: %s" % (p["url"].rstrip("/"), exc))
    if "decode" in info:  # a prefill/decode deployment reports per role
        info = info["decode"][0]
    mismatches = compare(p["expect"], info)
    result = {"changed": False, "mismatches": mismatches, "accept_length": accept_length(info),
              "keys_shown": keys_shown(info),
              "server_args": dict({k: info.get(k) for k in p["expect"]}, version=info.get("version"))}
    if mismatches:
        module.fail_json(msg="The server's own configuration differs from the inventory: " + "; ".join(mismatches),
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
