// What the console's browser tests share: a real `lizard serve` of their
// own (data directory, projects, address pool, no egress) and its cleanup.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
export const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const bin = path.join(repo, "bin", "lizard");
export const strict = process.env.LIZARD_TEST_STRICT === "1";
export const artifacts = process.env.LIZARD_TEST_ARTIFACTS || path.join(repo, "e2e", "artifacts", "console");
export const CHROMIUM = process.env.LIZARD_TEST_CHROMIUM || "/usr/bin/chromium";

/** missing says why the browser tests cannot run here, or undefined. */
export function missing() {
  if (process.getuid?.() !== 0) return "the console's browser tests need root (they run lizard serve)";
  for (const p of [bin, path.join(repo, "bin", "lizard-agent"), path.join(repo, "bin", "runsc"), CHROMIUM]) {
    if (!fs.existsSync(p)) return `${p} is missing: run make build (chromium: make test-console installs it)`;
  }
  return undefined;
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const l = net.createServer();
    l.on("error", reject);
    l.listen(0, "127.0.0.1", () => {
      const { port } = l.address();
      l.close(() => resolve(port));
    });
  });
}

/**
 * startLizard runs lizard serve with a data directory and projects of its
 * own (proj_x, or the ids given), with extra serve flags. keys maps each
 * project to its key; apiKey and api are the first project's.
 */
export async function startLizard({ projects = ["proj_x"], args: extra = [], name = "serve" } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "lizard-console-e2e-"));
  const dataDir = path.join(dir, "data");
  fs.mkdirSync(dataDir);
  const keys = {};
  for (const id of projects) {
    const { stdout } = await run(bin, ["admin", "create-project", "--data-dir", dataDir, "--id", id, "--json"]);
    keys[id] = JSON.parse(stdout).apiKey;
    assert.match(keys[id], /^lz_/);
  }
  const apiKey = keys[projects[0]];
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const logPath = path.join(dir, "serve.log");
  const log = fs.openSync(logPath, "a");
  const args = ["serve", "--listen", `127.0.0.1:${port}`, "--data-dir", dataDir, "--metrics-listen", "",
    // A pool of our own beside the other suites', and no egress: the test
    // never sends a packet off this machine.
    "--address-pool", process.env.LIZARD_TEST_ADDRESS_POOL || "169.254.108.0/22", "--egress=none", ...extra];
  if (process.env.LIZARD_CACHE_DIR) args.push("--cache-dir", process.env.LIZARD_CACHE_DIR);
  const child = spawn(bin, args, { stdio: ["ignore", log, log] });
  fs.closeSync(log);
  let exited;
  const exitedP = new Promise((resolve) => child.on("exit", (code, sig) => resolve((exited = `exit ${code} ${sig}`))));
  const logs = () => fs.readFileSync(logPath, "utf8");
  const deadline = Date.now() + 10 * 60_000; // a first start may build the template
  for (;;) {
    if (exited) throw new Error(`lizard serve exited early (${exited}):\n${logs()}`);
    try {
      if ((await fetch(`${url}/v1/health`)).ok) break;
    } catch {
      /* not yet listening */
    }
    if (Date.now() > deadline) throw new Error(`lizard serve did not become healthy:\n${logs()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const apiAs = (key) => (method, p, body) =>
    fetch(url + p, {
      method,
      headers: { Authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
  const api = apiAs(apiKey);
  const stop = async () => {
    try {
      if (!exited) {
        // Sandboxes outlive a server (a restart finds them): kill ours first.
        for (const key of Object.values(keys)) {
          const list = await apiAs(key)("GET", "/v1/sandboxes").then((r) => r.json());
          for (const sb of list.sandboxes) {
            if (["killed", "expired", "failed"].includes(sb.state)) continue;
            const r = await apiAs(key)("DELETE", `/v1/sandboxes/${sb.sandboxId}`).catch((e) => e);
            if (!(r instanceof Response) || !r.ok) console.error(`killing ${sb.sandboxId}: ${r.status ?? r}`);
          }
        }
        child.kill("SIGTERM");
        const t = setTimeout(() => child.kill("SIGKILL"), 30_000);
        await exitedP;
        clearTimeout(t);
      }
      // Then whatever the runtime still has (the server's own sandboxes, a
      // create cut short), as the Go e2e harness does; before the data
      // directory goes, or they would outlive it.
      const { stdout } = await run("go", ["run", "./web/console/test/cleanup", path.join(repo, "bin", "runsc"), dataDir], { cwd: repo });
      if (stdout.trim()) console.error(stdout.trim());
    } finally {
      fs.mkdirSync(artifacts, { recursive: true });
      fs.copyFileSync(logPath, path.join(artifacts, `${name}.log`));
      fs.rmSync(dir, { recursive: true, force: true });
    }
  };
  return { url, port, apiKey, keys, api, apiAs, logs, stop };
}

/** execute runs Python code in a sandbox and returns its stdout, failing on an error. */
export async function execute(api, id, code) {
  const r = await api("POST", `/v1/sandboxes/${id}/execute`, { code });
  assert.equal(r.status, 200, `execute in ${id}: HTTP ${r.status}`);
  let stdout = "";
  for (const line of (await r.text()).split("\n")) {
    if (!line.trim()) continue;
    const e = JSON.parse(line);
    if (e.type === "stdout") stdout += e.text ?? "";
    if (e.type === "error") assert.fail(`execute in ${id}: ${e.error?.name}: ${e.error?.message}`);
  }
  return stdout;
}

/** createSandbox makes a sandbox through the API and returns it. */
export async function createSandbox(api, req = {}) {
  const r = await api("POST", "/v1/sandboxes", req);
  const body = await r.json();
  assert.equal(r.status, 201, `create: HTTP ${r.status} ${JSON.stringify(body)}`);
  return body;
}
