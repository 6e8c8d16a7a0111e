"""`sandbox.pty`: a terminal is a command with a PTY; its bytes come over the same output route, keystrokes go as stdin."""
from __future__ import annotations

from typing import Callable, Dict, Optional, Union

from ._http import DataPlane, path_of
from .commands import CommandHandle, CommandResult, Commands

DataCallback = Callable[[bytes], None]


class PtyHandle:
    def __init__(self, pty: "Pty", handle: CommandHandle) -> None:
        self._pty = pty
        self._h = handle
        self.id = handle.id

    @property
    def output_offset(self) -> int:
        return self._h.output_offset

    def send_input(self, data: Union[str, bytes]) -> None:
        """Keystrokes, as the terminal's input."""
        self._h.send_stdin(data)

    def resize(self, cols: int, rows: int) -> None:
        self._pty.resize(self.id, cols, rows)

    def kill(self) -> bool:
        return self._h.kill("SIGKILL")

    def wait(self) -> CommandResult:
        """Follows the terminal's output (to on_data) until it exits; its status is answered, not raised."""
        return self._h.wait_exit()


class Pty:
    def __init__(self, dp: DataPlane, commands: Commands) -> None:
        self._dp = dp
        self._commands = commands

    def create(
        self,
        *,
        cols: int = 80,
        rows: int = 24,
        on_data: Optional[DataCallback] = None,
        cmd: Optional[str] = None,
        envs: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout_ms: int = 0,
    ) -> PtyHandle:
        """Starts a terminal: a login bash, or `cmd`; its output goes to on_data as bytes once wait() follows it."""
        body = {
            **({"argv": ["/bin/bash", "-l"]} if cmd is None else {"cmd": cmd}),
            "cwd": cwd,
            "envs": {"TERM": "xterm-256color", **(envs or {})},
            "user": user,
            "stdin": True,
            "pty": {"cols": cols, "rows": rows},
            "timeoutMs": timeout_ms,
        }
        info = self._dp.json("POST", "/commands", json_body=body)
        return self.connect(info["id"], on_data=on_data)

    def connect(self, pty_id: str, *, from_offset: int = 0, on_data: Optional[DataCallback] = None) -> PtyHandle:
        on_bytes = None if on_data is None else (lambda _fd, data: on_data(data))
        return PtyHandle(self, CommandHandle(self._commands, pty_id, from_offset=from_offset, on_bytes=on_bytes))

    def resize(self, pty_id: str, cols: int, rows: int) -> None:
        self._dp.request("POST", f"/commands/{path_of(pty_id)[1:]}/resize", json_body={"cols": cols, "rows": rows}).read()

    def kill(self, pty_id: str) -> bool:
        return self._commands.kill(pty_id, "SIGKILL")
