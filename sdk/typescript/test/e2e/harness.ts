// The end-to-end harness: a real `lizard serve` from <repo>/bin on a free
// loopback port with a fresh data directory and a project proj_123.
//
// It needs root and `make build` (LIZARD_TEST_BIN_DIR points elsewhere than <repo>/bin). Without them the tests skip, except under
// LIZARD_TEST_STRICT=1 (set by `make test`), where they fail.

import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { CodeSandbox } from '../../src/index.js';

const run = promisify(execFile);

/** repoRoot is the directory above this file that holds go.mod. */
export function repoRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, 'go.mod'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error('no go.mod above ' + fileURLToPath(import.meta.url));
    dir = up;
  }
  return dir;
}

export const strict = process.env.LIZARD_TEST_STRICT === '1';

/** binDir holds lizard and lizard-agent: <repo>/bin, or LIZARD_TEST_BIN_DIR. */
export function binDir(): string {
  return process.env.LIZARD_TEST_BIN_DIR || path.join(repoRoot(), 'bin');
}

/** missing says why the e2e tests cannot run here, or undefined when they can. */
export function missing(): string | undefined {
  if (process.getuid?.() !== 0) return 'end-to-end tests need root';
  for (const bin of ['lizard', 'lizard-agent']) {
    const p = path.join(binDir(), bin);
    try {
      fs.accessSync(p, fs.constants.X_OK);
    } catch {
      return `${p} is missing: run make build`;
    }
  }
  return undefined;
}

export interface Lizard {
  url: string;
  apiKey: string;
  projectId: string;
  dataDir: string;
  /** logs returns what the server printed so far. */
  logs(): string;
  /** stop kills the project's sandboxes through the API, then stops the server and removes its data. */
  stop(): Promise<void>;
}

/** freePort returns a loopback port nobody listens on right now. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const l = net.createServer();
    l.on('error', reject);
    l.listen(0, '127.0.0.1', () => {
      const port = (l.address() as net.AddressInfo).port;
      l.close(() => resolve(port));
    });
  });
}

/** startLizard starts the server and returns once /v1/health answers. */
export async function startLizard(projectId = 'proj_123'): Promise<Lizard> {
  const bin = path.join(binDir(), 'lizard');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lizard-ts-e2e-'));
  const dataDir = path.join(dir, 'data');
  fs.mkdirSync(dataDir);
  const logPath = path.join(dir, 'serve.log');

  const { stdout } = await run(bin, ['admin', 'create-project', '--data-dir', dataDir, '--id', projectId, '--json']);
  const created = JSON.parse(stdout) as { projectId: string; apiKey: string };
  if (created.projectId !== projectId || !created.apiKey) {
    throw new Error(`admin create-project printed ${stdout}, want project ${projectId} and a key`);
  }

  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const args = ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', dataDir];
  if (process.env.LIZARD_CACHE_DIR) args.push('--cache-dir', process.env.LIZARD_CACHE_DIR);
  // A pool of our own, so that servers of other test suites running at the
  // same time never hand out the same sandbox addresses; and no internet
  // egress: tests never send a packet off this machine.
  args.push('--address-pool', process.env.LIZARD_TEST_ADDRESS_POOL ?? '169.254.244.0/22', '--egress=none');
  const log = fs.openSync(logPath, 'a');
  const env = { ...process.env };
  // The server finds runsc in bin/ (make build); a machine with only the shared build has it elsewhere.
  if (!env.LIZARD_RUNSC && !fs.existsSync(path.join(repoRoot(), 'bin', 'runsc')) && fs.existsSync('/tmp/runsc-bin/runsc')) {
    env.LIZARD_RUNSC = '/tmp/runsc-bin/runsc';
  }
  const child: ChildProcess = spawn(bin, args, { stdio: ['ignore', log, log], env });
  fs.closeSync(log);
  let exited: string | undefined;
  const exitedP = new Promise<void>((resolve) =>
    child.on('exit', (code, signal) => {
      exited = `exit code ${code}, signal ${signal}`;
      resolve();
    }),
  );
  const logs = () => (fs.existsSync(logPath) ? fs.readFileSync(logPath, 'utf8') : '');

  const stop = async () => {
    try {
      if (exited === undefined) {
        // Sandboxes outlive a server stop (a restart must find them): kill them first.
        const sandboxes = await CodeSandbox.list({ apiUrl: url, apiKey: created.apiKey }).catch(() => []);
        for (const s of sandboxes) {
          if (['killed', 'expired', 'failed'].includes(s.state)) continue;
          await CodeSandbox.connect(s.sandboxId, { apiUrl: url, apiKey: created.apiKey })
            .then((sb) => sb.kill())
            .catch((err) => console.error(`killing sandbox ${s.sandboxId}: ${err}`));
        }
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 30_000);
        await exitedP;
        clearTimeout(t);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  };

  const deadline = Date.now() + 10 * 60_000; // the first start may build the template
  for (;;) {
    if (exited !== undefined) {
      const out = logs();
      fs.rmSync(dir, { recursive: true, force: true });
      throw new Error(`lizard serve exited early (${exited}):\n${out}`);
    }
    try {
      const res = await fetch(`${url}/v1/health`);
      if (res.ok) break;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      const out = logs();
      await stop();
      throw new Error(`lizard serve did not become healthy:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, apiKey: created.apiKey, projectId, dataDir, logs, stop };
}

/**
 * pointE2B sets the environment E2B's SDKs read, and only that, to reach
 * lizard's E2B surface (docs/e2b.md): the three variables a user sets, with
 * any other E2B setting of the caller's environment removed.
 */
export function pointE2B(lizard: Lizard): void {
  for (const v of ['E2B_DOMAIN', 'E2B_DEBUG', 'E2B_ACCESS_TOKEN']) delete process.env[v];
  process.env.E2B_API_URL = `${lizard.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${lizard.url}/e2b/sandbox`;
  process.env.E2B_API_KEY = lizard.apiKey;
}
