// Browser tests of the web console: Playwright (playwright-core) drives
// Debian's chromium, headless, against a real `lizard serve` with real
// gVisor sandboxes. `make test-console` installs chromium if missing.
//
// Needs root, `make build` and the template. Without them the test fails
// under LIZARD_TEST_STRICT=1 (make test) and skips otherwise. Screenshots
// of the main pages go to LIZARD_TEST_ARTIFACTS (default e2e/artifacts/console).
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";
import { createRequire } from "node:module";
import { artifacts, CHROMIUM, missing, repo, startLizard, strict } from "./lizard.mjs";

const axeSource = fs.readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

const why = missing();

test("web console in a real browser against lizard serve", { skip: !strict && why, timeout: 15 * 60_000 }, async (t) => {
  if (why) assert.fail(why);
  fs.mkdirSync(artifacts, { recursive: true });
  const lz = await startLizard();
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
  t.after(async () => {
    await browser.close().catch(() => {});
    await lz.stop();
  });
  const context = await browser.newContext({ viewport: { width: 1366, height: 900 }, acceptDownloads: true });
  const page = await context.newPage();
  page.setDefaultTimeout(60_000);

  // Everything the page asks the network for, and every dialog it opens.
  const requests = [];
  page.on("request", (r) => requests.push({ url: r.url(), auth: r.headers()["authorization"], main: r.frame() === page.mainFrame() }));
  const failed = [];
  page.on("requestfailed", (r) => failed.push(`${r.method()} ${r.url()}: ${r.failure()?.errorText}`));
  const dialogs = [];
  page.on("dialog", (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  const shot = (name) => page.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: true });
  // a11y runs axe-core (WCAG 2 A and AA rules) on the page as it is and
  // fails on any serious or critical violation. The frames of untrusted
  // output are not the console's markup and are left out.
  const a11y = async (what) => {
    await page.evaluate(axeSource); // through devtools: the page's CSP rightly forbids it
    const violations = await page.evaluate(async () => {
      const r = await window.axe.run(document, { iframes: false, runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } });
      return r.violations
        .filter((v) => v.impact === "serious" || v.impact === "critical")
        .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")}`);
    });
    assert.deepEqual(violations, [], `accessibility violations on ${what}`);
  };

  // appear waits for loc, failing at once with the console's alert (the
  // API's message) if one shows up first.
  const appear = async (loc, timeout = 180_000) => {
    const alert = page.locator("#alert:not([hidden])");
    await loc.or(alert).first().waitFor({ timeout });
    if (await alert.isVisible()) assert.fail(`the console shows an error: ${await alert.textContent()}`);
  };
  let sandboxId;
  // Each step builds on the ones before: once one fails, the rest are
  // skipped rather than each waiting out its timeouts.
  let broken;
  const step = (name, fn) =>
    t.test(name, { skip: broken && `an earlier step failed: ${broken}` }, async () => {
      try {
        await fn();
      } catch (e) {
        broken = name;
        if (failed.length) console.error(`requests that failed below HTTP:\n${failed.join("\n")}`);
        await shot(`failed-${name.replace(/\W+/g, "-").slice(0, 40)}`).catch(() => {});
        throw e;
      }
    });

  await step("the console is served with a strict CSP; unknown API paths stay JSON", async () => {
    const r = await fetch(lz.url + "/");
    assert.equal(r.status, 200);
    const csp = r.headers.get("content-security-policy") ?? "";
    // Scripts only from the server, never inline; styles may be inline for
    // xterm.js (internal/console's CSP says why).
    assert.match(csp, /script-src 'self';/);
    assert.doesNotMatch(csp, /unsafe-eval/);
    assert.doesNotMatch(csp.split(";").find((d) => d.trim().startsWith("script-src")), /unsafe-inline/);
    assert.match(await r.text(), /<script type="module"[^>]*src="\/assets\//, "index.html is the built console, not the not-built page");
    const nf = await fetch(lz.url + "/v1/nope");
    assert.equal(nf.status, 404);
    assert.equal((await nf.json()).code, "not_found");
  });

  await step("sign in: a wrong key shows the API's message; the right one is kept in sessionStorage only", async () => {
    await page.goto(lz.url + "/");
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    // The footer names the server's version (GET /v1/health).
    const version = fs.readFileSync(path.join(repo, "internal/version/VERSION"), "utf8").trim();
    await page.locator("footer").getByText(`Lizard ${version}`, { exact: true }).waitFor();
    await shot("signin");
    await a11y("the sign-in page");
    // The pages' links are for a signed-in user: the nav's display rule must not override hidden.
    assert.equal(await page.locator(".top nav").isVisible(), false, "the nav shows on the sign-in page");
    await page.getByLabel("API key").fill("lz_wrong_key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByText(/HTTP 401 unauthenticated/).waitFor();
    await page.getByLabel("API key").fill(lz.apiKey);
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
    assert.equal(await page.locator(".top nav").isVisible(), true, "the nav is hidden once signed in");
    assert.equal(await page.evaluate(() => sessionStorage.getItem("lizard.apiKey")), lz.apiKey);
    assert.equal(await page.evaluate(() => localStorage.length), 0);
    assert.deepEqual(await context.cookies(), []);
  });

  await step("create a sandbox with options from the list page", async () => {
    await page.getByText("New sandbox").click();
    await page.getByLabel("Timeout (seconds)").fill("900");
    await page.getByLabel("Metadata", { exact: true }).first().fill("suite=console\nrun=1");
    await page.getByLabel("Environment variables").fill("GREETING=hello");
    await page.getByRole("button", { name: "Create sandbox" }).click();
    await appear(page.getByRole("heading", { name: /^Sandbox \S+$/ }));
    sandboxId = (await page.getByRole("heading", { name: /^Sandbox \S+$/ }).textContent()).replace("Sandbox ", "");
    await page.locator("#sb-state").getByText("running").waitFor({ timeout: 120_000 });
    await page.getByText("suite=console").waitFor();
    // Its resources: the server's defaults (1024 MiB, 1 CPU, 2048 MiB disk).
    await page.getByText(/1024 MiB, 1 CPU, 2048 MiB disk/).waitFor();
  });

  const cell = (n) => page.locator("section.cell").nth(n);
  // waitRun waits for a cell's run to end (its data-state leaves "running").
  const waitRun = async (c) =>
    page.waitForFunction((el) => ["done", "error", "failed"].includes(el.dataset.state), await c.elementHandle(), { timeout: 120_000 });
  async function runCell(n, code, language = "python") {
    while ((await page.locator("section.cell").count()) <= n) await page.getByRole("button", { name: "Add cell" }).click();
    const c = cell(n);
    await c.getByLabel(/^Language of cell/).selectOption(language);
    await c.getByLabel(/^Code of cell/).fill(code);
    await c.getByRole("button", { name: "Run" }).click();
    await waitRun(c);
    return c;
  }

  await step("playground: the seed's pandas example gives np.int64(6), variables persist", async () => {
    await runCell(0, 'import pandas as pd; df = pd.DataFrame({"x":[1,2,3]})');
    const c = await runCell(1, "df.x.sum()");
    await c.locator(".output").getByText("np.int64(6)").waitFor();
    assert.match(await c.locator(".count").textContent(), /^\[\d+\]$/, "the execution count is shown");
  });

  await step("playground: keyboard only — Ctrl+Enter runs a cell; stdout streams", async () => {
    await page.getByRole("button", { name: "Add cell" }).click();
    const c = cell(2);
    await c.getByLabel(/^Code of cell/).focus();
    await page.keyboard.type('import os\nprint("hello", os.environ["GREETING"])');
    await page.keyboard.press("Control+Enter");
    await waitRun(c);
    await c.locator("pre.stdout").getByText("hello hello").waitFor();
  });

  await step("playground: matplotlib shows the image", async () => {
    const c = await runCell(3, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()");
    const img = c.locator('img[alt*="PNG image"]');
    await img.waitFor();
    const w = await img.evaluate((el) => el.naturalWidth);
    assert.ok(w > 100, `the plot image is ${w}px wide, want a real image`);
  });

  await step("playground: 1/0 shows ZeroDivisionError with its traceback", async () => {
    const c = await runCell(4, "1/0");
    const err = c.locator('.exec-error[data-error-name="ZeroDivisionError"]');
    await err.waitFor();
    assert.match(await err.textContent(), /ZeroDivisionError: division by zero/);
    assert.match(await err.locator("pre").textContent(), /1\/0|ZeroDivisionError/);
  });

  await step("playground: a DataFrame's HTML table is shown in a sandboxed iframe", async () => {
    const c = await runCell(5, 'pd.DataFrame({"city": ["Oslo", "Lima"], "temp": [3, 19]})');
    const frame = c.locator("iframe.result-frame");
    await frame.waitFor();
    assert.equal(await frame.getAttribute("sandbox"), "", "the iframe's sandbox attribute must be empty (no scripts, no same origin)");
    await c.frameLocator("iframe.result-frame").locator("td", { hasText: "Lima" }).waitFor();
    // A view of the results so far for docs/console.png. Not full-page:
    // headless chromium does not paint cross-origin frames off screen.
    await page.setViewportSize({ width: 1366, height: 2100 });
    await cell(1).evaluate((el) => el.scrollIntoView());
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(artifacts, "playground-results.png") });
    await page.setViewportSize({ width: 1366, height: 900 });
  });

  await step("playground: JavaScript and bash cells; Markdown, JSON and LaTeX results", async () => {
    let c = await runCell(6, "console.log(6 * 7)", "javascript");
    await c.locator("pre.stdout").getByText("42").waitFor();
    c = await runCell(7, 'echo "from bash $((40 + 2))"; echo oops >&2', "bash");
    await c.locator("pre.stdout").getByText("from bash 42").waitFor();
    await c.locator("pre.stderr").getByText("oops").waitFor();
    c = await runCell(8, "from IPython.display import Markdown, JSON, Latex, display\ndisplay(Markdown('# Title\\n\\n*emphasis*'))\ndisplay(JSON({'a': [1, 2]}))\ndisplay(Latex(r'$\\frac{1}{2}$'))");
    await c.frameLocator('[data-mime="text/markdown"] iframe').locator("h1", { hasText: "Title" }).waitFor();
    assert.match(await c.locator('[data-mime="application/json"] pre').textContent(), /"a": \[\s*1,\s*2\s*\]/);
    assert.match(await c.locator('[data-mime="text/latex"] pre').textContent(), /\\frac\{1\}\{2\}/);
  });

  await step("untrusted HTML with <script> cannot read the key or the console's DOM, alert, or call the API", async () => {
    const before = requests.length;
    const attack = `
from IPython.display import HTML, SVG, display
display(HTML("""<p id="evil">evil html</p>
<script>
try { parent.document.body.dataset.pwned = "dom"; } catch (e) {}
try { fetch("/v1/sandboxes?leak=" + parent.sessionStorage.getItem("lizard.apiKey")); } catch (e) {}
try { fetch("/v1/sandboxes?leak2=" + sessionStorage.getItem("lizard.apiKey")); } catch (e) {}
fetch("/v1/sandboxes?plain=1"); alert("xss"); document.title = "script ran";
</script>
<img src="x" onerror="alert('img onerror')">
<img src="/v1/sandboxes?img=1">
<form action="/v1/sandboxes" method="post"><button id="go">go</button></form>"""))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="60" height="20" onload="alert(1)"><script>alert("svg")</script><text x="2" y="15">svg ok</text></svg>'))`;
    const c = await runCell(9, attack);
    const html = c.locator('[data-mime="text/html"] iframe');
    await html.waitFor();
    const inner = c.frameLocator('[data-mime="text/html"] iframe');
    await inner.locator("#evil").waitFor(); // the markup is shown...
    await c.frameLocator('[data-mime="image/svg+xml"] iframe').getByRole("img", { name: "SVG image made by the code" }).waitFor();
    await page.waitForTimeout(1500); // give any script that could run time to
    // ...but only inside the frames, and nothing in them ran.
    assert.equal(await page.locator("#evil").count(), 0, "untrusted HTML must not be in the console's document");
    assert.equal(await page.evaluate(() => document.body.dataset.pwned ?? null), null, "a sandboxed script changed the console's DOM");
    assert.deepEqual(dialogs, [], "a sandboxed script opened a dialog");
    const fromFrames = requests.slice(before).filter((r) => !r.main || /leak|plain=1|img=1/.test(r.url));
    assert.deepEqual(fromFrames.filter((r) => /\/v1\//.test(r.url)), [], "a sandboxed frame called the API");
    for (const sel of ['[data-mime="text/html"] iframe', '[data-mime="image/svg+xml"] iframe']) {
      const f = c.locator(sel);
      assert.equal(await f.getAttribute("sandbox"), "", `${sel}: sandbox must be empty`);
      // Opaque origin: the console cannot reach into the frame, nor it out.
      assert.equal(await f.evaluate((el) => el.contentDocument), null, `${sel}: the frame shares the console's origin`);
    }
    await inner.locator("#go").click(); // forms are blocked too
    await page.waitForTimeout(500);
    assert.deepEqual(requests.slice(before).filter((r) => !r.main && /\/v1\//.test(r.url)), []);
    await shot("playground");
    await a11y("a sandbox's page with results of every kind");
  });

  await step("command runner streams output and the exit code", async () => {
    await page.getByLabel("Command (bash -c)").fill("echo from-cmd; echo to-err >&2; exit 3");
    await page.getByRole("button", { name: "Run command" }).click();
    await page.getByText("Exit code 3").waitFor();
    assert.match(await page.locator(".cmd-out").textContent(), /from-cmd/);
  });

  await step("files: upload, browse, download, delete", async () => {
    const content = `uploaded by the console test ${Date.now()}\n`;
    await page.getByLabel("Upload files into this directory").setInputFiles({ name: "hello.txt", mimeType: "text/plain", buffer: Buffer.from(content) });
    await page.getByRole("button", { name: "Upload", exact: true }).click();
    const row = page.locator('#files-table tr[data-name="hello.txt"]');
    await row.waitFor();
    const [download] = await Promise.all([page.waitForEvent("download"), row.getByRole("button", { name: "Download hello.txt" }).click()]);
    const saved = path.join(artifacts, "downloaded-hello.txt");
    await download.saveAs(saved);
    assert.equal(fs.readFileSync(saved, "utf8"), content);
    fs.rmSync(saved);
    await page.getByLabel("New folder").fill("made-here");
    await page.getByRole("button", { name: "Make folder" }).click();
    await page.locator('#files-table tr[data-name="made-here"]').getByRole("button", { name: "made-here/" }).click();
    await page.getByText("Empty directory.").waitFor();
    await page.getByRole("button", { name: /parent directory/ }).click();
    await row.getByRole("button", { name: "Delete hello.txt" }).click();
    await row.waitFor({ state: "detached" });
  });

  await step("an API error is shown with the API's message", async () => {
    await page.getByRole("button", { name: `Timeout ${sandboxId}` }).click();
    await page.locator("dialog").getByLabel("Seconds from now").fill("999999999");
    await page.locator("dialog").getByRole("button", { name: "Set timeout" }).click();
    const alert = page.locator("#alert");
    await alert.getByText(/HTTP 400 invalid_argument/).waitFor();
    assert.match(await alert.textContent(), /timeout/i);
    await alert.getByRole("button", { name: "Dismiss" }).click();
  });

  await step("pause and resume from the detail page keep the kernel's state", async () => {
    await page.getByRole("button", { name: `Pause ${sandboxId}` }).click();
    await appear(page.locator("#sb-state").getByText("paused"));
    await page.getByRole("button", { name: `Resume ${sandboxId}` }).click();
    await appear(page.locator("#sb-state").getByText("running"));
    const c = await runCell(1, "df.x.sum()");
    await c.locator(".output").getByText("np.int64(6)").waitFor();
  });

  await step("snapshot, restore into a new sandbox, delete the snapshot", async () => {
    await page.getByRole("button", { name: `Snapshot ${sandboxId}` }).click();
    await appear(page.getByText(/Snapshot \S+ taken of/));
    await page.getByRole("link", { name: "Snapshots", exact: true }).click();
    await page.getByRole("heading", { name: "Snapshots" }).waitFor();
    const row = page.locator("#snapshot-table tbody tr[data-id]").first();
    await row.waitFor();
    await shot("snapshots");
    await a11y("the snapshots page");
    const snapId = await row.getAttribute("data-id");
    await row.getByRole("button", { name: `Restore ${snapId}` }).click();
    await page.locator("dialog").getByRole("button", { name: "Restore" }).click();
    await appear(page.getByRole("heading", { name: /^Sandbox \S+$/ }));
    const restored = (await page.getByRole("heading", { name: /^Sandbox \S+$/ }).textContent()).replace("Sandbox ", "");
    assert.notEqual(restored, sandboxId);
    await page.locator("#sb-state").getByText("running").waitFor({ timeout: 120_000 });
    const c = await runCell(0, "df.x.sum()");
    await c.locator(".output").getByText("np.int64(6)").waitFor();
    await page.getByRole("link", { name: "Snapshots", exact: true }).click();
    await page.getByRole("button", { name: `Delete ${snapId}` }).click();
    await page.locator("dialog").getByRole("button", { name: "Delete" }).click();
    await page.locator(`#snapshot-table tr[data-id="${snapId}"]`).waitFor({ state: "detached" });
  });

  await step("the live list shows both sandboxes, filters by metadata; fork and kill from the list", async () => {
    await page.getByRole("link", { name: "Sandboxes", exact: true }).click();
    const rows = page.locator("#sandbox-table tbody tr[data-id]");
    await page.locator(`#sandbox-table tr[data-id="${sandboxId}"]`).waitFor();
    assert.ok((await rows.count()) >= 2);
    const metaFilter = page.locator('input[name="metadata"]');
    await metaFilter.fill("suite=console");
    await page.getByRole("button", { name: "Apply filters" }).click();
    await page.waitForFunction(() => document.querySelectorAll("#sandbox-table tbody tr[data-id]").length === 1);
    await shot("sandboxes");
    await a11y("the sandboxes page");
    await page.getByRole("button", { name: `Fork ${sandboxId}` }).click();
    await page.locator("dialog").getByRole("button", { name: "Fork" }).click();
    await appear(page.getByText(/^Forked /));
    // Forks keep no metadata unless given: clear the filter to see them.
    await metaFilter.fill("");
    await page.getByRole("button", { name: "Apply filters" }).click();
    await page.waitForFunction(() => document.querySelectorAll("#sandbox-table tbody tr[data-id]").length >= 3);
    await page.getByRole("button", { name: `Kill ${sandboxId}` }).click();
    await page.locator("dialog").getByRole("button", { name: "Kill" }).click();
    await page.locator(`#sandbox-table tr[data-id="${sandboxId}"]`).waitFor({ state: "detached" });
  });

  await step("keyboard: the skip link moves focus to the content without changing the page", async () => {
    const hash = await page.evaluate(() => location.hash);
    await page.locator(".skip").focus();
    await page.keyboard.press("Enter");
    assert.equal(await page.evaluate(() => document.activeElement?.id), "main");
    assert.equal(await page.evaluate(() => location.hash), hash);
  });

  await step("the network tab shows a sandbox's policy and its egress log", async () => {
    const r = await fetch(lz.url + "/v1/sandboxes", {
      method: "POST",
      headers: { authorization: `Bearer ${lz.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ network: { default: "deny", allow: ["pypi.org", "*.pythonhosted.org"] } }),
    });
    assert.equal(r.status, 201);
    const netId = (await r.json()).sandboxId;
    try {
      await page.goto(`${lz.url}/#/sandboxes/${netId}/network`);
      await appear(page.getByRole("heading", { name: "Network" }));
      await page.locator("#network-policy").getByText("pypi.org *.pythonhosted.org").waitFor();
      await page.locator("#network-log").getByText("No egress decisions yet.").waitFor();
      assert.equal(await page.getByRole("link", { name: "Network" }).getAttribute("aria-current"), "page");
      await shot("network");
      await a11y("the network tab");
    } finally {
      await fetch(`${lz.url}/v1/sandboxes/${netId}`, { method: "DELETE", headers: { authorization: `Bearer ${lz.apiKey}` } });
    }
  });

  await step("templates: build one from a recipe with its log streamed, its page shows the recipe, delete it", async () => {
    try {
      await templatesSteps();
    } finally {
      // Built templates live in the cache directory the machine's servers share: never leave one behind.
      await fetch(lz.url + "/v1/templates/console-tpl", { method: "DELETE", headers: { authorization: `Bearer ${lz.apiKey}` } });
    }
  });
  async function templatesSteps() {
    await page.getByRole("link", { name: "Templates", exact: true }).click();
    await page.getByRole("heading", { name: "Templates" }).waitFor();
    await page.locator("#template-table").getByText("No templates.").waitFor();
    await page.getByLabel("Name", { exact: true }).fill("console-tpl");
    await page.getByLabel("Recipe (JSON)").fill(JSON.stringify({ env: { FROM_CONSOLE: "yes" }, run: [{ cmd: "echo console-build-$((6*7))" }] }));
    await page.getByRole("button", { name: "Build template" }).click();
    // The build's own output, streamed into the log, then the template listed.
    await appear(page.locator("#build-log").getByText("console-build-42"));
    await appear(page.getByText("Built template console-tpl."));
    const row = page.locator('#template-table tr[data-name="console-tpl"]');
    await row.getByText("interpreter").waitFor();
    assert.match(await row.textContent(), /[KMG]iB\d+(\.\d)? s.*ago/, "the row shows size, build time and age");
    await shot("templates");
    await a11y("the templates page");
    // A wrong recipe: the API's message in the alert, nothing listed.
    await page.getByLabel("Name", { exact: true }).fill("console-bad");
    await page.getByLabel("Recipe (JSON)").fill(JSON.stringify({ env: { LIZARD_X: "1" } }));
    await page.getByRole("button", { name: "Build template" }).click();
    await page.locator("#alert").getByText(/Building console-bad failed: .*LIZARD_.*HTTP 400/).waitFor();
    await page.getByRole("button", { name: "Dismiss" }).click();
    await row.getByRole("link", { name: "console-tpl" }).click();
    await appear(page.getByRole("heading", { name: "Template console-tpl" }));
    await page.locator("#template-recipe").getByText("echo console-build-$((6*7))").waitFor();
    await page.locator("dl.facts").getByText("interpreter").waitFor();
    await a11y("a template's page");
    await page.getByRole("button", { name: "Delete console-tpl" }).click();
    await page.locator("dialog").getByRole("button", { name: "Delete" }).click();
    await appear(page.getByRole("heading", { name: "Templates" }));
    await page.locator("#template-table").getByText("No templates.").waitFor();
    const r = await fetch(lz.url + "/v1/templates/console-tpl", { headers: { authorization: `Bearer ${lz.apiKey}` } });
    assert.equal(r.status, 404, "the template is gone from the API");
  }

  await step("the key only ever travelled in the Authorization header; sign out forgets it", async () => {
    const api = requests.filter((r) => new URL(r.url).pathname.startsWith("/v1/"));
    assert.ok(api.length > 20, `only ${api.length} API calls recorded`);
    for (const r of api) {
      assert.ok(!r.url.includes(lz.apiKey), `the key is in a URL: ${r.url}`);
      if (new URL(r.url).pathname === "/v1/health") {
        // The footer's version: a call that needs no key is sent none.
        assert.equal(r.auth, undefined, "GET /v1/health carried the key");
        continue;
      }
      assert.ok(r.auth === `Bearer ${lz.apiKey}` || r.auth === "Bearer lz_wrong_key", `${r.url} went without the key (${r.auth})`);
    }
    const foreign = requests.filter((r) => /^https?:/.test(r.url) && new URL(r.url).origin !== lz.url);
    assert.deepEqual(foreign, [], "the console fetched something from another origin");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    assert.equal(await page.locator(".top nav").isVisible(), false, "the nav shows after sign out");
    assert.equal(await page.evaluate(() => sessionStorage.getItem("lizard.apiKey")), null);
  });
});
