"""sandglass: the Python client of Sandglass (standard library only), shaped like the TypeScript SDK and E2B's."""
from .aio import AsyncCommandHandle, AsyncPorts, AsyncPty, AsyncPtyHandle, AsyncSandbox, AsyncTemplate
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
from .template_build import BuildLogLine, BuiltStep, TemplateBuildResult, base_key, canonical_json, start_key, step_key
from .template_spec import parse_dockerfile, parse_template_file, parse_template_yaml

__all__ = [
    "AUDIT_EXPORT_FORMAT",
    "ApiKeys",
    "AsyncCommandHandle",
    "AsyncPorts",
    "AsyncPty",
    "AsyncPtyHandle",
    "AsyncSandbox",
    "AsyncTemplate",
    "AuditExportFailure",
    "AuditExportOk",
    "AuditExportVerdict",
    "AuthenticationError",
    "BuildLogLine",
    "BuiltStep",
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
    "TemplateBuildResult",
    "UnavailableError",
    "audit_key_id",
    "base_key",
    "canonical_json",
    "compare_command",
    "format_audit_verdict",
    "format_replay_report",
    "parse_dockerfile",
    "parse_fork_source",
    "parse_template_file",
    "parse_template_yaml",
    "start_key",
    "step_key",
    "verify_audit_export",
]
