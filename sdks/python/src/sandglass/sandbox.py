"""`Sandbox`: create, connect, list and kill sandboxes; snapshots, timeline, fork, pause and resume; network policy.
Shaped like the TypeScript SDK (packages/sdk/src/sandbox.ts) and like E2B's Python SDK where the two meet."""
from __future__ import annotations

import json
import re
import threading
from datetime import datetime
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Set

from ._http import Config, ControlPlane, DataPlane, path_of, resolve_config
from ._time import Time, iso_time
from .commands import Commands
from .errors import NotFoundError, error_of
from .files import Files
from .models import SandboxInfo, SandboxMetric
from .ports import Ports
from .pty import Pty
from .replay import ReplayFork, run_replay


def _connection(api_url: Optional[str], api_key: Optional[str], request_timeout_s: Optional[float]) -> ControlPlane:
    return ControlPlane(resolve_config(api_url, api_key, request_timeout_s))


# What a sandbox's timeout may do (create's on_timeout).
ON_TIMEOUT = ("kill", "pause")

# The largest page of events the control plane serves.
EVENTS_PAGE = 1000


def _sandbox_path(sandbox_id: str, *rest: str) -> str:
    return path_of("v1", "sandboxes", sandbox_id, *rest)


def parse_fork_source(source: str) -> Dict[str, str]:
    """`snap_…`, `sbx_…` or `sbx_…@<ISO time>` as the fork request's source; anything else is invalid_argument."""
    if re.fullmatch(r"snap_[A-Za-z0-9]+", source):
        return {"snapshotId": source}
    m = re.fullmatch(r"(sbx_[A-Za-z0-9]+)(?:@(.+))?", source, re.S)
    if m:
        return {"sandboxId": m.group(1)} if m.group(2) is None else {"sandboxId": m.group(1), "at": iso_time(m.group(2), "from")}
    raise error_of(
        "invalid_argument",
        f"'{source}' is not a fork source: give a snapshot id (snap_…), a sandbox id (sbx_…) or sbx_…@<ISO time>",
        status=400,
        details={"field": "from"},
    )


class _ClassOrInstance:
    """A method that is `Sandbox.kill(id)` on the class and `sbx.kill()` on a handle, as in E2B's SDK."""

    def __init__(self, on_class: Callable[..., Any], on_instance: Callable[..., Any]) -> None:
        self._on_class = on_class
        self._on_instance = on_instance
        self.__doc__ = on_class.__doc__

    def __get__(self, obj: Any, owner: Any) -> Callable[..., Any]:
        return self._on_class if obj is None else self._on_instance.__get__(obj, owner)


def _kill_by_id(sandbox_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> bool:
    """Kills a sandbox by id (Sandbox.kill(id)) or this one (sbx.kill()); False when there is no such sandbox."""
    try:
        _connection(api_url, api_key, None).request("DELETE", _sandbox_path(sandbox_id)).read()
        return True
    except NotFoundError as err:
        if err.code == "sandbox_not_found":
            return False
        raise


def _kill_this(self: "Sandbox") -> bool:
    self._cp.request("DELETE", _sandbox_path(self.id)).read()
    return True


def _decide(cp: ControlPlane, request_id: str, body: Dict[str, Any]) -> None:
    cp.request("POST", path_of("v1", "approvals", request_id), json_body=body).read()


def _approve_by_id(request_id: str, *, sandbox_id: str, ttl_s: Optional[int] = None, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
    """Lets a request held for approval use its secret (Sandbox.approve(id, sandbox_id=…) or sbx.approve(id)); with
    ttl_s, also the sandbox's later uses of it until then."""
    _decide(_connection(api_url, api_key, None), request_id, {"sandboxId": sandbox_id, "decision": "approve", "ttlS": ttl_s})


def _approve_this(self: "Sandbox", request_id: str, *, ttl_s: Optional[int] = None) -> None:
    _decide(self._cp, request_id, {"sandboxId": self.id, "decision": "approve", "ttlS": ttl_s})


def _deny_by_id(request_id: str, *, sandbox_id: str, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
    """Refuses a request held for approval: the sandbox's client gets egress_approval_denied."""
    _decide(_connection(api_url, api_key, None), request_id, {"sandboxId": sandbox_id, "decision": "deny"})


def _deny_this(self: "Sandbox", request_id: str) -> None:
    _decide(self._cp, request_id, {"sandboxId": self.id, "decision": "deny"})


class Sandbox:
    """One sandbox: `commands` and `files` go to its gateway with a short-lived access token."""

    def __init__(self, control_plane: ControlPlane, info: Dict[str, Any]) -> None:
        self.id: str = info["id"]
        self.info = info
        self._cp = control_plane
        dp = DataPlane(control_plane, self.id, info.get("access"))
        self._dp = dp
        self.commands = Commands(dp)
        self.files = Files(dp)
        self.pty = Pty(dp, self.commands)
        self.ports = Ports(dp)

    def get_host(self, port: int) -> str:
        """`<port>-<sandbox id>.<domain>:<gateway port>`, the host name of a guest port, like E2B's get_host (see
        Ports.host)."""
        return self.ports.host(port)

    @property
    def config(self) -> Config:
        return self._cp.config

    @classmethod
    def create(
        cls,
        template: Optional[str] = None,
        *,
        memory_mib: Optional[int] = None,
        vcpus: Optional[int] = None,
        timeout_s: Optional[int] = None,
        metadata: Optional[Dict[str, str]] = None,
        envs: Optional[Dict[str, str]] = None,
        snapshot_interval_s: Optional[int] = None,
        network: Optional[Dict[str, List[str]]] = None,
        secrets: Optional[List[str]] = None,
        disk_mib: Optional[int] = None,
        snapshot_best_effort: Optional[bool] = None,
        on_timeout: Optional[str] = None,
        on_timeout_keep_memory: Optional[bool] = None,
        auto_resume: Optional[bool] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout_s: Optional[float] = None,
    ) -> "Sandbox":
        """Starts a sandbox from a template (default "base"). on_timeout="pause" makes its timeout snapshot it and release
        its VM instead of killing it ("kill", the default), keeping its disk alone with on_timeout_keep_memory=False (the
        resume then boots the guest over it: files kept, processes gone); auto_resume=True lets a request carrying its access token or a
        signed port URL to one of its ports resume it while paused (else such a request is sandbox_paused). A bad
        on_timeout, on_timeout_keep_memory or auto_resume is invalid_argument naming it, before any request."""
        if on_timeout is not None and on_timeout not in ON_TIMEOUT:
            raise error_of("invalid_argument", f"on_timeout: must be one of {', '.join(ON_TIMEOUT)}, not {on_timeout!r}", details={"field": "on_timeout"})
        for name, flag in (("auto_resume", auto_resume), ("snapshot_best_effort", snapshot_best_effort), ("on_timeout_keep_memory", on_timeout_keep_memory)):
            if flag is not None and not isinstance(flag, bool):
                raise error_of("invalid_argument", f"{name}: must be True or False, not {flag!r}", details={"field": name})
        cp = _connection(api_url, api_key, request_timeout_s)
        body = {
            "template": template,
            "memoryMib": memory_mib,
            "vcpus": vcpus,
            "timeoutS": timeout_s,
            "metadata": metadata,
            "envs": envs,
            "snapshotIntervalS": snapshot_interval_s,
            "network": network,
            "secrets": secrets,
            "diskMib": disk_mib,
            "snapshotBestEffort": snapshot_best_effort,
            "onTimeout": on_timeout,
            "onTimeoutKeepMemory": on_timeout_keep_memory,
            "autoResume": auto_resume,
        }
        return cls(cp, cp.json("POST", "/v1/sandboxes", json_body=body))

    @classmethod
    def connect(cls, sandbox_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None, request_timeout_s: Optional[float] = None) -> "Sandbox":
        cp = _connection(api_url, api_key, request_timeout_s)
        return cls(cp, cp.json("GET", _sandbox_path(sandbox_id)))

    @staticmethod
    def list(*, state: Optional[str] = None, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[SandboxInfo]:
        """The tenant's sandboxes (each a SandboxInfo; `s["id"]` reads the API's keys too)."""
        sandboxes = _connection(api_url, api_key, None).json("GET", "/v1/sandboxes", query={"state": state})["sandboxes"]
        return [SandboxInfo.from_api(s) for s in sandboxes]

    kill = _ClassOrInstance(_kill_by_id, _kill_this)
    approve = _ClassOrInstance(_approve_by_id, _approve_this)
    deny = _ClassOrInstance(_deny_by_id, _deny_this)

    @staticmethod
    def replay(
        source: "str | Sandbox",
        *,
        from_creation: bool = False,
        snapshot_id: Optional[str] = None,
        at: "Optional[datetime | str]" = None,
        until: "Optional[datetime | str]" = None,
        nondeterministic: Optional[List[str]] = None,
        input_timeout_ms: int = 60_000,
        timeout_s: int = 600,
        keep_fork: bool = False,
        prepare: Optional[Callable[[ReplayFork], None]] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Replays a sandbox: forks it in replay mode at a snapshot (its first, snapshot_id, or its latest at or before
        `at`) or at its creation (from_creation, the default when no snapshot precedes its first input) and re-issues
        every recorded input after it, up to `until`, in order, with the guest's clock and entropy from the recording
        and egress answered only from the recorded exchanges. `prepare(fork)` runs in the fork first ("what if the
        snapshot had been this way"); commands whose argv holds a `nondeterministic` string may print otherwise.
        Answers the report (the TypeScript SDK's ReplayReport): per input same or different, and the first divergence."""
        if isinstance(source, Sandbox) and api_url is None and api_key is None:
            cp, source_id = source._cp, source.id
        else:
            cp, source_id = _connection(api_url, api_key, None), source.id if isinstance(source, Sandbox) else source
        return run_replay(
            cp,
            source_id,
            from_creation=from_creation,
            snapshot_id=snapshot_id,
            at=at,
            until=until,
            nondeterministic=nondeterministic,
            input_timeout_ms=input_timeout_ms,
            timeout_s=timeout_s,
            keep_fork=keep_fork,
            prepare=prepare,
        )

    @staticmethod
    def delete_snapshot(snapshot_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a snapshot, pinned or not; sandboxes already forked from it keep running."""
        _connection(api_url, api_key, None).request("DELETE", path_of("v1", "snapshots", snapshot_id)).read()

    @staticmethod
    def name_snapshot(snapshot_id: str, name: Optional[str], *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Dict[str, Any]:
        """Names (which pins) or renames a snapshot; None removes the name. Answers the snapshot as it is now."""
        cp = _connection(api_url, api_key, None)
        # The name goes even when None: a JSON null is what removes it.
        res = cp.request("PATCH", path_of("v1", "snapshots", snapshot_id), body=json.dumps({"name": name}).encode(), content_type="application/json")
        return dict(res.json())

    @staticmethod
    def audit_public_key(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Dict[str, Any]:
        """The public key the deployment signs audit exports with ({"keyId", "publicKeyPem", ...}): fetch it once and
        keep it apart from the exports; a key fetched next to a forged export proves nothing."""
        return dict(_connection(api_url, api_key, None).json("GET", "/v1/audit/public-key"))

    @classmethod
    def resume(
        cls,
        sandbox_id: str,
        *,
        at: Optional[Time] = None,
        snapshot_id: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> "Sandbox":
        """Runs a paused sandbox again under the same id, from its latest snapshot, one at or before `at` (a datetime or
        an ISO 8601 string; without a zone, local time), or `snapshot_id`."""
        when = None if at is None else iso_time(at, "at")
        cp = _connection(api_url, api_key, None)
        return cls(cp, cp.json("POST", _sandbox_path(sandbox_id, "resume"), json_body={"at": when, "snapshotId": snapshot_id}))

    @classmethod
    def fork(
        cls,
        source: "str | Sandbox",
        *,
        count: Optional[int] = None,
        timeout_s: Optional[int] = None,
        metadata: Optional[Dict[str, str]] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> List["Sandbox"]:
        """New sandboxes from a snapshot id, a sandbox (its latest snapshot) or `sbx_…@<time>`; the source keeps running."""
        if isinstance(source, Sandbox):
            cp, body = source._cp, {"sandboxId": source.id}
        else:
            cp, body = _connection(api_url, api_key, None), parse_fork_source(source)
        reply = cp.json("POST", "/v1/forks", json_body=dict(body, count=count, timeoutS=timeout_s, metadata=metadata))
        return [cls(cp, info) for info in reply["sandboxes"]]

    def get_info(self) -> SandboxInfo:
        """The sandbox as the control plane reports it now: state, on_timeout, auto_resume, times as datetimes, … (the
        API's keys read too: `info["state"]`)."""
        return SandboxInfo.from_api(self._cp.json("GET", _sandbox_path(self.id)))

    def metrics(self, *, start: Optional[Time] = None, end: Optional[Time] = None) -> List[SandboxMetric]:
        """The running sandbox's CPU, memory and disk over the last hour, oldest first: one sample every few seconds, from
        its gateway's memory (a resume or a move starts a new series). start/end (datetimes, or ISO 8601 strings) keep
        only the samples between them."""
        query = {"start": None if start is None else iso_time(start, "start"), "end": None if end is None else iso_time(end, "end")}
        return [SandboxMetric.from_api(m) for m in self._dp.json("GET", "/metrics", query=query)["metrics"]]

    def set_timeout(self, timeout_s: int) -> SandboxInfo:
        """Moves the expiry to now + timeout_s (longer or shorter); answers the sandbox with its new expires_at."""
        return SandboxInfo.from_api(self._cp.json("POST", _sandbox_path(self.id, "timeout"), json_body={"timeoutS": timeout_s}))

    def snapshot(self, *, name: Optional[str] = None, compact: Optional[bool] = None) -> Dict[str, Any]:
        """Takes a snapshot now; a named one is kept until deleted. compact=True first drops the guest's page cache and
        zeroes its freed memory: a smaller snapshot to fork from (a template's)."""
        return dict(self._cp.json("POST", _sandbox_path(self.id, "snapshots"), json_body={"name": name, "compact": compact}))

    def timeline(self) -> List[Dict[str, Any]]:
        return list(self._cp.json("GET", _sandbox_path(self.id, "snapshots"))["snapshots"])

    def pause(self) -> Dict[str, Any]:
        """Snapshots the sandbox and releases its VM; answers the snapshot. Sandbox.resume runs it again."""
        return dict(self._cp.json("POST", _sandbox_path(self.id, "pause"))["snapshot"])

    def set_network(self, *, allow: Optional[List[str]] = None, deny: Optional[List[str]] = None) -> Dict[str, Any]:
        """Replaces the egress policy (`host[:port] [METHOD] [/path-prefix]` rules; deny wins, default deny)."""
        return dict(self._cp.json("PUT", _sandbox_path(self.id, "network"), json_body={"allow": allow, "deny": deny})["network"])

    def timeline_with_cadence(self) -> Dict[str, Any]:
        """The timeline and the snapshot cadence in one answer: {"snapshots": [...], "cadence": {...}}, the interval asked
        for against the one achieved, and whether the sandbox is behind (the snapshot.behind event says why)."""
        return dict(self._cp.json("GET", _sandbox_path(self.id, "snapshots")))

    def set_snapshot_interval(self, snapshot_interval_s: int, *, best_effort: Optional[bool] = None) -> SandboxInfo:
        """Sets the seconds between rolling snapshots (5…86400). One the node can never keep for this size is refused
        (`snapshot_interval_unachievable`, details["minimumS"]) unless best_effort."""
        body = {"snapshotIntervalS": snapshot_interval_s, "bestEffort": best_effort}
        return SandboxInfo.from_api(self._cp.json("POST", _sandbox_path(self.id, "snapshot-interval"), json_body=body))

    def events(self, *, after_seq: Optional[int] = None, types: Optional[List[str]] = None) -> List[Dict[str, Any]]:
        """The sandbox's events in log order, every page; types=["egress", "secret"] keeps those families only."""
        out: List[Dict[str, Any]] = []
        type_filter = ",".join(types) if types else None
        while True:
            query = {"afterSeq": after_seq, "limit": EVENTS_PAGE, "type": type_filter}
            page = list(self._cp.json("GET", _sandbox_path(self.id, "events"), query=query)["events"])
            out.extend(page)
            if len(page) < EVENTS_PAGE:
                return out
            after_seq = int(page[-1]["seq"])

    def approvals(self) -> List[Dict[str, Any]]:
        """Requests of the sandbox's egress held until someone approves using a secret in them."""
        return list(self._cp.json("GET", _sandbox_path(self.id, "approvals"))["approvals"])

    def on_approval_request(
        self,
        callback: Callable[[Dict[str, Any]], None],
        *,
        interval_s: float = 1.0,
        on_error: Optional[Callable[[BaseException], None]] = None,
    ) -> Callable[[], None]:
        """Polls for held requests in a daemon thread and calls `callback` once for each new one (decide it with approve
        or deny). Failures to poll and exceptions of the callback go to on_error, or are dropped and polling goes on.
        Returns the function that stops it."""
        stopped = threading.Event()

        def poll() -> None:
            seen: Set[str] = set()
            while not stopped.is_set():
                try:
                    pending = self.approvals()
                    # Only ids still pending are remembered, so the set stays as small as the queue.
                    fresh = [r for r in pending if r["requestId"] not in seen]
                    seen = {r["requestId"] for r in pending}
                    for request in fresh:
                        if stopped.is_set():
                            break
                        try:
                            callback(request)
                        except Exception as err:  # noqa: BLE001 — the callback's failure is the caller's to hear
                            if on_error is not None:
                                on_error(err)
                except Exception as err:  # noqa: BLE001
                    if on_error is not None:
                        on_error(err)
                stopped.wait(interval_s)

        threading.Thread(target=poll, name=f"sandglass-approvals-{self.id}", daemon=True).start()
        return stopped.set

    def export_audit(self) -> str:
        """The sandbox's signed audit export (JSON lines: header, events, trailer), which verify_audit_export checks."""
        return self._cp.request("GET", _sandbox_path(self.id, "audit", "export"), timeout_s=None).read().decode("utf-8")

    def export_audit_to(self, out: BinaryIO) -> int:
        """Streams the export into a binary file as it arrives, for long sessions; answers the bytes written."""
        written = 0
        for chunk in self._cp.request("GET", _sandbox_path(self.id, "audit", "export"), timeout_s=None).iter_chunks():
            out.write(chunk)
            written += len(chunk)
        return written

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class Secrets:
    """The tenant's secrets: values go in and never come back; the guest sees only a placeholder."""

    @staticmethod
    def set(
        name: str,
        value: str,
        *,
        hosts: List[str],
        header: Optional[str] = None,
        format: Optional[str] = None,
        approval: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Dict[str, Any]:
        body = {"value": value, "hosts": hosts, "header": header, "format": format, "approval": approval}
        return dict(_connection(api_url, api_key, None).json("PUT", path_of("v1", "secrets", name), json_body=body))

    @staticmethod
    def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
        return list(_connection(api_url, api_key, None).json("GET", "/v1/secrets")["secrets"])

    @staticmethod
    def remove(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> bool:
        try:
            _connection(api_url, api_key, None).request("DELETE", path_of("v1", "secrets", name)).read()
            return True
        except NotFoundError as err:
            if err.code == "secret_not_found":
                return False
            raise
