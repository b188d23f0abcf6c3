#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until an sglang server is healthy, serves its model and answers a known question right."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_health_gate
short_description: Gate a (re)started sglang server on health, its model list and a known answer
description:
  - Polls C(/health) until it answers 200, failing early when the systemd unit failed or
    restarted (a crash during model load), or when I(timeout) passes.
  - Then checks that C(/v1/models) lists I(model) and that a chat completion of I(prompt) at
    temperature 0 matches the regex I(expect), because a server can be healthy and still
    produce garbage (as FlashInfer's SM12x fusion path has done).
  - On failure the message carries the last lines of the unit's journal.
  - Talks only to I(url), normally the server on the host's loopback. Changes nothing.
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  service:
    description: The systemd unit that runs the server, watched for crashes; empty to skip.
    type: str
    default: sglang
  model:
    description: Model id C(/v1/models) must list and the chat request names.
    type: str
    required: true
  prompt:
    description: The known-answer question.
    type: str
    default: What is 17 + 25? Reply with the number only.
  expect:
    description: Regex the answer must match.
    type: str
    default: '\b42\b'
  api_key:
    description: Bearer token, when the server was started with C(--api-key).
    type: str
    default: ""
  timeout:
    description: Seconds to wait for C(/health).
    type: int
    default: 3600
  journal_lines:
    description: Journal lines to show on failure.
    type: int
    default: 30
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
- name: The server is healthy and answers right
  sglang_health_gate:
    url: http://127.0.0.1:30000
    model: /models/nvidia/Kimi-K2.5-NVFP4
"""

RETURN = r"""
waited:
  description: Seconds until /health answered 200.
  returned: success
  type: float
models:
  description: The model ids /v1/models lists.
  returned: success
  type: list
  elements: str
answer:
  description: The server's answer to the known-answer prompt.
  returned: success
  type: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
# What makes a worker fit to serve has one home, which the router host's healer shares.
from ansible.module_utils.router_api import AnswerError, known_answer, request


class GateError(Exception):
    pass


def unit_state(module, service):
    """(ActiveState, SubState, NRestarts) of the unit, or (None, None, 0) when there is none to watch."""
    if not service:
        return None, None, 0
    rc, out, _ = module.run_command(["systemctl", "show", "-p", "ActiveState", "-p", "SubState", "-p", "NRestarts",
                                     service])
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else {}
    return props.get("ActiveState"), props.get("SubState"), int(props.get("NRestarts") or 0)


def wait_healthy(module, p, sleep=time.sleep, clock=time.monotonic):
    start = clock()
    _, _, restarts0 = unit_state(module, p["service"])
    last = "no answer yet"
    while True:
        state, substate, restarts = unit_state(module, p["service"])
        if state == "failed":
            raise GateError("the unit %s failed while starting" % p["service"])
        # Its process exited and systemd waits RestartSec to start it again: a crash, seen at once.
        if (substate or "").startswith("auto-restart"):
            raise GateError("the unit %s crashed while starting (systemd is waiting to restart it)" % p["service"])
        if restarts > restarts0:
            raise GateError("the unit %s crashed and was restarted by systemd while starting" % p["service"])
        try:
            code, _ = request(p["url"] + "/health", p["api_key"], timeout=10)
            if code == 200:
                return clock() - start
            last = "HTTP %d" % code
        except Exception as exc:  # connection refused while the model loads, HTTP errors...
            last = str(exc)
        if clock() - start > p["timeout"]:
            raise GateError("/health did not answer 200 within %ds (last: %s)" % (p["timeout"], last))
        sleep(2)


def check_model_and_answer(p):
    try:
        return known_answer(p["url"], p["api_key"], p["model"], p["prompt"], p["expect"])
    except AnswerError as exc:
        raise GateError(str(exc))


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:30000"},
            "service": {"type": "str", "default": "sglang"},
            "model": {"type": "str", "required": True},
            "prompt": {"type": "str", "default": "What is 17 + 25? Reply with the number only."},
            "expect": {"type": "str", "default": r"\b42\b"},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "int", "default": 3600},
            "journal_lines": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    p["url"] = p["url"].rstrip("/")
    try:
        waited = wait_healthy(module, p)
        models, answer = check_model_and_answer(p)
    except (GateError, ValueError, KeyError, IndexError, OSError) as exc:
        journal = ""
        if p["service"]:
            _, journal, _ = module.run_command(["journalctl", "-u", p["service"], "-n", str(p["journal_lines"]),
                                                "--no-pager", "-o", "cat"])
        module.fail_json(msg="%s failed its health gate: %s. Last journal lines:\n%s"
                             % (p["service"] or p["url"], exc, journal.strip() or "(none)"))
    module.exit_json(changed=False, waited=round(waited, 1), models=models, answer=answer)


if __name__ == "__main__":
    main()
