"""sandglass: the Python client of Sandglass (standard library only), shaped like the TypeScript SDK and E2B's."""
from .aio import AsyncCommandHandle, AsyncSandbox
from .commands import DEFAULT_COMMAND_TIMEOUT_MS, CommandHandle, CommandResult, Commands
from .errors import AuthenticationError, CommandExitError, CommandTimeoutError, NotFoundError, SandglassError
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
    "DEFAULT_COMMAND_TIMEOUT_MS",
    "Files",
    "NotFoundError",
    "Pty",
    "PtyHandle",
    "Sandbox",
    "SandglassError",
    "Secrets",
    "parse_fork_source",
]
