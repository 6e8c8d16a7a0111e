"""`sandbox.commands`: start a command, follow its output (HTTP output records, the same route the TypeScript SDK's
http transport reads), reattach from an offset, stdin, signals."""
from __future__ import annotations

import codecs
import json
import signal as _signal
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from ._http import DataPlane, path_of
from .errors import CommandExitError, CommandTimeoutError, SandglassError, error_of

DEFAULT_COMMAND_TIMEOUT_MS = 60_000
OutputCallback = Callable[[str], None]


@dataclass
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    signal: Optional[str] = None


def exit_code_of(exit_msg: Dict[str, Any]) -> int:
    """The exit status, or 128 + the signal's number for a command a signal killed (as a shell reports it)."""
    if isinstance(exit_msg.get("exitCode"), int):
        return int(exit_msg["exitCode"])
    signo = getattr(_signal, str(exit_msg.get("signal")), None)
    return 128 + int(signo) if signo is not None else -1


class _Records:
    """Splits the output route's body into records: a 4-byte big-endian length, then the record."""

    def __init__(self) -> None:
        self.pending = b""

    def push(self, chunk: bytes) -> List[bytes]:
        buf = self.pending + chunk
        out: List[bytes] = []
        at = 0
        while len(buf) - at >= 4:
            (n,) = struct.unpack_from(">I", buf, at)
            if n == 0:
                raise error_of("protocol_error", "output record of length 0")
            if len(buf) - at - 4 < n:
                break
            out.append(buf[at + 4 : at + 4 + n])
            at += 4 + n
        self.pending = buf[at:]
        return out


class CommandHandle:
    """A running (or finished) command; `wait()` follows its output to the exit."""

    def __init__(
        self,
        commands: "Commands",
        command_id: str,
        *,
        from_offset: int = 0,
        timeout_ms: int = 0,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        on_bytes: Optional[Callable[[int, bytes], None]] = None,
    ) -> None:
        self.id = command_id
        self._on_bytes = on_bytes
        self._commands = commands
        self.output_offset = from_offset
        self._timeout_ms = timeout_ms
        self._callbacks = {1: on_stdout, 2: on_stderr}
        self._decoders = {1: codecs.getincrementaldecoder("utf-8")("replace"), 2: codecs.getincrementaldecoder("utf-8")("replace")}
        self._out = {1: [], 2: []}  # type: Dict[int, List[str]]
        self._result: Optional[CommandResult] = None
        self._stream: Any = None
        self._disconnected = False

    @property
    def stdout(self) -> str:
        return "".join(self._out[1])

    @property
    def stderr(self) -> str:
        return "".join(self._out[2])

    def _text(self, fd: int, s: str) -> None:
        if not s:
            return
        self._out[fd].append(s)
        cb = self._callbacks[fd]
        if cb is not None:
            cb(s)

    def wait_exit(self) -> CommandResult:
        """Follows the output to the exit and answers it, whatever the status (a terminal's shell may end non-zero)."""
        if self._result is None:
            self._result = self._follow()
        return self._result

    def wait(self) -> CommandResult:
        """Follows the output to the exit; raises CommandExitError for a non-zero exit, CommandTimeoutError past the timeout."""
        r = self.wait_exit()
        if r.timed_out:
            raise CommandTimeoutError(r, self._timeout_ms)
        if r.exit_code != 0:
            raise CommandExitError(r)
        return r

    def _follow(self) -> CommandResult:
        res = self._commands._dp.request(
            "GET",
            f"/commands/{path_of(self.id)[1:]}/output",
            query={"fromOffset": self.output_offset, "follow": True},
            timeout_s=None,
        )
        self._stream = res
        if self._disconnected:
            res.close()
            raise error_of("disconnected", f"stopped following {self.id}")
        records = _Records()
        for chunk in res.iter_chunks():
            for rec in records.push(chunk):
                if rec[0] != 0:
                    (offset,) = struct.unpack_from(">Q", rec, 1)
                    data = rec[9:]
                    if offset + len(data) <= self.output_offset:
                        continue
                    data = data[max(0, self.output_offset - offset) :]
                    self.output_offset = max(self.output_offset, offset) + len(data)
                    if self._on_bytes is not None:
                        self._on_bytes(rec[0], data)
                    self._text(rec[0], self._decoders[rec[0]].decode(data))
                    continue
                msg = json.loads(rec[1:].decode("utf-8"))
                if msg.get("type") == "start":
                    self.output_offset = max(self.output_offset, int(msg.get("startOffset", 0)))
                elif msg.get("type") == "exit":
                    res.close()
                    for fd in (1, 2):
                        self._text(fd, self._decoders[fd].decode(b"", final=True))
                    return CommandResult(exit_code_of(msg), self.stdout, self.stderr, bool(msg.get("timedOut")), msg.get("signal"))
                elif msg.get("type") == "error":
                    err = msg.get("error", msg)
                    raise error_of(str(err.get("code", "protocol_error")), str(err.get("message", "output stream error")))
        raise error_of("disconnected", f"output of {self.id} ended before the command exited; reattach with commands.connect('{self.id}', from_offset={self.output_offset})")

    def disconnect(self) -> None:
        """Stops following the output, from any thread (a wait() there raises `disconnected`); the command keeps running."""
        self._disconnected = True
        if self._stream is not None:
            self._stream.shutdown()

    def send_stdin(self, data: "str | bytes") -> None:
        self._commands.send_stdin(self.id, data)

    def close_stdin(self) -> None:
        self._commands.close_stdin(self.id)

    def kill(self, signal: str = "SIGKILL") -> bool:
        return self._commands.kill(self.id, signal)


class Commands:
    def __init__(self, dp: DataPlane) -> None:
        self._dp = dp

    def run(
        self,
        cmd: str,
        *,
        background: bool = False,
        envs: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: bool = False,
        timeout_ms: int = DEFAULT_COMMAND_TIMEOUT_MS,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> Any:
        """Runs `cmd` with /bin/bash -c: the CommandResult, or with background=True a CommandHandle at once."""
        return self._start({"cmd": cmd}, background, envs, cwd, user, stdin, timeout_ms, on_stdout, on_stderr)

    def exec(
        self,
        argv: List[str],
        *,
        background: bool = False,
        envs: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: bool = False,
        timeout_ms: int = DEFAULT_COMMAND_TIMEOUT_MS,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> Any:
        """Runs an argv directly, without a shell; the same options as run()."""
        return self._start({"argv": argv}, background, envs, cwd, user, stdin, timeout_ms, on_stdout, on_stderr)

    def _start(self, what: Dict[str, Any], background: bool, envs: Any, cwd: Any, user: Any, stdin: bool, timeout_ms: int, on_stdout: Any, on_stderr: Any) -> Any:
        body = dict(what, envs=envs, cwd=cwd, user=user, stdin=stdin, timeoutMs=timeout_ms)
        info = self._dp.json("POST", "/commands", json_body=body)
        handle = CommandHandle(self, info["id"], timeout_ms=timeout_ms, on_stdout=on_stdout, on_stderr=on_stderr)
        return handle if background else handle.wait()

    def connect(self, command_id: str, *, from_offset: int = 0, on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None) -> CommandHandle:
        """Reattaches to a command, e.g. from another process; output continues from `from_offset`."""
        return CommandHandle(self, command_id, from_offset=from_offset, on_stdout=on_stdout, on_stderr=on_stderr)

    def list(self) -> List[Dict[str, Any]]:
        return list(self._dp.json("GET", "/commands")["commands"])

    def send_stdin(self, command_id: str, data: "str | bytes") -> None:
        self._dp.request("POST", f"/commands/{path_of(command_id)[1:]}/stdin", body=data.encode() if isinstance(data, str) else data).read()

    def close_stdin(self, command_id: str) -> None:
        self._dp.request("POST", f"/commands/{path_of(command_id)[1:]}/stdin", query={"eof": True}, body=b"").read()

    def kill(self, command_id: str, signal: str = "SIGKILL") -> bool:
        try:
            self._dp.request("POST", f"/commands/{path_of(command_id)[1:]}/signal", json_body={"signal": signal}).read()
            return True
        except SandglassError as err:
            if err.code in ("command_not_found", "command_exited"):
                return False
            raise
