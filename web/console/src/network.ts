// A sandbox's network tab: its policy by domain name and its egress log
// (docs/network.md). Names in the log are what code in the sandbox asked
// for: untrusted text, set as text nodes like every other output here.
import { api, type NetworkLogEntry, type NetworkPolicy } from "./api";
import { h, replace } from "./dom";
import type { Tab } from "./processes";

const REFRESH_MS = 3000;
const COLUMNS = ["Time", "Kind", "Name", "Address", "Port", "Verdict", "Out", "In", "Reason"];

export function networkTab(id: string): Tab {
  let stopped = false;
  let started = false;
  let timer: number | undefined;
  const policy = h("dl", { class: "facts", id: "network-policy" });
  const tbody = h("tbody");
  const table = h(
    "table",
    { class: "list", id: "network-log" },
    h("caption", {}, "Egress decisions, newest first (the last 1000)"),
    h("thead", {}, h("tr", {}, COLUMNS.map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );

  function showPolicy(p: NetworkPolicy | undefined): void {
    if (!p) {
      replace(policy, h("dt", {}, "Policy"), h("dd", {}, "none: the server's egress as it is"));
      return;
    }
    replace(
      policy,
      h("dt", {}, "Default"), h("dd", {}, p.default ?? "allow"),
      h("dt", {}, "Allow"), h("dd", {}, (p.allow ?? []).join(" ") || "none"),
      h("dt", {}, "Deny"), h("dd", {}, (p.deny ?? []).join(" ") || "none"),
    );
  }

  function row(e: NetworkLogEntry): HTMLTableRowElement {
    return h(
      "tr",
      {},
      h("td", {}, new Date(e.time).toLocaleTimeString()),
      h("td", {}, e.kind),
      h("td", { class: "meta" }, e.name ?? ""),
      h("td", {}, e.addr ?? ""),
      h("td", {}, e.port ? String(e.port) : ""),
      h("td", {}, e.allowed ? "allowed" : "denied"),
      h("td", {}, String(e.bytesOut ?? 0)),
      h("td", {}, String(e.bytesIn ?? 0)),
      h("td", { class: "meta" }, e.reason ?? ""),
    );
  }

  async function refresh(): Promise<void> {
    window.clearTimeout(timer);
    try {
      const [sb, log] = await Promise.all([api.getSandbox(id), api.networkLog(id)]);
      if (stopped) return;
      showPolicy(sb.network);
      if (!log.length) replace(tbody, h("tr", {}, h("td", { colspan: COLUMNS.length, class: "muted" }, "No egress decisions yet.")));
      else replace(tbody, ...log.slice().reverse().map(row));
    } catch {
      /* the sandbox ended: its page says so */
    }
    if (!stopped) timer = window.setTimeout(refresh, REFRESH_MS);
  }

  replace(tbody, h("tr", {}, h("td", { colspan: COLUMNS.length, class: "muted" }, "Shown once the sandbox is running.")));
  return {
    el: h(
      "section",
      { class: "card", "aria-labelledby": "network-h" },
      h("h2", { id: "network-h" }, "Network"),
      h("p", { class: "muted small" }, "Its policy by domain name and every DNS answer and connection the node's resolver and proxy decided."),
      policy,
      table,
    ),
    start() {
      if (started) return;
      started = true;
      void refresh();
    },
    stop() {
      stopped = true;
      window.clearTimeout(timer);
    },
  };
}
