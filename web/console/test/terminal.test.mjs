// The console's terminal and processes tabs in a real browser against a
// real lizard serve: xterm.js over a process's WebSocket, authenticated
// with the key as a subprotocol (docs/console.md). A shell answers
// `echo $((6*7))`, follows the window's size (`stty size`), a background
// process is reattached from a second page with its output replayed and
// ended with a signal from the processes tab, the sandbox's usage is
// charted, and the terminal says so when its sandbox is paused or killed. No CSP violation, and the key in no URL.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";
import { artifacts, CHROMIUM, createSandbox, missing, startLizard, strict } from "./lizard.mjs";

const axeSource = fs.readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
const why = missing();

test("terminal and processes tabs in a real browser", { skip: !strict && why, timeout: 10 * 60_000 }, async (t) => {
  if (why) assert.fail(why);
  fs.mkdirSync(artifacts, { recursive: true });
  const lz = await startLizard({ name: "serve-terminal" });
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
  t.after(async () => {
    await browser.close().catch(() => {});
    await lz.stop();
  });
  const context = await browser.newContext({ viewport: { width: 1366, height: 900 } });
  const urls = [];
  const violations = [];
  const open = async () => {
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    page.on("request", (r) => urls.push(r.url()));
    page.on("websocket", (ws) => urls.push(ws.url()));
    page.on("console", (m) => {
      if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
    });
    await page.goto(lz.url + "/");
    await page.getByLabel("API key").fill(lz.apiKey);
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
    return page;
  };
  const page = await open();
  // After the page has loaded: Chromium drops loads in flight when the
  // host's interfaces change, as they do when a sandbox is made.
  const sb = await createSandbox(lz.api, { timeoutMs: 600_000 });
  const id = sb.sandboxId;
  const shot = (p, name) => p.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: true });
  // The text xterm shows, a line per row.
  // (xterm draws only what is in view.)
  const screen = (loc) => loc.locator(".xterm-rows > div").allTextContents().then((rows) => rows.map((r) => r.replace(/\u00a0/g, " ").trimEnd()));
  const untilLine = async (loc, re, what) => {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const rows = await screen(loc);
      const hit = rows.find((r) => re.test(r));
      if (hit !== undefined) return hit;
      if (Date.now() > deadline) assert.fail(`${what}: no line matching ${re} in:\n${rows.join("\n")}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  let broken;
  const step = (name, fn) =>
    t.test(name, { skip: broken && `an earlier step failed: ${broken}` }, async () => {
      try {
        await fn();
      } catch (e) {
        broken = name;
        for (const [i, p] of context.pages().entries()) await shot(p, `failed-${i}-${name.replace(/\W+/g, "-").slice(0, 40)}`).catch(() => {});
        throw e;
      }
    });

  const term = page.locator(".term").first();
  await step("the terminal tab opens a shell that answers echo $((6*7)) with 42", async () => {
    await page.goto(`${lz.url}/#/sandboxes/${id}/terminal`);
    await page.getByRole("link", { name: "Terminal", exact: true }).and(page.locator('[aria-current="page"]')).waitFor();
    await page.locator('.term[data-state="open"]').waitFor();
    await page.locator(".xterm").click();
    await page.keyboard.type("echo $((6*7))");
    await page.keyboard.press("Enter");
    await untilLine(term, /^42$/, "the shell's answer");
    await shot(page, "terminal");
  });

  await step("a smaller window makes a smaller terminal: stty size follows", async () => {
    const size = async (n) => {
      await page.keyboard.type(`echo size$((${n})) $(stty size)`);
      await page.keyboard.press("Enter");
      const line = await untilLine(term, new RegExp(`^size${n} \\d+ \\d+$`), "stty size");
      const [rows, cols] = line.split(" ").slice(1).map(Number);
      return { rows, cols };
    };
    const before = await size(1);
    await page.setViewportSize({ width: 760, height: 900 });
    let after;
    const deadline = Date.now() + 10_000;
    do after = await size(2 + (after ? 1 : 0)); // a new marker each time
    while (after.cols === before.cols && Date.now() < deadline);
    assert.ok(after.cols < before.cols, `stty size ${before.rows} ${before.cols} before, ${after.rows} ${after.cols} after narrowing the window`);
    await page.setViewportSize({ width: 1366, height: 900 });
  });

  let pid;
  await step("a background process started from the processes tab is reattached from a second page", async () => {
    await page.getByRole("link", { name: "Processes" }).click();
    await page.getByLabel("Command (bash -c)").fill("echo started-marker; i=0; while :; do i=$((i+1)); echo tick $i; sleep 2; done");
    await page.getByLabel("Tag").fill("ticker");
    await page.getByRole("button", { name: "Start", exact: true }).click();
    const row = page.locator("#processes-table tr", { hasText: "ticker" });
    await row.waitFor();
    pid = Number(await row.getAttribute("data-pid"));
    assert.ok(pid > 0);
    // (A tick every 2 s keeps the start on the viewer's screen, which is
    // what the test reads.)
    const listed = await lz.api("GET", `/v1/sandboxes/${id}/processes`).then((r) => r.json());
    assert.ok(listed.processes.some((p) => p.pid === pid && p.running && p.tag === "ticker"), JSON.stringify(listed));

    const second = await open();
    await second.goto(`${lz.url}/#/sandboxes/${id}/processes`);
    await second.getByRole("button", { name: `Output of process ${pid}` }).click();
    const out = second.getByRole("group", { name: `Output of process ${pid}` });
    await out.scrollIntoViewIfNeeded();
    await untilLine(out, /^started-marker$/, "the replayed start of the output");
    const last = Number((await untilLine(out, /^tick \d+$/, "a tick")).split(" ")[1]);
    await untilLine(out, new RegExp(`^tick ${last + 1}$`), "live output after the replay");
    await shot(second, "processes");

    // axe-core (WCAG 2 A/AA) on the processes tab; xterm's own markup is left out.
    await second.evaluate(axeSource);
    const a11y = await second.evaluate(async () => {
      const r = await window.axe.run({ exclude: [".xterm"] }, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } });
      return r.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => `${v.id}: ${v.help} at ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")}`);
    });
    assert.deepEqual(a11y, [], "accessibility violations on the processes tab");

    await second.getByLabel(`Signal for process ${pid}`).selectOption("TERM");
    await second.getByRole("button", { name: `Send the signal to process ${pid}` }).click();
    await untilLine(out, new RegExp(`Process ${pid} exited with code 143`), "the end after TERM");
    await second.locator(`#processes-table tr[data-pid="${pid}"]`, { hasText: "exited 143" }).waitFor({ timeout: 10_000 });
    await second.close();
  });

  await step("the sandbox's usage is a live chart", async () => {
    // The node samples every 5 s; the page asks every 5 s.
    await page.locator(".metrics-text").getByText(/^CPU [\d.]+% of 1, memory .+ of 1\.0 GiB, disk .+ of 2\.0 GiB$/).waitFor({ timeout: 20_000 });
    assert.match(await page.locator(".m-mem").getAttribute("points"), /^[\d.]+,[\d.]+/);
  });

  await step("a pause ends the terminal saying so; the shell runs on after a resume", async () => {
    await page.goto(`${lz.url}/#/sandboxes/${id}/terminal`);
    await page.locator('.term[data-state="open"]').waitFor();
    const shell = Number(await page.locator(".term").getAttribute("data-pid"));
    const r = await lz.api("POST", `/v1/sandboxes/${id}/pause`);
    assert.equal(r.status, 200, await r.text());
    await page.getByText(/The sandbox was paused: .*Process \d+ runs on after a resume/).first().waitFor({ timeout: 10_000 });
    assert.equal((await lz.api("POST", `/v1/sandboxes/${id}/resume`, {})).status, 200);
    const listed = await lz.api("GET", `/v1/sandboxes/${id}/processes`).then((r) => r.json());
    assert.ok(listed.processes.some((p) => p.pid === shell && p.running), `shell ${shell} after the resume: ${JSON.stringify(listed)}`);
    await page.getByRole("link", { name: "Processes" }).click();
  });

  await step("killing the sandbox ends the terminal with a clear message", async () => {
    await page.goto(`${lz.url}/#/sandboxes/${id}/terminal`);
    await page.locator('.term[data-state="open"]').waitFor();
    const killed = Date.now();
    const r = await lz.api("DELETE", `/v1/sandboxes/${id}`);
    assert.equal(r.status, 204);
    await page.getByText(/The sandbox has ended: .*killed/).first().waitFor({ timeout: 5_000 });
    assert.ok(Date.now() - killed < 5_000);
    assert.equal(await page.getByRole("button", { name: "New terminal" }).isVisible(), false, "a new terminal offered in a killed sandbox");
    await shot(page, "terminal-killed");
  });

  await step("no CSP violation, and the key in no URL", async () => {
    assert.deepEqual(violations, []);
    assert.ok(urls.some((u) => u.startsWith("ws://") && u.endsWith("/ws")), "a WebSocket was opened");
    assert.deepEqual(urls.filter((u) => u.includes(lz.apiKey) || u.includes("bearer")), []);
  });
});
