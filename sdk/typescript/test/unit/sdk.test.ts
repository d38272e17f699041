// Unit tests of the SDK against a fake API on loopback: request shapes,
// NDJSON assembly, callback order, error mapping and configuration.

import assert from 'node:assert/strict';
import type http from 'node:http';
import { after, before, beforeEach, describe, test } from 'node:test';

import {
  AuthenticationError,
  CodeSandbox,
  ConflictError,
  DiskFullError,
  InvalidArgumentError,
  LizardConnectionError,
  LizardError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
  RequestTimeoutError,
  SandboxError,
  SandboxGoneError,
  Secret,
  portUrl,
} from '../../src/index.js';
import { errorFromResponse } from '../../src/errors.js';
import { ndjsonLines, resolveConfig } from '../../src/http.js';
import { FakeServer, sandboxJSON, sleep, type Seen } from './fake.js';

const KEY = 'lz_test_key';
let fake: FakeServer;
let opts: { apiUrl: string; apiKey: string };

before(async () => {
  fake = await new FakeServer().start();
  opts = { apiUrl: fake.url, apiKey: KEY };
});
after(() => fake.close());
beforeEach(() => {
  fake.requests.length = 0;
});

/** withEnv runs fn with LIZARD_* set as given (undefined: unset), then restores them. */
async function withEnv(env: Record<string, string | undefined>, fn: () => Promise<void> | void): Promise<void> {
  const saved: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(env)) {
    saved[k] = process.env[k];
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
  try {
    await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

/** connected returns a sandbox handle on the fake, answering the GET connect makes. */
async function connected(id = 'sbx_1'): Promise<CodeSandbox> {
  const prev = fake.handler;
  fake.handler = (_req, res) => FakeServer.json(res, 200, sandboxJSON(id));
  const sb = await CodeSandbox.connect(id, opts);
  fake.handler = prev;
  fake.requests.length = 0;
  return sb;
}

/** writeChunks sends text as separate writes cut at the given byte offsets, with a pause between. */
async function writeChunks(res: http.ServerResponse, text: string, cuts: number[], pauseMs = 5): Promise<void> {
  const buf = Buffer.from(text);
  let prev = 0;
  for (const cut of [...cuts, buf.length]) {
    res.write(buf.subarray(prev, cut));
    prev = cut;
    await sleep(pauseMs);
  }
}

const ndjson = (...events: unknown[]) => events.map((e) => JSON.stringify(e) + '\n').join('');

describe('configuration', () => {
  test('missing key throws before any request', async () => {
    await withEnv({ LIZARD_API_KEY: undefined }, async () => {
      await assert.rejects(CodeSandbox.create({ apiUrl: fake.url }), (err: unknown) => {
        assert.ok(err instanceof AuthenticationError, `got ${err}, want AuthenticationError`);
        assert.match((err as Error).message, /set LIZARD_API_KEY or pass apiKey/);
        return true;
      });
    });
    assert.equal(fake.requests.length, 0, 'requests sent without a key');
  });

  test('precedence: option, then environment, then default', async () => {
    const cases: { name: string; env: Record<string, string | undefined>; o: object; url: string; key: string }[] = [
      { name: 'env only', env: { LIZARD_API_URL: 'http://env:1', LIZARD_API_KEY: 'k_env' }, o: {}, url: 'http://env:1', key: 'k_env' },
      {
        name: 'explicit wins',
        env: { LIZARD_API_URL: 'http://env:1', LIZARD_API_KEY: 'k_env' },
        o: { apiUrl: 'http://opt:2/', apiKey: 'k_opt' },
        url: 'http://opt:2',
        key: 'k_opt',
      },
      { name: 'default url', env: { LIZARD_API_URL: undefined, LIZARD_API_KEY: 'k' }, o: {}, url: 'http://127.0.0.1:8080', key: 'k' },
    ];
    for (const c of cases) {
      await withEnv(c.env, () => {
        const got = resolveConfig(c.o);
        assert.equal(got.apiUrl, c.url, `${c.name}: apiUrl`);
        assert.equal(got.apiKey, c.key, `${c.name}: apiKey`);
      });
    }
  });

  test('environment reaches the server', async () => {
    fake.handler = (_req, res) => FakeServer.json(res, 201, sandboxJSON('sbx_env'));
    await withEnv({ LIZARD_API_URL: fake.url, LIZARD_API_KEY: 'k_from_env' }, async () => {
      const sb = await CodeSandbox.create();
      assert.equal(sb.sandboxId, 'sbx_env');
    });
    assert.equal(fake.requests[0]?.headers.authorization, 'Bearer k_from_env');
  });
});

describe('trace context', () => {
  const key = Symbol.for('opentelemetry.js.api.1');
  const g = globalThis as Record<symbol, unknown>;
  const tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

  test("sends the traceparent of the caller's active span, as @opentelemetry/api registers it", async () => {
    // What the OpenTelemetry API registers: a context manager whose active
    // context holds the span, and the W3C propagator (baggage left out).
    const active = { span: tp };
    g[key] = {
      version: '1.9.0',
      context: { active: () => active },
      propagation: {
        inject(ctx: unknown, carrier: Record<string, string>, setter: { set(c: Record<string, string>, k: string, v: string): void }) {
          setter.set(carrier, 'traceparent', (ctx as typeof active).span);
          setter.set(carrier, 'baggage', 'user=secret');
        },
      },
    };
    try {
      fake.handler = (_req, res) => FakeServer.json(res, 201, sandboxJSON('sbx_t'));
      await CodeSandbox.create(opts);
    } finally {
      delete g[key];
    }
    assert.equal(fake.requests[0]?.headers.traceparent, tp);
    assert.equal(fake.requests[0]?.headers.baggage, undefined, 'only the trace context goes out');
  });

  test('sends none without OpenTelemetry, or when its propagator throws', async () => {
    fake.handler = (_req, res) => FakeServer.json(res, 201, sandboxJSON('sbx_t'));
    await CodeSandbox.create(opts);
    g[key] = { context: { active: () => ({}) }, propagation: { inject: () => { throw new Error('broken'); } } };
    try {
      await CodeSandbox.create(opts);
    } finally {
      delete g[key];
    }
    assert.equal(fake.requests.length, 2);
    for (const r of fake.requests) assert.equal(r.headers.traceparent, undefined);
  });
});

describe('sandboxes', () => {
  test('create sends the defaults and returns the id', async () => {
    fake.handler = (_req, res) => FakeServer.json(res, 201, sandboxJSON('sbx_new'));
    const sb = await CodeSandbox.create({ ...opts, projectId: 'proj_123', envs: { A: '1' }, metadata: { m: 'v' } });
    assert.equal(sb.sandboxId, 'sbx_new');
    const r = fake.requests[0]!;
    assert.equal(`${r.method} ${r.path}`, 'POST /v1/sandboxes');
    assert.equal(r.headers.authorization, `Bearer ${KEY}`);
    assert.deepEqual(JSON.parse(r.body.toString()), {
      template: 'interpreter',
      timeoutMs: 300000,
      envs: { A: '1' },
      metadata: { m: 'v' },
    });
  });

  test('create with timeoutMs 0 and lizardToken sends them', async () => {
    fake.handler = (_req, res) => FakeServer.json(res, 201, sandboxJSON('sbx_0'));
    await CodeSandbox.create({ ...opts, timeoutMs: 0, lizardToken: true, template: 't' });
    assert.deepEqual(JSON.parse(fake.requests[0]!.body.toString()), { template: 't', timeoutMs: 0, lizardToken: true });
  });

  test('create sends the resources and options asked for, and the info reports them', async () => {
    fake.handler = (req, res) =>
      FakeServer.json(res, req.method === 'POST' ? 201 : 200, { ...sandboxJSON('sbx_r'), memoryMb: 512, cpus: 1, diskMb: 1024 });
    const sb = await CodeSandbox.create({ ...opts, memoryMb: 512, cpus: 1, diskMb: 1024, onTimeout: 'pause', allowInternet: false });
    assert.deepEqual(JSON.parse(fake.requests[0]!.body.toString()), {
      template: 'interpreter',
      timeoutMs: 300000,
      memoryMb: 512,
      cpus: 1,
      diskMb: 1024,
      onTimeout: 'pause',
      allowInternet: false,
    });
    const info = await sb.getInfo();
    assert.deepEqual([info.memoryMb, info.cpus, info.diskMb], [512, 1, 1024]);
  });

  test('create refuses resources that cannot be right, before any request', async () => {
    for (const bad of [{ memoryMb: 0 }, { memoryMb: 1.5 }, { cpus: -1 }, { diskMb: Number.NaN }, { onTimeout: 'stop' as 'kill' }]) {
      await assert.rejects(CodeSandbox.create({ ...opts, ...bad }), InvalidArgumentError, JSON.stringify(bad));
    }
    assert.equal(fake.requests.length, 0);
  });

  test('create with another project kills the sandbox and throws', async () => {
    fake.handler = (req, res) =>
      req.method === 'POST' ? FakeServer.json(res, 201, sandboxJSON('sbx_x', 'proj_other')) : void res.writeHead(204).end();
    await assert.rejects(CodeSandbox.create({ ...opts, projectId: 'proj_123' }), InvalidArgumentError);
    assert.deepEqual(
      fake.requests.map((r) => `${r.method} ${r.path}`),
      ['POST /v1/sandboxes', 'DELETE /v1/sandboxes/sbx_x'],
    );
  });

  test('list sends metadata filters and parses dates', async () => {
    fake.handler = (_req, res) => FakeServer.json(res, 200, { sandboxes: [sandboxJSON('a'), sandboxJSON('b')] });
    const got = await CodeSandbox.list({ ...opts, metadata: { a: '1', b: '2' }, state: 'running' });
    assert.deepEqual(
      got.map((s) => s.sandboxId),
      ['a', 'b'],
    );
    assert.ok(got[0]!.createdAt instanceof Date && got[0]!.createdAt.getUTCFullYear() === 2026);
    const q = fake.requests[0]!.query;
    assert.deepEqual(q.getAll('metadata'), ['a=1', 'b=2']);
    assert.equal(q.get('state'), 'running');
  });

  test('setTimeout, getInfo, kill', async () => {
    const sb = await connected('sbx_1');
    fake.handler = (req, res) => {
      if (req.method === 'DELETE') return void res.writeHead(204).end();
      FakeServer.json(res, 200, sandboxJSON('sbx_1'));
    };
    await sb.setTimeout(0);
    const info = await sb.getInfo();
    await sb.kill();
    assert.equal(info.state, 'running');
    assert.deepEqual(
      fake.requests.map((r) => `${r.method} ${r.path} ${r.body.toString()}`),
      ['POST /v1/sandboxes/sbx_1/timeout {"timeoutMs":0}', 'GET /v1/sandboxes/sbx_1 ', 'DELETE /v1/sandboxes/sbx_1 '],
    );
  });

  test('kill of a gone sandbox succeeds; other errors throw', async () => {
    const sb = await connected('sbx_1');
    for (const [status, code] of [
      [404, 'not_found'],
      [410, 'gone'],
    ] as const) {
      fake.handler = (_req, res) => FakeServer.json(res, status, { code, message: 'gone' });
      await sb.kill();
    }
    fake.handler = (_req, res) => FakeServer.json(res, 500, { code: 'internal', message: 'boom' });
    await assert.rejects(sb.kill(), SandboxError);
  });

  test('pause, resume, snapshot and fork surface the server error', async () => {
    const sb = await connected('sbx_1');
    fake.handler = (_req, res) => FakeServer.json(res, 404, { code: 'not_found', message: 'no such path' });
    for (const call of [() => sb.pause(), () => sb.resume(), () => sb.snapshot(), () => sb.fork()]) {
      await assert.rejects(call(), NotFoundError);
    }
    assert.deepEqual(
      fake.requests.map((r) => `${r.method} ${r.path}`),
      [
        'POST /v1/sandboxes/sbx_1/pause',
        'POST /v1/sandboxes/sbx_1/resume',
        'POST /v1/sandboxes/sbx_1/snapshots',
        'POST /v1/sandboxes/sbx_1/fork',
      ],
    );
  });

  test('snapshot returns its info, createdAt a Date as the other times', async () => {
    const sb = await connected('sbx_1');
    fake.handler = (_req, res) =>
      FakeServer.json(res, 201, {
        snapshotId: 'snap-1', sandboxId: 'sbx_1', projectId: 'proj_123', template: 'interpreter',
        createdAt: '2026-12-02T03:56:16.723976Z', sizeBytes: 5, durable: false,
      });
    const snap = await sb.snapshot();
    assert.equal(snap.snapshotId, 'snap-1');
    assert.ok(snap.createdAt instanceof Date);
    assert.equal(snap.createdAt.toISOString(), '2026-12-02T03:56:16.723Z');
  });

  test('named snapshots: snapshot({ name }) sends it, listSnapshots({ name }) filters by it', async () => {
    const sb = await connected('sbx_1');
    const snap = {
      snapshotId: 'snap-1', sandboxId: 'sbx_1', projectId: 'proj_123', template: 'interpreter',
      createdAt: '2026-12-02T03:56:16.723976Z', sizeBytes: 5, durable: true, name: 'golden',
    };
    fake.handler = (req, res) =>
      req.method === 'POST' ? FakeServer.json(res, 201, snap) : FakeServer.json(res, 200, { snapshots: [snap] });
    assert.equal((await sb.snapshot({ name: 'golden' })).name, 'golden');
    const listed = await CodeSandbox.listSnapshots({ ...opts, name: 'golden' });
    assert.deepEqual(listed.map((s) => [s.snapshotId, s.name]), [['snap-1', 'golden']]);
    const [post, get] = fake.requests.slice(-2);
    assert.deepEqual(JSON.parse(post!.body.toString()), { name: 'golden' });
    assert.equal(`${get!.method} ${get!.path} ${get!.query.get('name')}`, 'GET /v1/snapshots golden');
  });

  test('fork returns a handle on the new sandbox', async () => {
    const sb = await connected('sbx_1');
    fake.handler = (_req, res) => FakeServer.json(res, 201, { sandboxes: [sandboxJSON('sbx_2')] });
    const child = await sb.fork();
    assert.equal(child.sandboxId, 'sbx_2');
    fake.handler = (_req, res) => FakeServer.json(res, 201, { sandboxes: [sandboxJSON('sbx_3'), sandboxJSON('sbx_4')] });
    const forks = await sb.fork({ count: 2 });
    assert.deepEqual(forks.map((f) => f.sandboxId), ['sbx_3', 'sbx_4']);
  });
});

describe('runCode', () => {
  test('assembles an execution from chunks cut anywhere, firing callbacks in order', async () => {
    const sb = await connected();
    const text = ndjson(
      { type: 'stdout', text: 'héllo ✓\n' },
      { type: 'stderr', text: 'warn\n' },
      { type: 'stdout', text: 'again\n' },
      { type: 'result', result: { type: 'display', mime: 'image/png', data: 'iVBOR' } },
      { type: 'result', result: { type: 'result', mime: 'text/plain', data: 'np.int64(6)' } },
      { type: 'end', executionCount: 3 },
    );
    // Cut inside the multi-byte characters and inside JSON tokens.
    const bytes = Buffer.from(text);
    const cuts = [1, 20, bytes.indexOf('✓') + 1, bytes.indexOf('✓') + 2, 60, 61, 130, bytes.length - 3];
    fake.handler = async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      await writeChunks(res, text, cuts);
      res.end();
    };
    const order: string[] = [];
    const run = await sb.runCode('print(1)', {
      onStdout: (t) => void order.push(`out:${t}`),
      onStderr: (t) => void order.push(`err:${t}`),
      onResult: (r) => void order.push(`res:${r.mime}`),
      onError: () => void order.push('error'),
    });
    assert.deepEqual(order, ['out:héllo ✓\n', 'err:warn\n', 'out:again\n', 'res:image/png', 'res:text/plain']);
    assert.equal(run.stdout, 'héllo ✓\nagain\n');
    assert.equal(run.stderr, 'warn\n');
    assert.deepEqual(run.results, [
      { type: 'display', mime: 'image/png', data: 'iVBOR' },
      { type: 'result', mime: 'text/plain', data: 'np.int64(6)' },
    ]);
    assert.equal(run.error, undefined);
    assert.equal(run.executionCount, 3);
    assert.equal(run.text, 'np.int64(6)');
    const r = fake.requests[0]!;
    assert.equal(`${r.method} ${r.path}`, 'POST /v1/sandboxes/sbx_1/execute');
    assert.deepEqual(JSON.parse(r.body.toString()), { code: 'print(1)', timeoutMs: 60000 });
  });

  test('callbacks fire while the code is still running', async () => {
    const sb = await connected();
    let sawBeforeEnd = false;
    let called = false;
    fake.handler = async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(ndjson({ type: 'stdout', text: 'first\n' }));
      for (let i = 0; i < 200 && !called; i++) await sleep(10);
      sawBeforeEnd = called;
      res.end(ndjson({ type: 'stdout', text: 'second\n' }, { type: 'end' }));
    };
    const run = await sb.runCode('x', { onStdout: () => void (called = true) });
    assert.ok(sawBeforeEnd, 'onStdout was not called before the stream ended');
    assert.equal(run.stdout, 'first\nsecond\n');
  });

  test('a stream the server ended with an abort event raises the typed error it carries', async () => {
    const sb = await connected();
    const abort = { status: 410, code: 'gone', message: 'sandbox sbx_1 was killed during the call; create a new sandbox' };
    fake.handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end(ndjson({ type: 'stdout', text: 'started\n' }, { type: 'abort', abort }));
    };
    await assert.rejects(sb.runCode('import time; time.sleep(300)'), (err: unknown) => {
      assert.ok(err instanceof SandboxGoneError, `got ${String(err)}`);
      assert.equal((err as SandboxGoneError).status, 410);
      assert.match((err as Error).message, /was killed during the call/);
      return true;
    });
    fake.handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end(ndjson({ type: 'abort', abort }));
    };
    await assert.rejects(sb.process.exec('sleep 300'), SandboxGoneError);
  });

  test('a code error is a result, not an exception', async () => {
    const sb = await connected();
    const error = { name: 'ZeroDivisionError', message: 'division by zero', traceback: 'Traceback...' };
    fake.handler = (_req, res) => {
      res.writeHead(200).end(ndjson({ type: 'error', error }, { type: 'end', executionCount: 1 }));
    };
    let seen: unknown;
    const run = await sb.runCode('1/0', { onError: (e) => void (seen = e) });
    assert.deepEqual(run.error, error);
    assert.deepEqual(seen, error);
  });

  test('options reach the request', async () => {
    const sb = await connected();
    fake.handler = (_req, res) => void res.writeHead(200).end(ndjson({ type: 'end' }) + '\r\n\n');
    await sb.runCode('echo hi', { language: 'bash', context: { id: 'ctx_9', language: 'bash', cwd: '/' }, timeoutMs: 0, envs: { X: 'y' } });
    assert.deepEqual(JSON.parse(fake.requests[0]!.body.toString()), {
      code: 'echo hi',
      language: 'bash',
      contextId: 'ctx_9',
      timeoutMs: 0,
      envs: { X: 'y' },
    });
  });

  test('a stream without an end event throws SandboxError', async () => {
    const sb = await connected();
    fake.handler = (_req, res) => void res.writeHead(200).end(ndjson({ type: 'stdout', text: 'partial' }));
    await assert.rejects(sb.runCode('x'), SandboxError);
  });

  test('a connection broken mid-stream throws LizardConnectionError', async () => {
    const sb = await connected();
    fake.handler = async (_req, res) => {
      res.writeHead(200);
      res.write(ndjson({ type: 'stdout', text: 'partial\n' }));
      await sleep(20);
      res.socket?.destroy();
    };
    await assert.rejects(sb.runCode('x'), LizardConnectionError);
  });

  test('an HTTP error before the stream is typed', async () => {
    const sb = await connected();
    fake.handler = (_req, res) => FakeServer.json(res, 404, { code: 'not_found', message: 'no context ctx_1' });
    await assert.rejects(sb.runCode('x', { context: 'ctx_1' }), (err: unknown) => {
      assert.ok(err instanceof NotFoundError);
      assert.equal((err as NotFoundError).message, 'no context ctx_1');
      assert.equal((err as NotFoundError).code, 'not_found');
      assert.equal((err as NotFoundError).status, 404);
      return true;
    });
  });

  test('the HTTP timeout follows the code timeout, not requestTimeoutMs', async () => {
    fake.handler = (_req, res) => FakeServer.json(res, 200, sandboxJSON('sbx_1'));
    const slowFake = await CodeSandbox.connect('sbx_1', { ...opts, requestTimeoutMs: 100 });
    fake.handler = async (_req, res) => {
      res.writeHead(200);
      await sleep(400); // longer than requestTimeoutMs, shorter than the code's timeout
      res.end(ndjson({ type: 'stdout', text: 'late' }, { type: 'end' }));
    };
    const run = await slowFake.runCode('x', { timeoutMs: 1000 });
    assert.equal(run.stdout, 'late');
    // Other requests keep requestTimeoutMs.
    fake.handler = async (_req, res) => {
      await sleep(400);
      FakeServer.json(res, 200, sandboxJSON('sbx_1'));
    };
    await assert.rejects(slowFake.getInfo(), RequestTimeoutError);
  });

  test('rejects a negative timeout before sending', async () => {
    const sb = await connected();
    await assert.rejects(sb.runCode('x', { timeoutMs: -1 }), InvalidArgumentError);
    assert.equal(fake.requests.length, 0);
  });
});

describe('contexts', () => {
  test('create, list, restart, delete', async () => {
    const sb = await connected();
    const ctx = { id: 'ctx_1', language: 'python', cwd: '/tmp' };
    fake.handler = (req, res) => {
      if (req.method === 'DELETE') return void res.writeHead(204).end();
      if (req.method === 'GET') return FakeServer.json(res, 200, { contexts: [ctx] });
      FakeServer.json(res, req.path.endsWith('/restart') ? 200 : 201, ctx);
    };
    assert.deepEqual(await sb.createContext({ cwd: '/tmp' }), ctx);
    assert.deepEqual(await sb.listContexts(), [ctx]);
    assert.deepEqual(await sb.restartContext(ctx), ctx);
    await sb.deleteContext('ctx_1');
    assert.deepEqual(
      fake.requests.map((r) => `${r.method} ${r.path} ${r.body.toString()}`),
      [
        'POST /v1/sandboxes/sbx_1/contexts {"cwd":"/tmp"}',
        'GET /v1/sandboxes/sbx_1/contexts ',
        'POST /v1/sandboxes/sbx_1/contexts/ctx_1/restart ',
        'DELETE /v1/sandboxes/sbx_1/contexts/ctx_1 ',
      ],
    );
  });
});

const PROC = {
  pid: 42,
  tag: 'web',
  cmd: 'serve',
  args: ['bash', '-c', 'serve'],
  cwd: '/home/user',
  user: 'user',
  startedAt: '2026-01-02T03:04:05Z',
  stdin: true,
  running: true,
};

describe('commands', () => {
  test('start sends its options, follows the output and waits for the end', async () => {
    const sb = await connected();
    fake.handler = async (req, res) => {
      if (req.method === 'POST' && req.path.endsWith('/processes')) return FakeServer.json(res, 201, PROC);
      if (req.path.endsWith('/processes/42/output')) {
        res.writeHead(200);
        await writeChunks(
          res,
          ndjson({ type: 'stdout', text: 'a' }, { type: 'dropped', dropped: 9 }, { type: 'stderr', text: 'b' }, { type: 'end', exitCode: 3 }),
          [12, 40],
        );
        return void res.end();
      }
      res.writeHead(204).end();
    };
    const seen: string[] = [];
    const h = await sb.commands.start({
      cmd: 'serve',
      cwd: '/tmp',
      envs: { A: '1' },
      stdin: true,
      timeoutMs: 5,
      tag: 'web',
      user: 'root',
      onStdout: (t) => void seen.push(`out:${t}`),
      onStderr: (t) => void seen.push(`err:${t}`),
    });
    assert.deepEqual(JSON.parse(fake.requests[0]!.body.toString()), {
      cmd: 'serve', cwd: '/tmp', envs: { A: '1' }, stdin: true, timeoutMs: 5, tag: 'web', user: 'root',
    });
    assert.equal(h.pid, 42);
    assert.equal(h.tag, 'web');
    assert.equal(h.info.startedAt.getUTCFullYear(), 2026);
    assert.deepEqual(await h.wait(), { stdout: 'a', stderr: 'b', exitCode: 3 });
    assert.deepEqual(seen, ['out:a', 'err:b']);
    await h.sendStdin('hé');
    assert.equal(fake.requests.at(-1)!.body.toString(), 'hé');
    await h.closeStdin();
    await h.kill();
    assert.deepEqual(JSON.parse(fake.requests.at(-1)!.body.toString()), { signal: 'KILL' });
    await sb.commands.kill(42, 'TERM');
    assert.deepEqual(
      fake.requests.slice(-4).map((r) => `${r.method} ${r.path} ${r.body}`),
      [
        'POST /v1/sandboxes/sbx_1/processes/42/stdin hé',
        'POST /v1/sandboxes/sbx_1/processes/42/stdin/close ',
        'POST /v1/sandboxes/sbx_1/processes/42/signal {"signal":"KILL"}',
        'POST /v1/sandboxes/sbx_1/processes/42/signal {"signal":"TERM"}',
      ],
    );
  });

  test('list parses processes; bad input fails before any request', async () => {
    const sb = await connected();
    fake.handler = (_req, res) =>
      FakeServer.json(res, 200, {
        processes: [PROC, { ...PROC, pid: 7, running: false, exitCode: 143, endedAt: '2026-01-02T03:04:06Z', pty: { cols: 80, rows: 24 } }],
      });
    const procs = await sb.commands.list();
    assert.deepEqual(
      procs.map((p) => [p.pid, p.running, p.exitCode, p.pty, p.endedAt?.getUTCSeconds()]),
      [
        [42, true, undefined, undefined, undefined],
        [7, false, 143, { cols: 80, rows: 24 }, 6],
      ],
    );
    fake.requests.length = 0;
    await assert.rejects(sb.commands.start({}), InvalidArgumentError);
    await assert.rejects(sb.commands.start({ cmd: 'a', args: ['b'] }), InvalidArgumentError);
    await assert.rejects(sb.commands.start({ args: [] }), InvalidArgumentError);
    await assert.rejects(sb.commands.kill(42, ''), /signal/);
    await assert.rejects(sb.pty.create({ cols: 80, rows: 1001, onData: () => {} }), /rows/);
    assert.equal(fake.requests.length, 0);
  });

  test("the output's abort is the typed error; an unknown pid NotFoundError", async () => {
    const sb = await connected();
    fake.handler = (req, res) => {
      if (req.path.endsWith('/processes/42')) return FakeServer.json(res, 200, PROC);
      if (req.path.endsWith('/processes/42/output')) {
        return void res.writeHead(200).end(ndjson({ type: 'stdout', text: 'a' }, { type: 'abort', abort: { status: 410, code: 'gone', message: 'killed' } }));
      }
      FakeServer.json(res, 404, { code: 'not_found', message: 'no process 9' });
    };
    const h = await sb.commands.connect(42);
    await assert.rejects(h.wait(), (e) => e instanceof SandboxGoneError && /killed/.test(e.message));
    assert.equal(h.stdout, 'a');
    await assert.rejects(sb.commands.connect(9), NotFoundError);
  });
});

describe('process', () => {
  test('exec streams output and returns the exit code', async () => {
    const sb = await connected();
    fake.handler = async (_req, res) => {
      res.writeHead(200);
      await writeChunks(
        res,
        ndjson({ type: 'stdout', text: 'a' }, { type: 'stderr', text: 'b' }, { type: 'stdout', text: 'c' }, { type: 'end', exitCode: 3 }),
        [10, 33],
      );
      res.end();
    };
    const order: string[] = [];
    const got = await sb.process.exec('ls /nope', {
      cwd: '/tmp',
      timeoutMs: 5000,
      onStdout: (t) => void order.push(`out:${t}`),
      onStderr: (t) => void order.push(`err:${t}`),
    });
    assert.deepEqual(got, { stdout: 'ac', stderr: 'b', exitCode: 3 });
    assert.deepEqual(order, ['out:a', 'err:b', 'out:c']);
    assert.deepEqual(JSON.parse(fake.requests[0]!.body.toString()), { cmd: 'ls /nope', cwd: '/tmp', timeoutMs: 5000 });
  });

  test('exec reports a process that could not start', async () => {
    const sb = await connected();
    fake.handler = (_req, res) => void res.writeHead(200).end(ndjson({ type: 'end', error: 'timed out' }));
    const got = await sb.process.exec(['sleep', '9']);
    assert.deepEqual(got, { stdout: '', stderr: '', exitCode: -1, error: 'timed out' });
    assert.deepEqual(JSON.parse(fake.requests[0]!.body.toString()), { args: ['sleep', '9'] });
  });

  test('exec without an end event throws', async () => {
    const sb = await connected();
    fake.handler = (_req, res) => void res.writeHead(200).end(ndjson({ type: 'stdout', text: 'a' }));
    await assert.rejects(sb.process.exec('true'), SandboxError);
  });
});

describe('files', () => {
  const entry = { name: 'f', path: '/home/user/f', type: 'file', size: 3, mode: 420, modTime: '2026-01-02T03:04:05Z' };

  test('read text and bytes', async () => {
    const sb = await connected();
    const raw = Buffer.from([0xff, 0x00, 0x61, 0xe2, 0x9c, 0x93]);
    fake.handler = (_req, res) => void res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(raw);
    const bytes = await sb.files.read('dir/f', { format: 'bytes' });
    assert.ok(bytes instanceof Uint8Array);
    assert.deepEqual(Buffer.from(bytes), raw);
    assert.equal(await sb.files.read('dir/f'), '\ufffd\u0000a✓');
    assert.equal(fake.requests[0]!.path, '/v1/sandboxes/sbx_1/files');
    assert.equal(fake.requests[0]!.query.get('path'), 'dir/f');
  });

  test('write sends the raw body for every kind of data', async () => {
    const sb = await connected();
    fake.handler = (_req, res) => FakeServer.json(res, 200, entry);
    const want = Buffer.from([1, 2, 3, 0, 255]);
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(want.subarray(0, 2));
        c.enqueue(want.subarray(2));
        c.close();
      },
    });
    const inputs: [string, Parameters<typeof sb.files.write>[1], Buffer][] = [
      ['string', 'héllo', Buffer.from('héllo')],
      ['Uint8Array', new Uint8Array(want), want],
      ['Blob', new Blob([want]), want],
      ['ReadableStream', stream, want],
    ];
    for (const [name, data, body] of inputs) {
      fake.requests.length = 0;
      const info = await sb.files.write('a b/c.bin', data);
      assert.equal(info.size, 3, name);
      assert.ok(info.modTime instanceof Date, name);
      const r = fake.requests[0]!;
      assert.equal(`${r.method} ${r.path} ${r.query.get('path')}`, 'PUT /v1/sandboxes/sbx_1/files a b/c.bin', name);
      assert.deepEqual(r.body, body, `${name}: body`);
    }
  });

  test('write sends metadata as metadata[key] and reads it back', async () => {
    const sb = await connected();
    fake.handler = (_req, res) => FakeServer.json(res, 200, { ...entry, metadata: { author: 'al' } });
    fake.requests.length = 0;
    const info = await sb.files.write('a.txt', 'x', { metadata: { author: 'al' } });
    assert.deepEqual(info.metadata, { author: 'al' });
    assert.equal(fake.requests[0]!.query.get('metadata[author]'), 'al');
  });

  test('every file call sends its user only when one is named', async () => {
    const sb = await connected();
    fake.handler = (req: Seen, res) => {
      if (req.method === 'DELETE') return void res.writeHead(204).end();
      if (req.path.endsWith('/list')) return FakeServer.json(res, 200, { entries: [entry] });
      if (req.method === 'GET' && req.path.endsWith('/files')) return void res.writeHead(200).end('x');
      FakeServer.json(res, 200, entry);
    };
    const calls: [string, (o?: { user?: 'user' | 'root' }) => Promise<unknown>][] = [
      ['read', (o) => sb.files.read('/etc/x', o)],
      ['read bytes', (o) => sb.files.read('/etc/x', { format: 'bytes', ...o })],
      ['write', (o) => sb.files.write('/etc/x', 'x', o)],
      ['remove', (o) => sb.files.remove('/etc/x', o)],
      ['list', (o) => sb.files.list('/etc', o)],
      ['stat', (o) => sb.files.stat('/etc/x', o)],
      ['getInfo', (o) => sb.files.getInfo('/etc/x', o)],
      ['exists', (o) => sb.files.exists('/etc/x', o)],
      ['makeDir', (o) => sb.files.makeDir('/etc/d', o)],
      ['rename', (o) => sb.files.rename('/etc/x', '/etc/y', o)],
    ];
    for (const [name, call] of calls) {
      fake.requests.length = 0;
      await call();
      await call({ user: 'root' });
      await call({ user: 'user' });
      assert.deepEqual(
        fake.requests.map((r) => r.query.get('user')),
        [null, 'root', 'user'],
        name,
      );
      assert.ok(fake.requests.every((r) => r.query.get('path')?.startsWith('/etc')), name);
      await assert.rejects(call({ user: 'mallory' as 'root' }), InvalidArgumentError, name);
      assert.equal(fake.requests.length, 3, `${name}: a bad user is refused before any request`);
    }
    assert.equal(fake.requests[2]!.query.get('to'), '/etc/y');
  });

  test('list, stat, makeDir, remove, exists', async () => {
    const sb = await connected();
    fake.handler = (req: Seen, res) => {
      if (req.method === 'DELETE') return void res.writeHead(204).end();
      if (req.path.endsWith('/list')) return FakeServer.json(res, 200, { entries: [entry] });
      if (req.query.get('path') === 'missing') return FakeServer.json(res, 404, { code: 'not_found', message: 'no file' });
      if (req.query.get('path') === 'ended') return FakeServer.json(res, 410, { code: 'gone', message: 'sandbox ended' });
      FakeServer.json(res, 200, { ...entry, type: req.path.endsWith('/mkdir') ? 'dir' : 'file' });
    };
    assert.equal((await sb.files.list('.'))[0]?.name, 'f');
    assert.equal((await sb.files.stat('f')).type, 'file');
    assert.equal((await sb.files.makeDir('d')).type, 'dir');
    await sb.files.remove('d');
    assert.equal(await sb.files.exists('f'), true);
    assert.equal(await sb.files.exists('missing'), false);
    await assert.rejects(sb.files.exists('ended'), SandboxGoneError);
    assert.deepEqual(
      fake.requests.map((r) => `${r.method} ${r.path}`),
      [
        'GET /v1/sandboxes/sbx_1/files/list',
        'GET /v1/sandboxes/sbx_1/files/stat',
        'POST /v1/sandboxes/sbx_1/files/mkdir',
        'DELETE /v1/sandboxes/sbx_1/files',
        'GET /v1/sandboxes/sbx_1/files/stat',
        'GET /v1/sandboxes/sbx_1/files/stat',
        'GET /v1/sandboxes/sbx_1/files/stat',
      ],
    );
  });
});

describe('secrets', () => {
  test('set sends the hosts a secret may be sent to, and allowHttp only when asked', async () => {
    fake.handler = (_req, res) =>
      FakeServer.json(res, 200, {
        name: 'K', hosts: ['api.openai.com', '*.example.com'], allowHttp: true,
        createdAt: '2025-01-01T00:00:00Z', updatedAt: '2025-01-01T00:00:00Z',
      });
    const info = await Secret.set('K', 'v', { ...opts, hosts: ['api.openai.com', '*.example.com'], allowHttp: true });
    assert.deepEqual(info.hosts, ['api.openai.com', '*.example.com']);
    assert.equal(info.allowHttp, true);
    await Secret.set('K', 'v', { ...opts, hosts: ['api.openai.com'] });
    const bodies = fake.requests.map((r) => `${r.method} ${r.path} ${r.body.toString()}`);
    assert.deepEqual(bodies, [
      'PUT /v1/secrets/K {"value":"v","hosts":["api.openai.com","*.example.com"],"allowHttp":true}',
      'PUT /v1/secrets/K {"value":"v","hosts":["api.openai.com"]}',
    ]);
    for (const hosts of [[], 'api.openai.com', [3], undefined]) {
      await assert.rejects(
        Secret.set('K', 'v', { ...opts, hosts: hosts as unknown as string[] }),
        (e: unknown) => e instanceof InvalidArgumentError && /hosts/.test(e.message),
      );
    }
    assert.equal(fake.requests.length, 2, 'a refused set sends nothing');
  });

  test('a secret set before hosts reads back with none', async () => {
    fake.handler = (_req, res) =>
      FakeServer.json(res, 200, { secrets: [{ name: 'OLD', createdAt: '2025-01-01T00:00:00Z', updatedAt: '2025-01-01T00:00:00Z' }] });
    const [old] = await Secret.list(opts);
    assert.deepEqual(old?.hosts, []);
    assert.equal(old?.allowHttp, false);
  });
});

describe('desktop', () => {
  test('each call is its request: screenshot bytes, a region, mouse and keyboard bodies, windows', async () => {
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 255]);
    fake.handler = (req, res) => {
      const p = req.path.replace('/v1/sandboxes/sbx_1/desktop', '');
      if (p === '/screenshot') return void res.writeHead(200, { 'content-type': 'image/png' }).end(png);
      if (p === '/screen') return FakeServer.json(res, 200, { width: 1024, height: 768 });
      if (p === '/cursor' || p === '/mouse') return FakeServer.json(res, 200, { x: 7, y: 9 });
      if (p === '/windows') {
        return FakeServer.json(res, 200, {
          windows: [{ id: '4194307', title: 'Page', class: 'chromium', x: 0, y: 0, width: 800, height: 600, active: true }],
        });
      }
      res.writeHead(204).end();
    };
    const sb = await connected();
    const shot = await sb.desktop.screenshot();
    assert.ok(shot instanceof Uint8Array);
    assert.deepEqual(Buffer.from(shot), png);
    await sb.desktop.screenshot({ x: 1, y: 2, width: 30, height: 40 });
    assert.deepEqual(await sb.desktop.screen(), { width: 1024, height: 768 });
    assert.deepEqual(await sb.desktop.cursor(), { x: 7, y: 9 });
    assert.deepEqual(await sb.desktop.move(10, 20), { x: 7, y: 9 });
    await sb.desktop.click(5, 6);
    await sb.desktop.click();
    await sb.desktop.doubleClick(1, 2);
    await sb.desktop.rightClick(3, 4);
    await sb.desktop.mouseDown();
    await sb.desktop.mouseUp('middle');
    await sb.desktop.drag({ x: 1, y: 2 }, { x: 3, y: 4 });
    await sb.desktop.scroll('up', 3, { x: 50, y: 60 });
    await sb.desktop.type('hé "$(x)"', { delayMs: 0 });
    await sb.desktop.press('ctrl+l', 'enter');
    await sb.desktop.open('/home/user/page.html');
    await sb.desktop.launch('xfce4-terminal');
    const [w] = await sb.desktop.windows();
    assert.deepEqual(w, { id: '4194307', title: 'Page', class: 'chromium', x: 0, y: 0, width: 800, height: 600, active: true });
    const seen = fake.requests.map((r) => `${r.method} ${r.path.replace('/v1/sandboxes/sbx_1', '')}${r.query.size ? '?' + r.query.toString() : ''} ${r.body.toString()}`.trim());
    assert.deepEqual(seen, [
      'GET /desktop/screenshot',
      'GET /desktop/screenshot?x=1&y=2&width=30&height=40',
      'GET /desktop/screen',
      'GET /desktop/cursor',
      'POST /desktop/mouse {"action":"move","x":10,"y":20}',
      'POST /desktop/mouse {"action":"click","x":5,"y":6}',
      'POST /desktop/mouse {"action":"click"}',
      'POST /desktop/mouse {"action":"click","x":1,"y":2,"count":2}',
      'POST /desktop/mouse {"action":"click","x":3,"y":4,"button":"right"}',
      'POST /desktop/mouse {"action":"down","button":"left"}',
      'POST /desktop/mouse {"action":"up","button":"middle"}',
      'POST /desktop/mouse {"action":"drag","x":1,"y":2,"toX":3,"toY":4,"button":"left"}',
      'POST /desktop/mouse {"action":"scroll","direction":"up","count":3,"x":50,"y":60}',
      'POST /desktop/keyboard {"action":"type","text":"hé \\"$(x)\\"","delayMs":0}',
      'POST /desktop/keyboard {"action":"press","keys":["ctrl+l","enter"]}',
      'POST /desktop/open {"target":"/home/user/page.html"}',
      'POST /desktop/launch {"app":"xfce4-terminal"}',
      'GET /desktop/windows',
    ]);
    await assert.rejects(sb.desktop.screenshot({ x: 1.5, y: 0, width: 1, height: 1 }), InvalidArgumentError);
  });

  test('the stream: a viewer per start, view-only unless control; revoke and stop', async () => {
    fake.handler = (req, res) => {
      if (req.method !== 'POST') return void res.writeHead(204).end();
      const control = JSON.parse(req.body.toString() || '{}').control === true;
      FakeServer.json(res, 201, {
        viewerId: 'vAbc', token: 'lzv_t', control, expiresAt: '2026-12-05T03:00:00Z',
        websocketUrl: 'ws://h/v1/sandboxes/sbx_1/desktop/stream/websocket?token=lzv_t', url: 'http://h/#/sandboxes/sbx_1/desktop?token=lzv_t',
      });
    };
    const sb = await connected();
    const v = await sb.desktop.stream.start();
    assert.equal(v.control, false);
    assert.equal(v.token, 'lzv_t');
    assert.deepEqual(v.expiresAt, new Date('2026-12-05T03:00:00Z'));
    assert.match(v.websocketUrl, /^ws:.*\/desktop\/stream\/websocket\?token=lzv_t$/);
    assert.equal((await sb.desktop.stream.start({ control: true, ttlSeconds: 60 })).control, true);
    await sb.desktop.stream.revoke('v/Abc');
    await sb.desktop.stream.stop();
    assert.deepEqual(fake.requests.map((r) => `${r.method} ${r.path} ${r.body.toString()}`.trim()), [
      'POST /v1/sandboxes/sbx_1/desktop/stream {}',
      'POST /v1/sandboxes/sbx_1/desktop/stream {"control":true,"ttlSeconds":60}',
      'DELETE /v1/sandboxes/sbx_1/desktop/stream/viewers/v%2FAbc',
      'DELETE /v1/sandboxes/sbx_1/desktop/stream',
    ]);
  });

  test("a sandbox without a desktop is the API's ConflictError", async () => {
    fake.handler = (_req, res) =>
      FakeServer.json(res, 409, { code: 'conflict', message: 'sandbox sbx_1 has no desktop (no X server answers): create it from a desktop template' });
    const sb = await connected();
    await assert.rejects(sb.desktop.screenshot(), (e: unknown) => e instanceof ConflictError && /has no desktop/.test(e.message));
  });
});

describe('errors', () => {
  test('each status maps to its class', async () => {
    const cases: [number, string, new (...a: never[]) => LizardError][] = [
      [400, 'invalid_argument', InvalidArgumentError],
      [401, 'unauthenticated', AuthenticationError],
      [403, 'forbidden', PermissionDeniedError],
      [404, 'not_found', NotFoundError],
      [409, 'conflict', ConflictError],
      [410, 'gone', SandboxGoneError],
      [413, 'too_large', InvalidArgumentError],
      [429, 'rate_limited', RateLimitError],
      [500, 'internal', SandboxError],
      [502, 'bad_gateway', SandboxError],
      [503, 'unavailable', SandboxError],
      [507, 'disk_full', DiskFullError],
      [418, 'teapot', LizardError],
    ];
    for (const [status, code, cls] of cases) {
      fake.handler = (_req, res) => FakeServer.json(res, status, { code, message: `msg ${status}` });
      await assert.rejects(CodeSandbox.list(opts), (err: unknown) => {
        assert.ok(err instanceof cls, `${status}: got ${(err as Error).name}, want ${cls.name}`);
        assert.ok(err instanceof LizardError);
        const e = err as LizardError;
        assert.equal(e.name, cls.name, `${status}: name`);
        assert.equal(e.status, status);
        assert.equal(e.code, code);
        assert.equal(e.message, `msg ${status}`);
        return true;
      });
    }
    assert.ok(new SandboxGoneError('x') instanceof NotFoundError, 'SandboxGoneError must extend NotFoundError');
    assert.ok(new DiskFullError('x') instanceof SandboxError, 'DiskFullError must extend SandboxError');
  });

  test('a body that is not JSON keeps the status class', () => {
    const err = errorFromResponse(502, '<html>bad gateway</html>');
    assert.ok(err instanceof SandboxError);
    assert.equal(err.message, 'HTTP 502: <html>bad gateway</html>');
    assert.equal(err.code, undefined);
  });

  test('server down throws LizardConnectionError', async () => {
    const down = await new FakeServer().start();
    const url = down.url;
    await down.close();
    await assert.rejects(CodeSandbox.create({ apiUrl: url, apiKey: KEY }), (err: unknown) => {
      assert.ok(err instanceof LizardConnectionError, `got ${err}`);
      assert.match((err as Error).message, /cannot reach Lizard at/);
      assert.equal((err as LizardError).status, undefined);
      return true;
    });
  });

  test('a slow server throws RequestTimeoutError', async () => {
    fake.handler = async (_req, res) => {
      await sleep(1000);
      FakeServer.json(res, 200, { sandboxes: [] });
    };
    await assert.rejects(CodeSandbox.list({ ...opts, requestTimeoutMs: 100 }), RequestTimeoutError);
  });
});

describe('ndjsonLines', () => {
  test('splits lines across chunks, skips blanks, keeps a last unterminated line', async () => {
    async function* chunks() {
      for (const s of ['{"a":', '1}\n\n{"b"', ':2}\r\n', '{"c":3}']) yield new TextEncoder().encode(s);
    }
    const got: string[] = [];
    for await (const l of ndjsonLines(chunks())) got.push(l);
    assert.deepEqual(got, ['{"a":1}', '{"b":2}', '{"c":3}']);
  });
});

test('portUrl: path-based, or host-based under a ports domain', () => {
  assert.equal(portUrl('http://127.0.0.1:8080', 'abc', 8000), 'http://127.0.0.1:8080/v1/sandboxes/abc/ports/8000/');
  assert.equal(portUrl('http://127.0.0.1:8080', 'abc', 80, 'sb.example.com'), 'http://80-abc.sb.example.com:8080/');
  assert.equal(portUrl('https://lizard.example.com', 'abc', 3000, 'sb.example.com'), 'https://3000-abc.sb.example.com/');
  for (const bad of [0, 65536, 1.5]) assert.throws(() => portUrl('http://x', 'abc', bad), InvalidArgumentError);
});

test('templateBody encodes file contents in base64', async () => {
  const { templateBody } = await import('../../src/template.js');
  assert.deepEqual(
    templateBody('t', { pip: ['six'], files: [{ path: '/a', content: 'hé' }, { path: '/b', content: new Uint8Array([0, 1]) }] }),
    { name: 't', recipe: { pip: ['six'], files: [{ path: '/a', content: 'aMOp' }, { path: '/b', content: 'AAE=' }] } },
  );
  assert.deepEqual(templateBody('t', {}), { name: 't', recipe: {} });
  assert.deepEqual(
    templateBody('t', { start: 's', ready: 'r', steps: [{ user: 'user' }, { copy: [{ path: '/c', content: 'x' }] }, { run: { cmd: 'true' } }] }),
    { name: 't', recipe: { start: 's', ready: 'r', steps: [{ user: 'user' }, { copy: [{ path: '/c', content: 'eA==' }] }, { run: { cmd: 'true' } }] } },
  );
});

test('templateBody sends an image and its registry credentials', async () => {
  const { templateBody } = await import('../../src/template.js');
  assert.deepEqual(templateBody('t', { from: 'registry.example.com/app:1' }, { username: 'me', password: 'pw' }), {
    name: 't',
    recipe: { from: 'registry.example.com/app:1' },
    registry: { username: 'me', password: 'pw' },
  });
  assert.deepEqual(templateBody('t', { from: 'python:3.12' }), { name: 't', recipe: { from: 'python:3.12' } });
  // The password named by a secret of the project (docs/secrets.md).
  assert.deepEqual(templateBody('t', { from: 'x' }, { username: 'me', passwordSecret: 'REG' }).registry, { username: 'me', passwordSecret: 'REG' });
});

test('templateBody sends skipCache only when asked', async () => {
  const { templateBody } = await import('../../src/template.js');
  assert.deepEqual(templateBody('t', { base: 'my-base' }, undefined, true), { name: 't', recipe: { base: 'my-base' }, skipCache: true });
  assert.equal('skipCache' in templateBody('t', {}), false);
});
