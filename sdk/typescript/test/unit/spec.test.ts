// The SDK against api/openapi.yaml: every field of the API's request and
// response objects has its place in the SDK (a member of the interface it
// is read into, an option or parameter of the call that sends it), or is
// named below as left out on purpose, with why. A field added to the spec
// fails this test until the SDK takes it or says why not.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

// build-test/test/unit -> sdk/typescript
const sdk = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const spec = path.resolve(sdk, '../../api/openapi.yaml');

// Response objects: the schema and the interfaces it is read into.
const MODELS: Record<string, string[]> = {
  Sandbox: ['WireSandbox', 'SandboxInfo'],
  Volume: ['WireVolume', 'VolumeInfo'],
  Secret: ['WireSecret', 'SecretInfo'],
  Snapshot: ['SnapshotInfo'],
  Template: ['TemplateInfo'],
  Context: ['Context'],
  EntryInfo: ['WireEntry', 'EntryInfo'],
  Result: ['Result'],
  ExecutionError: ['ExecutionError'],
  ExecuteEvent: ['ExecuteEvent'],
  ProcessEvent: ['ProcessEvent'],
  Abort: ['Abort'],
  TemplateBuildEvent: ['TemplateBuildEvent'],
  TemplateRecipe: ['Recipe'],
  TemplateFile: ['RecipeFile'],
  TemplateCommand: ['RecipeCommand'],
  TemplateStep: ['RecipeStep'],
  VolumeMount: ['VolumeMount'],
  SandboxVolume: ['VolumeMount'],
  FileEvent: ['FilesystemEvent'],
  SandboxMetric: ['WireMetric', 'SandboxMetric'],
  ProcessInfo: ['ProcessInfo'],
  PtySize: ['PtySize'],
  ProcessOutputEvent: ['ProcessOutputEvent'],
  ProcessControl: ['ProcessControl'],
  NetworkPolicy: ['NetworkPolicy'],
  NetworkLogEntry: ['WireLogEntry', 'NetworkLogEntry'],
  Event: ['WireEvent', 'SandboxEvent'],
  EventList: ['EventPage'],
  DesktopScreen: ['DesktopScreen'],
  DesktopCursor: ['DesktopCursor'],
  DesktopWindow: ['DesktopWindow'],
  DesktopViewer: ['WireViewer', 'DesktopViewer'],
};

// Request objects: the schema and the call that sends it (Class.method).
const CALLS: Record<string, string> = {
  CreateSandboxRequest: 'CodeSandbox.create',
  SetTimeoutRequest: 'CodeSandbox.setTimeout',
  PauseRequest: 'CodeSandbox.pause',
  ResumeRequest: 'CodeSandbox.resume',
  ForkRequest: 'CodeSandbox.fork',
  CreateVolumeRequest: 'Volume.create',
  SetSecretRequest: 'Secret.set',
  BuildTemplateRequest: 'Template.build',
  ExecuteRequest: 'CodeSandbox.runCode',
  CreateContextRequest: 'CodeSandbox.createContext',
  ProcessRequest: 'Process.exec',
  ProcessStartRequest: 'Commands.start',
  UpdateNetworkRequest: 'Network.update',
  SnapshotRequest: 'CodeSandbox.snapshot',
  DesktopMouseRequest: 'Desktop.mouse',
  DesktopKeyboardRequest: 'Desktop.keyboard',
  DesktopOpenRequest: 'Desktop.open',
  DesktopLaunchRequest: 'Desktop.launch',
  DesktopStreamRequest: 'DesktopStream.start',
};

// Fields the SDK takes or gives under another shape, and why.
const OMITTED: Record<string, string> = {
  'Template.projectId': "a template is only ever the key's project's: TemplateInfo leaves it out",
  'ExecuteRequest.contextId': 'runCode takes context, a Context or its id',
  'CreateContextRequest.stateful': "the E2B surface's flag (docs/e2b.md): a JavaScript context runs per call, as the seed specifies",
  'CreateContextRequest.user': "the E2B surface's (docs/e2b.md): its contexts are root's, as E2B's kernels; a context of the SDK's is the sandbox user's",
  'ExecuteRequest.stateful': "the E2B surface's flag (docs/e2b.md): runCode's JavaScript runs per call, as the seed specifies",
  'ExecuteRequest.bundle': "the E2B surface's flag (docs/e2b.md): runCode gives the richest MIME per result, as the seed specifies",
  'ExecuteEvent.bundle': 'only on streams that asked for bundle, which runCode never does',
  'ProcessRequest.args': 'exec takes cmd as an array, [program, ...args], or a string run by bash',
  'TemplateFile.size': "in responses only: TemplateInfo.recipe is a built template's recipe as the API gave it",
  'ProcessStartRequest.timeoutKills': "E2B's envd's deadline (the process alone), which the E2B surface sets; the SDK's timeouts kill the group",
  'ProcessStartRequest.pty': 'pty.create({ cols, rows, onData }) starts a process with a terminal; commands.start one without',
  'FileEvent.abort': 'a watch that ends with an abort gives onExit the matching error',
};

// Schemas the SDK has no interface or call of its own for, and why.
const UNMODELLED: Record<string, string> = {
  Error: 'read into the error hierarchy (errors.ts), code by code',
  SandboxState: 'an enum: SandboxInfo.state is its string',
  SandboxList: 'list() returns the sandboxes themselves',
  VolumeList: 'Volume.list() returns the volumes themselves',
  SecretList: 'Secret.list() returns the secrets themselves',
  SnapshotList: 'CodeSandbox.listSnapshots() returns the snapshots themselves',
  TemplateList: 'Template.list() returns the templates themselves',
  ContextList: 'listContexts() returns the contexts themselves',
  EntryList: 'files.list() returns the entries themselves',
  TemplateSymlink: 'inline in RecipeStep.symlink, { target, path }',
  TemplateNpm: 'inline in RecipeStep.npm, { packages, global, dev }',
  RegistryAuth: 'Template.build\'s registry option, RegistryCredentials: { username, password } or { username, passwordSecret }',
  Health: 'for probes and operators, not for code using sandboxes',
  NodeInfo: "GET /v1/nodes is a cluster operator's call (the cluster secret), not for code using sandboxes",
  NodeList: "GET /v1/nodes is a cluster operator's call (the cluster secret), not for code using sandboxes",
  SandboxMetrics: 'getMetrics() returns the samples themselves',
  ProcessList: 'commands.list() returns the processes themselves',
  ProcessStdinRequest: 'sendStdin sends its bytes as the raw body, the other form the API takes',
  ProcessSignalRequest: 'commands.kill(pid, signal) and the handles\' kill(signal)',
  HeaderRule: 'inline in NetworkPolicy.inject, { domain, headers }',
  NetworkLog: 'network.log() returns the entries themselves',
  EventType: 'an enum: SandboxEvent.type is its string',
  EventData: 'SandboxEvent.data is the object it is, in the API\'s names (its fields vary by type)',
  CreateWebhookRequest: 'webhooks are an operator\'s setup, registered once with the API or the Go client, not from sandbox code',
  Webhook: 'see CreateWebhookRequest',
  WebhookList: 'see CreateWebhookRequest',
  WebhookDelivery: 'see CreateWebhookRequest',
  WebhookAttempt: 'see CreateWebhookRequest',
  WebhookDeliveryList: 'see CreateWebhookRequest',
  NodeDrain: 'draining a cluster node is an operator\'s, with the cluster secret (lizard node drain, the Go client)',
  SandboxMove: 'see NodeDrain',
  SandboxLeft: 'see NodeDrain',
  NodeState: 'see NodeDrain',
  DesktopWindowList: 'desktop.windows() returns the windows themselves',
};

/**
 * schemaProperties reads components.schemas.*.properties of an OpenAPI
 * file laid out as api/openapi.yaml is (two spaces a level). Not a YAML
 * parser: the sanity checks below fail if the layout changes.
 */
function schemaProperties(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let inSchemas = false;
  let schema = '';
  let inProps = false;
  for (const line of text.split('\n')) {
    if (/^\S/.test(line)) inSchemas = false;
    if (line === 'components:' || /^ {2}schemas:\s*$/.test(line)) {
      inSchemas ||= line.trim() === 'schemas:';
      continue;
    }
    if (!inSchemas || line.trim() === '' || line.trim().startsWith('#')) continue;
    const indent = line.length - line.trimStart().length;
    const key = /^\s*([A-Za-z0-9_]+):/.exec(line)?.[1];
    if (indent === 4 && key) {
      schema = key;
      out.set(schema, []);
      inProps = false;
    } else if (indent === 6) {
      inProps = key === 'properties';
    } else if (indent === 8 && inProps && key) {
      out.get(schema)!.push(key);
    }
  }
  return out;
}

/** Names the SDK's sources give each interface (with what it extends) and each Class.method. */
function sdkNames(): { interfaces: Map<string, Set<string>>; calls: Map<string, Set<string>> } {
  const members = new Map<string, { own: Set<string>; bases: string[] }>();
  const methods = new Map<string, ts.MethodDeclaration[]>();
  const dir = path.join(sdk, 'src');
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
    const src = ts.createSourceFile(f, fs.readFileSync(path.join(dir, f), 'utf8'), ts.ScriptTarget.Latest, true);
    src.forEachChild((n) => {
      if (ts.isInterfaceDeclaration(n)) {
        const own = new Set(n.members.map((m) => m.name?.getText(src)).filter((x): x is string => !!x));
        const bases = (n.heritageClauses ?? []).flatMap((h) => h.types.map((t) => t.expression.getText(src)));
        members.set(n.name.text, { own, bases });
      } else if (ts.isClassDeclaration(n) && n.name) {
        for (const m of n.members) {
          if (ts.isMethodDeclaration(m)) {
            const k = `${n.name.text}.${m.name.getText(src)}`;
            methods.set(k, [...(methods.get(k) ?? []), m]);
          }
        }
      }
    });
  }
  const names = (iface: string): Set<string> => {
    const m = members.get(iface);
    if (!m) return new Set();
    return new Set([...m.own, ...m.bases.flatMap((b) => [...names(b)])]);
  };
  const interfaces = new Map([...members.keys()].map((k) => [k, names(k)]));
  // A call's names: its parameters', and the members of each options
  // parameter's type (an interface or a type literal).
  const calls = new Map<string, Set<string>>();
  for (const [k, decls] of methods) {
    const got = new Set<string>();
    for (const d of decls) {
      for (const p of d.parameters) {
        got.add(p.name.getText());
        const t = p.type;
        if (t && ts.isTypeReferenceNode(t)) names(t.typeName.getText()).forEach((n) => got.add(n));
        if (t && ts.isTypeLiteralNode(t)) t.members.forEach((m) => m.name && got.add(m.name.getText()));
      }
    }
    calls.set(k, got);
  }
  return { interfaces, calls };
}

const schemas = schemaProperties(fs.readFileSync(spec, 'utf8'));
const { interfaces, calls } = sdkNames();

test('the spec reader reads the spec', () => {
  assert.ok(schemas.size >= 30, `read ${schemas.size} schemas from ${spec}`);
  assert.ok(schemas.get('Sandbox')?.includes('sandboxId') && schemas.get('Sandbox')?.includes('portsDomain'));
  assert.deepEqual(schemas.get('Error'), ['code', 'message']);
});

test('every schema of the spec has its place in the SDK, or a reason', () => {
  const placed = new Set([...Object.keys(MODELS), ...Object.keys(CALLS), ...Object.keys(UNMODELLED)]);
  assert.deepEqual([...schemas.keys()].filter((s) => !placed.has(s)), [], 'schemas neither modelled nor explained');
  assert.deepEqual([...placed].filter((s) => !schemas.has(s)), [], 'schemas named here that the spec no longer has');
  for (const k of Object.keys(OMITTED)) {
    const [schema, field] = k.split('.');
    assert.ok(schemas.get(schema!)?.includes(field!), `OMITTED names ${k}, which the spec lacks`);
  }
});

for (const [schema, ifaces] of Object.entries(MODELS)) {
  test(`${ifaces.join(', ')} carry every field of ${schema}`, () => {
    for (const iface of ifaces) {
      const have = interfaces.get(iface);
      assert.ok(have, `no interface ${iface} in src/`);
      const missing = schemas.get(schema)!.filter((p) => !have.has(p) && !OMITTED[`${schema}.${p}`]);
      assert.deepEqual(missing, [], `${iface} lacks ${schema}'s ${missing.join(', ')}`);
    }
  });
}

for (const [schema, call] of Object.entries(CALLS)) {
  test(`${call} takes every field of ${schema}`, () => {
    const have = calls.get(call);
    assert.ok(have, `no method ${call} in src/`);
    const missing = schemas.get(schema)!.filter((p) => !have.has(p) && !OMITTED[`${schema}.${p}`]);
    assert.deepEqual(missing, [], `${call} takes no ${missing.join(', ')} of ${schema}`);
  });
}
