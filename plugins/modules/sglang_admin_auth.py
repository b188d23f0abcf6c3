#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Show that a running sglang server keeps its admin routes behind the admin key."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_admin_auth
short_description: Show that an sglang server's admin routes take the admin key and refuse the client key
description:
  - sglang 0.5.9 marks its admin routes (update_weights_from_disk, load_lora_adapter, /hicache/* ...)
    ADMIN_OPTIONAL; a server started with --admin-api-key opens them to that key alone.
  - Asks one admin route that only reads (C(GET /hicache/storage-backend), which 0.5.9 answers with its
    HiCache settings) twice, with the client key and with the admin key. Fails unless the client key is
    refused (401 or 403) and the admin key gets through (any other answer).
  - Returns the two statuses only, never a key or an answer's body. Changes nothing.
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: The client key (sglang_server_api_key); may be empty.
    type: str
    default: ""
  admin_api_key:
    description: The admin key (sglang_server_admin_api_key).
    type: str
    required: true
  route:
    description: The admin route asked, with GET.
    type: str
    default: /hicache/storage-backend
  timeout:
    description: Seconds to wait for each answer.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: It asks two read-only questions and changes nothing.
  diff_mode:
    support: none
    description: It returns no diff.
author:
  - sglang-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: The admin routes take the admin key only
  sglang_admin_auth:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_server_api_key }}"
    admin_api_key: "{{ sglang_server_admin_api_key }}"
"""

RETURN = r"""
route:
  description: The admin route asked.
  type: str
  returned: always
client_key_status:
  description: The HTTP status the client key got (401 or 403 when the route is kept from it).
  type: int
  returned: always
admin_key_status:
  description: The HTTP status the admin key got.
  type: int
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible.module_utils.six.moves.urllib.error import HTTPError

REFUSED = (401, 403)


def judge(route, client_status, admin_status):
    """What is wrong with the two answers, [] when the admin route is the admin key's alone."""
    problems = []
    if client_status not in REFUSED:
        problems.append("the client key got %s on the admin route %s, not 401 or 403: the admin routes are "
                        "the client key's too (is the server running with its admin key?)" % (client_status, route))
    if admin_status in REFUSED:
        problems.append("the admin key got %s on the admin route %s: the server has another admin key"
                        % (admin_status, route))
    return problems


def status_of(url, key, timeout):
    """The HTTP status of a GET with `key` as its bearer token (none without a key)."""
    headers = {"Authorization": "Bearer " + key} if key else {}
    try:
        with open_url(url, method="GET", headers=headers, timeout=timeout) as response:
            return response.getcode()
    except HTTPError as error:
        return error.code


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:30000"},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "admin_api_key": {"type": "str", "required": True, "no_log": True},
            "route": {"type": "str", "default": "/hicache/storage-backend"},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    url = p["url"].rstrip("/") + p["route"]
    try:
        client, admin = status_of(url, p["api_key"], p["timeout"]), status_of(url, p["admin_api_key"], p["timeout"])
    except Exception as exc:  # any transport error is the same answer for the operator
        module.fail_json(msg="%s did not answer: %s" % (url, exc))
    result = {"changed": False, "route": p["route"], "client_key_status": client, "admin_key_status": admin}
    problems = judge(p["route"], client, admin)
    if problems:
        module.fail_json(msg="; ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
