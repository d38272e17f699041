// The console's live desktop in a real browser against a real lizard serve
// and a sandbox of the desktop template (templates/desktop/recipe.yaml,
// built here or found in LIZARD_CACHE_DIR's cache): the Desktop tab draws
// noVNC's canvas at the screen's own size, what it shows is what
// GET /desktop/screenshot (the SDKs' screenshot()) returns, before and after
// the screen changes; view-only does not move the pointer (neither the tab
// nor a view-only viewer link, whose client sends the events and whose
// server drops them, and which sends no key in a signed-in tab), "Take
// control" does; leaving the page revokes its
// viewers; a sandbox without a desktop says so. No CSP violation.
//
// The project is proj_123, as in the Python and TypeScript suites: a
// build's key is the project's ID, the recipe and the base's build, so
// under `make test` this suite, the last of the three, finds their build in
// the template cache, and deletes the template (and so the build) after
// itself unless LIZARD_E2E_KEEP_TEMPLATES=1.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { chromium } from "playwright-core";
import { artifacts, CHROMIUM, createSandbox, execute, missing, repo, startLizard, strict } from "./lizard.mjs";

const run = promisify(execFile);
const why = missing();

test("the live desktop of a desktop sandbox", { skip: !strict && why, timeout: 40 * 60_000 }, async (t) => {
  if (why) assert.fail(why);
  fs.mkdirSync(artifacts, { recursive: true });
  const lz = await startLizard({ projects: ["proj_123"], name: "serve-desktop" });
  const lizardCLI = (args, timeout) =>
    run(path.join(repo, "bin", "lizard"), args, { env: { ...process.env, LIZARD_API_URL: lz.url, LIZARD_API_KEY: lz.apiKey }, timeout, maxBuffer: 64 << 20 });
  let browser;
  let id; // the desktop sandbox, killed before its template is deleted
  t.after(async () => {
    await browser?.close().catch(() => {});
    if (process.env.LIZARD_E2E_KEEP_TEMPLATES !== "1") {
      if (id) await lz.api("DELETE", `/v1/sandboxes/${id}`).catch(() => {});
      // Its build leaves the template cache with it (minutes under load).
      await lizardCLI(["template", "delete", "desktop"], 10 * 60_000).catch((e) => console.error(`deleting the desktop template: ${e}`));
    }
    await lz.stop();
  });
  // The project's `desktop` template, as docs/desktop.md builds it: a
  // build the cache has (the same project and recipe) takes no time.
  const begin = Date.now();
  await lizardCLI(["template", "build", "--quiet", "-f", path.join(repo, "templates", "desktop", "recipe.yaml")], 30 * 60_000);
  console.log(`desktop template: ${((Date.now() - begin) / 1000).toFixed(1)} s`);

  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
  const context = await browser.newContext({ viewport: { width: 1366, height: 1000 } });
  const violations = [];
  const tokens = []; // every viewer token the console minted
  const open = async () => {
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    page.on("console", (m) => {
      if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
    });
    page.on("response", async (r) => {
      if (r.request().method() === "POST" && r.url().endsWith("/desktop/stream") && r.status() === 201) tokens.push((await r.json()).token);
    });
    return page;
  };
  const page = await open();
  await page.goto(lz.url + "/");
  await page.getByLabel("API key").fill(lz.apiKey);
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { name: "Sandboxes" }).waitFor();

  const sb = await createSandbox(lz.api, { template: "desktop", timeoutMs: 900_000 });
  id = sb.sandboxId;
  const desk = (p) => `/v1/sandboxes/${id}/desktop${p}`;
  const call = async (method, p, body) => {
    const r = await lz.api(method, desk(p), body);
    assert.ok(r.ok, `${method} ${desk(p)}: HTTP ${r.status} ${await r.clone().text()}`);
    return r;
  };
  const cursor = async () => (await call("GET", "/cursor")).json();
  const screenshot = async () => Buffer.from(await (await call("GET", "/screenshot")).arrayBuffer()).toString("base64");
  const shot = (p, name) => p.screenshot({ path: path.join(artifacts, `${name}.png`) });

  let broken;
  const step = (name, fn) =>
    t.test(name, { skip: broken && `an earlier step failed: ${broken}` }, async () => {
      try {
        await fn();
      } catch (e) {
        broken = name;
        for (const [i, p] of context.pages().entries()) await shot(p, `failed-desktop-${i}-${name.replace(/\W+/g, "-").slice(0, 40)}`).catch(() => {});
        throw e;
      }
    });

  // compare draws the screenshot (PNG, base64) beside the page's canvas and
  // returns the share of pixels that match (each channel within 24: the
  // stream may be JPEG-coded) and the dominant colour of region in each.
  const compare = (p, png, region) =>
    p.locator(".desktop-screen canvas").evaluate(async (canvas, [png, region]) => {
      const bytes = Uint8Array.from(atob(png), (c) => c.charCodeAt(0));
      const img = await createImageBitmap(new Blob([bytes], { type: "image/png" }));
      const off = new OffscreenCanvas(img.width, img.height);
      const octx = off.getContext("2d");
      octx.drawImage(img, 0, 0);
      const a = octx.getImageData(0, 0, img.width, img.height).data;
      const b = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
      if (img.width !== canvas.width || img.height !== canvas.height) return { size: [img.width, img.height, canvas.width, canvas.height] };
      let same = 0;
      for (let i = 0; i < a.length; i += 4) {
        if (Math.abs(a[i] - b[i]) <= 24 && Math.abs(a[i + 1] - b[i + 1]) <= 24 && Math.abs(a[i + 2] - b[i + 2]) <= 24) same++;
      }
      const dominant = (d) => {
        const counts = new Map();
        for (let y = region.y; y < region.y + region.h; y++) {
          for (let x = region.x; x < region.x + region.w; x++) {
            const i = (y * img.width + x) * 4;
            const k = `${d[i] >> 4},${d[i + 1] >> 4},${d[i + 2] >> 4}`;
            counts.set(k, (counts.get(k) ?? 0) + 1);
          }
        }
        return [...counts].sort((x, y) => y[1] - x[1])[0][0];
      };
      return { same: same / (a.length / 4), shot: dominant(a), page: dominant(b) };
    }, [png, region]);
  // untilMatch waits until the canvas shows what a fresh screenshot does.
  const untilMatch = async (p, region, what) => {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const got = await compare(p, await screenshot(), region);
      if (got.same >= 0.95 && got.shot === got.page) return got;
      if (Date.now() > deadline) assert.fail(`${what}: the canvas does not show the screenshot: ${JSON.stringify(got)}`);
      await new Promise((r) => setTimeout(r, 500));
    }
  };
  // at maps a point of the screen to the page's, over the scaled canvas.
  const at = async (p, x, y) => {
    const canvas = p.locator(".desktop-screen canvas");
    const box = await canvas.boundingBox();
    const { w, h } = await canvas.evaluate((c) => ({ w: c.width, h: c.height }));
    return [box.x + ((x + 0.5) * box.width) / w, box.y + ((y + 0.5) * box.height) / h];
  };
  const still = async (want, what) => {
    await new Promise((r) => setTimeout(r, 2000));
    assert.deepEqual(await cursor(), want, what);
  };

  // A first create after the build boots cold: its screen is Xvfb's bare
  // root until Xfce is up (a restore from the template's snapshot has it).
  const settled = async () => {
    const deadline = Date.now() + 180_000;
    const probe = 'import subprocess\nprint(all(subprocess.run(["pgrep", "-x", p], capture_output=True).returncode == 0 for p in ("xfdesktop", "xfce4-panel", "xfwm4")))';
    while ((await execute(lz.api, id, probe)).trim() !== "True") {
      if (Date.now() > deadline) assert.fail("Xfce did not start within 180 s");
      await new Promise((r) => setTimeout(r, 1000));
    }
    // Then until the screen stops changing (xfdesktop and the panel drawn).
    let last = "";
    for (let i = 0; i < 30; i++) {
      const now = await screenshot();
      if (now === last) return;
      last = now;
      await new Promise((r) => setTimeout(r, 1000));
    }
  };
  const region = async (x, y, width, height) => Buffer.from(await (await call("GET", `/screenshot?x=${x}&y=${y}&width=${width}&height=${height}`)).arrayBuffer()).toString("base64");

  let size;
  await step("the Desktop tab draws the screen at its own size, view-only, showing what screenshot() returns", async () => {
    size = await (await call("GET", "/screen")).json();
    assert.deepEqual(size, { width: 1024, height: 768 });
    await settled();
    await call("POST", "/mouse", { action: "move", x: 100, y: 100 });
    await page.goto(`${lz.url}/#/sandboxes/${id}/desktop`);
    await page.getByRole("link", { name: "Desktop", exact: true }).and(page.locator('[aria-current="page"]')).waitFor();
    await page.locator('.desktop-screen[data-state="connected"][data-control="false"] canvas').waitFor({ timeout: 60_000 });
    await page.getByText("View-only:").waitFor();
    const canvas = page.locator(".desktop-screen canvas");
    assert.deepEqual(await canvas.evaluate((c) => ({ width: c.width, height: c.height })), size, "the canvas has the screen's pixels");
    const got = await untilMatch(page, { x: 312, y: 234, w: 400, h: 300 }, "the desktop as it started");
    console.log(`the canvas and screenshot(): ${(got.same * 100).toFixed(1)}% of pixels match; the centre's colour ${got.page}`);
    await shot(page, "desktop");
  });

  await step("a change of the screen shows in the page: a right-click's menu", async () => {
    const before = await region(512, 384, 120, 120);
    await call("POST", "/mouse", { action: "click", x: 512, y: 384, button: "right" });
    const deadline = Date.now() + 20_000;
    while ((await region(512, 384, 120, 120)) === before) {
      if (Date.now() > deadline) assert.fail("the right-click changed no pixel under it in 20 s");
      await new Promise((r) => setTimeout(r, 300));
    }
    // Xfce's desktop menu opens at the pointer, right and below it.
    const got = await untilMatch(page, { x: 512, y: 384, w: 120, h: 120 }, "the desktop's menu");
    console.log(`with the menu: ${(got.same * 100).toFixed(1)}% match; its colour ${got.page}`);
    await shot(page, "desktop-menu");
    await call("POST", "/keyboard", { action: "press", keys: ["Escape"] });
    await call("POST", "/mouse", { action: "move", x: 100, y: 100 });
  });

  await step("view-only: the page's mouse does not move the pointer", async () => {
    const [px, py] = await at(page, 300, 200);
    await page.mouse.move(px, py);
    await page.mouse.move(px + 40, py + 30, { steps: 5 });
    await still({ x: 100, y: 100 }, "the pointer after moving the mouse over a view-only screen");
  });

  await step("a view-only viewer link shows the screen, sends no key, and its mouse does nothing either", async () => {
    const v = await (await call("POST", "/stream", { control: false })).json();
    assert.match(v.url, new RegExp(`/#/sandboxes/${id}/desktop\\?token=lzv_`));
    // Opened in the signed-in tab (its key in this tab's sessionStorage),
    // as a link someone sent, after a page of another origin: the page must
    // not use the key (no API call; the WebSocket with the token alone).
    await page.goto("about:blank");
    const keyed = [];
    const sawKey = (r) => {
      if (r.headers().authorization || r.url().includes(lz.apiKey)) keyed.push(`${r.method()} ${r.url()}`);
    };
    page.on("request", sawKey);
    await page.goto(v.url);
    assert.equal(await page.evaluate(() => sessionStorage.length > 0), true, "the tab is signed in");
    await page.getByRole("heading", { name: `Desktop of ${id}` }).waitFor();
    await page.locator('.desktop-screen[data-state="connected"] canvas').waitFor({ timeout: 60_000 });
    await page.getByText("Connected.").waitFor();
    // This page's client sends the events (the token decides): x11vnc
    // -viewonly drops them.
    const [px, py] = await at(page, 400, 300);
    await page.mouse.move(px, py);
    await page.mouse.click(px + 20, py + 20);
    await still({ x: 100, y: 100 }, "the pointer after a view-only link's mouse moved and clicked");
    await shot(page, "desktop-link");
    await call("DELETE", `/stream/viewers/${v.viewerId}`);
    await page.getByText("The stream closed").or(page.getByText("The stream could not be opened")).waitFor();
    page.off("request", sawKey);
    assert.deepEqual(keyed, [], "requests of the viewer link that carried the key");
    await page.goto(`${lz.url}/#/sandboxes/${id}/desktop`);
    await page.locator('.desktop-screen[data-state="connected"][data-control="false"] canvas').waitFor({ timeout: 60_000 });
  });

  await step("Take control: the page's mouse moves the pointer", async () => {
    await page.getByRole("button", { name: "Take control" }).click();
    await page.locator('.desktop-screen[data-state="connected"][data-control="true"] canvas').waitFor({ timeout: 60_000 });
    await page.getByText("In control:").waitFor();
    const [px, py] = await at(page, 300, 200);
    await page.mouse.move(px - 10, py - 10);
    await page.mouse.move(px, py, { steps: 3 });
    const deadline = Date.now() + 10_000;
    let c;
    do c = await cursor();
    while ((Math.abs(c.x - 300) > 2 || Math.abs(c.y - 200) > 2) && Date.now() < deadline && (await new Promise((r) => setTimeout(r, 200)), true));
    assert.ok(Math.abs(c.x - 300) <= 2 && Math.abs(c.y - 200) <= 2, `the pointer is at ${JSON.stringify(c)}, not (300, 200)`);
    await page.getByRole("button", { name: "Release control" }).waitFor();
  });

  // revoked waits until a viewer token opens the stream no more: without
  // an Upgrade a live token is a 400, a revoked one a 401.
  const revoked = async (token, what) => {
    const deadline = Date.now() + 10_000;
    let status;
    do status = (await fetch(`${lz.url}${desk("/stream/websocket")}?token=${encodeURIComponent(token)}`)).status;
    while (status !== 401 && Date.now() < deadline && (await new Promise((r) => setTimeout(r, 200)), true));
    assert.equal(status, 401, what);
  };

  await step("leaving the page, or closing the browser's tab, revokes the viewers it minted", async () => {
    assert.ok(tokens.length >= 2, `the console minted ${tokens.length} viewers`);
    await page.goto(`${lz.url}/#/sandboxes/${id}`);
    await page.getByRole("heading", { name: "Playground" }).waitFor();
    for (const token of tokens) await revoked(token, "a token of the console's after leaving the page");
    // A second tab (its own sessionStorage: signed in again), closed.
    const p2 = await open();
    await p2.goto(lz.url + "/");
    await p2.getByLabel("API key").fill(lz.apiKey);
    await p2.keyboard.press("Enter");
    await p2.getByRole("heading", { name: "Sandboxes" }).waitFor();
    const n = tokens.length;
    await p2.goto(`${lz.url}/#/sandboxes/${id}/desktop`);
    await p2.locator('.desktop-screen[data-state="connected"] canvas').waitFor({ timeout: 60_000 });
    assert.equal(tokens.length, n + 1);
    await p2.close({ runBeforeUnload: true });
    await revoked(tokens[n], "the token of a tab that was closed");
  });

  await step("a sandbox without a desktop says so on its Desktop tab", async () => {
    await call("DELETE", "/stream");
    assert.equal((await lz.api("DELETE", `/v1/sandboxes/${id}`)).status, 204);
    const plain = await createSandbox(lz.api, { timeoutMs: 300_000 });
    await page.goto(`${lz.url}/#/sandboxes/${plain.sandboxId}/desktop`);
    await page.getByText(/No live desktop: .*has no desktop.*\(HTTP 409 conflict\)/).waitFor({ timeout: 60_000 });
    assert.equal(await page.locator(".desktop-screen canvas").count(), 0);
  });

  await step("no CSP violation", async () => {
    assert.deepEqual(violations, []);
  });
});
