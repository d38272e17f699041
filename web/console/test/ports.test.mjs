// Exposed ports in a real browser (issue 20): what a sandbox serves must
// never run script in the API's and console's origin. Project A's public
// sandbox serves a hostile page through the path form (the API's origin)
// that tries to register a service worker at / and at its own path, to
// read storage and cookies, to fetch project B's private port (whose page
// this browser opened with B's token, so B's cookie exists) and the API
// with credentials; the browser is signed into the console as project B.
// Then the host form (--ports-domain, mapped to loopback in chromium):
// a full app with subresources works there, and A's page on its own
// origin still reads nothing of B's.
import { test } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { chromium } from "playwright-core";
import { artifacts, CHROMIUM, createSandbox, execute, missing, startLizard, strict } from "./lizard.mjs";

const DOMAIN = "lizard.test";
const PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

// serve starts, inside a sandbox, a static server on port with files
// (name -> text, or {b64}) and extra headers per file name.
async function serve(api, id, port, files, headers = {}) {
  const spec = JSON.stringify({ files, headers });
  const code = `
import base64, json, os, subprocess, sys, textwrap
spec = json.loads(${JSON.stringify(spec)})
os.makedirs('/home/user/www', exist_ok=True)
for name, body in spec['files'].items():
    data = base64.b64decode(body['b64']) if isinstance(body, dict) else body.encode()
    open('/home/user/www/' + name, 'wb').write(data)
json.dump(spec['headers'], open('/home/user/headers.json', 'w'))
src = textwrap.dedent('''
    import functools, http.server, json
    extra = json.load(open('/home/user/headers.json'))
    class H(http.server.SimpleHTTPRequestHandler):
        def end_headers(self):
            for k, v in extra.get(self.path.split('?')[0].rsplit('/', 1)[-1], []):
                self.send_header(k, v)
            super().end_headers()
        def log_message(self, *a): pass
    http.server.ThreadingHTTPServer(('0.0.0.0', ${port}), functools.partial(H, directory='/home/user/www')).serve_forever()
''')
open('/home/user/srv.py', 'w').write(src)
subprocess.Popen([sys.executable, '/home/user/srv.py'], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print('ok')`;
  assert.equal((await execute(api, id, code)).trim(), "ok");
}

// The hostile page: every attempt's outcome goes into window.results.
const ATTACK = `<!doctype html><html><head><title>attack</title></head><body><p id="out">running</p>
<script>
const r = (window.results = {});
const attempt = async (k, f) => { try { r[k] = String(await f()); } catch (e) { r[k] = "err " + e.name + ": " + e.message; } };
(async () => {
  const b = new URLSearchParams(location.search).get("b");
  await attempt("origin", () => self.origin);
  await attempt("cookie", () => document.cookie);
  await attempt("localStorage", () => localStorage.length);
  await attempt("sessionKey", () => sessionStorage.getItem("lizard.apiKey"));
  await attempt("swRoot", async () => "registered " + (await navigator.serviceWorker.register("sw.js", { scope: "/" })).scope);
  await attempt("swOwn", async () => "registered " + (await navigator.serviceWorker.register("sw.js")).scope);
  await attempt("portB", async () => { const x = await fetch(b, { credentials: "include" }); return x.status + " " + (await x.text()); });
  await attempt("portBNoCors", async () => { const x = await fetch(b, { credentials: "include", mode: "no-cors" }); return x.type + " " + (await x.text()); });
  await attempt("api", async () => { const x = await fetch("/v1/sandboxes", { credentials: "include" }); return x.status + " " + (await x.text()); });
  await attempt("worker", () => new Worker("sw.js") && "started");
  r.done = "yes";
  document.getElementById("out").textContent = JSON.stringify(r);
})();
</script></body></html>`;

// B's app: a page with an image and a script of its own.
const APP = `<!doctype html><html><head><title>B</title><script src="app.js"></script><script type="module" src="mod.js"></script></head>
<body><p id="secret">SECRET_OF_B</p><img id="img" alt="pixel" src="pixel.png"></body></html>`;

const APP_FILES = { "page.html": APP, "app.js": "window.appRan = true;", "mod.js": "window.modRan = true;", "pixel.png": { b64: PIXEL } };

// loaded says what of APP's subresources loaded in page.
const loaded = (page) =>
  page.evaluate(() => ({ img: document.getElementById("img").naturalWidth > 0, script: window.appRan ?? false, module: window.modRan ?? false }));

const why = missing();

test("exposed ports cannot run script in the API's origin", { skip: !strict && why, timeout: 10 * 60_000 }, async (t) => {
  if (why) assert.fail(why);
  const lz = await startLizard({ projects: ["proj_a", "proj_b"], args: [`--ports-domain=${DOMAIN}`], name: "serve-ports" });
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Loopback only: every name under the test domain is this machine.
    args: ["--no-sandbox", `--host-resolver-rules=MAP *.${DOMAIN} 127.0.0.1`],
  });
  t.after(async () => {
    await browser.close().catch(() => {});
    await lz.stop();
  });
  const apiA = lz.apiAs(lz.keys.proj_a);
  const apiB = lz.apiAs(lz.keys.proj_b);
  const [a, b] = await Promise.all([createSandbox(apiA, { publicPorts: true }), createSandbox(apiB, {})]);
  assert.equal(b.publicPorts ?? false, false);
  await Promise.all([
    serve(apiA, a.sandboxId, 8001, { "attack.html": ATTACK, "sw.js": 'self.addEventListener("fetch", () => {});', ...APP_FILES }, {
      "sw.js": [["Service-Worker-Allowed", "/"]],
      // The program asks for the same origin: Lizard's policy still holds.
      "attack.html": [["Content-Security-Policy", "sandbox allow-same-origin allow-scripts"], ["Set-Cookie", "fromA=1; Path=/"]],
    }),
    serve(apiB, b.sandboxId, 8000, APP_FILES),
  ]);
  const context = await browser.newContext();
  const shot = (page, name) => page.screenshot({ path: path.join(artifacts, `${name}.png`) }).catch(() => {});
  const waitUp = async (u) => {
    for (let i = 0; ; i++) {
      const r = await fetch(u, { headers: { Authorization: `Bearer ${lz.keys.proj_b}` } }).catch(() => undefined);
      if (r?.status !== 502 && r !== undefined) return;
      assert.ok(i < 150, `${u} never answered`);
      await new Promise((res) => setTimeout(res, 200));
    }
  };
  const bPath = `${lz.url}/v1/sandboxes/${b.sandboxId}/ports/8000`;
  const aPath = `${lz.url}/v1/sandboxes/${a.sandboxId}/ports/8001`;
  await waitUp(`${bPath}/page.html`);

  // The browser is signed into the console as project B.
  const console_ = await context.newPage();
  await console_.goto(lz.url + "/");
  await console_.getByLabel("API key").fill(lz.keys.proj_b);
  await console_.keyboard.press("Enter");
  await console_.locator(`#sandbox-table tr[data-id="${b.sandboxId}"]`).waitFor({ timeout: 60_000 });

  await t.test("a page opened with the token is redirected without it; the path form serves it in an opaque origin", async () => {
    const page = await context.newPage();
    await page.goto(`${bPath}/page.html?lizard_access_token=${b.accessToken}`);
    assert.equal(page.url(), `${bPath}/page.html`, "the token is still in the page's URL");
    assert.equal(await page.locator("#secret").textContent(), "SECRET_OF_B");
    assert.equal(await page.evaluate(() => self.origin), "null", "the port's page runs in the API's origin");
    const cookies = (await context.cookies()).filter((c) => c.domain === "127.0.0.1");
    assert.deepEqual(cookies.map((c) => [c.name, c.path, c.httpOnly, c.sameSite]), [["lizard_access_token", `/v1/sandboxes/${b.sandboxId}/ports/8000`, true, "Lax"]]);
    // Subresources of a CSP-sandboxed page come from an opaque origin:
    // cross-site, so Chromium sends no SameSite=Lax cookie with them and a
    // private port answers them 401 (docs/ports.md: top-level pages only;
    // use a ports domain or publicPorts for full apps).
    await page.waitForLoadState("load");
    assert.deepEqual(await loaded(page), { img: false, script: false, module: false }, "a subresource of a private port's page loaded: its cookie went with it");
    // A public port needs no cookie: images and classic scripts load; a
    // module script is a CORS request from the opaque origin, refused
    // unless the program allows it (Access-Control-Allow-Origin).
    await page.goto(`${aPath}/page.html`);
    await page.waitForLoadState("load");
    assert.deepEqual(await loaded(page), { img: true, script: true, module: false });
    await page.close();
  });

  await t.test("a hostile page on the path form registers no service worker and reads nothing of B's", async () => {
    const page = await context.newPage();
    const dialogs = [];
    page.on("dialog", (d) => (dialogs.push(d.message()), void d.dismiss()));
    await page.goto(`${aPath}/attack.html?b=${encodeURIComponent(bPath + "/page.html")}`);
    await page.waitForFunction(() => window.results?.done === "yes", null, { timeout: 30_000 });
    const r = await page.evaluate(() => window.results);
    await shot(page, "ports-attack-path");
    console.log("path form, the hostile page's results:", JSON.stringify(r));
    assert.equal(r.origin, "null", "the page ran in the API's origin");
    assert.match(r.swRoot, /^err /, "a service worker was registered at /");
    assert.match(r.swOwn, /^err /, "a service worker was registered at the port's path");
    for (const k of ["cookie", "localStorage", "sessionKey"]) assert.match(r[k], /^err SecurityError/, `${k}: ${r[k]}`);
    for (const k of ["portB", "portBNoCors", "api", "worker"]) assert.doesNotMatch(r[k], /SECRET_OF_B|sandboxId|lz_|lzp_|started/, `${k}: ${r[k]}`);
    assert.match(r.portB, /^err TypeError/, "B's port was readable");
    assert.match(r.api, /^err TypeError/, "the API was readable");
    assert.equal(r.portBNoCors, "opaque ", "no-cors fetch of B's port gave a readable body");
    assert.deepEqual(await context.serviceWorkers(), []);
    assert.deepEqual(dialogs, []);
    // Nothing of A's reached the API's cookies outside A's port.
    const cookies = (await context.cookies()).filter((c) => c.domain === "127.0.0.1");
    assert.deepEqual(cookies.filter((c) => !c.path.startsWith(`/v1/sandboxes/${a.sandboxId}/ports/8001`) && c.name !== "lizard_access_token"), []);
    assert.ok(cookies.some((c) => c.name === "lizard_access_token" && c.value === b.accessToken), "B's cookie was lost or changed");
    await page.close();
  });

  await t.test("the console still works and has no service worker", async () => {
    await console_.reload();
    await console_.locator(`#sandbox-table tr[data-id="${b.sandboxId}"]`).waitFor({ timeout: 60_000 });
    assert.equal(await console_.evaluate(async () => (await navigator.serviceWorker.getRegistrations()).length), 0);
    assert.equal(await console_.evaluate(() => sessionStorage.getItem("lizard.apiKey")), lz.keys.proj_b);
  });

  await t.test("a page of the API's origin cannot load a port's content as a script or service worker", async () => {
    // As if markup had got into the console: its CSP allows scripts of
    // 'self', which the path form is part of; Lizard refuses such loads.
    const aPrefix = new URL(aPath).pathname;
    const r = await console_.evaluate(async ([src, sw, scope]) => {
      const s = document.createElement("script");
      s.src = src;
      const script = await new Promise((res) => ((s.onload = () => res("loaded")), (s.onerror = () => res("error")), document.head.append(s)));
      let worker;
      try {
        worker = "registered " + (await navigator.serviceWorker.register(sw, { scope })).scope;
      } catch (e) {
        worker = "err " + e.name;
      }
      return { script, appRan: window.appRan ?? false, worker };
    }, [`${aPath}/app.js`, `${aPath}/sw.js`, `${aPrefix}/`]);
    assert.deepEqual(r, { script: "error", appRan: false, worker: "err TypeError" });
    assert.equal(await console_.evaluate(async () => (await navigator.serviceWorker.getRegistrations()).length), 0);
  });

  await t.test("the host form: B's full app works with its cookie; A's page on its own origin reads nothing of B's", async () => {
    const bHost = `http://8000-${b.sandboxId}.${DOMAIN}:${lz.port}`;
    const aHost = `http://8001-${a.sandboxId}.${DOMAIN}:${lz.port}`;
    const page = await context.newPage();
    await page.goto(`${bHost}/page.html?lizard_access_token=${b.accessToken}`);
    assert.equal(page.url(), `${bHost}/page.html`);
    await page.waitForLoadState("load");
    assert.deepEqual(await loaded(page), { img: true, script: true, module: true }, "B's app on its own origin lacks a subresource");
    assert.equal(await page.evaluate(() => self.origin), bHost);
    await page.close();
    const attack = await context.newPage();
    await attack.goto(`${aHost}/attack.html?b=${encodeURIComponent(bHost + "/page.html")}`);
    await attack.waitForFunction(() => window.results?.done === "yes", null, { timeout: 30_000 });
    const r = await attack.evaluate(() => window.results);
    console.log("host form, the hostile page's results:", JSON.stringify(r));
    assert.equal(r.origin, aHost);
    for (const k of ["cookie", "portB", "portBNoCors", "api", "sessionKey"]) assert.doesNotMatch(r[k], /SECRET_OF_B|lz_|lzp_/, `${k}: ${r[k]}`);
    assert.match(r.portB, /^err TypeError/, "B's port was readable from A's origin");
    assert.doesNotMatch(r.cookie, /lizard_access_token/);
    await attack.close();
  });
});
