// The lifecycle actions a sandbox offers on the list and on its own page:
// pause, resume, fork, snapshot, set timeout and kill. Each asks what it
// needs in a modal <dialog> (keyboard-trapped, Escape cancels).
import { api, type Sandbox } from "./api";
import { field, h } from "./dom";
import { act, go, say } from "./ui";

/** ask shows a modal form and resolves with its data, or null if cancelled. */
export function ask(title: string, fields: HTMLElement[], submitLabel: string, danger = false): Promise<FormData | null> {
  return new Promise((resolve) => {
    const form = h("form", { method: "dialog" });
    const dlg = h(
      "dialog",
      { "aria-labelledby": "dlg-title" },
      form,
    );
    form.append(
      h("h2", { id: "dlg-title" }, title),
      ...fields,
      h(
        "div",
        { class: "buttons" },
        h("button", { type: "submit", value: "ok", class: danger ? "danger" : "" }, submitLabel),
        h("button", { type: "submit", value: "cancel", formnovalidate: true }, "Cancel"),
      ),
    );
    dlg.addEventListener("close", () => {
      const ok = dlg.returnValue === "ok";
      const data = new FormData(form);
      dlg.remove();
      resolve(ok ? data : null);
    });
    document.body.append(dlg);
    dlg.showModal();
  });
}

/** actionButtons are the buttons for sb's state; done runs after a change. */
export function actionButtons(sb: Sandbox, done: () => void, opts: { leaveOnKill?: boolean } = {}): HTMLElement {
  const id = sb.sandboxId;
  const live = sb.state === "running" || sb.state === "paused" || sb.state === "starting";
  const b = (label: string, onclick: () => void, cls = "") =>
    h("button", { type: "button", class: `small ${cls}`, onclick, "aria-label": `${label} ${id}` }, label);
  const buttons: HTMLElement[] = [];
  if (!live) return h("span", { class: "muted" }, "ended");
  if (sb.state === "running")
    buttons.push(
      b("Pause", () => void act(`Pausing ${id}`, async () => { say(`Pausing ${id}…`); await api.pause(id); say(`Paused ${id}.`); done(); })),
    );
  if (sb.state === "paused")
    buttons.push(
      b("Resume", () => void act(`Resuming ${id}`, async () => { say(`Resuming ${id}…`); await api.resume(id); say(`Resumed ${id}.`); done(); })),
    );
  buttons.push(
    b("Fork", async () => {
      const count = h("input", { type: "number", name: "count", min: 1, max: 16, value: 1, required: true });
      const data = await ask(`Fork ${id}`, [field("How many forks", count, "Each is a copy of this sandbox at this moment: variables, files and processes.")], "Fork");
      if (!data) return;
      await act(`Forking ${id}`, async () => {
        say(`Forking ${id}…`);
        const forks = await api.fork(id, Number(data.get("count")));
        say(`Forked ${id}: ${forks.map((f) => f.sandboxId).join(", ")}.`);
        done();
      });
    }),
    b("Snapshot", () =>
      void act(`Snapshotting ${id}`, async () => {
        say(`Snapshotting ${id}…`);
        const sn = await api.snapshot(id);
        say(`Snapshot ${sn.snapshotId} taken of ${id}.`);
        done();
      })),
    b("Timeout", async () => {
      const secs = h("input", { type: "number", name: "seconds", min: 0, step: 1, value: 300, required: true });
      const data = await ask(`Set the timeout of ${id}`, [field("Seconds from now", secs, "0 means the sandbox never expires.")], "Set timeout");
      if (!data) return;
      await act(`Setting the timeout of ${id}`, async () => {
        await api.setTimeout(id, Math.round(Number(data.get("seconds")) * 1000));
        say(`Timeout of ${id} set.`);
        done();
      });
    }),
    b("Kill", async () => {
      const data = await ask(`Kill ${id}?`, [h("p", {}, "Everything in it is lost. Snapshots taken of it are kept.")], "Kill", true);
      if (!data) return;
      await act(`Killing ${id}`, async () => {
        await api.kill(id);
        say(`Killed ${id}.`);
        if (opts.leaveOnKill) go("#/sandboxes");
        else done();
      });
    }, "danger"),
  );
  return h("div", { class: "actions", role: "group", "aria-label": `Actions on ${id}` }, buttons);
}
