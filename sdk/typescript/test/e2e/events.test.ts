// End-to-end tests of lifecycle events against a real `lizard serve` (see
// harness.ts): a follow sees a sandbox's create, pause, resume and kill in
// order; pages filter by sandbox, type and metadata; a bad filter is an
// InvalidArgumentError naming it.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';

import { CodeSandbox, Events, InvalidArgumentError, type SandboxEvent } from '../../src/index.js';
import { missing, startLizard, strict, type Lizard } from './harness.js';

const why = missing();

if (why !== undefined && strict) {
  test('end-to-end prerequisites', () => {
    assert.fail(`${why} (LIZARD_TEST_STRICT=1 turns this skip into a failure)`);
  });
}

describe('lifecycle events against lizard serve', { skip: why, timeout: 10 * 60_000 }, () => {
  let lizard: Lizard;

  before(async () => {
    lizard = await startLizard('proj_123');
    process.env.LIZARD_API_URL = lizard.url;
    process.env.LIZARD_API_KEY = lizard.apiKey;
  });

  after(async () => {
    await lizard?.stop();
  });

  test('follow sees create, pause, resume and kill; list pages and filters them', async () => {
    const run = crypto.randomUUID();
    const stream = await Events.follow({ metadata: { run } });
    const sandbox = await CodeSandbox.create({ metadata: { run }, timeoutMs: 300_000 });
    await sandbox.pause();
    await sandbox.resume();
    await sandbox.kill();
    const seen: SandboxEvent[] = [];
    const timer = setTimeout(() => stream.close(), 30_000);
    for await (const ev of stream) {
      seen.push(ev);
      if (seen.length === 4) break;
    }
    clearTimeout(timer);
    stream.close();
    assert.deepEqual(
      seen.map((e) => e.type),
      ['sandbox.created', 'sandbox.paused', 'sandbox.resumed', 'sandbox.killed'],
    );
    for (const e of seen) {
      assert.equal(e.sandboxId, sandbox.sandboxId);
      assert.deepEqual(e.metadata, { run });
      assert.ok(e.time instanceof Date && !Number.isNaN(e.time.getTime()));
    }
    assert.equal(seen[3]!.data.state, 'killed');
    assert.equal(stream.last, seen[3]!.id);

    const page = await Events.list({ sandboxId: sandbox.sandboxId, limit: 3 });
    assert.deepEqual(page.events.map((e) => e.id), seen.slice(0, 3).map((e) => e.id));
    assert.ok(page.hasMore);
    const rest = await Events.list({ sandboxId: sandbox.sandboxId, after: page.next });
    assert.deepEqual(rest.events.map((e) => e.type), ['sandbox.killed']);
    assert.equal(rest.hasMore, false);
    const paused = await Events.list({ types: ['sandbox.paused'], metadata: { run } });
    assert.deepEqual(paused.events.map((e) => e.id), [seen[1]!.id]);

    await assert.rejects(Events.list({ types: ['sandbox.nope'] }), (err: unknown) => {
      assert.ok(err instanceof InvalidArgumentError && /type/.test(err.message), String(err));
      return true;
    });
  });
});
