"""`sandbox.ports`: what a sandbox serves: its listening ports, their URLs (by host name or path, signed for browsers),
who may open them, and a raw TCP tunnel to one, as packages/sdk/src/ports.ts has them."""
from __future__ import annotations

import json
import socket
import ssl
from typing import Any, Dict, List, Optional
from urllib.parse import urljoin, urlsplit

from ._http import DataPlane, path_of
from .errors import error_from_response, error_of

# The gateway's default port domain (SANDGLASS_PORT_DOMAIN on the gateway sets another).
DEFAULT_PORT_DOMAIN = "sandglass.localhost"
# The upgrade the gateway's tunnel route answers (raw TCP after it).
_TUNNEL_PROTOCOL = "sandglass-tcp"


class Ports:
    def __init__(self, dp: DataPlane) -> None:
        self._dp = dp
        # The domain the gateway last named (list, url); the default until then.
        self._domain = DEFAULT_PORT_DOMAIN

    def list(self) -> List[Dict[str, Any]]:
        """The guest's listening TCP sockets ({"port", "address", "public"})."""
        reply = self._dp.json("GET", "/ports")
        self._domain = reply["domain"]
        return list(reply["ports"])

    def url(self, port: int, *, expires_in_s: Optional[int] = None, form: str = "host") -> Dict[str, str]:
        """A short-lived URL a browser can open ({"url", "expiresAt"}): its first use sets a cookie for that port and
        drops the token from the address; anyone holding it opens the port until it expires. form="host" (default):
        `<port>-<id>.<domain>`, an origin of its own; form="path": on the gateway's origin, no DNS needed."""
        reply = self._dp.json("POST", "/port-urls", json_body={"port": port, "expiresInS": expires_in_s})
        self._domain = reply["host"][reply["host"].index(".") + 1 :]
        gateway = urlsplit(self._dp.access()["gatewayUrl"])
        if form != "path":
            suffix = f":{gateway.port}" if gateway.port else ""
            return {"url": f"{gateway.scheme}://{reply['host']}{suffix}/?sandglass_url_token={reply['token']}", "expiresAt": reply["expiresAt"]}
        return {"url": urljoin(f"{gateway.scheme}://{gateway.netloc}/", reply["path"]), "expiresAt": reply["expiresAt"]}

    def set_public(self, port: int, public: bool) -> None:
        """Opens the port to requests without any credential (True) or makes it private again; each change is an event."""
        self._dp.request("PUT", f"/public-ports/{int(port)}", json_body={"public": public}).read()

    def host(self, port: int) -> str:
        """`<port>-<sandbox id>.<domain>[:gateway port]`, E2B's get_host: a request to it needs the sandbox's access
        token (X-Sandglass-Access-Token) unless the port is public."""
        gateway = urlsplit(self._dp.access()["gatewayUrl"])
        return f"{int(port)}-{self._dp.sandbox_id}.{self._domain}" + (f":{gateway.port}" if gateway.port else "")

    def connect(self, port: int, *, timeout_s: Optional[float] = None) -> socket.socket:
        """A raw TCP connection to a guest port (a database, a debugger: anything, not only HTTP), tunnelled through the
        gateway and the agent to the guest's loopback; port_not_listening when nothing listens there. The caller
        closes the socket."""
        access = self._dp.access()
        gateway = urlsplit(access["gatewayUrl"])
        host = gateway.hostname or "127.0.0.1"
        sock: socket.socket = socket.create_connection((host, gateway.port or (443 if gateway.scheme == "https" else 80)), timeout=timeout_s)
        try:
            if gateway.scheme == "https":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            target = gateway.path.rstrip("/") + path_of("v1", "sandboxes", self._dp.sandbox_id, "tunnel", str(int(port)))
            sock.sendall(
                (
                    f"GET {target} HTTP/1.1\r\nhost: {gateway.netloc}\r\nconnection: Upgrade\r\nupgrade: {_TUNNEL_PROTOCOL}\r\n"
                    f"x-sandglass-access-token: {access['token']}\r\n\r\n"
                ).encode()
            )
            # Byte by byte up to the blank line, so nothing of the guest's stream is taken with the headers.
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(1)
                if not chunk:
                    raise error_of("protocol_error", f"the gateway closed the tunnel to port {port} before answering")
                head += chunk
                if len(head) > 65536:
                    raise error_of("protocol_error", "the gateway's answer to the tunnel has no end of headers")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ")[1])
            if status == 101:
                return sock
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            body = b""
            length = int(headers.get("content-length", "0"))
            while len(body) < length:
                chunk = sock.recv(length - len(body))
                if not chunk:
                    break
                body += chunk
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            raise error_from_response(status, parsed)
        except BaseException:
            sock.close()
            raise
