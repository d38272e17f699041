// End-to-end tests: the SDK against a real `lizard serve` with real gVisor
// sandboxes (see harness.ts for what they need).

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';

import {
  AuthenticationError,
  CodeSandbox,
  ConflictError,
  InvalidArgumentError,
  Volume,
  LizardConnectionError,
  LizardError,
  Network,
  NotFoundError,
  SandboxGoneError,
  Secret,
  Template,
  TemplateBuildError,
  type Context,
  type TemplateBuildEvent,
} from '../../src/index.js';
import { binDir, freePort, missing, repoRoot, startLizard, strict, type Lizard } from './harness.js';
import { WebSocketClient, waitOk } from './websocket.js';

const run = promisify(execFile);
const why = missing();

if (why !== undefined && strict) {
  test('end-to-end prerequisites', () => {
    assert.fail(`${why} (LIZARD_TEST_STRICT=1 turns this skip into a failure)`);
  });
}

const MIN = 60_000;

describe('end to end against lizard serve', { skip: why, timeout: 60 * MIN }, () => {
  let lizard: Lizard;
  let sandbox: CodeSandbox;

  /** e2e wraps a test so that its failure shows the end of the server's log. */
  const e2e =
    (fn: () => Promise<void>) =>
    async (): Promise<void> => {
      try {
        await fn();
      } catch (err) {
        if (err instanceof Error) err.message += `\n--- lizard serve log (tail) ---\n${lizard.logs().slice(-4000)}`;
        throw err;
      }
    };

  before(async () => {
    lizard = await startLizard('proj_123');
    process.env.LIZARD_API_URL = lizard.url;
    process.env.LIZARD_API_KEY = lizard.apiKey;
    // The first create may wait for the template: the SDK's create timeout allows for it.
    sandbox = await CodeSandbox.create({ projectId: 'proj_123', timeoutMs: 20 * MIN, metadata: { suite: 'ts-e2e' } });
  });

  after(async () => {
    await sandbox?.kill().catch(() => {});
    await lizard?.stop();
  });

  test(
    'the seed example: state, np.int64(6), ZeroDivisionError',
    e2e(async () => {
      const first = await sandbox.runCode('import pandas as pd\ndf = pd.DataFrame({"x": [1, 2, 3]})');
      assert.equal(first.error, undefined, `first run error: ${JSON.stringify(first.error)}`);
      const run1 = await sandbox.runCode('df.x.sum()');
      assert.deepEqual(run1.results, [{ type: 'result', mime: 'text/plain', data: 'np.int64(6)' }]);
      assert.ok((run1.executionCount ?? 0) >= 2, `executionCount = ${run1.executionCount}, want >= 2`);
      const bad = await sandbox.runCode('1/0');
      assert.equal(bad.error?.name, 'ZeroDivisionError');
      assert.equal(bad.error?.message, 'division by zero');
      assert.match(bad.error?.traceback ?? '', /ZeroDivisionError/);
      assert.deepEqual(bad.results, []);
    }),
  );

  test(
    'callbacks fire in order while the code runs',
    e2e(async () => {
      const events: string[] = [];
      let firstAt = 0;
      const code = [
        'import sys, time',
        'print("one", flush=True)',
        'print("warn", file=sys.stderr, flush=True)',
        'time.sleep(1.5)',
        'print("two", flush=True)',
        '42',
      ].join('\n');
      const run = await sandbox.runCode(code, {
        onStdout: (t) => {
          firstAt ||= Date.now();
          events.push(`out:${t}`);
        },
        onStderr: (t) => void events.push(`err:${t}`),
        onResult: (r) => void events.push(`result:${r.data}`),
        onError: (e) => void events.push(`error:${e.name}`),
      });
      const endAt = Date.now();
      assert.deepEqual(events, ['out:one\n', 'err:warn\n', 'out:two\n', 'result:42']);
      assert.ok(endAt - firstAt >= 1000, `first stdout came ${endAt - firstAt} ms before the end, want >= 1000`);
      assert.equal(run.stdout, 'one\ntwo\n');
      assert.equal(run.stderr, 'warn\n');
    }),
  );

  test(
    'a DataFrame comes back as text/html only',
    e2e(async () => {
      const run = await sandbox.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})');
      assert.equal(run.results.length, 1, `results: ${JSON.stringify(run.results)}`);
      assert.equal(run.results[0]!.mime, 'text/html');
      assert.equal(run.results[0]!.type, 'result');
      assert.match(run.results[0]!.data, /<table/);
    }),
  );

  test(
    'a matplotlib chart comes back as a base64 PNG',
    e2e(async () => {
      const run = await sandbox.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()');
      assert.equal(run.error, undefined, JSON.stringify(run.error));
      const png = run.results.find((r) => r.mime === 'image/png');
      assert.ok(png, `no image/png in ${JSON.stringify(run.results.map((r) => r.mime))}`);
      assert.equal(png.type, 'display');
      const bytes = Buffer.from(png.data, 'base64');
      assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    }),
  );

  test(
    'contexts have their own variables and working directory',
    e2e(async () => {
      await sandbox.runCode('ctx_probe = "default"');
      const ctx: Context = await sandbox.createContext({ language: 'python', cwd: '/tmp' });
      assert.equal(ctx.cwd, '/tmp');
      assert.equal(ctx.language, 'python');
      const inCtx = await sandbox.runCode('import os\nprint(os.getcwd())\nctx_probe', { context: ctx });
      assert.equal(inCtx.stdout, '/tmp\n');
      assert.equal(inCtx.error?.name, 'NameError');
      await sandbox.runCode('only_here = 7', { context: ctx });
      assert.equal((await sandbox.runCode('only_here', { context: ctx })).results[0]?.data, '7');
      assert.equal((await sandbox.runCode('ctx_probe')).results[0]?.data, "'default'");

      const ids = (await sandbox.listContexts()).map((c) => c.id);
      assert.ok(ids.includes(ctx.id), `listContexts = ${ids}, want ${ctx.id} in it`);

      const restarted = await sandbox.restartContext(ctx);
      assert.equal(restarted.id, ctx.id);
      assert.equal((await sandbox.runCode('only_here', { context: ctx })).error?.name, 'NameError');

      await sandbox.deleteContext(ctx);
      await assert.rejects(sandbox.runCode('1', { context: ctx }), NotFoundError);
      assert.ok(!(await sandbox.listContexts()).some((c) => c.id === ctx.id), 'deleted context still listed');
    }),
  );

  test(
    'a timeout interrupts the kernel, keeps its state, and the next run works',
    e2e(async () => {
      await sandbox.runCode('kept = 41');
      const t0 = Date.now();
      const slow = await sandbox.runCode('import time\ntime.sleep(60)', { timeoutMs: 1500 });
      assert.equal(slow.error?.name, 'TimeoutError');
      assert.ok(Date.now() - t0 < 30_000, `the timed-out run took ${Date.now() - t0} ms`);
      const next = await sandbox.runCode('kept + 1');
      assert.equal(next.error, undefined, JSON.stringify(next.error));
      assert.equal(next.results[0]?.data, '42');
    }),
  );

  test(
    'JavaScript and bash run fresh on every call',
    e2e(async () => {
      const js1 = await sandbox.runCode('var a = 41; console.log(a + 1); console.log(process.version)', {
        language: 'javascript',
      });
      assert.equal(js1.error, undefined, JSON.stringify(js1.error));
      assert.match(js1.stdout, /^42\nv22\./);
      assert.deepEqual(js1.results, []);
      const js2 = await sandbox.runCode('console.log(typeof a)', { language: 'javascript' });
      assert.equal(js2.stdout, 'undefined\n');

      const sh1 = await sandbox.runCode('export LZ_FRESH=yes; echo "[$LZ_FRESH]"', { language: 'bash' });
      assert.equal(sh1.stdout, '[yes]\n');
      assert.deepEqual(sh1.results, []);
      const sh2 = await sandbox.runCode('echo "[$LZ_FRESH]"', { language: 'bash' });
      assert.equal(sh2.stdout, '[]\n');

      const jsErr = await sandbox.runCode('throw new Error("boom")', { language: 'javascript' });
      assert.ok(jsErr.error, 'a throwing script must give Execution.error');
    }),
  );

  test(
    'process.exec returns output and exit code',
    e2e(async () => {
      const outs: string[] = [];
      const got = await sandbox.process.exec('echo out; echo err >&2; pwd; exit 3', {
        cwd: '/tmp',
        envs: { LZ_E2E: 'v' },
        onStdout: (t) => void outs.push(t),
      });
      assert.deepEqual(got, { stdout: 'out\n/tmp\n', stderr: 'err\n', exitCode: 3 });
      assert.equal(outs.join(''), 'out\n/tmp\n');
      const env = await sandbox.process.exec('echo $LZ_E2E; whoami', { envs: { LZ_E2E: 'v' } });
      assert.deepEqual(env, { stdout: 'v\nuser\n', stderr: '', exitCode: 0 });
      assert.deepEqual(await sandbox.process.exec('cat', { stdin: 'fed in' }), { stdout: 'fed in', stderr: '', exitCode: 0 });
      const slow = await sandbox.process.exec(['sleep', '30'], { timeoutMs: 500 });
      assert.equal(slow.exitCode, 124, `timed-out process: ${JSON.stringify(slow)}`);
      assert.ok(slow.error, 'a timed-out process must say so in error');
      // A separate process: Python variables are not there.
      const py = await sandbox.process.exec('/opt/lizard/venv/bin/python -c "print(kept)"');
      assert.notEqual(py.exitCode, 0);
    }),
  );

  test(
    'files: binary round trip, streams, list, stat, remove',
    e2e(async () => {
      const all = new Uint8Array(256).map((_, i) => i);
      const info = await sandbox.files.write('e2e/dir/all.bin', all);
      assert.equal(info.size, 256);
      assert.equal(info.path, '/home/user/e2e/dir/all.bin');
      assert.deepEqual(await sandbox.files.read('e2e/dir/all.bin', { format: 'bytes' }), all);

      const stream = new Blob([all, all]).stream();
      await sandbox.files.write('/home/user/e2e/stream.bin', stream);
      assert.equal((await sandbox.files.stat('e2e/stream.bin')).size, 512);
      await sandbox.files.write('e2e/blob.txt', new Blob(['héllo ✓']));
      assert.equal(await sandbox.files.read('e2e/blob.txt'), 'héllo ✓');

      // Python sees what the SDK wrote.
      const py = await sandbox.runCode('open("/home/user/e2e/dir/all.bin", "rb").read() == bytes(range(256))');
      assert.equal(py.results[0]?.data, 'True');

      const dir = await sandbox.files.makeDir('e2e/made/deep');
      assert.equal(dir.type, 'dir');
      const names = (await sandbox.files.list('e2e')).map((e) => e.name).sort();
      assert.deepEqual(names, ['blob.txt', 'dir', 'made', 'stream.bin']);

      assert.equal(await sandbox.files.exists('e2e/blob.txt'), true);
      await sandbox.files.remove('e2e');
      assert.equal(await sandbox.files.exists('e2e/blob.txt'), false);
      await assert.rejects(sandbox.files.read('e2e/blob.txt'), NotFoundError);
    }),
  );

  test(
    'lifetime: info, setTimeout, list by metadata',
    e2e(async () => {
      const info = await sandbox.getInfo();
      assert.equal(info.sandboxId, sandbox.sandboxId);
      assert.equal(info.projectId, 'proj_123');
      assert.equal(info.state, 'running');
      assert.deepEqual(info.metadata, { suite: 'ts-e2e' });
      await sandbox.setTimeout(0);
      assert.equal((await sandbox.getInfo()).expiresAt, undefined);
      await sandbox.setTimeout(20 * MIN);
      assert.ok((await sandbox.getInfo()).expiresAt instanceof Date);

      const listed = await CodeSandbox.list({ metadata: { suite: 'ts-e2e' } });
      assert.deepEqual(
        listed.map((s) => s.sandboxId),
        [sandbox.sandboxId],
      );
      assert.deepEqual(await CodeSandbox.list({ metadata: { suite: 'none' } }), []);
    }),
  );

  test(
    'typed errors: bad key, unknown sandbox, ended sandbox, server down',
    e2e(async () => {
      await assert.rejects(CodeSandbox.create({ apiKey: 'lz_bad_key' }), AuthenticationError);
      await assert.rejects(CodeSandbox.connect('sbx_does_not_exist'), NotFoundError);
      await assert.rejects(CodeSandbox.list({ apiUrl: `http://127.0.0.1:${await freePort()}` }), LizardConnectionError);

      const short = await CodeSandbox.create({ timeoutMs: 60_000 });
      await short.kill();
      await short.kill(); // killing twice is fine
      assert.equal((await short.getInfo()).state, 'killed');
      await assert.rejects(short.runCode('1'), SandboxGoneError);
    }),
  );

  test(
    'the resources asked for at create are the sandbox\'s, across a pause',
    e2e(async () => {
      const sb = await CodeSandbox.create({ timeoutMs: 5 * MIN, memoryMb: 512, cpus: 1, diskMb: 1024, onTimeout: 'pause' });
      try {
        assert.equal((await sb.runCode('1 + 1')).results[0]?.data, '2');
        const info = await sb.getInfo();
        assert.deepEqual([info.memoryMb, info.cpus, info.diskMb], [512, 1, 1024]);
        await sb.pause();
        await sb.resume();
        const after = await sb.getInfo();
        assert.deepEqual([after.state, after.memoryMb, after.cpus, after.diskMb], ['running', 512, 1, 1024]);
      } finally {
        await sb.kill();
      }
    }),
  );

  test(
    'pause, resume, snapshot, fork',
    e2e(async () => {
      const sb = await CodeSandbox.create({ timeoutMs: 5 * MIN });
      try {
        await sb.runCode('import random\nsurvivor = 99');
        await sb.pause();
        assert.equal((await sb.getInfo()).state, 'paused');
        await sb.resume();
        assert.equal((await sb.runCode('survivor')).results[0]?.data, '99');
        await sb.pause();
        assert.equal((await sb.runCode('survivor')).results[0]?.data, '99', 'a call resumes a paused sandbox');
        await sb.pause({ waitDurable: true }); // the server's disk is its image store: durable at once
        const info = await sb.getInfo();
        assert.ok(info.state === 'paused' && info.durable, JSON.stringify(info));
        await CodeSandbox.connect(sb.sandboxId);
        assert.equal((await sb.getInfo()).state, 'running', 'connect resumes a paused sandbox');
        await sb.files.write('/home/user/kept.txt', 'on disk');
        await sb.pause({ memory: false }); // the disk alone: the resume boots fresh over it
        assert.equal(await sb.files.read('/home/user/kept.txt'), 'on disk');
        assert.equal((await sb.runCode("'survivor' in globals()")).results[0]?.data, 'False', 'kernel state goes with the memory');
        await sb.runCode('import random\nsurvivor = 99'); // the kernel booted fresh
        const snap = await sb.snapshot();
        assert.equal(snap.sandboxId, sb.sandboxId);
        assert.ok(snap.sizeBytes > 0);
        assert.equal(snap.durable, true);
        try {
          const restored = await CodeSandbox.create({ snapshotId: snap.snapshotId });
          try {
            assert.equal((await restored.runCode('survivor')).results[0]?.data, '99');
          } finally {
            await restored.kill();
          }
        } finally {
          await sb.deleteSnapshot(snap.snapshotId);
        }
        const forks = await sb.fork({ count: 2 });
        try {
          const draws = new Set<string | undefined>();
          for (const f of forks) {
            assert.equal((await f.runCode('survivor')).results[0]?.data, '99');
            draws.add((await f.runCode('random.random()')).results[0]?.data);
          }
          assert.equal(draws.size, 2, 'forks draw different random numbers');
          await forks[0]!.runCode('survivor = 1');
          assert.equal((await sb.runCode('survivor')).results[0]?.data, '99');
        } finally {
          for (const f of forks) await f.kill();
        }
      } finally {
        await sb.kill();
      }
    }),
  );

  test(
    'a volume outlives its sandbox, is full at its size and refuses traversal',
    e2e(async () => {
      const name = `ts-${Math.random().toString(36).slice(2, 10)}`;
      const vol = await Volume.create(name, { sizeMb: 16 });
      assert.equal(vol.sizeMb, 16);
      assert.ok((await Volume.list()).some((v) => v.name === name));
      const volumes = [{ name, path: '/home/user/data' }];
      const first = await CodeSandbox.create({ projectId: 'proj_123', volumes });
      try {
        assert.deepEqual((await first.getInfo()).volumes, volumes);
        await first.runCode("open('/home/user/data/note.txt', 'w').write('kept')");
      } finally {
        await first.kill();
      }
      const second = await CodeSandbox.create({ projectId: 'proj_123', volumes });
      try {
        assert.equal((await second.runCode("print(open('/home/user/data/note.txt').read())")).stdout, 'kept\n');
        const full = await second.runCode(
          "import errno\ntry:\n    with open('/home/user/data/big', 'wb') as f:\n        for _ in range(32):\n" +
            "            f.write(b'x' * (1 << 20)); f.flush()\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\n",
        );
        assert.equal(full.stdout, 'ENOSPC\n');
        const link = await second.runCode(
          "import os\nos.symlink('/etc/shadow-of-the-host', '/home/user/data/l')\ntry:\n    open('/home/user/data/l').read()\n" +
            'except OSError as e:\n    print(type(e).__name__)\n',
        );
        assert.equal(link.stdout, 'FileNotFoundError\n');
        await assert.rejects(Volume.delete(name), ConflictError);
      } finally {
        await second.kill();
      }
      await assert.rejects(Volume.create('../etc'), InvalidArgumentError);
      await assert.rejects(CodeSandbox.create({ volumes: [{ name, path: '/home/user/../../etc' }] }), InvalidArgumentError);
      await Volume.delete(name);
      await assert.rejects(Volume.get(name), NotFoundError);
    }),
  );

  test(
    'a secret is set, listed without its value, replaced, deleted, and its bad input refused',
    e2e(async () => {
      const name = `TS_${Math.random().toString(36).slice(2, 10).toUpperCase()}`;
      const first = await Secret.set(name, 'sk-ts-0001', { hosts: ['api.example.test'] });
      assert.equal(first.name, name);
      assert.deepEqual(first.hosts, ['api.example.test']);
      const listed = await Secret.list();
      assert.ok(listed.some((s) => s.name === name));
      assert.ok(!JSON.stringify(listed).includes('sk-ts-0001'));
      const again = await Secret.set(name, 'sk-ts-0002', { hosts: ['API.example.test', '*.example.org'], allowHttp: true });
      assert.deepEqual(again.hosts, ['api.example.test', '*.example.org']);
      assert.equal(again.allowHttp, true);
      assert.equal(again.createdAt.getTime(), first.createdAt.getTime());
      await assert.rejects(
        Secret.set('not-an-identifier', 'v', { hosts: ['api.example.test'] }),
        (e: unknown) => e instanceof InvalidArgumentError && /secret name/.test(e.message),
      );
      await assert.rejects(Secret.set(name, 'x'.repeat(64 * 1024 + 1), { hosts: ['api.example.test'] }), InvalidArgumentError);
      await assert.rejects(
        Secret.set(name, 'v', { hosts: ['203.0.113.7'] }),
        (e: unknown) => e instanceof InvalidArgumentError && e.message.startsWith('hosts[0]'),
      );
      // An inject rule for a host the secret may not be sent to: 400 naming both.
      await assert.rejects(
        CodeSandbox.create({ network: { default: 'deny', inject: [{ domain: 'echo.attacker.test', headers: { Authorization: `{{ secrets.${name} }}` } }] } }),
        (e: unknown) => e instanceof InvalidArgumentError && e.message.includes(`secret "${name}" for echo.attacker.test`),
      );
      await assert.rejects(
        CodeSandbox.create({ network: { default: 'deny', inject: [{ domain: 'api.example.test', headers: { Authorization: '{{ secrets.NOT_MINE }}' } }] } }),
        (e: unknown) => e instanceof InvalidArgumentError && e.message.startsWith('network.inject[0].headers[Authorization]'),
      );
      await Secret.delete(name);
      await assert.rejects(Secret.delete(name), NotFoundError);
    }),
  );

  test(
    'getHost reaches http.server and a WebSocket echo, with a key or the token, and closes with the sandbox',
    e2e(async () => {
      const sb = await CodeSandbox.create({ projectId: 'proj_123' });
      try {
        await sb.files.write('/home/user/wsecho.py', fs.readFileSync(path.join(repoRoot(), 'e2e', 'testdata', 'wsecho.py')));
        await sb.runCode(
          "import subprocess, sys\nopen('/home/user/index.html', 'w').write('hello from the sandbox')\n" +
            "for args in (['-m', 'http.server', '8000', '--bind', '0.0.0.0'], ['/home/user/wsecho.py', '8765']):\n" +
            "    subprocess.Popen([sys.executable] + args, cwd='/home/user', start_new_session=True,\n" +
            '                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n',
        );
        const url = sb.getHost(8000);
        assert.equal(url, `${lizard.url}/v1/sandboxes/${sb.sandboxId}/ports/8000/`);
        const auth = { Authorization: `Bearer ${lizard.apiKey}` };
        const page = await waitOk(`${url}index.html`, auth);
        assert.equal(page, 'hello from the sandbox');
        const refused = await fetch(`${url}index.html`);
        assert.equal(refused.status, 401);
        assert.ok(sb.accessToken);
        const withToken = await fetch(`${url}index.html?lizard_access_token=${sb.accessToken}`);
        assert.equal(await withToken.text(), 'hello from the sandbox');
        const closed = await fetch(sb.getHost(8001), { headers: auth });
        assert.equal(closed.status, 502);

        await waitOk(sb.getHost(8765), { 'X-Lizard-Access-Token': sb.accessToken! });
        const wsUrl = `${sb.getHost(8765)}ws`;
        assert.equal((await WebSocketClient.open(wsUrl, {})).status, 401);
        const ws = await WebSocketClient.open(wsUrl, { 'X-Lizard-Access-Token': sb.accessToken! });
        assert.equal(ws.status, 101);
        for (const msg of ['hello', 'streamed']) {
          ws.send(msg);
          assert.equal(await ws.recv(), msg);
        }
        await sb.kill();
        await assert.rejects(ws.recv(), /closed/);
        ws.close();
        assert.equal((await fetch(url, { headers: auth })).status, 410);
      } finally {
        await sb.kill();
      }
    }),
  );

  test(
    'the seed examples run verbatim',
    e2e(async () => {
      const dir = path.join(repoRoot(), 'examples', 'typescript');
      const env = { ...process.env, LIZARD_API_URL: lizard.url, LIZARD_API_KEY: lizard.apiKey };
      if (!fs.existsSync(path.join(dir, 'node_modules', '@lizard-build', 'sdk'))) {
        await run('npm', ['ci', '--no-audit', '--no-fund'], { cwd: dir, env });
      }
      await run('npm', ['run', 'build'], { cwd: dir, env });

      const state = await run('node', ['dist/run-with-state.js'], { cwd: dir, env, timeout: 5 * MIN });
      assert.equal(state.stdout, 'np.int64(6)\nZeroDivisionError\n');

      const tool = await run('node', ['dist/llm-tool.js'], { cwd: dir, env, timeout: 5 * MIN });
      assert.match(tool.stdout, /^rows: 3\n/);
      assert.match(tool.stdout, /<table/);
      assert.match(tool.stdout, /\nnp\.int64\(6\)\n/);
      assert.match(tool.stdout, /ZeroDivisionError: division by zero\n/);

      // Both examples killed their sandboxes.
      const running = (await CodeSandbox.list({ state: 'running' })).map((s) => s.sandboxId);
      assert.deepEqual(running, [sandbox.sandboxId]);
    }),
  );
  test(
    'a sandbox from a custom template built with lizard template build',
    e2e(async () => {
      // A recipe adding a pinned pure-Python wheel and a file (docs/templates.md). The nonce keeps this
      // build apart from every other run's in the shared template cache, so that deleting it at the
      // end cannot take another test's build away.
      const name = 'sdk-ts-tpl';
      const nonce = crypto.randomBytes(6).toString('hex');
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lizard-ts-recipe-'));
      const lizardBin = path.join(binDir(), 'lizard');
      const env = { ...process.env, LIZARD_API_URL: lizard.url, LIZARD_API_KEY: lizard.apiKey };
      try {
        fs.writeFileSync(path.join(dir, 'note.txt'), 'hello from the typescript sdk recipe\n');
        fs.writeFileSync(
          path.join(dir, 'recipe.yaml'),
          [
            'pip: ["six==1.16.0"]',
            'files:',
            '  - src: note.txt',
            '    dest: /home/user/note.txt',
            'env:',
            `  TEMPLATE_NONCE: "${nonce}"`,
            '',
          ].join('\n'),
        );
        const built = await run(lizardBin, ['template', 'build', '-f', path.join(dir, 'recipe.yaml'), '--name', name], {
          env,
          timeout: 10 * MIN,
        });
        assert.match(built.stdout, new RegExp(`^template ${name} ready`));
        assert.match(built.stderr, /Successfully installed six-1\.16\.0/);

        const sb = await CodeSandbox.create({ template: name, timeoutMs: 5 * MIN });
        try {
          assert.equal((await sb.getInfo()).template, name);
          const out = await sb.runCode('import six\nprint(six.__version__)\nopen("/home/user/note.txt").read()');
          assert.equal(out.error, undefined);
          assert.equal(out.stdout, '1.16.0\n');
          assert.equal(out.results[0]?.data, `'hello from the typescript sdk recipe\\n'`);
        } finally {
          await sb.kill();
        }
        await assert.rejects(CodeSandbox.create({ template: 'no-such-template' }), NotFoundError);

        // The same recipe through the SDK: found in the cache, no step.
        const events: TemplateBuildEvent[] = [];
        const info = await Template.build(
          name,
          {
            pip: ['six==1.16.0'],
            files: [{ path: '/home/user/note.txt', content: 'hello from the typescript sdk recipe\n' }],
            env: { TEMPLATE_NONCE: nonce },
          },
          { onEvent: (e) => events.push(e) },
        );
        assert.deepEqual(
          events.map((e) => [e.type, e.cached]),
          [['done', true]],
        );
        assert.equal(info.key, (await Template.get(name)).key);
        assert.deepEqual(
          (await Template.list()).map((t) => t.name),
          [name],
        );
        // A pip requirement that does not exist fails at its fetch, before anything is copied.
        const err = await Template.build('sdk-ts-broken', { pip: ['six==0.0.0.1'] }).then(
          () => assert.fail('a broken recipe built'),
          (e: unknown) => e,
        );
        assert.ok(err instanceof TemplateBuildError, String(err));
        assert.equal(err.code, 'invalid_argument');
        assert.match(err.step ?? '', /^fetching packages/);
        assert.match(err.log ?? '', /six==0\.0\.0\.1/);
      } finally {
        const got = await run(lizardBin, ['template', 'get', name, '--json'], { env });
        const key = JSON.parse(got.stdout).key as string;
        await run(lizardBin, ['template', 'delete', name], { env });
        // Deleted and used by nothing: its build has left the shared template cache.
        const cache = process.env.LIZARD_CACHE_DIR || '/var/cache/lizard';
        assert.equal(fs.existsSync(path.join(cache, 'templates', `custom-${key}`)), false, `custom-${key} is still in ${cache}`);
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }),
  );

  test(
    'files: watchDir, rename, getInfo, streamed write and read; getMetrics',
    e2e(async () => {
      const sb = await CodeSandbox.create({ timeoutMs: 10 * MIN, metadata: { suite: 'ts-files' } });
      try {
        await sb.files.makeDir('w');
        const seen: string[] = [];
        let exited: Error | undefined | null = null;
        const handle = await sb.files.watchDir('w', (ev) => void seen.push(`${ev.type} ${ev.name}`), {
          recursive: true,
          onExit: (err) => void (exited = err),
        });
        await sb.process.exec('echo hi > ~/w/a.txt && mv ~/w/a.txt ~/w/b.txt && mkdir -p ~/w/d && touch ~/w/d/f && rm ~/w/b.txt');
        const want = ['create a.txt', 'write a.txt', 'rename a.txt', 'create b.txt', 'create d', 'create d/f', 'remove b.txt'];
        const inOrder = () => want.every((w, i) => seen.indexOf(w) >= 0 && (i === 0 || seen.indexOf(w) > seen.indexOf(want[i - 1]!)));
        for (let end = Date.now() + 5000; !inOrder() && Date.now() < end; ) await new Promise((r) => setTimeout(r, 50));
        assert.ok(inOrder(), `events ${JSON.stringify(seen)}, want ${JSON.stringify(want)} in order`);
        await handle.stop();
        assert.equal(exited, undefined);

        await assert.rejects(sb.files.watchDir('nothing', () => {}), NotFoundError);
        await sb.process.exec('echo 12345 > ~/r.txt && chmod 640 ~/r.txt && ln -s r2.txt ~/link');
        await assert.rejects(sb.files.watchDir('r.txt', () => {}), InvalidArgumentError);
        const info = await sb.files.rename('r.txt', 'r2.txt');
        assert.deepEqual([info.path, info.size, info.owner, info.group, info.permissions], ['/home/user/r2.txt', 6, 'user', 'user', '-rw-r-----']);
        const link = await sb.files.getInfo('link');
        assert.equal(link.type, 'symlink');
        assert.equal(link.symlinkTarget, 'r2.txt');
        await assert.rejects(sb.files.rename('nothing', 'x'), NotFoundError);

        // 64 MiB up from an AsyncIterable and down as a ReadableStream, hashed on both sides.
        const size = 64 << 20;
        const block = crypto.createHash('sha256').update('ts').digest();
        const piece = Buffer.concat(Array.from({ length: 1 << 15 }, () => block)); // 1 MiB
        async function* chunks(): AsyncGenerator<Uint8Array> {
          for (let i = 0; i < size / piece.length; i++) yield piece;
        }
        const up = crypto.createHash('sha256');
        for (let i = 0; i < size / piece.length; i++) up.update(piece);
        const written = await sb.files.write('big.bin', chunks());
        assert.equal(written.size, size);
        const stream = await sb.files.read('big.bin', { format: 'stream' });
        const down = crypto.createHash('sha256');
        let n = 0;
        for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) {
          down.update(chunk);
          n += chunk.length;
        }
        assert.equal(n, size);
        assert.equal(down.digest('hex'), up.digest('hex'));

        let metrics = await sb.getMetrics();
        for (let end = Date.now() + 20_000; metrics.length === 0 && Date.now() < end; ) {
          await new Promise((r) => setTimeout(r, 1000));
          metrics = await sb.getMetrics();
        }
        const m = metrics.at(-1);
        assert.ok(m, 'no metrics within 20 s');
        assert.ok(m.cpuCount > 0 && m.memTotal > 0 && m.memUsed > 0 && m.memUsed <= m.memTotal, JSON.stringify(m));
        assert.ok(m.diskUsed >= size && m.diskTotal > m.diskUsed && m.timestamp instanceof Date, JSON.stringify(m));

        // The sandbox's end ends a watch with SandboxGoneError.
        let gone: Error | undefined;
        let ended!: () => void;
        const exitedOnce = new Promise<void>((resolve) => (ended = resolve));
        await sb.files.watchDir('w', () => {}, {
          onExit: (err) => {
            gone = err;
            ended();
          },
        });
        await sb.kill();
        await Promise.race([exitedOnce, new Promise((_, reject) => setTimeout(() => reject(new Error('watch still open 5 s after the kill')), 5000))]);
        assert.ok(gone instanceof SandboxGoneError, `the watch ended with ${gone}`);
      } finally {
        await sb.kill().catch(() => {});
      }
    }),
  );

  test(
    'commands: a counter reattached with replay, stdin through cat, TERM is 143',
    e2e(async () => {
      const sb = await CodeSandbox.create({ timeoutMs: 10 * MIN, metadata: { suite: 'ts-commands' } });
      const until = async (cond: () => boolean, what: string) => {
        for (let end = Date.now() + 20_000; !cond(); await new Promise((r) => setTimeout(r, 50))) {
          assert.ok(Date.now() < end, `timed out waiting for ${what}`);
        }
      };
      try {
        let seen = '';
        const counter = await sb.commands.start({
          cmd: 'for i in $(seq 1 1000); do echo line-$i; sleep 0.1; done',
          tag: 'counter',
          onStdout: (t) => void (seen += t),
        });
        assert.ok(counter.pid > 0);
        assert.equal(counter.tag, 'counter');
        await until(() => seen.includes('line-3'), "the counter's third line");
        await counter.disconnect();
        const listed = (await sb.commands.list()).find((p) => p.pid === counter.pid);
        assert.ok(listed?.running && listed.tag === 'counter' && listed.pty === undefined, JSON.stringify(listed));
        let again = '';
        const back = await sb.commands.connect(counter.pid, { onStdout: (t) => void (again += t) });
        await until(() => again.includes('line-8'), 'replay then live output');
        assert.ok(again.startsWith('line-1\n'), again.slice(0, 100));
        await back.kill('TERM');
        const res = await back.wait();
        assert.equal(res.exitCode, 143);
        assert.equal((await sb.commands.get(counter.pid)).exitCode, 143);
        await assert.rejects(sb.commands.kill(counter.pid, 'TERM'), NotFoundError);

        let out = '';
        const cat = await sb.commands.start({ args: ['bash', '-c', 'cat; echo bye >&2'], stdin: true, onStdout: (t) => void (out += t) });
        await cat.sendStdin('hello ');
        await cat.sendStdin(new TextEncoder().encode('world\n'));
        await until(() => out === 'hello world\n', "cat's echo");
        await cat.closeStdin();
        assert.deepEqual(await cat.wait(), { stdout: 'hello world\n', stderr: 'bye\n', exitCode: 0 });
        await assert.rejects(sb.commands.sendStdin(cat.pid, 'late'), (e) => e instanceof ConflictError && /ended/.test(e.message));

        const sleeper = await sb.commands.start({ cmd: 'sleep 600' });
        await assert.rejects(sleeper.sendStdin('x'), (e) => e instanceof ConflictError && /stdin/.test(e.message));
        await assert.rejects(sb.commands.kill(sleeper.pid, 'NOPE'), InvalidArgumentError);
        await sleeper.disconnect();
        await sb.commands.kill(sleeper.pid);
        assert.equal((await sleeper.wait()).exitCode, 137);
      } finally {
        await sb.kill().catch(() => {});
      }
    }),
  );

  test(
    'pty: 6*7, stty size after a resize, reattach with replay, a pause and the sandbox killed under it',
    e2e(async () => {
      const sb = await CodeSandbox.create({ timeoutMs: 10 * MIN, metadata: { suite: 'ts-pty' } });
      const dec = new TextDecoder();
      const shows = async (screen: () => string, want: string) => {
        for (let end = Date.now() + 20_000; !screen().includes(want); await new Promise((r) => setTimeout(r, 50))) {
          assert.ok(Date.now() < end, `${JSON.stringify(want)} never appeared; the terminal showed ${JSON.stringify(screen().slice(-500))}`);
        }
      };
      try {
        let screen = '';
        const term = await sb.pty.create({ cols: 80, rows: 24, tag: 'shell', onData: (d) => void (screen += dec.decode(d)) });
        await term.sendInput('echo $((6*7))\n');
        await shows(() => screen, '42');
        await term.sendInput('stty size\n');
        await shows(() => screen, '24 80');
        await term.resize(100, 30);
        await term.sendInput('stty size\n');
        await shows(() => screen, '30 100');
        const info = (await sb.commands.list()).find((p) => p.pid === term.pid);
        assert.deepEqual([info?.pty, info?.tag], [{ cols: 100, rows: 30 }, 'shell']);
        await assert.rejects(term.resize(0, 30), InvalidArgumentError);

        await term.disconnect();
        let replay = '';
        const term2 = await sb.pty.connect(term.pid, { onData: (d) => void (replay += dec.decode(d)) });
        await shows(() => replay, '42');
        await sb.pty.resize(term.pid, 90, 20);
        await term2.sendInput('stty size; exit 3\n');
        await shows(() => replay, '20 90');
        assert.equal(await term2.wait(), 3);
        await assert.rejects(sb.pty.connect(999_999, { onData: () => {} }), NotFoundError);

        // A pause ends an attached terminal with ConflictError (close code 4409); connecting again resumes the sandbox.
        const paused = await sb.pty.create({ cols: 80, rows: 24, cmd: 'sleep 600', onData: () => {} });
        await sb.pause();
        await assert.rejects(paused.wait(), (e) => e instanceof ConflictError && /pause/.test(e.message));
        const resumed = await sb.pty.connect(paused.pid, { onData: () => {} });
        assert.equal((await sb.commands.get(paused.pid)).running, true);
        await resumed.disconnect();

        const term3 = await sb.pty.create({ cols: 80, rows: 24, cmd: ['sleep', '600'], onData: () => {} });
        const start = Date.now();
        await sb.kill();
        await assert.rejects(term3.wait(), SandboxGoneError);
        assert.ok(Date.now() - start < 5000, `gone after ${Date.now() - start} ms`);
      } finally {
        await sb.kill().catch(() => {});
      }
    }),
  );

  // The suite's server has no internet (--egress=none): policies are recorded, not enforced; the Go e2e
  // suite (e2e/network_test.go) tries their enforcement and each bypass.
  test(
    'network policy: given at create, updated and logged; bad rules refused naming the field',
    e2e(async () => {
      const sb = await CodeSandbox.create({ network: { default: 'deny', allow: ['PyPI.org', '*.pythonhosted.org'] } });
      try {
        assert.deepEqual((await sb.getInfo()).network, { default: 'deny', allow: ['pypi.org', '*.pythonhosted.org'] });
        const pol = await sb.network.update({ deny: ['evil.test'], cut: true });
        assert.deepEqual(pol.deny, ['evil.test']);
        assert.deepEqual(pol.allow, ['pypi.org', '*.pythonhosted.org']);
        assert.ok(Array.isArray(await sb.network.log()));
        await assert.rejects(sb.network.update({ allow: ['ok.test', 'api.*.test'] }), (err: unknown) =>
          err instanceof InvalidArgumentError && err.message.startsWith('network.allow[1]'));
        await assert.rejects(sb.network.update({ ports: [70000] }), (err: unknown) =>
          err instanceof InvalidArgumentError && err.message.startsWith('network.ports[0]'));
        assert.deepEqual((await sb.getInfo()).network?.allow, ['pypi.org', '*.pythonhosted.org']);
      } finally {
        await sb.kill();
      }
      await assert.rejects(CodeSandbox.create({ network: { default: 'sometimes' as 'deny' } }), InvalidArgumentError);
      await assert.rejects(sandbox.network.update({ default: 'deny' }), ConflictError);
    }),
  );

  test(
    "network policy: the project's default is what a create without network gets; cleared, it is gone",
    e2e(async () => {
      try {
        assert.equal(await Network.getDefault(), undefined);
        const pol = await Network.setDefault({ default: 'deny', allow: ['PyPI.org'] });
        assert.deepEqual(pol, { default: 'deny', allow: ['pypi.org'] });
        assert.deepEqual(await Network.getDefault(), pol);
        const sb = await CodeSandbox.create();
        try {
          assert.deepEqual((await sb.getInfo()).network, pol);
        } finally {
          await sb.kill();
        }
        await assert.rejects(Network.setDefault({ allow: ['api.*.test'] }), (err: unknown) =>
          err instanceof InvalidArgumentError && err.message.startsWith('network.allow[0]'));
        assert.deepEqual(await Network.getDefault(), pol); // nothing applied
        await Network.clearDefault();
        assert.equal(await Network.getDefault(), undefined);
        const plain = await CodeSandbox.create();
        try {
          assert.equal((await plain.getInfo()).network, undefined);
        } finally {
          await plain.kill();
        }
      } finally {
        await Network.clearDefault();
      }
    }),
  );
});
