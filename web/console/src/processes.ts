// A sandbox's terminal tab (a login shell in xterm.js over its process's
// WebSocket) and its processes tab (start, list, follow the output of any
// with its kept output replayed, send a signal). docs/processes.md.
import { api, type ProcessInfo } from "./api";
import { field, h, replace } from "./dom";
import { termView, type TermView } from "./terminal";
import { act, say } from "./ui";

export interface Tab {
  el: HTMLElement;
  /** start runs once the sandbox is seen running. */
  start(): void;
  /** stop runs when the page is left. */
  stop(): void;
}

/**
 * terminalTab opens a login shell in a terminal the size of its box. Leaving
 * the page hangs it up (SIGHUP), as closing a terminal window does; one left
 * some other way (the browser tab closed) runs on and is in the processes tab.
 */
export function terminalTab(id: string): Tab {
  const holder = h("div");
  const again = h("button", { type: "button", hidden: true }, "New terminal");
  let view: TermView | undefined;
  let pid: number | undefined;
  let ended = false;

  async function open(): Promise<void> {
    view?.dispose();
    ended = false;
    again.hidden = true;
    view = termView(id, "Terminal", {
      interactive: true,
      onEnd: (_msg, sandboxGone) => {
        ended = true;
        again.hidden = sandboxGone;
      },
    });
    replace(holder, view.el);
    const p = await act("Starting a terminal", () => api.startProcess(id, { pty: view!.size(), tag: "console" }));
    if (!p) {
      again.hidden = false;
      return;
    }
    pid = p.pid;
    view.attach(p.pid);
  }
  again.addEventListener("click", () => void open());
  return {
    el: h(
      "section",
      { class: "card", "aria-labelledby": "term-h" },
      h("h2", { id: "term-h" }, "Terminal"),
      h("p", { class: "muted small" }, "A login shell in the sandbox. Leaving this page hangs it up; processes it started in the background with nohup run on."),
      holder,
      again,
    ),
    start: () => void open(),
    stop() {
      if (pid !== undefined && !ended) void api.signal(id, pid, "HUP").catch(() => {});
      view?.dispose();
    },
  };
}

const SIGNALS = ["TERM", "INT", "KILL", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT"];
const REFRESH_MS = 3000;

export function processesTab(id: string): Tab {
  let stopped = false;
  let started = false;
  let timer: number | undefined;
  let viewer: TermView | undefined;
  const rows = new Map<number, { tr: HTMLTableRowElement; key: string }>();

  const cmd = h("input", { type: "text", name: "cmd", spellcheck: "false", autocomplete: "off", placeholder: "python3 -m http.server 8000" });
  const tag = h("input", { type: "text", name: "tag", spellcheck: "false", autocomplete: "off", maxlength: 256 });
  const startForm = h("form", { class: "row" }, field("Command (bash -c)", cmd), field("Tag", tag), h("button", { type: "submit" }, "Start"));
  const tbody = h("tbody");
  const table = h(
    "table",
    { class: "list", id: "processes-table" },
    h("caption", {}, "Processes: running ones first, then the last that ended"),
    h("thead", {}, h("tr", {}, ["PID", "Tag", "Command", "Status", "Terminal", "Started", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  const output = h("div");
  replace(tbody, h("tr", {}, h("td", { colspan: 7, class: "muted" }, "Shown once the sandbox is running (listing a paused sandbox's processes would resume it).")));

  const status = (p: ProcessInfo) =>
    p.running ? "running" : `exited ${p.exitCode ?? "?"}${p.error ? `: ${p.error}` : ""}`;
  const command = (p: ProcessInfo) => p.cmd ?? p.args.join(" ");

  function row(p: ProcessInfo): HTMLTableRowElement {
    const sig = h("select", { name: "signal", "aria-label": `Signal for process ${p.pid}` }, SIGNALS.map((s) => h("option", { value: s }, s)));
    const send = h("button", { type: "button", class: "small danger", "aria-label": `Send the signal to process ${p.pid}` }, "Send");
    send.addEventListener("click", () =>
      void act(`Sending ${sig.value} to process ${p.pid}`, async () => {
        await api.signal(id, p.pid, sig.value);
        say(`Sent ${sig.value} to process ${p.pid}.`);
        void refresh();
      }),
    );
    const out = h("button", { type: "button", class: "small", "aria-label": `Output of process ${p.pid}` }, "Output");
    out.addEventListener("click", () => follow(p));
    const st = h("td", {}, status(p));
    return h(
      "tr",
      { "data-pid": String(p.pid) },
      h("th", { scope: "row" }, String(p.pid)),
      h("td", {}, p.tag ?? ""),
      h("td", { class: "meta" }, command(p)),
      st,
      h("td", {}, p.pty ? `${p.pty.cols}×${p.pty.rows}` : "no"),
      h("td", {}, new Date(p.startedAt).toLocaleTimeString()),
      h("td", {}, h("div", { class: "actions" }, out, p.running ? [sig, send] : [])),
    );
  }

  function follow(p: ProcessInfo): void {
    viewer?.dispose();
    const title = p.pty ? `Terminal of process ${p.pid}` : `Output of process ${p.pid}`;
    viewer = termView(id, title, { interactive: !!p.pty && p.running });
    const close = h("button", { type: "button", class: "small" }, "Close");
    close.addEventListener("click", () => {
      viewer?.dispose();
      viewer = undefined;
      output.replaceChildren();
    });
    const section = h("section", { class: "card", "aria-label": title }, h("h3", {}, `${title}: ${command(p)} `, close), viewer.el);
    replace(output, section);
    viewer.attach(p.pid);
    // xterm does not draw while it is out of view.
    section.scrollIntoView({ block: "nearest" });
  }

  async function refresh(): Promise<void> {
    window.clearTimeout(timer);
    try {
      const list = await api.listProcesses(id);
      if (stopped) return;
      if (!list.length) {
        rows.clear();
        replace(tbody, h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No background processes.")));
      }
      else {
        if (!rows.size) tbody.replaceChildren();
        const seen = new Set<number>();
        // Rows are kept while nothing about them changed, so a chosen signal
        // and keyboard focus survive a refresh.
        for (const p of list) {
          seen.add(p.pid);
          const key = status(p);
          const have = rows.get(p.pid);
          if (have && have.key === key) {
            tbody.append(have.tr);
            continue;
          }
          const tr = row(p);
          if (have) have.tr.replaceWith(tr);
          tbody.append(tr);
          rows.set(p.pid, { tr, key });
        }
        for (const [pid, r] of rows) {
          if (!seen.has(pid)) {
            r.tr.remove();
            rows.delete(pid);
          }
        }
      }
    } catch {
      /* the sandbox paused or ended: its page says so */
    }
    if (!stopped) timer = window.setTimeout(refresh, REFRESH_MS);
  }

  startForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (!cmd.value.trim()) return;
    void act("Starting the process", async () => {
      const p = await api.startProcess(id, { cmd: cmd.value, tag: tag.value.trim() || undefined });
      say(`Started process ${p.pid}.`);
      cmd.value = "";
      await refresh();
      follow(p);
    });
  });
  const again = h("button", { type: "button", class: "small" }, "Refresh");
  again.addEventListener("click", () => void refresh());

  return {
    el: h(
      "div",
      {},
      h(
        "section",
        { class: "card", "aria-labelledby": "procs-h" },
        h("h2", { id: "procs-h" }, "Processes ", again),
        h("p", { class: "muted small" }, "Background processes run on when no one watches; their last 1 MiB of output is kept and replayed to whoever opens it."),
        startForm,
        table,
      ),
      output,
    ),
    start() {
      if (started) return;
      started = true;
      void refresh();
    },
    stop() {
      stopped = true;
      window.clearTimeout(timer);
      viewer?.dispose();
    },
  };
}
