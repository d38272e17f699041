// The Templates page in a real browser (issue 36): a build's progress bar
// and log as its events come, the same recipe again found in the cache,
// Skip the cache running every step again (the API's skipCache), a
// template from an image served by a registry of the test's own on
// loopback — its digest in the list and in full on its page — and Delete.
import { test } from "node:test";
import assert from "node:assert/strict";
import crypto from "node:crypto";
import http from "node:http";
import zlib from "node:zlib";
import { chromium } from "playwright-core";
import { CHROMIUM, missing, startLizard, strict } from "./lizard.mjs";

const why = missing();

/** tar is a ustar archive of files (name -> text), each root's, 0644. */
function tar(files) {
  const blocks = [];
  for (const [name, text] of Object.entries(files)) {
    const data = Buffer.from(text);
    const h = Buffer.alloc(512);
    h.write(name, 0);
    h.write("0000644\0", 100);
    h.write("0000000\0", 108);
    h.write("0000000\0", 116);
    h.write(data.length.toString(8).padStart(11, "0") + "\0", 124);
    h.write("14700000000\0", 136);
    h.write("        ", 148); // the checksum's room counts as spaces
    h.write("0", 156);
    h.write("ustar\0" + "00", 257);
    let sum = 0;
    for (const b of h) sum += b;
    h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
    blocks.push(h, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

const sha = (b) => "sha256:" + crypto.createHash("sha256").update(b).digest("hex");

/** registry serves one image, console/tiny:1 (a layer of one file), as
 * an OCI registry does: manifests by tag or digest, blobs by digest. */
async function registry() {
  const layerTar = tar({ "hello.txt": "hello from an image\n" });
  const layer = zlib.gzipSync(layerTar);
  const config = Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", config: { Env: ["PATH=/usr/bin:/bin"] }, rootfs: { type: "layers", diff_ids: [sha(layerTar)] } }));
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: sha(config), size: config.length },
      layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: sha(layer), size: layer.length }],
    }),
  );
  const digest = sha(manifest);
  const blobs = { [sha(config)]: config, [sha(layer)]: layer };
  const server = http.createServer((req, res) => {
    const send = (status, body, type) => {
      res.writeHead(status, { "content-type": type, "content-length": body.length, "docker-content-digest": status === 200 ? sha(body) : "" });
      res.end(req.method === "HEAD" ? undefined : body);
    };
    const url = new URL(req.url, "http://x");
    let m;
    if (url.pathname === "/v2/") return send(200, Buffer.from("{}"), "application/json");
    if ((m = url.pathname.match(/^\/v2\/console\/tiny\/manifests\/(.+)$/)) && (m[1] === "1" || m[1] === digest))
      return send(200, manifest, "application/vnd.oci.image.manifest.v1+json");
    if ((m = url.pathname.match(/^\/v2\/console\/tiny\/blobs\/(.+)$/)) && blobs[m[1]]) return send(200, blobs[m[1]], "application/octet-stream");
    send(404, Buffer.from(JSON.stringify({ errors: [{ code: "NOT_FOUND", message: "not here" }] })), "application/json");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { ref: `127.0.0.1:${server.address().port}/console/tiny:1`, digest, close: () => server.close() };
}

test("the Templates page: progress, the cache, skip the cache, an image's digest, delete", { skip: !strict && why, timeout: 15 * 60_000 }, async (t) => {
  if (why) assert.fail(why);
  const reg = await registry();
  const lz = await startLizard({ name: "serve-templates", args: ["--registry-allow", "127.0.0.1", "--template-builds-per-hour", "0"] });
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
  t.after(async () => {
    await browser.close().catch(() => {});
    // Built templates live in the cache directory the machine's servers share: never leave one behind.
    for (const name of ["console-cache", "console-image"]) await lz.api("DELETE", `/v1/templates/${name}`).catch(() => {});
    await lz.stop();
    reg.close();
  });
  const page = await browser.newPage();
  page.setDefaultTimeout(60_000);
  const appear = async (loc, timeout = 300_000) => {
    const alert = page.locator("#alert:not([hidden])");
    await loc.or(alert).first().waitFor({ timeout });
    if (await alert.isVisible()) assert.fail(`the console shows an error: ${await alert.textContent()}`);
  };
  await page.goto(lz.url + "/");
  await page.getByLabel("API key").fill(lz.apiKey);
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
  await page.getByRole("link", { name: "Templates", exact: true }).click();
  await page.getByRole("heading", { name: "Templates" }).waitFor();

  const log = page.locator("#build-log");
  const bar = page.locator("#build-progress");
  const build = async (name, recipe, skip = false) => {
    await page.getByLabel("Name", { exact: true }).fill(name);
    await page.getByLabel("Recipe (JSON)").fill(JSON.stringify(recipe));
    await page.getByLabel("Skip the cache").setChecked(skip);
    await page.getByRole("button", { name: "Build template" }).click();
  };
  const key = async (name) => (await (await lz.api("GET", `/v1/templates/${name}`)).json()).key;

  await t.test("a build's progress and log, then the same recipe found in the cache", async () => {
    const recipe = { run: [{ cmd: "echo console-cache-$((6*7))" }] };
    await build("console-cache", recipe);
    // The progress bar follows the step events while they come.
    await appear(page.locator("#build-step").getByText(/^step \d+ of \d+: /));
    await appear(log.getByText("console-cache-42"));
    await appear(page.getByText("Built template console-cache."));
    assert.equal(await page.locator("#build-step").textContent(), "done");
    const [value, max] = await bar.evaluate((b) => [b.value, b.max]);
    assert.ok(max > 1 && value === max, `the progress bar ends full: ${value} of ${max}`);
    assert.match(await log.textContent(), /\[1\/\d+\] /, "the log numbers the steps");
    const first = await key("console-cache");

    await build("console-cache", recipe);
    await appear(page.getByText("Template console-cache: the same recipe was built before."));
    assert.equal(await page.locator("#build-step").textContent(), "done: found in the cache");
    assert.doesNotMatch(await log.textContent(), /console-cache-42/, "a build found in the cache runs no step");
    assert.equal(await key("console-cache"), first);

    // Skip the cache: every step again, a build of its own.
    await build("console-cache", recipe, true);
    await appear(log.getByText("console-cache-42"));
    await appear(page.getByText("Built template console-cache."));
    assert.match(await log.textContent(), /skip the cache/);
    assert.notEqual(await key("console-cache"), first, "skip the cache made a build with a key of its own");
  });

  await t.test("a template from an image shows its digest", async () => {
    await build("console-image", { from: reg.ref });
    await appear(page.getByText("Built template console-image."));
    assert.match(await log.textContent(), /pulling image/);
    const row = page.locator('#template-table tr[data-name="console-image"]');
    await row.getByText(`${reg.ref} @ ${reg.digest.slice(0, "sha256:".length + 12)}`).waitFor();
    await row.getByRole("link", { name: "console-image" }).click();
    await appear(page.getByRole("heading", { name: "Template console-image" }));
    await page.locator("dl.facts").getByText(reg.digest, { exact: true }).waitFor();
    await page.getByRole("button", { name: "Delete console-image" }).click();
    await page.locator("dialog").getByRole("button", { name: "Delete" }).click();
    await appear(page.getByRole("heading", { name: "Templates" }));
    assert.equal((await lz.api("GET", "/v1/templates/console-image")).status, 404, "the image template is gone");
  });

  await t.test("delete from the list", async () => {
    const row = page.locator('#template-table tr[data-name="console-cache"]');
    await row.getByRole("button", { name: "Delete console-cache" }).click();
    await page.locator("dialog").getByRole("button", { name: "Delete" }).click();
    await page.getByText("Deleted template console-cache.").waitFor();
    await page.locator("#template-table").getByText("No templates.").waitFor();
    assert.equal((await lz.api("GET", "/v1/templates/console-cache")).status, 404);
  });
});
