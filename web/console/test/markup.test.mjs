// The console against markup in everything it shows (issue 20): every
// field a project or its sandboxes' code can fill — sandbox metadata keys
// and values, file and directory names, a context's working directory,
// stdout and stderr of Python, JavaScript and bash cells, a result's
// text, JSON and LaTeX, an error's name, message and traceback, the
// command runner's output, and API error messages that echo what was sent
// (a template name, a sandbox ID in the URL) — is planted with
// <img onerror>, <script> and <svg onload> payloads, through the API and
// the console. The console must show each as text: no element of the
// payload in its document, no request for the payload's image, no script
// run (a window flag stays unset), no dialog. console.test.mjs covers
// HTML, SVG and Markdown output (sandboxed frames); template and volume
// names are restricted to [a-z0-9-] and snapshots have no names or
// metadata, so they carry no markup.
import { test } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { chromium } from "playwright-core";
import { artifacts, CHROMIUM, createSandbox, execute, missing, startLizard, strict } from "./lizard.mjs";

// P is the payload: an image whose load fails into a handler, a script, an
// SVG with onload. Each would set window.pwned and open a dialog.
const P = `<img src="x-pwned.png" onerror="window.pwned='img';alert('img')"><script>window.pwned='script';alert('script')</script><svg onload="window.pwned='svg';alert('svg')"></svg>`;
// A file name may not hold "/": the same without the closing tags.
const PF = `<img src="x-pwned.png" onerror="window.pwned='file';alert('file')"><svg onload="alert('svg')">`;
// A metadata key may not hold "=".
const PK = `<script>alert('key')</script><b onmouseover>key</b>`;

const why = missing();

test("the console shows markup from the API and from sandboxes as text", { skip: !strict && why, timeout: 10 * 60_000 }, async (t) => {
  if (why) assert.fail(why);
  const lz = await startLizard({ name: "serve-markup" });
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
  t.after(async () => {
    await browser.close().catch(() => {});
    await lz.stop();
  });
  const sb = await createSandbox(lz.api, { metadata: { [PK]: P, plain: P } });
  const id = sb.sandboxId;
  // Files, a directory and a context whose working directory are markup,
  // and a file holding the payload for the bash cell and the command.
  await execute(lz.api, id, `
import json, os
p, pf = json.loads(${JSON.stringify(JSON.stringify([P, PF]))})
open('/home/user/' + pf, 'w').write('x')
os.makedirs('/home/user/' + pf + 'dir', exist_ok=True)
open('/home/user/p.txt', 'w').write(p)
print('ok')`);
  const ctx = await lz.api("POST", `/v1/sandboxes/${id}/contexts`, { language: "python", cwd: `/home/user/${PF}dir` });
  assert.equal(ctx.status, 201, `context with a markup cwd: HTTP ${ctx.status} ${await ctx.text()}`);

  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  page.setDefaultTimeout(60_000);
  const dialogs = [];
  page.on("dialog", (d) => (dialogs.push(d.message()), void d.dismiss()));
  const fetchedPayload = [];
  page.on("request", (r) => new URL(r.url()).pathname.endsWith("x-pwned.png") && fetchedPayload.push(r.url()));
  // injected says what of the payload became markup in the console's own
  // document (frames are the sandboxed output frames, not looked into).
  const injected = () =>
    page.evaluate(() => ({
      elements: document.querySelectorAll('img[src*="x-pwned"], script:not([src]), svg[onload], [onerror], [onload], [onmouseover]').length,
      pwned: window.pwned ?? null,
    }));
  const clean = async (where) => {
    await page.waitForTimeout(300); // a failed image load takes a moment to fire onerror
    assert.deepEqual(await injected(), { elements: 0, pwned: null }, `markup became live in the console: ${where}`);
    assert.deepEqual(dialogs, [], `a dialog opened: ${where}`);
    assert.deepEqual(fetchedPayload, [], `the payload's image was fetched: ${where}`);
  };
  // shown asserts the payload arrived as text (the test would prove
  // nothing if it never reached the page).
  const shown = async (loc, text, where) => {
    for (const deadline = Date.now() + 60_000; ; await page.waitForTimeout(200)) {
      if ((await loc.allTextContents()).join("\n").includes(text)) return;
      assert.ok(Date.now() < deadline, `${where}: the payload is not shown as text`);
    }
  };

  await page.goto(lz.url + "/");
  await page.getByLabel("API key").fill(lz.apiKey);
  await page.keyboard.press("Enter");

  await t.test("sandbox list and detail: metadata keys and values", async () => {
    await shown(page.locator(`#sandbox-table tr[data-id="${id}"] .meta`), P, "the list's metadata");
    await shown(page.locator(`#sandbox-table tr[data-id="${id}"] .meta`), PK, "the list's metadata key");
    await clean("the sandbox list");
    await page.goto(`${lz.url}/#/sandboxes/${id}`);
    await shown(page.locator("dl.facts dd"), `${PK}=${P}`, "the detail's metadata");
    await clean("the sandbox page");
  });

  await t.test("files panel and contexts: names and working directories", async () => {
    await shown(page.locator(`#files-table tr[data-name="${PF.replace(/"/g, '\\"')}"]`), PF, "a file name");
    await shown(page.locator(`#files-table tr[data-name="${(PF + "dir").replace(/"/g, '\\"')}"]`), PF + "dir", "a directory name");
    await page.locator(`#files-table tr[data-name="${(PF + "dir").replace(/"/g, '\\"')}"]`).getByRole("button", { name: `${PF}dir/` }).click();
    await page.getByText("Empty directory.").waitFor();
    await clean("the files panel");
    const options = page.locator("section.cell").first().locator('select[name="context"] option');
    await shown(options, `${PF}dir`, "a context's working directory");
    await clean("the context menu");
  });

  const cell = (n) => page.locator("section.cell").nth(n);
  async function runCell(n, code, language = "python") {
    while ((await page.locator("section.cell").count()) <= n) await page.getByRole("button", { name: "Add cell" }).click();
    const c = cell(n);
    await c.getByLabel(/^Language of cell/).selectOption(language);
    await c.getByLabel(/^Code of cell/).fill(code);
    await c.getByRole("button", { name: "Run" }).click();
    await page.waitForFunction((el) => ["done", "error", "failed"].includes(el.dataset.state), await c.elementHandle(), { timeout: 120_000 });
    return c;
  }

  await t.test("cells: stdout, stderr, results, errors in Python, JavaScript and bash", async () => {
    let c = await runCell(0, `
import sys
from IPython.display import JSON, Latex, display
p = open('/home/user/p.txt').read()
print(p); print(p, file=sys.stderr)
display(JSON({p: [p]})); display(Latex(p))
class R:
    def __repr__(self): return p
R()`);
    await shown(c.locator("pre.stdout"), P, "Python stdout");
    await shown(c.locator("pre.stderr"), P, "Python stderr");
    await shown(c.locator('[data-mime="text/plain"]'), P, "a text/plain result");
    await shown(c.locator('[data-mime="application/json"]'), JSON.stringify(P), "a JSON result");
    await shown(c.locator('[data-mime="text/latex"]'), P, "a LaTeX result");
    c = await runCell(1, "p = open('/home/user/p.txt').read()\nraise type(p, (Exception,), {})(p)");
    await shown(c.locator(".exec-error strong"), `${P}: ${P}`, "an error's name and message");
    await shown(c.locator(".exec-error pre"), P, "a traceback");
    c = await runCell(2, "console.log(require('fs').readFileSync('/home/user/p.txt', 'utf8')); throw new Error(require('fs').readFileSync('/home/user/p.txt', 'utf8'))", "javascript");
    await shown(c.locator(".output"), P, "JavaScript output and error");
    c = await runCell(3, "cat /home/user/p.txt; cat /home/user/p.txt >&2; exit 1", "bash");
    await shown(c.locator(".output"), P, "bash output");
    await clean("cell output");
  });

  await t.test("command runner output", async () => {
    await page.getByLabel("Command (bash -c)").fill("cat /home/user/p.txt; cat /home/user/p.txt >&2");
    await page.getByRole("button", { name: "Run command" }).click();
    await page.getByText("Exit code 0").waitFor();
    await shown(page.locator(".cmd-out"), P, "the command's output");
    await clean("the command runner");
  });

  await t.test("API errors that echo what was sent: a template name, a sandbox ID in the URL", async () => {
    await page.goto(`${lz.url}/#/sandboxes`);
    await page.getByText("New sandbox").click();
    await page.getByLabel("Template").fill(P);
    await page.getByRole("button", { name: "Create sandbox" }).click();
    await shown(page.locator("#alert:not([hidden])"), "x-pwned", "the create's error");
    await clean("the create's error");
    await page.goto(`${lz.url}/#/sandboxes/${encodeURIComponent(PF)}`);
    await page.locator("#alert:not([hidden])").waitFor();
    await clean("a sandbox page for an ID that is markup");
    await page.screenshot({ path: path.join(artifacts, "markup.png"), fullPage: true });
  });
});
