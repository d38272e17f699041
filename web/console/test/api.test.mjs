// The console's API types (src/api.ts) against api/openapi.yaml: every
// interface named after a schema of the spec carries each of its fields.
// A field added to the spec fails this test until the console's type has
// it.
// (sdk/typescript/test/unit/spec.test.ts is the same check for the SDK.)
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

// Schemas the console must model, for what it shows and sends.
const REQUIRED = ["Sandbox", "Snapshot", "CreateSandboxRequest", "Result", "ExecutionError", "ExecuteEvent",
  "ProcessEvent", "Context", "EntryInfo", "Health", "VolumeMount", "Abort", "PtySize", "ProcessStartRequest", "ProcessInfo", "ProcessControl", "SandboxMetric",
  "Template", "TemplateRecipe", "BuildTemplateRequest", "RegistryAuth", "TemplateBuildEvent", "DesktopViewer"];

/**
 * schemaProperties reads components.schemas.*.properties of an OpenAPI
 * file laid out as api/openapi.yaml is (two spaces a level). Not a YAML
 * parser: the sanity checks below fail if the layout changes.
 */
function schemaProperties(text) {
  const out = new Map();
  let inSchemas = false;
  let schema = "";
  let inProps = false;
  for (const line of text.split("\n")) {
    if (/^\S/.test(line)) inSchemas = false;
    if (/^ {2}schemas:\s*$/.test(line)) {
      inSchemas = true;
      continue;
    }
    if (!inSchemas || line.trim() === "" || line.trim().startsWith("#")) continue;
    const indent = line.length - line.trimStart().length;
    const key = /^\s*([A-Za-z0-9_]+):/.exec(line)?.[1];
    if (indent === 4 && key) {
      schema = key;
      out.set(schema, []);
      inProps = false;
    } else if (indent === 6) {
      inProps = key === "properties";
    } else if (indent === 8 && inProps && key) {
      out.get(schema).push(key);
    }
  }
  return out;
}

function interfaces(file) {
  const src = ts.createSourceFile(file, fs.readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
  const out = new Map();
  src.forEachChild((n) => {
    if (ts.isInterfaceDeclaration(n)) out.set(n.name.text, new Set(n.members.map((m) => m.name?.getText(src))));
  });
  return out;
}

const schemas = schemaProperties(fs.readFileSync(path.join(repo, "api", "openapi.yaml"), "utf8"));
const types = interfaces(path.join(repo, "web", "console", "src", "api.ts"));

test("the spec reader reads the spec", () => {
  assert.ok(schemas.size >= 30, `read ${schemas.size} schemas`);
  assert.deepEqual(schemas.get("Error"), ["code", "message"]);
});

test("api.ts models the schemas the console uses", () => {
  assert.deepEqual(REQUIRED.filter((s) => !types.has(s)), [], "schemas api.ts has no interface for");
});

for (const [name, have] of types) {
  if (!schemas.has(name)) continue;
  test(`api.ts ${name} carries every field of the spec's ${name}`, () => {
    const missing = schemas.get(name).filter((p) => !have.has(p));
    assert.deepEqual(missing, [], `${name} lacks ${missing.join(", ")}`);
  });
}
