"""The one HTTP transport of the Python SDK (http.client, no redirects followed) and where it finds the server: explicit
arguments, then SANDGLASS_URL / SANDGLASS_API_KEY, then the server.json a local `sandglass up` writes."""
from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO, Dict, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote, urlencode, urlsplit

from ._time import parse_time
from .errors import AuthenticationError, SandglassError, error_from_response, error_of

DEFAULT_REQUEST_TIMEOUT_S = 60.0
Query = Mapping[str, Union[str, int, bool, None]]


@dataclass(frozen=True)
class Config:
    api_url: str
    api_key: str
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S


def resolve_config(api_url: Optional[str] = None, api_key: Optional[str] = None, request_timeout_s: Optional[float] = None) -> Config:
    """Fills in what the caller left out; raises `unauthenticated` saying what to do when nothing is found."""
    url = api_url or os.environ.get("SANDGLASS_URL") or None
    key = api_key or os.environ.get("SANDGLASS_API_KEY") or None
    if url is None or key is None:
        home = os.environ.get("SANDGLASS_HOME") or os.path.join(os.path.expanduser("~"), ".sandglass")
        try:
            with open(os.path.join(home, "server.json"), encoding="utf-8") as f:
                server = json.load(f)
            url = url or server["url"]
            if key is None:
                with open(server["adminKeyFile"], encoding="utf-8") as f:
                    key = f.read().strip()
        except (OSError, ValueError, KeyError):
            pass
    if not url or not key:
        raise AuthenticationError(
            "unauthenticated",
            "No Sandglass server configured: run `sandglass up`, or set SANDGLASS_URL and SANDGLASS_API_KEY (or pass api_url and api_key).",
        )
    return Config(url.rstrip("/"), key, request_timeout_s or DEFAULT_REQUEST_TIMEOUT_S)


class Response:
    """A response whose body is read whole (`body`) or, for streams, left on the connection (`raw`)."""

    def __init__(self, status: int, headers: Mapping[str, str], raw: http.client.HTTPResponse, conn: http.client.HTTPConnection) -> None:
        self.status = status
        self.headers = headers
        self.raw = raw
        self._conn = conn

    def read(self) -> bytes:
        try:
            data = self.raw.read()
        except BaseException:
            self._conn.close()
            raise
        # Read to its end, the connection serves the next request to the same server (keep-alive).
        if self.raw.will_close:
            self._conn.close()
        else:
            _POOL.put(self._conn)
        return data

    def json(self) -> Any:
        data = self.read()
        return json.loads(data) if data else None

    def iter_chunks(self, size: int = 65536) -> Iterator[bytes]:
        try:
            while True:
                chunk = self.raw.read1(size) if hasattr(self.raw, "read1") else self.raw.read(size)
                if not chunk:
                    return
                yield chunk
        finally:
            self._conn.close()

    def close(self) -> None:
        self._conn.close()

    def shutdown(self) -> None:
        """Ends a stream being read in another thread: its blocked read returns at once (close alone would not wake it)."""
        # A response that closes its connection has left the connection without its socket: the reader still has it.
        sock = self._conn.sock or getattr(getattr(self.raw.fp, "raw", None), "_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Pool:
    """Idle keep-alive connections by server, one set per thread (http.client connections are not thread-safe)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _idle(self) -> Dict[Tuple[str, str, Optional[int]], List[http.client.HTTPConnection]]:
        if not hasattr(self._local, "idle"):
            self._local.idle = {}
        return self._local.idle  # type: ignore[no-any-return]

    def take(self, scheme: str, host: str, port: Optional[int]) -> Optional[http.client.HTTPConnection]:
        idle = self._idle().get((scheme, host, port))
        return idle.pop() if idle else None

    def put(self, conn: http.client.HTTPConnection) -> None:
        scheme = "https" if isinstance(conn, http.client.HTTPSConnection) else "http"
        self._idle().setdefault((scheme, conn.host, conn.port), []).append(conn)


_POOL = _Pool()


def path_of(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


def send(
    base: str,
    path: str,
    token: str,
    method: str,
    *,
    query: Optional[Query] = None,
    json_body: Any = None,
    body: "Optional[bytes | BinaryIO]" = None,
    content_type: Optional[str] = None,
    timeout_s: Optional[float] = DEFAULT_REQUEST_TIMEOUT_S,
) -> Response:
    """One request; a non-2xx answer raises the catalogued error it carries, a redirect is an error naming its target."""
    target = urlsplit(base)
    q = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in (query or {}).items() if v is not None}
    url_path = (target.path.rstrip("/") + path) + (f"?{urlencode(q)}" if q else "")
    headers: Dict[str, str] = {"authorization": f"Bearer {token}", "accept": "application/json"}
    data: "Optional[bytes | BinaryIO]" = body
    if json_body is not None:
        data = json.dumps({k: v for k, v in json_body.items() if v is not None} if isinstance(json_body, dict) else json_body).encode()
        headers["content-type"] = "application/json"
    elif body is not None:
        headers["content-type"] = content_type or "application/octet-stream"
        if not isinstance(body, bytes):
            # A file is sent from its start, with its length: a retry below sends it whole again.
            headers["content-length"] = str(body.seek(0, os.SEEK_END))
    cls = http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection
    host = target.hostname or "127.0.0.1"
    reused = _POOL.take(target.scheme, host, target.port)
    conn = reused or cls(host, target.port, timeout=timeout_s)
    conn.timeout = timeout_s
    if conn.sock is not None:
        conn.sock.settimeout(timeout_s)
    try:
        _rewind(data)
        conn.request(method, url_path, body=data, headers=headers)
        raw = conn.getresponse()
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as err:
        conn.close()
        if reused is None:
            raise error_of("connection_failed", f"{method} {base}{path}: {err}") from err
        # The server closed the idle connection before our request reached it: once more, on a new one.
        conn = cls(host, target.port, timeout=timeout_s)
        try:
            _rewind(data)
            conn.request(method, url_path, body=data, headers=headers)
            raw = conn.getresponse()
        except OSError as again:
            conn.close()
            raise error_of("connection_failed", f"{method} {base}{path}: {again}") from again
    except OSError as err:
        conn.close()
        raise error_of("connection_failed", f"{method} {base}{path}: {err}") from err
    res = Response(raw.status, {k.lower(): v for k, v in raw.getheaders()}, raw, conn)
    if 300 <= raw.status < 400:
        res.close()
        raise error_of("protocol_error", f"{method} {path} was redirected to {raw.getheader('location')}; not followed", status=raw.status)
    if raw.status >= 400:
        text = res.read()
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        raise error_from_response(raw.status, parsed)
    return res


def _rewind(data: "Optional[bytes | BinaryIO]") -> None:
    if data is not None and not isinstance(data, bytes):
        data.seek(0)


class ControlPlane:
    def __init__(self, config: Config) -> None:
        self.config = config

    def request(self, method: str, path: str, **kw: Any) -> Response:
        kw.setdefault("timeout_s", self.config.request_timeout_s)
        return send(self.config.api_url, path, self.config.api_key, method, **kw)

    def json(self, method: str, path: str, **kw: Any) -> Any:
        return self.request(method, path, **kw).json()


class DataPlane:
    """The gateway side of one sandbox: every call carries a fresh enough access token from the control plane."""

    def __init__(self, control_plane: ControlPlane, sandbox_id: str, access: Optional[Dict[str, Any]] = None) -> None:
        self.control_plane = control_plane
        self.sandbox_id = sandbox_id
        self._access: Optional[Dict[str, Any]] = None
        self._refresh_at = 0.0
        if access:
            self._adopt(access)

    def _adopt(self, access: Dict[str, Any]) -> Dict[str, Any]:
        if not access.get("token") or not access.get("gatewayUrl") or not access.get("expiresAt"):
            raise error_of("protocol_error", f"the control plane returned an unusable access grant for {self.sandbox_id}")
        expires = parse_time(access["expiresAt"]).timestamp()
        self._refresh_at = expires - min(60.0, max(0.0, (expires - time.time()) / 2))
        self._access = access
        return access

    def access(self, force: bool = False) -> Dict[str, Any]:
        if not force and self._access is not None and time.time() < self._refresh_at:
            return self._access
        return self._adopt(self.control_plane.json("POST", path_of("v1", "sandboxes", self.sandbox_id, "access")))

    def request(self, method: str, subpath: str, **kw: Any) -> Response:
        kw.setdefault("timeout_s", self.control_plane.config.request_timeout_s)
        path = path_of("v1", "sandboxes", self.sandbox_id) + subpath
        used = self.access()
        try:
            return send(used["gatewayUrl"], path, used["token"], method, **kw)
        except AuthenticationError:
            fresh = self.access(force=True)
            return send(fresh["gatewayUrl"], path, fresh["token"], method, **kw)
        except SandglassError as err:
            # A sandbox that moved to another node: the fresh grant names its gateway now.
            if err.code not in ("sandbox_not_found", "connection_failed"):
                raise
            fresh = self.access(force=True)
            if fresh["gatewayUrl"] == used["gatewayUrl"]:
                raise
            return send(fresh["gatewayUrl"], path, fresh["token"], method, **kw)

    def json(self, method: str, subpath: str, **kw: Any) -> Any:
        return self.request(method, subpath, **kw).json()
