// E2B's own JavaScript SDK (@e2b/code-interpreter 2.8.0, pinned in
// package.json) against a real `lizard serve`, with nothing set but
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (docs/e2b.md): run_code with
// results, errors and state, a chart, streaming callbacks, contexts,
// JavaScript, list, info, timeout, a wrong key, and a sandbox killed while
// its code runs.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { AuthenticationError, Sandbox, TimeoutError } from '@e2b/code-interpreter';

import { missing, pointE2B, startLizard, strict, type Lizard } from './harness.js';

const why = missing();

if (why !== undefined && strict) {
  test('end-to-end prerequisites (E2B)', () => {
    assert.fail(`${why} (LIZARD_TEST_STRICT=1 turns this skip into a failure)`);
  });
}

describe("E2B's JavaScript SDK against lizard serve", { skip: why, timeout: 20 * 60_000 }, () => {
  let lizard: Lizard;
  let sandbox: Sandbox;

  before(async () => {
    lizard = await startLizard('proj_123');
    pointE2B(lizard);
    sandbox = await Sandbox.create({ metadata: { suite: 'e2b-js' } });
  });

  after(async () => {
    await lizard?.stop();
  });

  test('runCode: logs, results, errors and state', async () => {
    const ex = await sandbox.runCode("print('hello')\nx = 41\nx + 1");
    assert.deepEqual(ex.logs.stdout, ['hello\n']);
    assert.equal(ex.text, '42');
    assert.equal(ex.results[0].isMainResult, true);
    const bad = await sandbox.runCode('1/0');
    assert.equal(bad.error?.name, 'ZeroDivisionError');
    assert.equal(bad.error?.value, 'division by zero');
    const chart = await sandbox.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()');
    assert.ok(chart.results[0]?.png, `no png in ${JSON.stringify(chart.results)}`);
    const html = await sandbox.runCode("import pandas as pd\npd.DataFrame({'a': [1]})");
    assert.match(html.results[0]?.html ?? '', /<table/);
  });

  test('callbacks, contexts and JavaScript', async () => {
    const lines: string[] = [];
    await sandbox.runCode('for i in range(2): print(i, flush=True)', { onStdout: (m) => void lines.push(m.line) });
    assert.equal(lines.join(''), '0\n1\n');
    const ctx = await sandbox.createCodeContext();
    assert.ok((await sandbox.listCodeContexts()).some((c) => c.id === ctx.id));
    await sandbox.runCode('y = 3', { context: ctx });
    assert.equal((await sandbox.runCode('y', { context: ctx })).text, '3');
    await sandbox.restartCodeContext(ctx);
    assert.equal((await sandbox.runCode('y', { context: ctx })).error?.name, 'NameError');
    await sandbox.removeCodeContext(ctx);
    assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === ctx.id));
    assert.deepEqual((await sandbox.runCode('console.log(6 * 7)', { language: 'javascript' })).logs.stdout, ['42\n']);
  });

  test('JavaScript and TypeScript keep their variables without a context, as E2B\'s kernel', async () => {
    await sandbox.runCode('const base = 40', { language: 'js' });
    let ex = await sandbox.runCode('base + 2', { language: 'javascript' });
    assert.equal(ex.error, undefined);
    assert.equal(ex.text, '42');
    assert.equal(ex.results[0].isMainResult, true);
    ex = await sandbox.runCode('const half = (n: number): number => n / 2', { language: 'ts' });
    assert.equal(ex.error, undefined);
    assert.equal((await sandbox.runCode('half(84) as number', { language: 'typescript' })).text, '42');
    assert.equal((await sandbox.runCode('let x: = 1', { language: 'ts' })).error?.name, 'SyntaxError');
    const ts = await sandbox.createCodeContext({ language: 'typescript' });
    assert.equal(ts.language, 'typescript');
    await sandbox.runCode('type N = number\nconst k: N = 7', { context: ts });
    assert.equal((await sandbox.runCode('k * 6', { context: ts })).text, '42');
  });

  test('info, list, timeout and a wrong key', async () => {
    const info = await sandbox.getInfo();
    assert.equal(info.sandboxId, sandbox.sandboxId);
    assert.deepEqual(info.metadata, { suite: 'e2b-js' });
    await sandbox.setTimeout(10 * 60_000);
    assert.ok((await sandbox.getInfo()).endAt > info.endAt);
    const listed = await Sandbox.list({ query: { metadata: { suite: 'e2b-js' } } }).nextItems();
    assert.deepEqual(listed.map((s) => s.sandboxId), [sandbox.sandboxId]);
    await assert.rejects(Sandbox.create({ apiKey: 'lz_00000000_' + '0'.repeat(64) }), AuthenticationError);
  });

  test('a sandbox killed mid-run ends the run within 2 s', async () => {
    let killedAt = 0;
    const killer = (async () => {
      await new Promise((r) => setTimeout(r, 2000));
      killedAt = Date.now();
      await Sandbox.kill(sandbox.sandboxId);
    })();
    await assert.rejects(sandbox.runCode('import time\ntime.sleep(120)'), (err: unknown) => {
      assert.ok(err instanceof TimeoutError, `got ${String(err)}`);
      assert.match((err as Error).message, /killed/);
      return true;
    });
    await killer;
    assert.ok(Date.now() - killedAt < 2000, `the run ended ${Date.now() - killedAt} ms after the kill`);
    assert.equal(await Sandbox.kill(sandbox.sandboxId), false);
  });
});
