// sandbox.desktop against a real `lizard serve` and a sandbox of the
// desktop template (templates/desktop/recipe.yaml, built here as
// docs/desktop.md says, or found in LIZARD_CACHE_DIR's cache): a screenshot
// is a PNG of the screen's size, a right-click changes the pixels under it
// (Xfce's desktop menu) and Escape closes it, the pointer goes where a
// click is, and the stream's viewer token opens noVNC's WebSocket (the VNC
// server's RFB greeting) until it is revoked.
//
// The project is proj_123, as in the Python and console suites: a build's
// key is the project's ID, the recipe and the base's build, so under
// `make test` this suite finds the Python suite's build in the template
// cache (LIZARD_E2E_KEEP_TEMPLATES=1 keeps it there for the console suite
// after this one); alone, it deletes the template after itself.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';

import WebSocket from 'ws';

import { CodeSandbox } from '../../src/index.js';
import { binDir, missing, repoRoot, startLizard, strict, type Lizard } from './harness.js';

const run = promisify(execFile);
const why = missing();

if (why !== undefined && strict) {
  test('end-to-end prerequisites (desktop)', () => {
    assert.fail(`${why} (LIZARD_TEST_STRICT=1 turns this skip into a failure)`);
  });
}

/** pngSize reads a PNG's width and height from its IHDR chunk. */
function pngSize(png: Uint8Array): { width: number; height: number } {
  const b = Buffer.from(png);
  assert.equal(b.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'a PNG signature');
  assert.equal(b.subarray(12, 16).toString(), 'IHDR');
  return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
}

/** greeting opens url and returns the first message (or the HTTP status of a refusal). */
function greeting(url: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    const t = setTimeout(() => {
      ws.terminate();
      reject(new Error(`no answer on ${url} in 15 s`));
    }, 15_000);
    ws.on('message', (data: Buffer) => {
      clearTimeout(t);
      ws.close();
      resolve({ status: 101, text: data.toString() });
    });
    ws.on('unexpected-response', (_req, res) => {
      clearTimeout(t);
      resolve({ status: res.statusCode ?? 0, text: '' });
    });
    ws.on('error', (err) => {
      clearTimeout(t);
      reject(err);
    });
  });
}

describe('sandbox.desktop against lizard serve', { skip: why, timeout: 40 * 60_000 }, () => {
  let lizard: Lizard;
  let sb: CodeSandbox;

  const lizardCLI = (args: string[], timeout: number) =>
    run(path.join(binDir(), 'lizard'), args, {
      env: { ...process.env, LIZARD_API_URL: lizard.url, LIZARD_API_KEY: lizard.apiKey },
      timeout,
      maxBuffer: 64 << 20,
    });

  before(async () => {
    lizard = await startLizard('proj_123');
    const begin = Date.now();
    await lizardCLI(['template', 'build', '--quiet', '-f', path.join(repoRoot(), 'templates', 'desktop', 'recipe.yaml')], 30 * 60_000);
    console.log(`desktop template: ${((Date.now() - begin) / 1000).toFixed(1)} s`);
    sb = await CodeSandbox.create({ apiUrl: lizard.url, apiKey: lizard.apiKey, template: 'desktop', timeoutMs: 600_000 });
  });

  after(async () => {
    await sb?.kill().catch(() => {});
    if (lizard && process.env.LIZARD_E2E_KEEP_TEMPLATES !== '1') {
      // Its build leaves the template cache with it (minutes under load).
      await lizardCLI(['template', 'delete', 'desktop'], 10 * 60_000).catch((err) => console.error(`deleting the desktop template: ${err}`));
    }
    await lizard?.stop();
  });

  test('a screenshot, and a click that changes the screen', async () => {
    const screen = await sb.desktop.screen();
    assert.deepEqual(screen, { width: 1024, height: 768 });
    const shot = await sb.desktop.screenshot();
    assert.deepEqual(pngSize(shot), screen);
    const region = { x: 512, y: 384, width: 120, height: 120 };
    const part = await sb.desktop.screenshot(region);
    assert.deepEqual(pngSize(part), { width: 120, height: 120 });

    // Xfce's desktop menu opens at a right-click, right and below it.
    assert.deepEqual(await sb.desktop.rightClick(512, 384), { x: 512, y: 384 });
    let changed = false;
    for (let i = 0; i < 50 && !changed; i++) {
      changed = !Buffer.from(await sb.desktop.screenshot(region)).equals(Buffer.from(part));
      if (!changed) await new Promise((r) => setTimeout(r, 200));
    }
    assert.ok(changed, 'the right-click changed no pixel under it');
    await sb.desktop.press('Escape');
    assert.deepEqual(await sb.desktop.click(300, 200), { x: 300, y: 200 });
    assert.deepEqual(await sb.desktop.cursor(), { x: 300, y: 200 });
    // A move's answer may still be the old place (xdotool mousemove has no
    // --sync there): where the pointer goes is read back with cursor().
    await sb.desktop.move(10, 20);
    let at = await sb.desktop.cursor();
    for (let i = 0; i < 25 && (at.x !== 10 || at.y !== 20); i++) {
      await new Promise((r) => setTimeout(r, 200));
      at = await sb.desktop.cursor();
    }
    assert.deepEqual(at, { x: 10, y: 20 });
    for (const w of await sb.desktop.windows()) assert.equal(typeof w.title, 'string');
  });

  test("the stream: a viewer's token opens noVNC's WebSocket until it is revoked", async () => {
    const v = await sb.desktop.stream.start();
    assert.match(v.token, /^lzv_/);
    assert.equal(v.control, false);
    assert.ok(v.expiresAt.getTime() > Date.now());
    assert.equal(new URL(v.websocketUrl).host, new URL(lizard.url).host);
    const hello = await greeting(v.websocketUrl);
    assert.equal(hello.status, 101);
    assert.match(hello.text, /^RFB 003\.00\d\n$/);
    await sb.desktop.stream.revoke(v.viewerId);
    assert.equal((await greeting(v.websocketUrl)).status, 401);
    await sb.desktop.stream.stop();
  });
});
