# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The URL a client uses for a server's listen address."""
from __future__ import annotations

DOCUMENTATION = r"""
name: http_url
short_description: The http URL of a listen address and port, as a client must write it
description:
  - A server listening on every address (C(0.0.0.0) or C(::)) is reached at I(wildcard_host)
    instead; an IPv6 address is put in brackets.
positional: _input, port, wildcard_host
options:
  _input:
    description: The listen address.
    type: str
    required: true
  port:
    description: The port.
    type: int
    required: true
  wildcard_host:
    description: Where to reach a server that listens on every address.
    type: str
    default: 127.0.0.1
"""

EXAMPLES = r"""
- name: Where this host's clients reach the server
  ansible.builtin.debug:
    msg: "{{ '0.0.0.0' | http_url(30000) }}"   # http://127.0.0.1:30000
"""

RETURN = r"""
_value:
  description: The URL, for example C(http://[fd00::1]:30000).
  type: str
"""

WILDCARDS = ("0.0.0.0", "::")


def http_url(host, port, wildcard_host="127.0.0.1"):
    host = str(host)
    if host in WILDCARDS:
        host = str(wildcard_host)
    return "http://%s:%s" % ("[%s]" % host if ":" in host else host, port)


class FilterModule(object):
    def filters(self):
        return {"http_url": http_url}
