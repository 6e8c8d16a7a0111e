"""sandglass: the Python client of Sandglass (standard library only), shaped like the TypeScript SDK and E2B's."""
from .aio import AsyncCommandHandle, AsyncSandbox
from .commands import DEFAULT_COMMAND_TIMEOUT_MS, CommandHandle, CommandResult, Commands
from .errors import (
    KNOWN_ERROR_CODES,
    AuthenticationError,
    CommandExitError,
    CommandTimeoutError,
    ConflictError,
    ConnectionFailedError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    SandglassError,
    SandglassTimeoutError,
    UnavailableError,
)
from .files import Files
from .pty import Pty, PtyHandle
from .sandbox import Sandbox, Secrets, parse_fork_source

__all__ = [
    "AsyncCommandHandle",
    "AsyncSandbox",
    "AuthenticationError",
    "CommandExitError",
    "CommandHandle",
    "CommandResult",
    "CommandTimeoutError",
    "Commands",
    "ConflictError",
    "ConnectionFailedError",
    "DEFAULT_COMMAND_TIMEOUT_MS",
    "Files",
    "InternalError",
    "InvalidArgumentError",
    "KNOWN_ERROR_CODES",
    "NotFoundError",
    "PermissionDeniedError",
    "ProtocolError",
    "Pty",
    "PtyHandle",
    "Sandbox",
    "SandglassError",
    "SandglassTimeoutError",
    "Secrets",
    "UnavailableError",
    "parse_fork_source",
]
