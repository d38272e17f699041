// The project's sandboxes: a live list (refreshed every few seconds while
// shown), filters by state and metadata, and the create form.
import { api, type CreateSandboxRequest, type Sandbox } from "./api";
import { actionButtons } from "./actions";
import { ago, duration, field, h, pairs, replace } from "./dom";
import { act, clearError, go, say, showError } from "./ui";

const REFRESH_MS = 3000;
const STATES = ["starting", "running", "paused", "killed", "expired", "failed"] as const;
const LIVE = ["starting", "running", "paused"];

/** timeLeft says how long the sandbox has before its timeout. */
export function timeLeft(sb: Sandbox, now = Date.now()): string {
  if (sb.endedAt) return "—";
  if (sb.state === "paused") return "paused (clock stopped)";
  if (!sb.expiresAt) return sb.timeoutMs === 0 ? "never expires" : "—";
  return duration(new Date(sb.expiresAt).getTime() - now);
}

/** resources says what a sandbox runs with: memory, CPUs, disk. */
export function resources(sb: Sandbox): string {
  const parts: string[] = [];
  if (sb.memoryMb) parts.push(`${sb.memoryMb} MiB`);
  if (sb.cpus) parts.push(`${sb.cpus} CPU`);
  if (sb.diskMb) parts.push(`${sb.diskMb} MiB disk`);
  return parts.join(", ") || "defaults";
}

function metadataText(m: Record<string, string>): string {
  return Object.entries(m).map(([k, v]) => `${k}=${v}`).join(", ");
}

export function stateBadge(state: string): HTMLElement {
  return h("span", { class: `badge state-${state}` }, state);
}

export function sandboxesPage(main: HTMLElement): () => void {
  // Filters: states as checkboxes (live ones by default), metadata as k=v.
  const stateBoxes = STATES.map((s) => h("input", { type: "checkbox", name: "state", value: s, checked: LIVE.includes(s) }));
  const metaInput = h("input", { type: "text", name: "metadata", placeholder: "user=alice, run=7", spellcheck: "false" });
  const filters = h(
    "form",
    { class: "filters", "aria-label": "Filter sandboxes" },
    h("fieldset", {}, h("legend", {}, "State"), stateBoxes.map((b) => h("label", { class: "inline" }, b, ` ${b.value}`))),
    field("Metadata", metaInput, "KEY=VALUE pairs, comma-separated; all must match."),
    h("button", { type: "submit" }, "Apply filters"),
  );
  const tbody = h("tbody");
  const caption = h("caption", {}, "Sandboxes");
  const table = h(
    "table",
    { class: "list", id: "sandbox-table" },
    caption,
    h("thead", {}, h("tr", {}, ["Sandbox", "State", "Template", "Age", "Time left", "Timeout", "Resources", "Metadata", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  const updated = h("p", { class: "muted small", "aria-live": "off" });

  let timer: number | undefined;
  let stopped = false;
  let rowsKey = "";

  const filter = () => {
    const state = stateBoxes.filter((b) => b.checked).map((b) => b.value);
    const metadata = metaInput.value.split(",").map((s) => s.trim()).filter(Boolean);
    return { state: state.length === STATES.length ? undefined : state, metadata };
  };

  async function refresh(): Promise<void> {
    window.clearTimeout(timer);
    try {
      const sbs = await api.listSandboxes(filter());
      if (stopped) return;
      sbs.sort((a, b) => b.createdAt.localeCompare(a.createdAt));
      render(sbs);
      updated.textContent = `Updated ${new Date().toLocaleTimeString()}; refreshes every ${REFRESH_MS / 1000} s.`;
    } catch (e) {
      if (!stopped) showError(e, "Listing sandboxes");
    }
    if (!stopped) timer = window.setTimeout(refresh, REFRESH_MS);
  }

  function render(sbs: Sandbox[]): void {
    // Rebuilding rows would take keyboard focus away from a button every
    // few seconds: only rebuild when something but the clocks changed, and
    // otherwise update the clocks in place.
    const key = JSON.stringify(sbs.map((s) => [s.sandboxId, s.state, s.expiresAt, s.timeoutMs, s.metadata]));
    const now = Date.now();
    if (key === rowsKey) {
      for (const sb of sbs) {
        const row = tbody.querySelector<HTMLTableRowElement>(`tr[data-id="${CSS.escape(sb.sandboxId)}"]`);
        if (!row) continue;
        row.cells[3].textContent = ago(sb.createdAt, now);
        row.cells[4].textContent = timeLeft(sb, now);
      }
      return;
    }
    rowsKey = key;
    caption.textContent = `Sandboxes (${sbs.length})`;
    if (!sbs.length) {
      replace(tbody, h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No sandboxes match. Create one above.")));
      return;
    }
    replace(
      tbody,
      sbs.map((sb) =>
        h(
          "tr",
          { "data-id": sb.sandboxId, "data-state": sb.state },
          h("th", { scope: "row" }, h("a", { href: `#/sandboxes/${encodeURIComponent(sb.sandboxId)}` }, sb.sandboxId)),
          h("td", {}, stateBadge(sb.state)),
          h("td", {}, sb.template),
          h("td", {}, ago(sb.createdAt, now)),
          h("td", {}, timeLeft(sb, now)),
          h("td", {}, sb.timeoutMs ? duration(sb.timeoutMs) : "none"),
          h("td", {}, resources(sb)),
          h("td", { class: "meta" }, metadataText(sb.metadata)),
          h("td", {}, actionButtons(sb, () => void refresh())),
        ),
      ),
    );
  }

  filters.addEventListener("submit", (ev) => {
    ev.preventDefault();
    rowsKey = "";
    void refresh();
  });

  main.append(
    h("h1", {}, "Sandboxes"),
    createForm(() => void refresh()),
    filters,
    table,
    updated,
  );
  void refresh();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

function createForm(created: () => void): HTMLElement {
  const template = h("input", { type: "text", name: "template", placeholder: "interpreter", spellcheck: "false" });
  const timeout = h("input", { type: "number", name: "timeout", min: 0, step: 1, placeholder: "300" });
  const onTimeout = h("select", { name: "onTimeout" }, h("option", { value: "" }, "kill (default)"), h("option", { value: "pause" }, "pause"));
  const envs = h("textarea", { name: "envs", rows: 2, placeholder: "KEY=VALUE per line", spellcheck: "false" });
  const metadata = h("textarea", { name: "metadata", rows: 2, placeholder: "user=alice", spellcheck: "false" });
  const memory = h("input", { type: "number", name: "memoryMb", min: 64, step: 1, placeholder: "server default" });
  const cpus = h("input", { type: "number", name: "cpus", min: 0.1, step: 0.1, placeholder: "server default" });
  const disk = h("input", { type: "number", name: "diskMb", min: 16, step: 1, placeholder: "server default" });
  const internet = h("select", { name: "allowInternet" }, h("option", { value: "" }, "as the server allows"), h("option", { value: "false" }, "no network egress"));
  const token = h("input", { type: "checkbox", name: "lizardToken" });
  const open = h("input", { type: "checkbox", name: "open", checked: true });
  const submit = h("button", { type: "submit" }, "Create sandbox");
  const form = h(
    "form",
    { class: "grid" },
    field("Template", template),
    field("Timeout (seconds)", timeout, "Empty: the server's default; 0: never expires."),
    field("When the timeout passes", onTimeout),
    field("Memory (MiB)", memory),
    field("CPUs", cpus),
    field("Disk (MiB)", disk),
    field("Network", internet),
    field("Environment variables", envs, "Given to the code; never shown again by the API."),
    field("Metadata", metadata, "Labels, usable as list filters."),
    h("label", { class: "inline" }, token, " Give it an API key of this project (lizardToken)"),
    h("label", { class: "inline" }, open, " Open it once created"),
    h("div", { class: "buttons" }, submit),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let req: CreateSandboxRequest;
    try {
      req = {
        template: template.value.trim() || undefined,
        timeoutMs: timeout.value === "" ? undefined : Math.round(Number(timeout.value) * 1000),
        onTimeout: onTimeout.value === "pause" ? "pause" : undefined,
        memoryMb: memory.value === "" ? undefined : Number(memory.value),
        cpus: cpus.value === "" ? undefined : Number(cpus.value),
        diskMb: disk.value === "" ? undefined : Number(disk.value),
        allowInternet: internet.value === "false" ? false : undefined,
        envs: pairs(envs.value, "Environment variables"),
        metadata: pairs(metadata.value, "Metadata"),
        lizardToken: token.checked || undefined,
      };
    } catch (e) {
      showError(e);
      return;
    }
    submit.disabled = true;
    submit.textContent = "Creating…";
    say("Creating a sandbox…");
    const sb = await act("Creating a sandbox", () => api.createSandbox(req));
    submit.disabled = false;
    submit.textContent = "Create sandbox";
    if (!sb) return;
    clearError();
    say(`Created ${sb.sandboxId}.`);
    if (open.checked) go(`#/sandboxes/${encodeURIComponent(sb.sandboxId)}`);
    else created();
  });
  return h("details", { class: "card", id: "create" }, h("summary", {}, "New sandbox"), form);
}
