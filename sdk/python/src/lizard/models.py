"""Values returned by the Lizard SDK: executions, results, contexts, sandbox and file information."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Mapping, Optional

__all__ = [
    "Result",
    "ExecutionError",
    "Execution",
    "Context",
    "SandboxInfo",
    "EntryInfo",
    "FilesystemEvent",
    "SandboxMetric",
    "NetworkLogEntry",
    "ProcessResult",
    "ProcessInfo",
    "PtySize",
    "Event",
    "EventPage",
]


@dataclass
class Result:
    """One output of a run, with exactly one MIME type: the richest the output offered.

    Attributes:
        type: ``"result"`` for the value of the last expression, ``"display"`` for displayed output such
            as ``plt.show()``.
        mime: the MIME type, such as ``"text/plain"``, ``"text/html"`` or ``"image/png"``.
        data: the content; images are base64.
    """

    type: str
    mime: str
    data: str

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Result":
        """Build a Result from its wire form."""
        return cls(type=str(obj.get("type", "")), mime=str(obj.get("mime", "")), data=str(obj.get("data", "")))


@dataclass
class ExecutionError:
    """An error raised by the code that ran (not by the request), such as ``ZeroDivisionError``.

    A run stopped by its timeout has the name ``"TimeoutError"``.
    """

    name: str
    message: str
    traceback: str

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "ExecutionError":
        """Build an ExecutionError from its wire form."""
        return cls(
            name=str(obj.get("name", "")),
            message=str(obj.get("message", "")),
            traceback=str(obj.get("traceback", "")),
        )


@dataclass
class Execution:
    """What one ``run_code`` call produced.

    Attributes:
        results: the rich outputs, in the order they were produced.
        stdout: everything the code printed to standard output.
        stderr: everything the code printed to standard error.
        error: the error the code raised, or None.
        execution_count: the kernel's execution counter after this run (Python only), or None.
    """

    results: List[Result] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None


@dataclass
class Context:
    """An execution context: its own kernel, variables and working directory."""

    id: str
    language: str
    cwd: str

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Context":
        """Build a Context from its wire form."""
        return cls(id=str(obj.get("id", "")), language=str(obj.get("language", "")), cwd=str(obj.get("cwd", "")))


@dataclass
class SandboxInfo:
    """What the server tells about one sandbox.

    Attributes:
        sandbox_id: the sandbox's id.
        project_id: the project the sandbox belongs to.
        template: the template it booted, such as ``"interpreter"``.
        state: ``starting``, ``running``, ``paused``, ``killed``, ``expired`` or ``failed``.
        timeout_ms: the lifetime it was given; 0 means it never expires.
        metadata: the metadata it was created with.
        created_at: when it was created.
        expires_at: when it will end by itself, or None when it never expires.
        ended_at: when it ended, or None while it lives.
        memory_mb, cpus, disk_mb: the resources it runs with, or None when the server sets no bound.
        parent_sandbox_id: the sandbox whose lizard_token created this one, or None.
        volumes: the volumes it mounts, as ``{"name": ..., "path": ...}``.
        access_token: opens its exposed ports (``get_host``) to whoever holds it, or None.
        public_ports: its ports need no credential.
        ports_domain: the server's wildcard domain for ports, or None (path-based URLs only).
        ports_host: the ``Host`` its ports' requests carry (``${PORT}`` the port), or None: the caller's.
        network: its network policy by name (``{"default": ..., "allow": [...], ...}``), or None.
        durable: it is paused and its image is in the server's image store, so it outlives the
            machine that paused it (docs/storage.md).
    """

    sandbox_id: str
    project_id: str
    template: str
    state: str
    timeout_ms: int
    metadata: Dict[str, str]
    created_at: Optional[datetime]
    expires_at: Optional[datetime] = None
    ended_at: Optional[datetime] = None
    memory_mb: Optional[int] = None
    cpus: Optional[float] = None
    disk_mb: Optional[int] = None
    parent_sandbox_id: Optional[str] = None
    volumes: List[Dict[str, str]] = field(default_factory=list)
    access_token: Optional[str] = None
    public_ports: bool = False
    ports_domain: Optional[str] = None
    ports_host: Optional[str] = None
    network: Optional[Dict[str, Any]] = None
    durable: bool = False

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "SandboxInfo":
        """Build a SandboxInfo from the wire form of a Sandbox."""
        return cls(
            sandbox_id=str(obj.get("sandboxId", "")),
            project_id=str(obj.get("projectId", "")),
            template=str(obj.get("template", "")),
            state=str(obj.get("state", "")),
            timeout_ms=int(obj.get("timeoutMs") or 0),
            metadata={str(k): str(v) for k, v in (obj.get("metadata") or {}).items()},
            created_at=parse_time(obj.get("createdAt")),
            expires_at=parse_time(obj.get("expiresAt")),
            ended_at=parse_time(obj.get("endedAt")),
            memory_mb=int(obj["memoryMb"]) if isinstance(obj.get("memoryMb"), int) else None,
            cpus=float(obj["cpus"]) if isinstance(obj.get("cpus"), (int, float)) else None,
            disk_mb=int(obj["diskMb"]) if isinstance(obj.get("diskMb"), int) else None,
            parent_sandbox_id=str(obj["parentSandboxId"]) if obj.get("parentSandboxId") else None,
            volumes=[{"name": str(v.get("name", "")), "path": str(v.get("path", ""))} for v in obj.get("volumes") or []],
            access_token=str(obj["accessToken"]) if obj.get("accessToken") else None,
            public_ports=bool(obj.get("publicPorts")),
            ports_domain=str(obj["portsDomain"]) if obj.get("portsDomain") else None,
            ports_host=str(obj["portsHost"]) if obj.get("portsHost") else None,
            network=dict(obj["network"]) if isinstance(obj.get("network"), dict) else None,
            durable=bool(obj.get("durable")),
        )


@dataclass
class VolumeInfo:
    """A persistent volume of the project: files written under its mount path outlive the sandbox.

    Attributes:
        name: its name, unique in the project; mount it with ``CodeSandbox.create(volumes=[...])``.
        volume_id: the server's id for it.
        size_mb: its size; writes past it fail with ENOSPC inside the sandbox.
        created_at: when it was made.
    """

    name: str
    volume_id: str
    size_mb: int
    created_at: Optional[datetime]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "VolumeInfo":
        """Build a VolumeInfo from the wire form of a Volume."""
        return cls(
            name=str(obj.get("name", "")),
            volume_id=str(obj.get("volumeId", "")),
            size_mb=int(obj.get("sizeMb") or 0),
            created_at=parse_time(obj.get("createdAt")),
        )


@dataclass
class SecretInfo:
    """A secret of the project, without its value: no call returns a value (docs/secrets.md).

    Attributes:
        name: its name, unique in the project; a network policy names it as ``{{ secrets.NAME }}``.
        hosts: the names and wildcards it may be sent to; empty for a secret set before secrets named
            their hosts, which is sent nowhere until it is set again.
        allow_http: whether it may go to them over plain HTTP too.
        created_at: when it was first set.
        updated_at: when its value was last set.
    """

    name: str
    hosts: List[str]
    allow_http: bool
    created_at: Optional[datetime]
    updated_at: Optional[datetime]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "SecretInfo":
        """Build a SecretInfo from the wire form of a Secret."""
        return cls(
            name=str(obj.get("name", "")),
            hosts=[str(h) for h in obj.get("hosts") or []],
            allow_http=bool(obj.get("allowHttp", False)),
            created_at=parse_time(obj.get("createdAt")),
            updated_at=parse_time(obj.get("updatedAt")),
        )


@dataclass
class TemplateInfo:
    """A custom template of the project (docs/templates.md): create sandboxes from it with
    ``CodeSandbox.create(template=name)``.

    Attributes:
        name: its name, unique in the project.
        base: the built-in template it was built on.
        key: the hash of its recipe and base; a build is cached under it.
        created_at: when it was built.
        build_ms: how long its build took (0 when it was found in the cache).
        size_bytes: the size of its root filesystem.
        recipe: its recipe as sent, file contents left out.
        digest: for a template built on an image (recipe ``from``), the digest of the image it was
            built from; "" otherwise.
    """

    name: str
    base: str
    key: str
    created_at: Optional[datetime]
    build_ms: int
    size_bytes: int
    recipe: Dict[str, Any]
    digest: str = ""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "TemplateInfo":
        """Build a TemplateInfo from the wire form of a Template."""
        return cls(
            name=str(obj.get("name", "")),
            base=str(obj.get("base", "")),
            key=str(obj.get("key", "")),
            created_at=parse_time(obj.get("createdAt")),
            build_ms=int(obj.get("buildMs") or 0),
            size_bytes=int(obj.get("sizeBytes") or 0),
            recipe=dict(obj.get("recipe") or {}),
            digest=str(obj.get("digest") or ""),
        )


@dataclass
class SnapshotInfo:
    """A saved copy of a sandbox (memory, kernel variables, processes, files).

    Create sandboxes from it with ``CodeSandbox.create(snapshot_id=...)``. ``durable`` says its
    image is in the server's image store, uploaded in the background after the snapshot answers.
    """

    snapshot_id: str
    sandbox_id: str
    project_id: str
    template: str
    created_at: Optional[datetime]
    size_bytes: int
    durable: bool = False
    name: Optional[str] = None
    """The name it was taken with, while no newer snapshot of the project has taken it."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "SnapshotInfo":
        """Build a SnapshotInfo from the wire form of a Snapshot."""
        return cls(
            snapshot_id=str(obj.get("snapshotId", "")),
            sandbox_id=str(obj.get("sandboxId", "")),
            project_id=str(obj.get("projectId", "")),
            template=str(obj.get("template", "")),
            created_at=parse_time(obj.get("createdAt")),
            size_bytes=int(obj.get("sizeBytes") or 0),
            durable=bool(obj.get("durable")),
            name=obj.get("name") or None,
        )


@dataclass
class EntryInfo:
    """One file or directory in a sandbox; a symlink is described, not followed.

    Attributes:
        name: the base name.
        path: the absolute path inside the sandbox.
        type: ``file``, ``dir``, ``symlink`` or ``other``.
        size: the size in bytes.
        mode: the permission bits, such as ``0o644``.
        mod_time: the last modification time.
        permissions: the type and mode as ``ls -l`` shows them, such as ``"-rw-r--r--"``.
        owner: the owner's user name (the uid when the sandbox has no name for it).
        group: the group's name (the gid when the sandbox has no name for it).
        symlink_target: where a symlink points, as stored in it; None for other types.
        metadata: the file's metadata (``files.write(..., metadata=)``, its ``user.e2b.*`` extended
            attributes); None when it has none.
    """

    name: str
    path: str
    type: str
    size: int
    mode: int
    mod_time: Optional[datetime]
    permissions: str = ""
    owner: str = ""
    group: str = ""
    symlink_target: Optional[str] = None
    metadata: Optional[Dict[str, str]] = None

    @property
    def modified_time(self) -> Optional[datetime]:
        """E2B's name for :attr:`mod_time`."""
        return self.mod_time

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "EntryInfo":
        """Build an EntryInfo from its wire form."""
        return cls(
            name=str(obj.get("name", "")),
            path=str(obj.get("path", "")),
            type=str(obj.get("type", "")),
            size=int(obj.get("size") or 0),
            mode=int(obj.get("mode") or 0),
            mod_time=parse_time(obj.get("modTime")),
            permissions=str(obj.get("permissions") or ""),
            owner=str(obj.get("owner") or ""),
            group=str(obj.get("group") or ""),
            symlink_target=obj.get("symlinkTarget") or None,
            metadata=dict(obj["metadata"]) if obj.get("metadata") else None,
        )


@dataclass
class FilesystemEvent:
    """One change under a watched directory (``files.watch_dir``).

    Attributes:
        type: ``create``, ``write``, ``remove``, ``rename`` (the old name; the new one comes as ``create``)
            or ``chmod``.
        name: the path that changed, relative to the watched directory.
        time: when the sandbox saw it.
        entry: the file as it was when the event was sent, for a watch asked to include it (the API's
            ``includeEntry``); None otherwise.
    """

    type: str
    name: str
    time: Optional[datetime]
    entry: Optional[EntryInfo] = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "FilesystemEvent":
        """Build a FilesystemEvent from its wire form."""
        entry = EntryInfo.from_json(obj["entry"]) if obj.get("entry") else None
        return cls(type=str(obj.get("type", "")), name=str(obj.get("name", "")), time=parse_time(obj.get("time")), entry=entry)


@dataclass
class SandboxMetric:
    """One sample of a sandbox's use of its machine (``get_metrics``), taken every 5 s.

    Attributes:
        timestamp: when it was taken.
        cpu_used_pct: CPU time used since the previous sample, in percent of ``cpu_count`` CPUs.
        cpu_count: the CPUs the sandbox may use.
        mem_used: memory its host cannot reclaim, bytes; ``mem_total`` its limit.
        disk_used: what its writable layer holds, bytes; ``disk_total`` its limit.
    """

    timestamp: Optional[datetime]
    cpu_used_pct: float
    cpu_count: float
    mem_used: int
    mem_total: int
    disk_used: int
    disk_total: int

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "SandboxMetric":
        """Build a SandboxMetric from its wire form."""
        return cls(
            timestamp=parse_time(obj.get("timestamp")),
            cpu_used_pct=float(obj.get("cpuUsedPct") or 0),
            cpu_count=float(obj.get("cpuCount") or 0),
            mem_used=int(obj.get("memUsed") or 0),
            mem_total=int(obj.get("memTotal") or 0),
            disk_used=int(obj.get("diskUsed") or 0),
            disk_total=int(obj.get("diskTotal") or 0),
        )


@dataclass
class NetworkLogEntry:
    """One egress decision of a sandbox with a network policy (``sandbox.network.log()``).

    Attributes:
        time: when it was decided.
        kind: ``dns``, ``http`` or ``tls``.
        name: the name asked for (lower-case punycode).
        addr: the address connected to (or answered), or "".
        port: the port the sandbox connected to (0 for DNS).
        allowed: whether it was let through; ``reason`` says why not.
        bytes_out, bytes_in: what the connection carried each way, once it ended.
    """

    time: Optional[datetime]
    kind: str
    name: str
    addr: str
    port: int
    allowed: bool
    reason: str
    bytes_out: int
    bytes_in: int

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "NetworkLogEntry":
        """Build a NetworkLogEntry from its wire form."""
        return cls(
            time=parse_time(obj.get("time")),
            kind=str(obj.get("kind", "")),
            name=str(obj.get("name", "")),
            addr=str(obj.get("addr", "")),
            port=int(obj.get("port") or 0),
            allowed=bool(obj.get("allowed")),
            reason=str(obj.get("reason", "")),
            bytes_out=int(obj.get("bytesOut") or 0),
            bytes_in=int(obj.get("bytesIn") or 0),
        )


@dataclass
class ProcessResult:
    """What one ``process.exec`` call produced, or a background command's ``wait()``.

    Attributes:
        stdout: the command's standard output.
        stderr: the command's standard error.
        exit_code: its exit code; -1 when it could not start or was stopped without one.
        error: why the command could not start or was stopped (such as a timeout), or None.
    """

    stdout: str
    stderr: str
    exit_code: int
    error: Optional[str] = None


@dataclass
class PtySize:
    """A terminal's size in characters."""

    cols: int
    rows: int


@dataclass
class ProcessInfo:
    """A background process of a sandbox (``commands.list``, ``commands.start``), running or ended.

    Attributes:
        pid: its process id in the sandbox.
        tag: the caller's name for it, or None.
        cmd: the command line, when it was started from one (run by ``bash -c``).
        args: what runs (for a command line, ``bash -c cmd``; for a terminal, the shell).
        cwd: its working directory.
        user: the user it runs as.
        started_at: when it started.
        pty: its terminal's size, or None when it has no terminal.
        stdin: whether its stdin takes input now.
        running: whether it still runs.
        exit_code: once it ended: its code; 128+N when signal N killed it, 124 when it timed out.
        ended_at: when it ended.
        error: why it ended, when not by itself (a timeout).
    """

    pid: int
    args: List[str]
    cwd: str
    user: str
    started_at: Optional[datetime]
    stdin: bool
    running: bool
    tag: Optional[str] = None
    cmd: Optional[str] = None
    pty: Optional[PtySize] = None
    exit_code: Optional[int] = None
    ended_at: Optional[datetime] = None
    error: Optional[str] = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "ProcessInfo":
        """Build a ProcessInfo from its wire form."""
        pty = obj.get("pty")
        code = obj.get("exitCode")
        return cls(
            pid=int(obj.get("pid") or 0),
            args=[str(a) for a in obj.get("args") or []],
            cwd=str(obj.get("cwd") or ""),
            user=str(obj.get("user") or ""),
            started_at=parse_time(obj.get("startedAt")),
            stdin=bool(obj.get("stdin")),
            running=bool(obj.get("running")),
            tag=obj.get("tag") or None,
            cmd=obj.get("cmd") or None,
            pty=PtySize(int(pty.get("cols") or 0), int(pty.get("rows") or 0)) if isinstance(pty, dict) else None,
            exit_code=code if isinstance(code, int) and not obj.get("running") else None,
            ended_at=parse_time(obj.get("endedAt")),
            error=obj.get("error") or None,
        )


_TIME_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))?$"
)


def parse_time(value: Any) -> Optional[datetime]:
    """Parse an RFC 3339 time as Go writes it (up to nanoseconds), or return None."""
    if not isinstance(value, str) or not value:
        return None
    m = _TIME_RE.match(value)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    tz = timezone.utc
    if m.group(9):
        offset = timedelta(hours=int(m.group(10)), minutes=int(m.group(11)))
        tz = timezone(offset if m.group(9) == "+" else -offset)
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


@dataclass
class Event:
    """One lifecycle event of a sandbox (docs/events.md).

    Attributes:
        id: grows in the order events are recorded; pass the last one seen as ``after`` to resume.
        type: what happened, such as ``"sandbox.created"``, ``"sandbox.paused"``, ``"sandbox.killed"``.
        time: when it happened.
        project_id: the project of the sandbox.
        sandbox_id: the sandbox it happened to.
        metadata: the sandbox's metadata when it happened.
        data: what else it says, in the API's names: ``state`` (after the event), ``reason``, ``template``,
            ``snapshotId``, ``forkedFrom``, ``parentSandboxId``, ``sandboxIds`` (a fork's copies), ``node``.
    """

    id: int
    type: str
    time: Optional[datetime]
    project_id: str
    sandbox_id: str
    metadata: Dict[str, str] = field(default_factory=dict)
    data: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Event":
        """Build an Event from the wire form of an Event."""
        return cls(
            id=int(obj.get("id") or 0),
            type=str(obj.get("type", "")),
            time=parse_time(obj.get("time")),
            project_id=str(obj.get("projectId", "")),
            sandbox_id=str(obj.get("sandboxId", "")),
            metadata=dict(obj.get("metadata") or {}),
            data=dict(obj.get("data") or {}),
        )


@dataclass
class EventPage:
    """One page of events, oldest first: pass ``next`` as ``after`` for the following page while ``has_more``."""

    events: List[Event]
    next: int
    has_more: bool

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "EventPage":
        """Build an EventPage from the wire form of an EventList."""
        return cls(
            events=[Event.from_json(e) for e in obj.get("events") or []],
            next=int(obj.get("next") or 0),
            has_more=bool(obj.get("hasMore")),
        )


@dataclass
class DesktopWindow:
    """A visible window of a desktop sandbox (``sandbox.desktop.windows()``).

    Attributes:
        id: its X window id, in decimal.
        title: its title.
        class_: its WM_CLASS instance name (``chromium``); ``class`` on the wire.
        x, y, width, height: where it is on the screen, in pixels.
        active: whether it has the focus.
    """

    id: str
    title: str
    class_: str
    x: int
    y: int
    width: int
    height: int
    active: bool

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "DesktopWindow":
        """Build a DesktopWindow from its wire form."""
        return cls(
            id=str(obj.get("id", "")),
            title=str(obj.get("title", "")),
            class_=str(obj.get("class", "")),
            x=int(obj.get("x") or 0),
            y=int(obj.get("y") or 0),
            width=int(obj.get("width") or 0),
            height=int(obj.get("height") or 0),
            active=bool(obj.get("active")),
        )


@dataclass
class DesktopViewer:
    """A viewer of a desktop sandbox's stream (``sandbox.desktop.stream.start()``), with a token of its own.

    Attributes:
        viewer_id: the viewer's id, for ``sandbox.desktop.stream.revoke(viewer_id)``.
        token: opens this sandbox's stream, and nothing else, until it expires or is revoked.
        control: whether the viewer may move the mouse and type (else view-only).
        expires_at: when the token stops opening the stream.
        websocket_url: the stream, RFB over a WebSocket (noVNC's), the token in its query.
        url: the console's live view of the stream.
    """

    viewer_id: str
    token: str
    control: bool
    expires_at: Optional[datetime]
    websocket_url: str
    url: str

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "DesktopViewer":
        """Build a DesktopViewer from its wire form."""
        return cls(
            viewer_id=str(obj.get("viewerId", "")),
            token=str(obj.get("token", "")),
            control=bool(obj.get("control")),
            expires_at=parse_time(obj.get("expiresAt")),
            websocket_url=str(obj.get("websocketUrl", "")),
            url=str(obj.get("url", "")),
        )
