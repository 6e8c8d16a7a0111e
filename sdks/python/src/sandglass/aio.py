"""The asyncio client: the synchronous client's calls run in a worker thread (asyncio.to_thread), so a coroutine never
blocks the event loop on the network; output callbacks are called from that thread."""
from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional, Union

from ._time import Time
from .commands import CommandHandle, CommandResult, Commands
from .files import Files
from .models import SandboxInfo, SandboxMetric
from .ports import Ports
from .pty import DataCallback, Pty, PtyHandle
from .sandbox import Sandbox
from .template import Template
from .template_build import TemplateBuildResult


class AsyncCommandHandle:
    def __init__(self, handle: CommandHandle) -> None:
        self._h = handle
        self.id = handle.id

    @property
    def output_offset(self) -> int:
        return self._h.output_offset

    async def wait(self) -> CommandResult:
        return await asyncio.to_thread(self._h.wait)

    async def send_stdin(self, data: Union[str, bytes]) -> None:
        await asyncio.to_thread(self._h.send_stdin, data)

    async def close_stdin(self) -> None:
        await asyncio.to_thread(self._h.close_stdin)

    async def kill(self, signal: str = "SIGKILL") -> bool:
        return await asyncio.to_thread(self._h.kill, signal)


class AsyncCommands:
    def __init__(self, commands: Commands) -> None:
        self._c = commands

    async def run(self, cmd: str, **kw: Any) -> Any:
        """As Commands.run: the CommandResult, or with background=True an AsyncCommandHandle."""
        out = await asyncio.to_thread(self._c.run, cmd, **kw)
        return AsyncCommandHandle(out) if isinstance(out, CommandHandle) else out

    async def connect(self, command_id: str, **kw: Any) -> AsyncCommandHandle:
        return AsyncCommandHandle(self._c.connect(command_id, **kw))

    async def list(self) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self._c.list)

    async def kill(self, command_id: str, signal: str = "SIGKILL") -> bool:
        return await asyncio.to_thread(self._c.kill, command_id, signal)


class AsyncFiles:
    def __init__(self, files: Files) -> None:
        self._f = files

    async def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        return await asyncio.to_thread(self._f.read, path, format)  # type: ignore[call-overload]

    async def write(self, path: str, data: Union[str, bytes], *, mode: Optional[int] = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self._f.write, path, data, mode=mode)

    async def write_tar(self, dir: str, tar: bytes) -> Dict[str, Any]:
        return await asyncio.to_thread(self._f.write_tar, dir, tar)

    async def read_tar(self, dir: str) -> bytes:
        return await asyncio.to_thread(self._f.read_tar, dir)

    async def list(self, path: str, *, depth: Optional[int] = None) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self._f.list, path, depth=depth)

    async def exists(self, path: str) -> bool:
        return await asyncio.to_thread(self._f.exists, path)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await asyncio.to_thread(self._f.remove, path, recursive=recursive)


class AsyncPtyHandle:
    def __init__(self, handle: PtyHandle) -> None:
        self._h = handle
        self.id = handle.id

    @property
    def output_offset(self) -> int:
        return self._h.output_offset

    async def send_input(self, data: Union[str, bytes]) -> None:
        await asyncio.to_thread(self._h.send_input, data)

    async def resize(self, cols: int, rows: int) -> None:
        await asyncio.to_thread(self._h.resize, cols, rows)

    async def kill(self) -> bool:
        return await asyncio.to_thread(self._h.kill)

    async def wait(self) -> CommandResult:
        """As PtyHandle.wait: on_data is called from the worker thread that follows the output."""
        return await asyncio.to_thread(self._h.wait)


class AsyncPty:
    def __init__(self, pty: Pty) -> None:
        self._p = pty

    async def create(self, **kw: Any) -> AsyncPtyHandle:
        """As Pty.create (cols, rows, on_data, cmd, envs, cwd, user, timeout_ms)."""
        return AsyncPtyHandle(await asyncio.to_thread(lambda: self._p.create(**kw)))

    async def connect(self, pty_id: str, *, from_offset: int = 0, on_data: Optional[DataCallback] = None) -> AsyncPtyHandle:
        return AsyncPtyHandle(self._p.connect(pty_id, from_offset=from_offset, on_data=on_data))

    async def resize(self, pty_id: str, cols: int, rows: int) -> None:
        await asyncio.to_thread(self._p.resize, pty_id, cols, rows)

    async def kill(self, pty_id: str) -> bool:
        return await asyncio.to_thread(self._p.kill, pty_id)


class AsyncPorts:
    def __init__(self, ports: Ports) -> None:
        self._p = ports

    async def list(self) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self._p.list)

    async def url(self, port: int, *, expires_in_s: Optional[int] = None, form: str = "host") -> Dict[str, str]:
        return await asyncio.to_thread(self._p.url, port, expires_in_s=expires_in_s, form=form)

    async def set_public(self, port: int, public: bool) -> None:
        await asyncio.to_thread(self._p.set_public, port, public)


class AsyncSandbox:
    """Sandbox for asyncio: the same methods as coroutines (`await AsyncSandbox.create()`, `async with`)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sync = sandbox
        self.id = sandbox.id
        self.commands = AsyncCommands(sandbox.commands)
        self.files = AsyncFiles(sandbox.files)
        self.pty = AsyncPty(sandbox.pty)
        self.ports = AsyncPorts(sandbox.ports)

    @classmethod
    async def create(cls, template: Optional[str] = None, **kw: Any) -> "AsyncSandbox":
        """As Sandbox.create (timeout_s, network, secrets, on_timeout, auto_resume, …)."""
        return cls(await asyncio.to_thread(Sandbox.create, template, **kw))

    @classmethod
    async def connect(cls, sandbox_id: str, **kw: Any) -> "AsyncSandbox":
        return cls(await asyncio.to_thread(Sandbox.connect, sandbox_id, **kw))

    @classmethod
    async def resume(cls, sandbox_id: str, **kw: Any) -> "AsyncSandbox":
        return cls(await asyncio.to_thread(Sandbox.resume, sandbox_id, **kw))

    @classmethod
    async def fork(cls, source: str, **kw: Any) -> List["AsyncSandbox"]:
        return [cls(s) for s in await asyncio.to_thread(Sandbox.fork, source, **kw)]

    @staticmethod
    async def list(**kw: Any) -> List[SandboxInfo]:
        return await asyncio.to_thread(Sandbox.list, **kw)

    @staticmethod
    async def replay(source: "str | AsyncSandbox", **kw: Any) -> Dict[str, Any]:
        """As Sandbox.replay; `prepare` is called from the worker thread with the synchronous fork."""
        return await asyncio.to_thread(Sandbox.replay, source.sync if isinstance(source, AsyncSandbox) else source, **kw)

    async def kill(self) -> bool:
        return await asyncio.to_thread(Sandbox.kill, self.id, api_url=self.sync.config.api_url, api_key=self.sync.config.api_key)

    async def snapshot(self, *, name: Optional[str] = None, compact: Optional[bool] = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self.sync.snapshot, name=name, compact=compact)

    async def timeline_with_cadence(self) -> Dict[str, Any]:
        return await asyncio.to_thread(self.sync.timeline_with_cadence)

    async def set_snapshot_interval(self, snapshot_interval_s: int, *, best_effort: Optional[bool] = None) -> SandboxInfo:
        return await asyncio.to_thread(self.sync.set_snapshot_interval, snapshot_interval_s, best_effort=best_effort)

    async def events(self, *, after_seq: Optional[int] = None, types: Optional[List[str]] = None) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self.sync.events, after_seq=after_seq, types=types)

    async def approvals(self) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self.sync.approvals)

    async def approve(self, request_id: str, *, ttl_s: Optional[int] = None) -> None:
        await asyncio.to_thread(self.sync.approve, request_id, ttl_s=ttl_s)

    async def deny(self, request_id: str) -> None:
        await asyncio.to_thread(self.sync.deny, request_id)

    async def export_audit(self) -> str:
        return await asyncio.to_thread(self.sync.export_audit)

    async def timeline(self) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self.sync.timeline)

    async def pause(self) -> Dict[str, Any]:
        return await asyncio.to_thread(self.sync.pause)

    async def set_network(self, **kw: Any) -> Dict[str, Any]:
        return await asyncio.to_thread(self.sync.set_network, **kw)

    async def get_info(self) -> SandboxInfo:
        return await asyncio.to_thread(self.sync.get_info)

    async def metrics(self, *, start: Optional[Time] = None, end: Optional[Time] = None) -> List[SandboxMetric]:
        return await asyncio.to_thread(self.sync.metrics, start=start, end=end)

    async def set_timeout(self, timeout_s: int) -> SandboxInfo:
        return await asyncio.to_thread(self.sync.set_timeout, timeout_s)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.kill()


class AsyncTemplate:
    """Template.build for asyncio: the build runs in a worker thread; on_log is called from that thread."""

    @staticmethod
    async def build(name: str, **kw: Any) -> TemplateBuildResult:
        """As Template.build (context, file or spec, on_log, step_timeout_ms, …)."""
        return await asyncio.to_thread(Template.build, name, **kw)
