// E2B's own JavaScript SDK (e2b, under @e2b/code-interpreter 2.8.0 pinned
// in package.json) against a real `lizard serve`, with nothing set but
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (docs/e2b.md):
// sandbox.commands, sandbox.pty and sandbox.files, served by Lizard's envd
// (internal/e2b/envd). The JS SDK speaks Connect with the binary codec and
// watches directories with the streamed WatchDir.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { CommandExitError, FileType, NotFoundError, Sandbox, TimeoutError } from '@e2b/code-interpreter';

import { missing, pointE2B, startLizard, strict, type Lizard } from './harness.js';

const why = missing();

if (why !== undefined && strict) {
  test('end-to-end prerequisites (E2B envd)', () => {
    assert.fail(`${why} (LIZARD_TEST_STRICT=1 turns this skip into a failure)`);
  });
}

describe("E2B's JavaScript SDK: commands, PTY and files", { skip: why, timeout: 20 * 60_000 }, () => {
  let lizard: Lizard;
  let sandbox: Sandbox;

  before(async () => {
    lizard = await startLizard('proj_123');
    pointE2B(lizard);
    sandbox = await Sandbox.create();
  });

  after(async () => {
    await sandbox?.kill().catch(() => undefined);
    await lizard?.stop();
  });

  test('commands: run, background, list, connect, stdin, kill', async () => {
    const r = await sandbox.commands.run('echo hi; echo err >&2', { cwd: '/tmp', envs: { X: '1' } });
    assert.deepEqual([r.stdout, r.stderr, r.exitCode], ['hi\n', 'err\n', 0]);
    await assert.rejects(sandbox.commands.run('exit 3'), (e: unknown) => e instanceof CommandExitError && e.exitCode === 3);

    const h = await sandbox.commands.run('cat', { background: true, stdin: true });
    assert.ok((await sandbox.commands.list()).some((p) => p.pid === h.pid));
    await sandbox.commands.sendStdin(h.pid, 'hello stdin\n');
    await sandbox.commands.closeStdin(h.pid);
    assert.equal((await h.wait()).stdout, 'hello stdin\n');

    const bg = await sandbox.commands.run('sleep 120', { background: true });
    const c = await sandbox.commands.connect(bg.pid);
    assert.equal(await sandbox.commands.kill(bg.pid), true);
    await assert.rejects(c.wait(), CommandExitError);
    assert.equal(await sandbox.commands.kill(999999), false);
  });

  test('pty: 6*7, resize', async () => {
    let out = '';
    const dec = new TextDecoder();
    const t = await sandbox.pty.create({ cols: 80, rows: 24, onData: (d) => void (out += dec.decode(d, { stream: true })) });
    const enc = new TextEncoder();
    await sandbox.pty.sendInput(t.pid, enc.encode('echo $((6*7))\n'));
    await sandbox.pty.resize(t.pid, { cols: 120, rows: 40 });
    await sandbox.pty.sendInput(t.pid, enc.encode('stty size\nexit\n'));
    await t.wait();
    assert.match(out, /42/);
    assert.match(out, /40 120/);
  });

  test('sudo: root, another user, stdin, an exit code and a terminal', async () => {
    // Every sandbox has a passwordless sudo, as E2B's templates (docs/security.md, "sudo in sandboxes").
    assert.equal((await sandbox.commands.run('sudo whoami')).stdout, 'root\n');
    const uid = (await sandbox.commands.run('id -u')).stdout;
    assert.equal((await sandbox.commands.run('sudo -u user id -u')).stdout, uid);
    assert.equal((await sandbox.commands.run('echo hi | sudo tee /root/x && sudo cat /root/x')).stdout, 'hi\nhi\n');
    await assert.rejects(sandbox.commands.run('sudo false'), (e: unknown) => e instanceof CommandExitError && e.exitCode === 1);

    let out = '';
    const dec = new TextDecoder();
    const t = await sandbox.pty.create({ cols: 80, rows: 24, onData: (d) => void (out += dec.decode(d, { stream: true })) });
    const enc = new TextEncoder();
    await sandbox.pty.sendInput(t.pid, enc.encode('sudo -i\n'));
    await new Promise((r) => setTimeout(r, 1000));
    await sandbox.pty.sendInput(t.pid, enc.encode('echo I am $(whoami)\nexit\n'));
    await new Promise((r) => setTimeout(r, 500));
    await sandbox.pty.sendInput(t.pid, enc.encode('echo then $(whoami)\nexit\n'));
    await t.wait();
    assert.match(out, /I am root/);
    assert.match(out, /then user/);
  });

  test('files and a streamed watch', async () => {
    await sandbox.files.makeDir('/tmp/js');
    const events: string[] = [];
    const w = await sandbox.files.watchDir('/tmp/js', (e) => void events.push(`${e.type}:${e.name}`));
    const info = await sandbox.files.write('/tmp/js/a.txt', 'alpha');
    assert.equal(info.path, '/tmp/js/a.txt');
    assert.equal(await sandbox.files.read('/tmp/js/a.txt'), 'alpha');
    assert.deepEqual((await sandbox.files.list('/tmp/js')).map((e) => e.name), ['a.txt']);
    await sandbox.files.rename('/tmp/js/a.txt', '/tmp/js/b.txt');
    assert.equal(await sandbox.files.exists('/tmp/js/a.txt'), false);
    const gi = await sandbox.files.getInfo('/tmp/js/b.txt');
    assert.deepEqual([gi.type, gi.size], [FileType.FILE, 5]);
    await sandbox.files.remove('/tmp/js/b.txt');
    await assert.rejects(sandbox.files.read('/tmp/js/b.txt'), NotFoundError);
    for (let i = 0; i < 50 && !events.includes('remove:b.txt'); i++) await new Promise((r) => setTimeout(r, 100));
    await w.stop();
    // As envd's: a new file's write is its create, chmod (envd's chown) and write, not the agent's
    // temporary file's events.
    assert.deepEqual(events, ['create:a.txt', 'chmod:a.txt', 'write:a.txt', 'rename:a.txt', 'create:b.txt', 'remove:b.txt']);
  });

  test('a paused sandbox is not running until connect', async () => {
    const sbx = await Sandbox.create();
    try {
      assert.equal(await sbx.pause(), true);
      // E2B's proxy's 502: not running, and the check leaves it paused.
      assert.equal(await sbx.isRunning(), false);
      await assert.rejects(sbx.commands.run('echo back'), /not running/);
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
      const again = await Sandbox.connect(sbx.sandboxId);
      assert.equal(await again.isRunning(), true);
      assert.equal((await again.commands.run('echo back')).stdout, 'back\n');
    } finally {
      await sbx.kill().catch(() => undefined);
    }
  });

  test('a sandbox killed under a followed command: "killed or reached its end of life"', async () => {
    const sbx = await Sandbox.create();
    const h = await sbx.commands.run('sleep 60', { background: true, timeoutMs: 0 });
    await sbx.kill();
    const began = Date.now();
    // The connection dropped, as E2B's proxy drops it; the SDK asked /health (502) and says so.
    await assert.rejects(h.wait(), (e: unknown) => e instanceof TimeoutError && /killed or reached its end of life/.test(e.message));
    assert.ok(Date.now() - began < 3000, `ended ${Date.now() - began} ms after the kill`);
    assert.equal(await sbx.isRunning(), false);
  });
});
