"""Lizard SDK: run LLM-written code in isolated Lizard sandboxes.

``CodeSandbox`` (synchronous) and ``AsyncCodeSandbox`` (asyncio) have the same methods. Configuration comes
from explicit arguments, then ``LIZARD_API_URL`` and ``LIZARD_API_KEY``.
"""

from ._async import AsyncCodeSandbox, AsyncNetwork, AsyncFiles, AsyncProcess, AsyncSecret, AsyncTemplate, AsyncVolume, AsyncWatchHandle
from ._async_commands import AsyncCommandHandle, AsyncCommands, AsyncPty, AsyncPtyHandle
from ._commands import CommandHandle, Commands, Pty, PtyHandle
from ._core import DEFAULT_API_URL
from ._sync import CodeSandbox, Network, Files, Process, Secret, Template, Volume, WatchHandle
from .errors import (
    AuthenticationError,
    ConflictError,
    DiskFullError,
    InvalidArgumentError,
    LizardConnectionError,
    LizardError,
    NotFoundError,
    RateLimitError,
    RequestTimeoutError,
    SandboxError,
    SandboxGoneError,
    TemplateBuildError,
)
from .models import (
    Context,
    NetworkLogEntry,
    EntryInfo,
    Execution,
    FilesystemEvent,
    ExecutionError,
    ProcessInfo,
    ProcessResult,
    PtySize,
    Result,
    SandboxInfo,
    SandboxMetric,
    SecretInfo,
    SnapshotInfo,
    TemplateInfo,
    VolumeInfo,
)

__version__ = "0.1.0"

__all__ = [
    "CodeSandbox",
    "AsyncCodeSandbox",
    "Files",
    "AsyncFiles",
    "Process",
    "AsyncProcess",
    "Network",
    "AsyncNetwork",
    "NetworkLogEntry",
    "Volume",
    "AsyncVolume",
    "VolumeInfo",
    "Secret",
    "AsyncSecret",
    "SecretInfo",
    "Template",
    "AsyncTemplate",
    "TemplateInfo",
    "Execution",
    "Result",
    "ExecutionError",
    "Context",
    "SandboxInfo",
    "SnapshotInfo",
    "EntryInfo",
    "FilesystemEvent",
    "WatchHandle",
    "AsyncWatchHandle",
    "SandboxMetric",
    "ProcessResult",
    "Commands",
    "AsyncCommands",
    "CommandHandle",
    "AsyncCommandHandle",
    "Pty",
    "AsyncPty",
    "PtyHandle",
    "AsyncPtyHandle",
    "ProcessInfo",
    "PtySize",
    "LizardError",
    "AuthenticationError",
    "InvalidArgumentError",
    "NotFoundError",
    "SandboxGoneError",
    "ConflictError",
    "RateLimitError",
    "SandboxError",
    "DiskFullError",
    "LizardConnectionError",
    "RequestTimeoutError",
    "TemplateBuildError",
    "DEFAULT_API_URL",
]
