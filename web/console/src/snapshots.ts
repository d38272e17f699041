// The project's snapshots: restore one into a new sandbox, or delete it.
import { api, type Snapshot } from "./api";
import { ask } from "./actions";
import { ago, bytes, field, h, replace } from "./dom";
import { act, go, say } from "./ui";

export function snapshotsPage(main: HTMLElement): () => void {
  const tbody = h("tbody");
  const table = h(
    "table",
    { class: "list", id: "snapshot-table" },
    h("caption", {}, "Snapshots, newest first"),
    h("thead", {}, h("tr", {}, ["Snapshot", "Of sandbox", "Template", "Taken", "Size", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  let stopped = false;

  async function refresh(): Promise<void> {
    const sns = await act("Listing snapshots", () => api.listSnapshots());
    if (!sns || stopped) return;
    if (!sns.length) {
      replace(tbody, h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No snapshots. Take one from a sandbox's Snapshot button.")));
      return;
    }
    replace(tbody, sns.map(row));
  }

  function row(sn: Snapshot): HTMLElement {
    const restore = h("button", { type: "button", class: "small", "aria-label": `Restore ${sn.snapshotId}` }, "Restore");
    restore.addEventListener("click", async () => {
      const secs = h("input", { type: "number", name: "seconds", min: 0, step: 1, placeholder: "server default" });
      const data = await ask(`Restore ${sn.snapshotId} into a new sandbox`, [field("Timeout (seconds)", secs, "Empty: the server's default; 0: never expires.")], "Restore");
      if (!data) return;
      const t = String(data.get("seconds") ?? "");
      say(`Restoring ${sn.snapshotId}…`);
      const sb = await act(`Restoring ${sn.snapshotId}`, () =>
        api.createSandbox({ snapshotId: sn.snapshotId, timeoutMs: t === "" ? undefined : Math.round(Number(t) * 1000) }),
      );
      if (sb) {
        say(`Restored ${sn.snapshotId} into ${sb.sandboxId}.`);
        go(`#/sandboxes/${encodeURIComponent(sb.sandboxId)}`);
      }
    });
    const del = h("button", { type: "button", class: "small danger", "aria-label": `Delete ${sn.snapshotId}` }, "Delete");
    del.addEventListener("click", async () => {
      if (!(await ask(`Delete ${sn.snapshotId}?`, [h("p", {}, "Sandboxes restored from it keep running.")], "Delete", true))) return;
      if (await act(`Deleting ${sn.snapshotId}`, () => api.deleteSnapshot(sn.snapshotId).then(() => true))) {
        say(`Deleted ${sn.snapshotId}.`);
        await refresh();
      }
    });
    return h(
      "tr",
      { "data-id": sn.snapshotId },
      h("th", { scope: "row" }, sn.snapshotId),
      h("td", {}, h("a", { href: `#/sandboxes/${encodeURIComponent(sn.sandboxId)}` }, sn.sandboxId)),
      h("td", {}, sn.template),
      h("td", {}, `${ago(sn.createdAt)} ago`),
      h("td", {}, bytes(sn.sizeBytes)),
      h("td", {}, h("div", { class: "actions" }, restore, del)),
    );
  }

  main.append(h("h1", {}, "Snapshots"), table);
  void refresh();
  return () => {
    stopped = true;
  };
}
