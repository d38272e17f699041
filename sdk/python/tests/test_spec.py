"""The SDK against api/openapi.yaml: every field of the API's request and response objects has its place in
the SDK (a model's field, a call's parameter), or is named below as left out on purpose, with why. A field
added to the spec fails this test until the SDK takes it or says why not."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
import yaml

from lizard import (
    AsyncDesktop,
    AsyncDesktopStream,
    Desktop,
    DesktopStream,
    DesktopViewer,
    DesktopWindow,
    AsyncNetwork,
    Network,
    NetworkLogEntry,
    AsyncCodeSandbox,
    AsyncCommands,
    AsyncProcess,
    AsyncPty,
    AsyncSecret,
    AsyncTemplate,
    AsyncVolume,
    CodeSandbox,
    Commands,
    Context,
    EntryInfo,
    Event,
    EventPage,
    ExecutionError,
    FilesystemEvent,
    Process,
    ProcessInfo,
    Pty,
    PtySize,
    Result,
    SandboxInfo,
    SandboxMetric,
    Secret,
    SecretInfo,
    SnapshotInfo,
    Template,
    TemplateInfo,
    Volume,
    VolumeInfo,
)

SPEC = Path(__file__).resolve().parents[3] / "api" / "openapi.yaml"

# Response objects: the schema and the dataclass it is read into.
MODELS: Dict[str, type] = {
    "Sandbox": SandboxInfo,
    "Volume": VolumeInfo,
    "Secret": SecretInfo,
    "Snapshot": SnapshotInfo,
    "Template": TemplateInfo,
    "Context": Context,
    "EntryInfo": EntryInfo,
    "Result": Result,
    "ExecutionError": ExecutionError,
    "FileEvent": FilesystemEvent,
    "ProcessInfo": ProcessInfo,
    "PtySize": PtySize,
    "SandboxMetric": SandboxMetric,
    "NetworkLogEntry": NetworkLogEntry,
    "Event": Event,
    "EventList": EventPage,
    "DesktopWindow": DesktopWindow,
    "DesktopViewer": DesktopViewer,
}

# Request objects: the schema and the calls that send it, sync and async.
CALLS: Dict[str, List[Callable[..., Any]]] = {
    "CreateSandboxRequest": [CodeSandbox.create, AsyncCodeSandbox.create],
    "SetTimeoutRequest": [CodeSandbox.set_timeout, AsyncCodeSandbox.set_timeout],
    "PauseRequest": [CodeSandbox.pause, AsyncCodeSandbox.pause],
    "ResumeRequest": [CodeSandbox.resume, AsyncCodeSandbox.resume],
    "ForkRequest": [CodeSandbox.fork, AsyncCodeSandbox.fork],
    "CreateVolumeRequest": [Volume.create, AsyncVolume.create],
    "SetSecretRequest": [Secret.set, AsyncSecret.set],
    "BuildTemplateRequest": [Template.build, AsyncTemplate.build],
    "ExecuteRequest": [CodeSandbox.run_code, AsyncCodeSandbox.run_code],
    "CreateContextRequest": [CodeSandbox.create_context, AsyncCodeSandbox.create_context],
    "ProcessRequest": [Process.exec, AsyncProcess.exec],
    "ProcessStartRequest": [Commands.start, AsyncCommands.start],
    "UpdateNetworkRequest": [Network.update, AsyncNetwork.update],
    "DesktopMouseRequest": [Desktop.mouse, AsyncDesktop.mouse],
    "DesktopKeyboardRequest": [Desktop.keyboard, AsyncDesktop.keyboard],
    "DesktopOpenRequest": [Desktop.open, AsyncDesktop.open],
    "DesktopLaunchRequest": [Desktop.launch, AsyncDesktop.launch],
    "DesktopStreamRequest": [DesktopStream.start, AsyncDesktopStream.start],
}

# Fields of those objects the SDK takes or gives under another shape, and why.
OMITTED: Dict[Tuple[str, str], str] = {
    ("DesktopWindow", "class"): "DesktopWindow.class_: class is a Python keyword",
    ("Template", "projectId"): "a template is only ever the key's project's: TemplateInfo leaves it out",
    ("ExecuteRequest", "contextId"): "run_code takes context=, a Context or its id",
    ("ExecuteRequest", "stateful"): "the E2B surface's flag (docs/e2b.md): run_code's JavaScript runs per call, as the seed specifies",
    ("ExecuteRequest", "bundle"): "the E2B surface's flag (docs/e2b.md): run_code gives the richest MIME per result, as the seed specifies",
    ("CreateContextRequest", "stateful"): "the E2B surface's flag (docs/e2b.md): a JavaScript context runs per call, as the seed specifies",
    ("CreateContextRequest", "user"): "the E2B surface's (docs/e2b.md): its contexts are root's, as E2B's kernels; a context of the SDK's is the sandbox user's",
    ("ProcessRequest", "args"): "exec takes cmd as a list, [program, *args], or a string run by bash",
    ("ProcessStartRequest", "args"): "start takes cmd as a list, [program, *args], or a string run by bash",
    ("ProcessStartRequest", "timeoutKills"): "E2B's envd's deadline (the process alone), which the E2B surface sets; the SDK's timeouts kill the group",
    ("ProcessStartRequest", "pty"): "pty.create(cols, rows, cmd=...) starts a process with a terminal (its input always open), commands.start one without",
    ("FileEvent", "abort"): "a watch that ends with an abort gives on_exit the matching exception",
}

# Schemas the SDK has no model or call of its own for, and why.
UNMODELLED: Dict[str, str] = {
    "Error": "read into the exception hierarchy (errors.py), code by code",
    "SandboxState": "an enum: SandboxInfo.state is its string",
    "SandboxList": "list() returns the sandboxes themselves",
    "VolumeList": "Volume.list() returns the volumes themselves",
    "SecretList": "Secret.list() returns the secrets themselves",
    "SnapshotList": "list_snapshots() returns the snapshots themselves",
    "SnapshotRequest": "snapshot(name=...)",
    "TemplateList": "Template.list() returns the templates themselves",
    "ContextList": "list_contexts() returns the contexts themselves",
    "EntryList": "files.list() returns the entries themselves",
    "VolumeMount": 'a dict {"name", "path"} in create(volumes=...)',
    "SandboxVolume": 'a dict {"name", "path"} in SandboxInfo.volumes',
    "NetworkPolicy": "a dict as the spec describes it, in create(network=...), SandboxInfo.network and network.update's answer",
    "HeaderRule": "a dict {\"domain\", \"headers\"} in a policy's inject",
    "NetworkLog": "network.log() returns the entries themselves",
    "TemplateRecipe": "the recipe is passed to Template.build as the dict the spec describes",
    "RegistryAuth": "Template.build takes it as its registry dict ({\"username\", \"password\"} or {\"username\", \"passwordSecret\"}), sent as the spec describes",
    "TemplateFile": "part of the recipe's dict (content may be str or bytes: the SDK encodes it)",
    "TemplateCommand": "part of the recipe's dict",
    "TemplateStep": "part of the recipe's dict (steps; a copy step's content may be str or bytes: the SDK encodes it)",
    "TemplateSymlink": "part of a step's dict",
    "TemplateNpm": "part of a step's dict (its npm packages)",
    "TemplateBuildEvent": "given to on_event as the dict it is; a failed step raises TemplateBuildError",
    "Health": "for probes and operators, not for code using sandboxes",
    "NodeInfo": "GET /v1/nodes is a cluster operator's call (the cluster secret), not for code using sandboxes",
    "NodeList": "GET /v1/nodes is a cluster operator's call (the cluster secret), not for code using sandboxes",
    "SandboxMetrics": "get_metrics() returns the samples themselves",
    "ExecuteEvent": "folded into Execution and the on_* callbacks of run_code",
    "ProcessEvent": "folded into ProcessResult and the on_* callbacks of exec",
    "ProcessList": "commands.list() returns the processes themselves",
    "ProcessStdinRequest": "send_stdin sends its bytes as the raw body, the other form the API takes",
    "ProcessSignalRequest": "commands.kill(pid, signal) and the handles' kill(signal)",
    "ProcessOutputEvent": "folded into the on_stdout/on_stderr callbacks and wait() of a command's handle",
    "ProcessControl": "a terminal handle's resize() sends it; its end gives wait() the exit code",
    "Abort": "a stream that ends with an abort raises the matching exception",
    "EventType": "an enum: Event.type is its string",
    "EventData": "Event.data is the dict it is, in the API's names (its fields vary by type)",
    "CreateWebhookRequest": "webhooks are an operator's setup, registered once with the API or the Go client, not from sandbox code",
    "Webhook": "see CreateWebhookRequest",
    "WebhookList": "see CreateWebhookRequest",
    "WebhookDelivery": "see CreateWebhookRequest",
    "WebhookAttempt": "see CreateWebhookRequest",
    "WebhookDeliveryList": "see CreateWebhookRequest",
    "NodeDrain": "draining a cluster node is an operator's, with the cluster secret (lizard node drain, the Go client)",
    "SandboxMove": "see NodeDrain",
    "SandboxLeft": "see NodeDrain",
    "NodeState": "see NodeDrain",
    "DesktopScreen": "desktop.screen_size() returns (width, height)",
    "DesktopCursor": "desktop.cursor_position() and the mouse calls return (x, y)",
    "DesktopWindowList": "desktop.windows() returns the windows themselves",
}


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.fixture(scope="module")
def schemas() -> Dict[str, Any]:
    spec = yaml.safe_load(SPEC.read_text())
    return dict(spec["components"]["schemas"])


def properties(schemas: Dict[str, Any], name: str) -> List[str]:
    return list((schemas[name].get("properties") or {}).keys())


def test_every_schema_is_placed(schemas: Dict[str, Any]) -> None:
    placed = set(MODELS) | set(CALLS) | set(UNMODELLED)
    assert set(schemas) - placed == set(), "schemas of the spec the SDK neither models nor says why not"
    assert placed - set(schemas) == set(), "schemas named here that the spec no longer has"
    for schema, field in OMITTED:
        assert field in properties(schemas, schema), f"OMITTED names {schema}.{field}, which the spec lacks"


@pytest.mark.parametrize("schema", sorted(MODELS))
def test_models_have_every_field(schemas: Dict[str, Any], schema: str) -> None:
    fields = {f.name for f in dataclasses.fields(MODELS[schema])}
    missing = [p for p in properties(schemas, schema) if snake(p) not in fields and (schema, p) not in OMITTED]
    assert missing == [], f"{MODELS[schema].__name__} lacks {schema}'s {missing}"


@pytest.mark.parametrize("schema", sorted(CALLS))
def test_calls_take_every_field(schemas: Dict[str, Any], schema: str) -> None:
    for call in CALLS[schema]:
        params = set(inspect.signature(call).parameters)
        missing = [p for p in properties(schemas, schema) if snake(p) not in params and (schema, p) not in OMITTED]
        assert missing == [], f"{call.__qualname__} takes no parameter for {schema}'s {missing}"
