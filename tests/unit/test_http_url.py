"""Where a client reaches a server from its listen address."""
import pytest

from http_url import http_url


@pytest.mark.parametrize("host, wildcard, url", [
    ("127.0.1.2", "127.0.0.1", "http://127.0.1.2:30000"),
    ("0.0.0.0", "127.0.0.1", "http://127.0.0.1:30000"),        # this host's own clients
    ("0.0.0.0", "gpu-1.example.com", "http://gpu-1.example.com:30000"),  # another host's (the router)
    ("::", "fd00::1", "http://[fd00::1]:30000"),
    ("fd00::2", "127.0.0.1", "http://[fd00::2]:30000"),
])
def test_listen_address_to_url(host, wildcard, url):
    assert http_url(host, 30000, wildcard) == url
