# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring stage's basic auth: the bcrypt hash each host's web configuration holds, and what is
wrong with the settings before anything changes."""
from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_monitoring_web_hash
short_description: The bcrypt hash of the monitoring password, the same on every run for one host and user
description:
  - The C(basic_auth_users) value of the exporter-toolkit web configuration of Prometheus, Alertmanager and
    node_exporter, a C($2b$) hash of cost I(rounds).
  - bcrypt's salt is random in every library, so a fresh hash on every run would rewrite the file and restart
    the daemons each time, and C(--check --diff) would always report a change. The salt here is derived from
    the host and the user (HMAC-SHA256 under a fixed label), never from the password; a salt computed
    quickly from the password would let anyone holding the file test guesses at HMAC speed instead of
    bcrypt's. Each host and user still has its own salt, and a new password gives a new hash.
positional: _input, host, user
options:
  _input:
    description: The password (C(fleet_monitoring_web_password)).
    type: str
    required: true
  host:
    description: The host whose web configuration holds the hash (its inventory name).
    type: str
    required: true
  user:
    description: The basic-auth user (C(fleet_monitoring_web_user)).
    type: str
    required: true
  rounds:
    description: bcrypt's cost (2^rounds iterations); each daemon checks a scrape's password at this cost.
    type: int
    default: 10
"""

EXAMPLES = r"""
basic_auth_users:
  fleet: "{{ fleet_monitoring_web_password | fleet_monitoring_web_hash(inventory_hostname, 'fleet') }}"
"""

RETURN = r"""
_value:
  description: A bcrypt hash, C($2b$<rounds>$) then 53 characters.
  type: str
"""

import base64
import hashlib
import hmac

from ansible.errors import AnsibleFilterError

_LABEL = b"sglang-fleet monitoring web salt v1"
# bcrypt's base64: the standard one's bit order with its own alphabet, unpadded.
_STANDARD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BCRYPT = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_TO_BCRYPT = str.maketrans(_STANDARD, _BCRYPT)


def _salt(host, user):
    """bcrypt's 22-character salt (16 bytes) for this host and user."""
    digest = hmac.new(_LABEL, ("%s\0%s" % (host, user)).encode("utf-8"), hashlib.sha256).digest()[:16]
    return base64.b64encode(digest).decode("ascii").rstrip("=").translate(_TO_BCRYPT)


def fleet_monitoring_web_problems(password, user, cert_file="", key_file=""):
    """What is wrong with the monitoring stage's web settings, one line each, naming the setting; [] when
    nothing is. Auth is always on: an empty password is refused, not switched off."""
    problems = []
    password = "" if password is None else str(password)
    if not password:
        problems.append("fleet_monitoring_web_password is empty: Prometheus, Alertmanager and node_exporter "
                        "answer only with basic auth; set it in the inventory (a vaulted variable)")
    elif password != password.strip():
        problems.append("fleet_monitoring_web_password starts or ends with whitespace, which Prometheus "
                        "strips from its password file")
    elif len(password.encode("utf-8")) > 72:
        problems.append("fleet_monitoring_web_password is longer than bcrypt's 72 bytes")
    user = "" if user is None else str(user)
    if not user or ":" in user or user != user.strip():
        problems.append("fleet_monitoring_web_user %r is no basic-auth user name (empty, a colon or "
                        "surrounding whitespace)" % user)
    if bool(cert_file) != bool(key_file):
        problems.append("fleet_monitoring_web_tls_cert_file and fleet_monitoring_web_tls_key_file go together: "
                        "one is set, the other is empty")
    return problems


def fleet_monitoring_web_hash(password, host, user, rounds=10):
    import bcrypt  # the controller's (requirements.txt); imported here so that the other filters load without it

    problems = fleet_monitoring_web_problems(password, user)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    salt = ("$2b$%02d$%s" % (int(rounds), _salt(host, user))).encode("ascii")
    return bcrypt.hashpw(str(password).encode("utf-8"), salt).decode("ascii")


class FilterModule(object):
    def filters(self):
        return {
            "fleet_monitoring_web_hash": fleet_monitoring_web_hash,
            "fleet_monitoring_web_problems": fleet_monitoring_web_problems,
        }
