// One sandbox: its facts and actions, then one of five tabs: a playground
// of code cells (Python in a chosen context, JavaScript, bash) whose output
// streams as it comes, a command runner and a files panel; a terminal; its
// background processes; its network policy and egress log; a desktop
// sandbox's live screen.
import { api, ApiError, stream, type Context, type EntryInfo, type ExecuteEvent, type ProcessEvent, type Sandbox } from "./api";
import { metricsChart } from "./metrics";
import { processesTab, terminalTab } from "./processes";
import { networkTab } from "./network";
import { desktopTab } from "./desktop";
import { actionButtons } from "./actions";
import { ago, bytes, field, h, replace, uid } from "./dom";
import * as render from "./render";
import { resources, stateBadge, timeLeft } from "./sandboxes";
import { act, say, showError } from "./ui";

const REFRESH_MS = 3000;

export type SandboxTab = "playground" | "terminal" | "processes" | "network" | "desktop";

export function sandboxPage(main: HTMLElement, id: string, tab: SandboxTab = "playground"): () => void {
  const facts = h("dl", { class: "facts" });
  const usage = metricsChart(id);
  const actions = h("div");
  let stopped = false;
  let timer: number | undefined;
  let shownKey = "";
  let looked = false;
  const aborts = new Set<AbortController>();

  async function refresh(): Promise<void> {
    window.clearTimeout(timer);
    try {
      const sb = await api.getSandbox(id);
      if (stopped) return;
      show(sb);
    } catch (e) {
      if (stopped) return;
      showError(e, `Reading ${id}`);
      // No such sandbox in this project: asking again will not change that.
      if (e instanceof ApiError && e.status === 404) return;
    }
    if (!stopped) timer = window.setTimeout(refresh, REFRESH_MS);
  }

  function show(sb: Sandbox): void {
    const now = Date.now();
    replace(
      facts,
      h("dt", {}, "State"), h("dd", { id: "sb-state" }, stateBadge(sb.state)),
      h("dt", {}, "Template"), h("dd", {}, sb.template),
      h("dt", {}, "Age"), h("dd", {}, ago(sb.createdAt, now)),
      h("dt", {}, "Time left"), h("dd", {}, timeLeft(sb, now)),
      h("dt", {}, "Resources"), h("dd", {}, resources(sb)),
      ...(sb.parentSandboxId ? [h("dt", {}, "Made by"), h("dd", {}, h("a", { href: `#/sandboxes/${encodeURIComponent(sb.parentSandboxId)}` }, sb.parentSandboxId))] : []),
      h("dt", {}, "Metadata"), h("dd", {}, Object.entries(sb.metadata).map(([k, v]) => `${k}=${v}`).join(", ") || "none"),
    );
    usage.running(sb.state === "running");
    // Keep the buttons (and keyboard focus on them) unless the state moved.
    const key = sb.state;
    if (key !== shownKey) {
      shownKey = key;
      replace(actions, actionButtons(sb, () => void refresh(), { leaveOnKill: true }));
      // Sandbox-scoped calls resume a paused sandbox: look inside it only
      // once it runs, never just because its page was opened.
      if (sb.state === "running" && !looked) {
        looked = true;
        if (tab === "playground") {
          void loadContexts();
          void files.load();
        } else other?.start();
      }
    }
  }

  const cells = h("div", { class: "cells" });
  const contexts: Context[] = [];
  const contextSelects = new Set<HTMLSelectElement>();

  async function loadContexts(): Promise<void> {
    try {
      const cs = await api.listContexts(id);
      contexts.splice(0, contexts.length, ...cs.filter((c) => c.language === "python"));
      for (const s of contextSelects) fillContexts(s);
    } catch {
      /* a paused or starting sandbox: the default context is still offered */
    }
  }

  function fillContexts(sel: HTMLSelectElement): void {
    const cur = sel.value;
    replace(
      sel,
      h("option", { value: "" }, "default"),
      contexts.filter((c) => !c.id.startsWith("default")).map((c) => h("option", { value: c.id }, `${c.id} (${c.cwd})`)),
    );
    sel.value = cur;
  }

  function addCell(code = "", language = "python"): void {
    const n = cells.children.length + 1;
    const lang = h(
      "select",
      { name: "language" },
      h("option", { value: "python" }, "Python"),
      h("option", { value: "javascript" }, "JavaScript"),
      h("option", { value: "bash" }, "Bash"),
    );
    lang.value = language;
    const ctx = h("select", { name: "context" });
    contextSelects.add(ctx);
    fillContexts(ctx);
    const newCtx = h("button", { type: "button", class: "small" }, "New context");
    const ctxField = h("div", { class: "ctx" }, field("Context", ctx), newCtx);
    const src = h("textarea", { class: "code", spellcheck: "false", "aria-keyshortcuts": "Control+Enter Shift+Enter" });
    src.value = code;
    const run = h("button", { type: "button", class: "run" }, "Run");
    const stop = h("button", { type: "button", class: "small", disabled: true }, "Stop");
    const count = h("span", { class: "count", "aria-label": "Execution count" }, "[ ]");
    const out = h("div", { class: "output", role: "log", "aria-live": "polite", "aria-label": `Output of cell ${n}` });
    const cell = h(
      "section",
      { class: "cell card", "aria-label": `Cell ${n}` },
      h("div", { class: "cell-bar" }, count, field(`Language of cell ${n}`, lang), ctxField, h("span", { class: "grow" }), run, stop),
      field(`Code of cell ${n}`, src, "Ctrl+Enter or Shift+Enter runs the cell."),
      out,
    );
    // The code box grows with its code, up to a screenful.
    const grow = () => (src.rows = Math.min(30, Math.max(3, src.value.split("\n").length + 1)));
    src.addEventListener("input", grow);
    grow();
    const syncCtx = () => (ctxField.hidden = lang.value !== "python");
    lang.addEventListener("change", syncCtx);
    syncCtx();
    newCtx.addEventListener("click", () =>
      void act("Creating a context", async () => {
        const c = await api.createContext(id, "python");
        contexts.push(c);
        for (const s of contextSelects) fillContexts(s);
        ctx.value = c.id;
        say(`Context ${c.id} created: its own kernel and variables.`);
      }),
    );

    async function exec(): Promise<void> {
      if (run.disabled) return;
      const ac = new AbortController();
      aborts.add(ac);
      run.disabled = true;
      stop.disabled = false;
      count.textContent = "[*]";
      out.replaceChildren();
      cell.dataset.state = "running";
      let textEl: HTMLPreElement | null = null;
      let textKind = "";
      const text = (kind: string, s: string) => {
        if (!textEl || textKind !== kind) {
          textEl = h("pre", { class: `out ${kind}` });
          textKind = kind;
          out.append(textEl);
        }
        textEl.append(render.stripAnsi(s));
      };
      try {
        const resp = await api.execute(id, { code: src.value, language: lang.value, contextId: lang.value === "python" && ctx.value ? ctx.value : undefined }, ac.signal);
        const end = await stream<ExecuteEvent>(resp, (e) => {
          switch (e.type) {
            case "stdout":
            case "stderr":
              text(e.type, e.text ?? "");
              break;
            case "result":
              if (e.result) out.append(render.result(e.result));
              textEl = null;
              break;
            case "error":
              if (e.error) out.append(render.error(e.error));
              textEl = null;
              break;
          }
        });
        count.textContent = end.executionCount ? `[${end.executionCount}]` : "[✓]";
        cell.dataset.state = out.querySelector(".exec-error") ? "error" : "done";
      } catch (e) {
        count.textContent = "[!]";
        cell.dataset.state = "failed";
        // Closing the stream interrupts a Python kernel (its state is kept);
        // JavaScript and bash processes are ended.
        if (e instanceof DOMException && e.name === "AbortError") out.append(h("p", { class: "muted" }, "Stopped: the run was interrupted."));
        else {
          out.append(h("p", { class: "form-error" }, e instanceof Error ? e.message : String(e)));
          showError(e, "Running the cell");
        }
      } finally {
        aborts.delete(ac);
        run.disabled = false;
        stop.disabled = true;
      }
    }
    run.addEventListener("click", () => void exec());
    stop.addEventListener("click", () => {
      for (const ac of aborts) ac.abort();
    });
    src.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey || ev.shiftKey)) {
        ev.preventDefault();
        void exec();
      }
    });
    cells.append(cell);
  }

  const files = filesPanel(id);
  const addBtn = h("button", { type: "button" }, "Add cell");
  addBtn.addEventListener("click", () => {
    addCell();
    cells.lastElementChild?.querySelector("textarea")?.focus();
  });
  addCell('import pandas as pd\ndf = pd.DataFrame({"x": [1, 2, 3]})\ndf.x.sum()');

  const base = `#/sandboxes/${encodeURIComponent(id)}`;
  const tabs = h(
    "nav",
    { class: "tabs", "aria-label": "Sandbox views" },
    ([["playground", "Playground", base], ["terminal", "Terminal", `${base}/terminal`], ["processes", "Processes", `${base}/processes`], ["network", "Network", `${base}/network`], ["desktop", "Desktop", `${base}/desktop`]] as const).map(
      ([t, label, href]) => h("a", { href, "aria-current": t === tab ? "page" : undefined }, label),
    ),
  );
  // The terminal and processes tabs look inside the sandbox only once it
  // runs, as the playground does.
  const other = tab === "terminal" ? terminalTab(id) : tab === "processes" ? processesTab(id) : tab === "network" ? networkTab(id) : tab === "desktop" ? desktopTab(id) : undefined;
  main.append(
    h("p", {}, h("a", { href: "#/sandboxes" }, "← All sandboxes")),
    h("h1", {}, `Sandbox ${id}`),
    h("div", { class: "card sb-card" }, h("div", {}, facts, actions), usage.el),
    tabs,
  );
  if (other) main.append(other.el);
  else main.append(h("h2", {}, "Playground"), cells, addBtn, h("div", { class: "two" }, commandRunner(id, aborts), files.el));
  void refresh();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
    for (const ac of aborts) ac.abort();
    other?.stop();
    usage.stop();
  };
}

function commandRunner(id: string, aborts: Set<AbortController>): HTMLElement {
  const cmd = h("input", { type: "text", name: "cmd", spellcheck: "false", placeholder: "ls -la /home/user", autocomplete: "off" });
  const out = h("pre", { class: "out cmd-out", role: "log", "aria-live": "polite", "aria-label": "Command output" });
  const exit = h("p", { class: "muted", "aria-live": "polite" });
  const run = h("button", { type: "submit" }, "Run command");
  const form = h("form", {}, field("Command (bash -c)", cmd), run);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (!cmd.value.trim()) return;
    const ac = new AbortController();
    aborts.add(ac);
    run.disabled = true;
    out.replaceChildren();
    exit.textContent = "Running…";
    try {
      const resp = await api.process(id, cmd.value, ac.signal);
      const end = await stream<ProcessEvent>(resp, (e) => {
        if (e.type === "stdout" || e.type === "stderr") out.append(h("span", { class: e.type }, render.stripAnsi(e.text ?? "")));
      });
      exit.textContent = end.error ? `Exit code ${end.exitCode}: ${end.error}` : `Exit code ${end.exitCode}`;
    } catch (e) {
      exit.textContent = "";
      showError(e, "Running the command");
    } finally {
      aborts.delete(ac);
      run.disabled = false;
    }
  });
  return h("section", { class: "card", "aria-labelledby": "cmd-h" }, h("h2", { id: "cmd-h" }, "Command"), form, exit, out);
}

function filesPanel(id: string): { el: HTMLElement; load: () => Promise<void> } {
  let dir = "/home/user";
  const pathInput = h("input", { type: "text", name: "path", spellcheck: "false", value: dir });
  const go = h("button", { type: "submit" }, "Open");
  const nav = h("form", { class: "row" }, field("Directory", pathInput), go);
  const tbody = h("tbody");
  const table = h(
    "table",
    { class: "list files", id: "files-table" },
    h("caption", { class: "visually-hidden" }, "Files"),
    h("thead", {}, h("tr", {}, ["Name", "Size", "Modified", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  const fileInput = h("input", { type: "file", name: "upload", multiple: true });
  const upload = h("button", { type: "submit" }, "Upload");
  const upForm = h("form", { class: "row" }, field("Upload files into this directory", fileInput), upload);
  const mkdirName = h("input", { type: "text", name: "dirname", spellcheck: "false" });
  const mkForm = h("form", { class: "row" }, field("New folder", mkdirName), h("button", { type: "submit" }, "Make folder"));

  const join = (d: string, n: string) => (d.endsWith("/") ? d + n : `${d}/${n}`);
  const parent = (d: string) => d.replace(/\/[^/]+\/?$/, "") || "/";

  async function list(to: string): Promise<void> {
    const entries = await act(`Listing ${to}`, () => api.listDir(id, to));
    if (!entries) return;
    dir = to;
    pathInput.value = to;
    const rows: HTMLElement[] = [];
    if (to !== "/") rows.push(h("tr", {}, h("td", { colspan: 4 }, h("button", { type: "button", class: "link", onclick: () => void list(parent(to)) }, ".. (parent directory)"))));
    for (const e of entries) rows.push(row(e));
    if (!entries.length) rows.push(h("tr", {}, h("td", { colspan: 4, class: "muted" }, "Empty directory.")));
    replace(tbody, rows);
  }

  function row(e: EntryInfo): HTMLElement {
    const p = join(dir, e.name);
    const name =
      e.type === "dir"
        ? h("button", { type: "button", class: "link", onclick: () => void list(p) }, `${e.name}/`)
        : h("span", {}, e.type === "symlink" ? `${e.name} →` : e.name);
    const buttons: HTMLElement[] = [];
    if (e.type === "file")
      buttons.push(
        h("button", {
          type: "button", class: "small", "aria-label": `Download ${e.name}`,
          onclick: () =>
            void act(`Downloading ${p}`, async () => {
              const blob = await api.readFile(id, p);
              const url = URL.createObjectURL(blob);
              const a = h("a", { href: url, download: e.name, hidden: true });
              document.body.append(a);
              a.click();
              a.remove();
              setTimeout(() => URL.revokeObjectURL(url), 60_000);
              say(`Downloaded ${e.name} (${bytes(blob.size)}).`);
            }),
        }, "Download"),
      );
    buttons.push(
      h("button", {
        type: "button", class: "small danger", "aria-label": `Delete ${e.name}`,
        onclick: () =>
          void act(`Deleting ${p}`, async () => {
            await api.removeFile(id, p);
            say(`Deleted ${p}.`);
            void list(dir);
          }),
      }, "Delete"),
    );
    return h(
      "tr",
      { "data-name": e.name, "data-type": e.type },
      h("th", { scope: "row" }, name),
      h("td", {}, e.type === "dir" ? "—" : bytes(e.size)),
      h("td", {}, new Date(e.modTime).toLocaleString()),
      h("td", {}, h("div", { class: "actions" }, buttons)),
    );
  }

  nav.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void list(pathInput.value.trim() || "/home/user");
  });
  upForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const files = [...(fileInput.files ?? [])];
    if (!files.length) return;
    upload.disabled = true;
    for (const f of files) {
      const done = await act(`Uploading ${f.name}`, () => api.writeFile(id, join(dir, f.name), f));
      if (done) say(`Uploaded ${f.name} to ${done.path}.`);
    }
    upload.disabled = false;
    fileInput.value = "";
    await list(dir);
  });
  mkForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = mkdirName.value.trim();
    if (!name) return;
    if (await act(`Making ${name}`, () => api.makeDir(id, join(dir, name)))) {
      mkdirName.value = "";
      await list(dir);
    }
  });
  const refresh = h("button", { type: "button", class: "small" }, "Refresh");
  refresh.addEventListener("click", () => void list(dir));
  replace(tbody, h("tr", {}, h("td", { colspan: 4, class: "muted" }, "Shown once the sandbox is running (opening a paused sandbox's files would resume it).")));
  const hid = uid("files-h");
  return {
    el: h("section", { class: "card", "aria-labelledby": hid }, h("h2", { id: hid }, "Files ", refresh), nav, table, upForm, mkForm),
    load: () => list(dir),
  };
}
