"""sandglass: the Python client of Sandglass (standard library only), shaped like the TypeScript SDK and E2B's."""
from .aio import AsyncCommandHandle, AsyncPorts, AsyncPty, AsyncPtyHandle, AsyncSandbox
from .apikeys import ApiKeys
from .audit import AUDIT_EXPORT_FORMAT, AuditExportFailure, AuditExportOk, AuditExportVerdict, audit_key_id, format_audit_verdict, verify_audit_export
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
from .models import SandboxInfo, SandboxMetric
from .ports import DEFAULT_PORT_DOMAIN, Ports
from .pty import Pty, PtyHandle
from .replay import ReplayFork, compare_command, format_replay_report
from .sandbox import Sandbox, Secrets, parse_fork_source
from .template import Template

__all__ = [
    "AUDIT_EXPORT_FORMAT",
    "ApiKeys",
    "AsyncCommandHandle",
    "AsyncPorts",
    "AsyncPty",
    "AsyncPtyHandle",
    "AsyncSandbox",
    "AuditExportFailure",
    "AuditExportOk",
    "AuditExportVerdict",
    "AuthenticationError",
    "CommandExitError",
    "CommandHandle",
    "CommandResult",
    "CommandTimeoutError",
    "Commands",
    "ConflictError",
    "ConnectionFailedError",
    "DEFAULT_COMMAND_TIMEOUT_MS",
    "DEFAULT_PORT_DOMAIN",
    "Files",
    "InternalError",
    "InvalidArgumentError",
    "KNOWN_ERROR_CODES",
    "NotFoundError",
    "PermissionDeniedError",
    "Ports",
    "ProtocolError",
    "Pty",
    "PtyHandle",
    "ReplayFork",
    "Sandbox",
    "SandboxInfo",
    "SandboxMetric",
    "SandglassError",
    "SandglassTimeoutError",
    "Secrets",
    "Template",
    "UnavailableError",
    "audit_key_id",
    "compare_command",
    "format_audit_verdict",
    "format_replay_report",
    "parse_fork_source",
    "verify_audit_export",
]
