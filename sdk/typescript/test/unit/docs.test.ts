// The docs' TypeScript against the SDK: every call a docs table names in its
// TypeScript column is declared in src/ (a method, or a member of an
// interface such as a handle's) with each option it shows, and the README's example is
// examples/typescript's run-with-state.ts, which the e2e tests run.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// build-test/test/unit -> sdk/typescript
const sdk = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const root = path.resolve(sdk, '../..');
const docs = [
  path.join(root, 'README.md'),
  path.join(sdk, 'README.md'),
  ...fs.readdirSync(path.join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => path.join(root, 'docs', f)),
];

function cells(line: string): string[] {
  return line.trim().split(/(?<!\\)\|/).slice(1, -1).map((c) => c.trim());
}

/** [file, cell, name] for each call in the TypeScript column of a table headed "| Python | TypeScript |". */
function tsColumnCalls(): [string, string, string][] {
  const out: [string, string, string][] = [];
  for (const doc of docs) {
    let col = -1;
    for (const line of fs.readFileSync(doc, 'utf8').split('\n')) {
      if (!line.startsWith('|')) {
        col = -1;
        continue;
      }
      const cs = cells(line);
      if (cs.includes('Python') && cs.includes('TypeScript')) {
        col = cs.indexOf('TypeScript');
        continue;
      }
      if (col < 0 || col >= cs.length || /^[|\s-]+$/.test(line)) continue;
      for (const m of cs[col].matchAll(/\b([A-Za-z_]\w*)\(/g)) out.push([path.basename(doc), cs[col], m[1]]);
    }
  }
  return out;
}

test('the docs name only calls the SDK declares', () => {
  const src = fs
    .readdirSync(path.join(sdk, 'src'))
    .filter((f) => f.endsWith('.ts'))
    .map((f) => fs.readFileSync(path.join(sdk, 'src', f), 'utf8'))
    .join('\n');
  const calls = tsColumnCalls();
  assert.ok(calls.length > 40, `found ${calls.length} calls in the docs' TypeScript columns: the parsing is broken`);
  const missing = new Set<string>();
  for (const [doc, cell, name] of calls) {
    const declared = new RegExp(`^\\s*(?:(?:readonly|static|async|get|public)\\s+)*${name}\\??\\s*[(<:]`, 'm');
    if (!declared.test(src) && !new RegExp(`\\bclass ${name}\\b`).test(src)) missing.add(`${doc}: ${name}( in ${cell}`);
  }
  assert.deepEqual([...missing], [], 'the docs name calls the TypeScript SDK lacks');

  // The options a call shows, `create({ projectId, timeoutMs })`: each a member declared in src/.
  const unknown = new Set<string>();
  for (const [doc, cell, name] of calls) {
    for (const m of cell.matchAll(new RegExp(`\\b${name}\\(([^()]*)\\)`, 'g'))) {
      const braces = /\{([^{}]*)\}/.exec(m[1].replace(/'[^']*'|"[^"]*"/g, "''"));
      if (!braces) continue;
      for (const opt of braces[1].matchAll(/\b([a-z][A-Za-z0-9]*)\b/g)) {
        // An interface's member or an inline option type's: `name?: T`, `{ name: T }`.
        if (!new RegExp(`[{\\s,;]${opt[1]}\\??\\s*:`).test(src)) unknown.add(`${doc}: ${name}({ ${opt[1]} }) in ${cell}`);
      }
    }
  }
  assert.deepEqual([...unknown], [], 'the docs pass options the TypeScript SDK does not declare');
});

test("the README's example is the one the e2e tests run", () => {
  const code = (text: string): string[] =>
    text
      .split('\n')
      .filter((l) => !/^\s*\/\//.test(l))
      .map((l) => l.trimEnd())
      .filter((l) => l !== '');
  const readme = fs.readFileSync(path.join(sdk, 'README.md'), 'utf8');
  const block = /^```ts\n([\s\S]*?)^```/m.exec(readme);
  assert.ok(block, 'sdk/typescript/README.md has no ts block');
  const example = fs.readFileSync(path.join(root, 'examples', 'typescript', 'run-with-state.ts'), 'utf8');
  assert.deepEqual(code(block[1]), code(example));
});
