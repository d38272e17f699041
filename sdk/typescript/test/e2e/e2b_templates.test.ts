// E2B's Template SDK of its JavaScript SDK (the `e2b` that
// @e2b/code-interpreter 2.8.0 brings, and re-exports) against a real
// `lizard serve`, with nothing set but E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY (docs/e2b.md): a template built from E2B's base template with
// copy (its files uploaded; a glob's files and a whole directory), runCmd, setEnvs, setWorkdir and a start
// command with a ready check, then a sandbox of it by name:tag;
// Template.exists, and a failing step.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';

import { BuildError, Sandbox, Template, waitForURL } from '@e2b/code-interpreter';

import { missing, pointE2B, startLizard, strict, type Lizard } from './harness.js';

const why = missing();

if (why !== undefined && strict) {
  test('end-to-end prerequisites (E2B templates)', () => {
    assert.fail(`${why} (LIZARD_TEST_STRICT=1 turns this skip into a failure)`);
  });
}

describe("E2B's JavaScript Template SDK against lizard serve", { skip: why, timeout: 20 * 60_000 }, () => {
  let lizard: Lizard;
  let context: string;

  before(async () => {
    lizard = await startLizard('proj_tpl');
    pointE2B(lizard);
    context = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-tpl-js-'));
    fs.mkdirSync(path.join(context, 'folder'));
    fs.writeFileSync(path.join(context, 'folder', 'hello.txt'), 'hello from a js copy\n');
    fs.mkdirSync(path.join(context, 'tree', 'sub'), { recursive: true });
    fs.mkdirSync(path.join(context, 'tree', 'empty'));
    fs.writeFileSync(path.join(context, 'tree', 'sub', 'deep.txt'), 'a file two directories down\n');
  });

  after(async () => {
    await lizard?.stop();
    if (context) fs.rmSync(context, { recursive: true, force: true });
  });

  test('build: copy, runCmd, setEnvs, setWorkdir, a start command; then a sandbox of name:tag', async () => {
    const nonce = randomUUID().slice(0, 8);
    const name = `e2b-tpl-js-${nonce}`;
    const template = Template({ fileContextPath: context })
      .fromTemplate('base')
      .copy('folder/*', 'data/')
      // A whole directory: its hash covers the directories' sizes on this
      // disk, which the server cannot check, and takes unchecked.
      .copy('tree', '/home/user/tree')
      .runCmd('cat data/hello.txt > data/by-run.txt')
      .setEnvs({ GREETING: 'hi', NONCE: nonce })
      .setWorkdir('/home/user/app')
      .setStartCmd('python3 -m http.server 8001 --directory /home/user/data', waitForURL('http://localhost:8001/hello.txt'));
    const logs: string[] = [];
    const info = await Template.build(template, `${name}:v1`, { onBuildLogs: (l) => logs.push(String(l.message)) });
    assert.equal(info.templateId, name);
    assert.ok(logs.some((l) => l.includes("Uploaded 'folder/*'")), logs.join('\n'));
    assert.equal(await Template.exists(name), true);
    assert.equal(await Template.exists(`${name}:v1`), true);
    assert.equal(await Template.exists(`nope-${nonce}`), false);

    const sb = await Sandbox.create(`${name}:v1`, { timeoutMs: 120_000 });
    try {
      assert.equal(await sb.files.read('/home/user/data/hello.txt'), 'hello from a js copy\n');
      assert.equal(await sb.files.read('/home/user/data/by-run.txt'), 'hello from a js copy\n');
      assert.equal(await sb.files.read('/home/user/tree/sub/deep.txt'), 'a file two directories down\n');
      const empty = await sb.commands.run('test -d /home/user/tree/empty && stat -c %U /home/user/tree/empty');
      assert.equal(empty.stdout.trim(), 'user');
      const run = await sb.commands.run('echo "$GREETING $NONCE $(pwd)"');
      assert.equal(run.stdout.trim(), `hi ${nonce} /home/user/app`);
      const served = await sb.commands.run('curl -s http://localhost:8001/hello.txt');
      assert.equal(served.stdout, 'hello from a js copy\n');
    } finally {
      await sb.kill();
    }
    const del = await fetch(`${lizard.url}/e2b/templates/${name}`, { method: 'DELETE', headers: { 'X-API-Key': lizard.apiKey } });
    assert.equal(del.status, 204);
    assert.equal(await Template.exists(name), false);
  });

  test('a failing step is a BuildError naming it', async () => {
    const name = `e2b-bad-js-${randomUUID().slice(0, 8)}`;
    await assert.rejects(Template.build(Template().fromBaseImage().runCmd('echo before && exit 4'), name), (err: unknown) => {
      assert.ok(err instanceof BuildError, String(err));
      assert.match(String((err as Error).message), /the build failed at step .*exit status 4/);
      return true;
    });
  });
});
