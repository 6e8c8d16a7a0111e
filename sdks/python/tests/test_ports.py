"""A guest port from Python against real VMs: listed once it listens, opened by a signed URL and through a raw TCP
tunnel, its host name; a port where nothing listens is refused with the catalogue's code."""
from __future__ import annotations

import http.cookiejar
import urllib.request

import pytest

from sandglass import Sandbox, UnavailableError


def test_a_guest_server_is_listed_reached_by_url_and_by_tunnel(sbx: Sandbox) -> None:
    sbx.commands.run("mkdir -p /srv/py && echo served > /srv/py/index.html")
    server = sbx.commands.run("python3 -m http.server 8123 --bind 127.0.0.1 --directory /srv/py", background=True)
    try:
        # Ready once it listens: the listing is the condition, not a sleep.
        sbx.commands.run("for i in $(seq 600); do grep -q ':1FBB ' /proc/net/tcp && exit 0; sleep 0.1; done; exit 1")
        listed = [p for p in sbx.ports.list() if p["port"] == 8123]
        assert listed and listed[0]["public"] is False
        signed = sbx.ports.url(8123, form="path")
        assert f"/v1/sandboxes/{sbx.id}/ports/8123/?sandglass_url_token=" in signed["url"]
        # As a browser: the first answer sets the port's cookie and redirects to the address without the token.
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        with browser.open(signed["url"], timeout=60) as res:
            assert res.read() == b"served\n"
        assert sbx.get_host(8123).startswith(f"8123-{sbx.id}.")
        with sbx.ports.connect(8123, timeout_s=60) as tunnel:
            tunnel.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := tunnel.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"served\n")
        with pytest.raises(UnavailableError) as e:
            sbx.ports.connect(8124, timeout_s=60)
        assert e.value.code == "port_not_listening"
    finally:
        server.kill()
