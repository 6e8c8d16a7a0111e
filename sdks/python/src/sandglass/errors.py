"""The SDK's errors: the server's wire errors ({"error": {code, message, requestId, details}}) as one exception type
with the catalogue's stable code (docs/errors.md), plus the failures only a client sees."""
from __future__ import annotations

from typing import Any, Dict, Optional


class SandglassError(Exception):
    """A failure with a stable code: a catalogued server code, or connection_failed / protocol_error /
    command_failed on the client side."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int = 0,
        request_id: Optional[str] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.details = details or {}


class NotFoundError(SandglassError):
    """The sandbox, command, file, snapshot or secret does not exist (404)."""


class AuthenticationError(SandglassError):
    """No key, or a key that is unknown, revoked or expired (401)."""


class CommandExitError(SandglassError):
    """A command that exited non-zero or was killed by a signal; `result` holds its output, as E2B's does."""

    def __init__(self, result: Any) -> None:
        how = f"was killed by {result.signal}" if result.signal else f"exited with code {result.exit_code}"
        super().__init__("command_failed", f"command {how}")
        self.result = result


class CommandTimeoutError(SandglassError):
    """A command that ran past its timeout and was killed (code `timeout`); `result` holds its output."""

    def __init__(self, result: Any, timeout_ms: int) -> None:
        super().__init__("timeout", f"command ran past its timeout of {timeout_ms} ms and was killed", status=504)
        self.result = result


def error_from_response(status: int, body: Any) -> SandglassError:
    """The exception for an error response; a body that is not the wire format still keeps its status."""
    wire = body.get("error") if isinstance(body, dict) else None
    if not isinstance(wire, dict) or not isinstance(wire.get("code"), str):
        return SandglassError("protocol_error", f"HTTP {status} without an error body", status=status)
    cls = NotFoundError if status == 404 else AuthenticationError if status == 401 else SandglassError
    return cls(
        wire["code"],
        str(wire.get("message", f"HTTP {status}")),
        status=status,
        request_id=wire.get("requestId"),
        details=wire.get("details") if isinstance(wire.get("details"), dict) else None,
    )
