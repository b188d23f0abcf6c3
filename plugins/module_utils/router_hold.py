# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A router's restart that refuses no client: its new connections are held, not refused.

sglang-router binds its own socket (no socket activation, no SO_REUSEPORT), so between the old router's
exit and the new one's bind nothing listens on its port, and a client's connect is refused. Held here
instead: for the time of the restart, an nftables rule drops the first packet (SYN) of every new
connection to the router's port. A client's TCP stack sends its SYN again (after 1 s, then 2 s, then
4 s more), and the retry that comes after the hold ends meets the new router. The clients see a slower
connect; none sees an error.

- The hold is an element of an nftables set with a timeout: the kernel ends it by itself, whatever
  becomes of the run that took it (killed, its SSH connection cut).
- The restart's own probes carry a socket mark the rule lets through, so the new router can be asked
  whether it serves before the hold ends.
- Connections already open are not touched: the old router finishes what they carry before it exits
  (sglang-router's graceful shutdown on SIGTERM), and the hold waits for them first, bounded.

The standard library and router_api (the router's API has one home) only: the module runs it on the
router's host.
"""
from __future__ import annotations

import http.client
import re
import socket
import urllib.parse
import urllib.request

from ansible.module_utils.router_api import request, workers as router_workers

TABLE = "sglang_fleet_router_hold"
# The restart's own probes: through the hold (socket.SO_MARK where Python names it; 36 on Linux).
MARK = 0x5F1E7
SO_MARK = getattr(socket, "SO_MARK", 36)


def ruleset():
    """The hold's table, for `nft -f`: `add` is a no-op for what exists already, so it is run before each
    hold. Priority: before the filter hooks of any firewall (a drop anywhere drops the packet)."""
    return ("add table inet %(t)s\n"
            "add set inet %(t)s held { type inet_service; flags timeout; }\n"
            "add chain inet %(t)s input { type filter hook input priority filter - 10; policy accept; }\n"
            "flush chain inet %(t)s input\n"
            "add rule inet %(t)s input tcp dport @held meta mark != %(m)#x tcp flags & (syn | ack) == syn drop\n"
            % {"t": TABLE, "m": MARK})


def hold(port, seconds):
    """The nft command that holds new connections to `port` for at most `seconds`."""
    return "add element inet %s held { %d timeout %ds }\n" % (TABLE, int(port), int(seconds))


def release(port):
    return "delete element inet %s held { %d }\n" % (TABLE, int(port))


# /proc/net/tcp{,6}: "sl local_address rem_address st ...", the local port in hex after the colon,
# st 01 ESTABLISHED and 0A LISTEN.
_ROW = re.compile(r"^\s*\d+:\s+[0-9A-Fa-f]+:([0-9A-Fa-f]{4})\s+[0-9A-Fa-f]+:[0-9A-Fa-f]{4}\s+([0-9A-Fa-f]{2})\s")


def sockets(tables, port, state):
    """How many sockets with local port `port` are in `state` ("01" established, "0A" listening), from the
    texts of /proc/net/tcp and /proc/net/tcp6."""
    count = 0
    for text in tables:
        for line in text.splitlines():
            found = _ROW.match(line)
            if found and int(found.group(1), 16) == int(port) and found.group(2).upper() == state:
                count += 1
    return count


def healthy_in_metrics(text):
    """The workers a router counts healthy, from its Prometheus exposition (smg_worker_health 1)."""
    healthy = set()
    for line in text.splitlines():
        found = re.match(r'^smg_worker_health\{[^}]*worker="([^"]+)"[^}]*\}\s+([0-9.eE+-]+)\s*$', line)
        if found and float(found.group(2)) == 1:
            healthy.add(found.group(1).rstrip("/"))
    return healthy


def healthy_urls(rows):
    """The healthy workers of a router's worker list (router_api.worker_rows), by URL."""
    return {str(w["url"] or "").rstrip("/") for w in rows if w["healthy"]}


class _MarkedConnection(http.client.HTTPConnection):
    def connect(self):
        error = OSError("no address for %s" % self.host)
        for family, kind, proto, _, address in socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_MARK, MARK)
                sock.settimeout(self.timeout)
                sock.connect(address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            self.sock = sock
            return
        raise error


class _MarkedHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_MarkedConnection, req)


# Through the hold, and never through a proxy (the router is this host's own).
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _MarkedHandler)


def get(url, timeout=5):
    """The body of GET `url`, asked through the hold."""
    return request(url, timeout=timeout, opener=_OPENER)[1]


def workers(router_url, api_key, timeout=5):
    """The workers the router lists healthy, asked through the hold (the router API's own call and reading)."""
    return healthy_urls(router_workers(router_url.rstrip("/"), api_key, timeout=timeout, opener=_OPENER))


def port_of(url):
    parsed = urllib.parse.urlsplit(url)
    return parsed.port or (443 if parsed.scheme == "https" else 80)
