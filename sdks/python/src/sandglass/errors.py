"""The SDK's errors: the server's wire errors ({"error": {code, message, requestId, details}}) as one exception type
with the catalogue's stable code (docs/errors.md), a subclass per family as in the TypeScript SDK, plus the failures
only a client sees."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Type

# code: (family, status, retryable), as packages/sdk/src/errors.ts has them; tests/python-sdk.test.ts fails when the
# two disagree, so a code added to spec/errors.yaml must be placed here too.
KNOWN_ERROR_CODES: Dict[str, Tuple[str, int, bool]] = {
    "invalid_argument": ("invalid_argument", 400, False),
    "malformed_json": ("invalid_argument", 400, False),
    "payload_too_large": ("invalid_argument", 413, False),
    "size_unsupported": ("invalid_argument", 400, False),
    "snapshot_interval_unachievable": ("invalid_argument", 400, False),
    "path_outside_sandbox": ("invalid_argument", 400, False),
    "unauthenticated": ("authentication", 401, False),
    "permission_denied": ("permission_denied", 403, False),
    "not_found": ("not_found", 404, False),
    "sandbox_not_found": ("not_found", 404, False),
    "template_not_found": ("not_found", 404, False),
    "tenant_not_found": ("not_found", 404, False),
    "command_not_found": ("not_found", 404, False),
    "file_not_found": ("not_found", 404, False),
    "file_exists": ("conflict", 409, False),
    "not_a_directory": ("conflict", 409, False),
    "is_a_directory": ("conflict", 409, False),
    "sandbox_not_running": ("conflict", 409, False),
    "sandbox_paused": ("conflict", 409, False),
    "command_exited": ("conflict", 409, False),
    "conflict": ("conflict", 409, False),
    "template_build_in_progress": ("conflict", 409, True),
    "template_build_failed": ("invalid_argument", 422, False),
    "capacity_exhausted": ("unavailable", 503, True),
    "rate_limited": ("unavailable", 429, True),
    "port_not_listening": ("unavailable", 502, True),
    "template_not_ready": ("unavailable", 503, True),
    "gateway_unavailable": ("unavailable", 502, True),
    "agent_timeout": ("timeout", 504, True),
    "timeout": ("timeout", 504, True),
    "vm_failed": ("internal", 500, False),
    "vm_reply_refused": ("internal", 502, False),
    "snapshot_not_found": ("not_found", 404, False),
    "secret_not_found": ("not_found", 404, False),
    "approval_not_found": ("not_found", 404, False),
    "api_key_not_found": ("not_found", 404, False),
    "api_key_revoked": ("authentication", 401, False),
    "api_key_expired": ("authentication", 401, False),
    "snapshot_out_of_range": ("invalid_argument", 400, False),
    "policy_invalid": ("invalid_argument", 400, False),
    "sandbox_running": ("conflict", 409, False),
    "node_fenced": ("conflict", 409, False),
    "node_event_refused": ("permission_denied", 403, False),
    "node_event_invalid": ("invalid_argument", 400, False),
    "egress_denied": ("permission_denied", 403, False),
    "egress_secret_scope": ("permission_denied", 403, False),
    "egress_approval_denied": ("permission_denied", 403, False),
    "key_unavailable": ("unavailable", 503, False),
    "key_revoked": ("permission_denied", 403, False),
    "storage_full": ("unavailable", 507, True),
    "storage_unavailable": ("unavailable", 503, True),
    "snapshot_corrupt": ("internal", 500, False),
    "snapshot_failed": ("internal", 500, True),
    "internal": ("internal", 500, True),
}


class SandglassError(Exception):
    """A failure with a stable code: a catalogued server code, or connection_failed / protocol_error / disconnected /
    command_failed on the client side (or, from a newer server, a code this SDK does not know yet)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int = 0,
        request_id: Optional[str] = None,
        details: Optional[Dict[str, Any]] = None,
        retryable: Optional[bool] = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.details = details or {}
        known = KNOWN_ERROR_CODES.get(code)
        self.retryable = retryable if retryable is not None else (known[2] if known else False)


class InvalidArgumentError(SandglassError):
    """The request breaks a rule (400/413/422); details["field"] names the field."""


class AuthenticationError(SandglassError):
    """No key, or a key that is unknown, revoked or expired (401)."""


class PermissionDeniedError(SandglassError):
    """Valid credentials that may not do this, or egress the policy refused (403)."""


class NotFoundError(SandglassError):
    """The sandbox, command, file, snapshot, secret, key, template or approval does not exist (404)."""


class ConflictError(SandglassError):
    """The thing is not in a state that allows this (409), e.g. sandbox_not_running."""


class UnavailableError(SandglassError):
    """No room, or the node cannot be reached right now; worth retrying."""


class SandglassTimeoutError(SandglassError):
    """The `timeout` family: the server or the guest agent ran out of time (504)."""


class InternalError(SandglassError):
    """The server failed (500)."""


class ConnectionFailedError(SandglassError):
    """The server (control plane or gateway) could not be reached at all (connection_failed)."""


class ProtocolError(SandglassError):
    """The server answered something that breaks the protocol (protocol_error, disconnected)."""


_FAMILY_CLASS: Dict[str, Type[SandglassError]] = {
    "invalid_argument": InvalidArgumentError,
    "authentication": AuthenticationError,
    "permission_denied": PermissionDeniedError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "unavailable": UnavailableError,
    "timeout": SandglassTimeoutError,
    "internal": InternalError,
}
_CLIENT_CLASS: Dict[str, Type[SandglassError]] = {"connection_failed": ConnectionFailedError, "protocol_error": ProtocolError, "disconnected": ProtocolError}


def _family_of_status(status: int) -> str:
    # A code this SDK does not know (a newer server) still gets the right family from its status.
    if status in (400, 413, 422):
        return "invalid_argument"
    if status == 401:
        return "authentication"
    if status == 403:
        return "permission_denied"
    if status in (404, 410):
        return "not_found"
    if status == 409:
        return "conflict"
    if status in (502, 503):
        return "unavailable"
    if status in (504, 408):
        return "timeout"
    return "internal"


def error_of(code: str, message: str, *, status: int = 0, **kw: Any) -> SandglassError:
    """The exception of the code's family; a known code without a status (raised by the client) gets its catalogued one."""
    known = KNOWN_ERROR_CODES.get(code)
    if known is not None:
        return _FAMILY_CLASS[known[0]](code, message, status=status or known[1], **kw)
    if code in _CLIENT_CLASS:
        return _CLIENT_CLASS[code](code, message, status=status, **kw)
    return _FAMILY_CLASS[_family_of_status(status)](code, message, status=status, retryable=status >= 500, **kw)


class CommandExitError(SandglassError):
    """A command that exited non-zero or was killed by a signal; `result` holds its output, as E2B's does."""

    def __init__(self, result: Any) -> None:
        how = f"was killed by {result.signal}" if result.signal else f"exited with code {result.exit_code}"
        super().__init__("command_failed", f"command {how}")
        self.result = result


class CommandTimeoutError(SandglassTimeoutError):
    """A command that ran past its timeout and was killed (code `timeout`); `result` holds its output."""

    def __init__(self, result: Any, timeout_ms: int) -> None:
        super().__init__("timeout", f"command ran past its timeout of {timeout_ms} ms and was killed", status=504)
        self.result = result


_FALLBACK_CODE = {
    "invalid_argument": "invalid_argument",
    "authentication": "unauthenticated",
    "permission_denied": "permission_denied",
    "not_found": "not_found",
    "conflict": "conflict",
    "unavailable": "gateway_unavailable",
    "timeout": "timeout",
    "internal": "internal",
}


def error_from_response(status: int, body: Any) -> SandglassError:
    """The exception for an error response; a body that is not the wire format (a proxy, another service on that port)
    gets the code of its status's family, as in the TypeScript SDK."""
    wire = body.get("error") if isinstance(body, dict) else None
    if not isinstance(wire, dict) or not isinstance(wire.get("code"), str):
        family = _family_of_status(status)
        return _FAMILY_CLASS[family](_FALLBACK_CODE[family], f"unexpected response (HTTP {status})", status=status)
    return error_of(
        wire["code"],
        str(wire.get("message", f"HTTP {status}")),
        status=status,
        request_id=wire.get("requestId"),
        details=wire.get("details") if isinstance(wire.get("details"), dict) else None,
    )
