"""schemathesis hooks of test/api/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

Two checks the built-in ones cannot make here:

- Some rules of api/openapi.yaml are not in its schemas: the bounds a server is configured with
  (--max-memory-mb, --max-cpus, --max-disk-mb, --max-timeout), rules across fields (no `envs` with
  `snapshotId`, a context's language), and the state of the sandbox (a `cwd` that must exist).
  schemathesis.toml lets positive_data_acceptance pass a 400 for the operations that have such
  rules (all of them here, in RULES), and `rejects_valid_data_only_by_a_stated_rule` fails every 400 on valid data whose message
  is not one of those rules.
- The NDJSON streams of /execute, /process and POST /v1/templates: `ndjson_events_conform` validates
  every line against the response schema and requires the last to be the final event (`end`; a
  build's `done` or `error`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema_rs
import schemathesis
import yaml

SPEC = yaml.safe_load((Path(__file__).resolve().parents[2] / "api" / "openapi.yaml").read_text())

# The rules each operation states in the spec's descriptions, by the start of the 400's message.
RULES = {
    "createSandbox": [r" is out of range", r"cannot be set when creating from a snapshot", r"is set by Lizard when lizardToken",
                      r"envs total \d+ bytes", r"metadata (key|value) .* bytes", r"differs from snapshot",
                      r"^volume path ", r"^a volume cannot be mounted at /", r"^volume \S+ is listed twice",
                      r"^volume paths .* overlap", r"^volumes cannot be mounted in a sandbox created from a snapshot",
                      r"^network"],
    # A policy's rules are checked beyond the schema (docs/network.md), each message naming its field.
    "updateSandboxNetwork": [r"^network"],
    "setProjectNetwork": [r"^network"],
    "createVolume": [r"^sizeMb \d+ is out of range"],
    "forkSandbox": [r" is out of range"],
    "resumeSandbox": [r" is out of range"],
    "setSandboxTimeout": [r" is out of range"],
    # typescript and stateful: the rules the spec's descriptions of the fields state.
    "execute": [r"^language: context \S+ runs \w+, not \w+$", r"^language: typescript runs only", r"^stateful: "],
    # The user is root or the sandbox's (the description of user).
    "createContext": [r"^cwd: ", r"^stateful: only javascript", r"^language: typescript runs only", r"^user: "],
    "runProcess": [r"^cwd: ", r"^args: the program name args\[0\] is empty$"],
    # The program must exist; the tag's bound is in bytes; the user is root or the sandbox's.
    "startProcess": [r"^cmd: ", r"^cwd: ", r"^args: ", r"^tag: is \d+ bytes", r"^user: "],
    "deleteContext": [r"^id: the default context \S+ cannot be deleted"],
    # What is at the path, and what the sandbox user may do there; a file's metadata keys and values
    # are printable US-ASCII within bytes' bounds (the description of metadata).
    "readFile": [r"^path: "],
    "writeFile": [r"^path: ", r"^metadata: "],
    "removeFile": [r"^path: "],
    "listDir": [r"^path: "],
    "statFile": [r"^path: "],
    "makeDir": [r"^path: "],
    "renameFile": [r"^path: ", r"^to: "],
    "watchDir": [r"^path: "],
    # The recipe's rules the schemas cannot state (docs/templates.md), each message naming its field.
    "buildTemplate": [r"^recipe\.", r"^name \""],
    # A value's bound is in bytes, the schema's maxLength would be in characters; hosts are names or
    # wildcards as network rules name them, never addresses (the description of hosts).
    "setSecret": [r"^value is \d+ bytes", r"^hosts(\[\d+\])?: "],
    # The desktop's rules its descriptions state beyond the schemas (docs/desktop.md).
    "desktopScreenshot": [r"^a region needs all of", r"is not inside the \d+x\d+ screen"],
    "desktopMouse": [r"^[xy] is required", r"^toX and toY are drag's alone", r"^count \d+: want 1 to 10"],
    "desktopKeyboard": [r"^keys are press's", r"^text is type's", r"^text is required", r"^text of \d+ bytes",
                        r"^text must be UTF-8", r"^typing \d+ characters", r"^xdotool knows no such key"],
    "desktopOpen": [r"^target \".*\" starts with -", r"^target must be one line", r"^target of \d+ bytes"],
}


@schemathesis.check
def rejects_valid_data_only_by_a_stated_rule(ctx, response, case):  # type: ignore[no-untyped-def]
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    rules = RULES.get(case.operation.definition.raw.get("operationId"), [])
    try:
        message = json.loads(response.text).get("message", "")
    except ValueError:
        message = ""
    if not any(re.search(r, message) for r in rules):
        raise AssertionError(f"valid data was refused with a 400 that states none of the operation's rules: {message!r}")
    return None


def _validator(ref: str):  # type: ignore[no-untyped-def]
    return jsonschema_rs.Draft202012Validator({"$ref": ref, "components": SPEC["components"]})


@schemathesis.check
def ndjson_events_conform(ctx, response, case):  # type: ignore[no-untyped-def]
    if response.status_code != 200 or not response.headers.get("content-type", [""])[0].startswith("application/x-ndjson"):
        return None
    ref = {"/v1/sandboxes/{sandboxId}/execute": "#/components/schemas/ExecuteEvent",
           "/v1/sandboxes/{sandboxId}/process": "#/components/schemas/ProcessEvent",
           "/v1/sandboxes/{sandboxId}/processes/{pid}/output": "#/components/schemas/ProcessOutputEvent",
           "/v1/templates": "#/components/schemas/TemplateBuildEvent"}.get(case.operation.path)
    last = {"/v1/templates": ("done", "error")}.get(case.operation.path, ("end",))
    if ref is None:
        raise AssertionError(f"an NDJSON response from {case.operation.path}, which the spec does not describe as a stream")
    v = _validator(ref)
    lines = [line for line in response.text.split("\n") if line.strip()]
    if not lines:
        raise AssertionError("an empty NDJSON stream: want events ending with an end event")
    for i, line in enumerate(lines):
        event = json.loads(line)
        errors = list(v.iter_errors(event))
        if errors:
            raise AssertionError(f"event {i} {line!r} does not match {ref}: {errors[0].message}")
    if json.loads(lines[-1]).get("type") not in last:
        raise AssertionError(f"the stream ends without a final event ({', '.join(last)}): last line {lines[-1]!r}")
    return None
