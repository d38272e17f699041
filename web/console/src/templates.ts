// The project's custom templates (docs/templates.md): the list, a
// template's page with its recipe, delete, and a build from a recipe whose
// events stream into the page as they come. A build is bound to its
// request (the API cancels it when the client goes away), so leaving the
// page cancels it too, and the page says so.
import { api, stream, type BuildTemplateRequest, type Template, type TemplateBuildEvent, type TemplateRecipe } from "./api";
import { ask } from "./actions";
import { ago, bytes, field, h, replace } from "./dom";
import { act, go, say, showError } from "./ui";

/** builtOn says what a template was built on: its image (with the digest
 * it was pinned to) or its built-in base. */
export function builtOn(t: Template, short = true): string {
  if (!t.recipe.from) return t.base || "interpreter";
  if (!t.digest) return t.recipe.from;
  return `${t.recipe.from} @ ${short ? t.digest.slice(0, "sha256:".length + 12) : t.digest}`;
}

/** buildTime says how long a build took; 0 is a build found in the cache. */
export function buildTime(ms: number): string {
  if (ms === 0) return "found in the cache";
  return ms < 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`;
}

export function templatesPage(main: HTMLElement): () => void {
  const tbody = h("tbody");
  const table = h(
    "table",
    { class: "list", id: "template-table" },
    h("caption", {}, "Templates, by name"),
    h("thead", {}, h("tr", {}, ["Template", "Built on", "Size", "Build time", "Created", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
    tbody,
  );
  let stopped = false;
  const builds = new AbortController();

  async function refresh(): Promise<void> {
    const ts = await act("Listing templates", () => api.listTemplates());
    if (!ts || stopped) return;
    if (!ts.length) {
      replace(tbody, h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No templates. Build one below, or with lizard template build.")));
      return;
    }
    replace(tbody, ts.map(row));
  }

  function row(t: Template): HTMLElement {
    return h(
      "tr",
      { "data-name": t.name },
      h("th", { scope: "row" }, h("a", { href: `#/templates/${encodeURIComponent(t.name)}` }, t.name)),
      h("td", { class: "mono" }, builtOn(t)),
      h("td", {}, bytes(t.sizeBytes)),
      h("td", {}, buildTime(t.buildMs)),
      h("td", {}, `${ago(t.createdAt)} ago`),
      h("td", {}, h("div", { class: "actions" }, deleteButton(t.name, refresh))),
    );
  }

  main.append(h("h1", {}, "Templates"), table, buildForm(builds.signal, refresh));
  void refresh();
  return () => {
    stopped = true;
    builds.abort();
  };
}

function deleteButton(name: string, done: () => void | Promise<void>): HTMLElement {
  const del = h("button", { type: "button", class: "small danger", "aria-label": `Delete ${name}` }, "Delete");
  del.addEventListener("click", async () => {
    const note = "New sandboxes cannot use it; snapshots of sandboxes made from it keep it. Refused while live sandboxes use it.";
    if (!(await ask(`Delete template ${name}?`, [h("p", {}, note)], "Delete", true))) return;
    if (await act(`Deleting ${name}`, () => api.deleteTemplate(name).then(() => true))) {
      say(`Deleted template ${name}.`);
      await done();
    }
  });
  return del;
}

/** buildForm builds a template from a recipe in JSON (the API's
 * TemplateRecipe), streaming the build's steps and output into a log. */
function buildForm(signal: AbortSignal, built: () => Promise<void>): HTMLElement {
  const name = h("input", { type: "text", name: "name", required: true, pattern: "[a-z0-9]([a-z0-9\\-]{0,61}[a-z0-9])?", spellcheck: "false" });
  const recipe = h("textarea", { name: "recipe", rows: 8, spellcheck: "false", class: "code", placeholder: '{"pip": ["httpx"], "run": [{"cmd": "echo hi"}]}' });
  const user = h("input", { type: "text", name: "username", autocomplete: "off", spellcheck: "false" });
  const pass = h("input", { type: "password", name: "password", autocomplete: "off" });
  const secret = h("input", { type: "text", name: "passwordSecret", autocomplete: "off", spellcheck: "false" });
  const skip = h("input", { type: "checkbox", name: "skipCache" });
  const submit = h("button", { type: "submit" }, "Build template");
  const log = h("pre", { class: "out", id: "build-log", role: "log", "aria-label": "Build log", hidden: true });
  // The build's progress: its step events' step of total.
  const bar = h("progress", { id: "build-progress", max: 1, value: 0, "aria-labelledby": "build-step" });
  const stepText = h("span", { id: "build-step" }, "");
  const progress = h("div", { class: "progress", hidden: true }, bar, " ", stepText);
  const form = h(
    "form",
    { class: "grid" },
    field("Name", name, "Lower-case letters, digits and dashes; a build under an existing name replaces it for new sandboxes."),
    field("Recipe (JSON)", recipe, 'The API\'s TemplateRecipe (docs/templates.md): base or from (an image), apt, pip, files, run, env, workdir, steps, start, ready.'),
    field("Registry user", user, "Only for a private from image: sent with this build, stored nowhere."),
    field("Registry password", pass),
    field("or the secret holding it", secret, "The name of a secret of the project whose hosts include the registry (docs/secrets.md)."),
    field("Skip the cache", skip, "Run every step again, even when this recipe, or its first steps, were built before (skipCache)."),
    h("div", { class: "buttons" }, submit),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let req: BuildTemplateRequest;
    try {
      const parsed: unknown = JSON.parse(recipe.value.trim() || "{}");
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("the recipe is not a JSON object");
      req = { name: name.value.trim(), recipe: parsed as TemplateRecipe };
      if (skip.checked) req.skipCache = true;
      if (secret.value.trim()) req.registry = { username: user.value, passwordSecret: secret.value.trim() };
      else if (user.value || pass.value) req.registry = { username: user.value, password: pass.value };
    } catch (e) {
      showError(e instanceof Error ? e.message : String(e), "Reading the recipe");
      return;
    }
    submit.disabled = true;
    submit.textContent = "Building…";
    log.hidden = false;
    progress.hidden = false;
    bar.max = 1;
    bar.value = 0;
    stepText.textContent = "starting";
    replace(log, `Building ${req.name}${req.skipCache ? ", every step run (skip the cache)" : ""}; leaving this page cancels the build.\n`);
    say(`Building template ${req.name}…`);
    const last = await act(`Building ${req.name}`, async () => {
      const resp = await api.buildTemplate(req, signal);
      return stream<TemplateBuildEvent>(
        resp,
        (e) => {
          log.append(line(e));
          if (e.type === "step" && e.total) {
            bar.max = e.total;
            bar.value = (e.step ?? 1) - 1;
            stepText.textContent = `step ${e.step} of ${e.total}: ${e.name ?? ""}`;
          } else if (e.type === "done") {
            bar.value = bar.max;
            stepText.textContent = e.cached ? "done: found in the cache" : "done";
          } else if (e.type === "error") {
            stepText.textContent = `failed${e.name ? ` at ${e.name}` : ""}`;
          }
        },
        (e) => e.type === "done" || e.type === "error",
      );
    });
    submit.disabled = false;
    submit.textContent = "Build template";
    if (!last) return;
    if (last.type === "error") {
      const where = last.name ? ` at step ${last.name}` : "";
      showError(`${last.message ?? "the build failed"}${where} (${last.code ?? "error"})`, `Building ${req.name}`);
      return;
    }
    say(last.cached ? `Template ${req.name}: the same recipe was built before.` : `Built template ${req.name}.`);
    await built();
  });
  return h("section", { class: "card", "aria-labelledby": "build-h" }, h("h2", { id: "build-h" }, "Build a template"), form, progress, log);
}

/** line is one event of a build as a line of its log. */
function line(e: TemplateBuildEvent): string {
  switch (e.type) {
    case "step":
      return `[${e.step}/${e.total}] ${e.name ?? ""}${e.cached ? " (cached)" : ""}\n`;
    case "log":
      return `${e.text ?? ""}\n`;
    case "done":
      return e.cached ? "done: found in the cache\n" : `done in ${buildTime(e.template?.buildMs ?? 0)}\n`;
    case "error":
      return `error: ${e.message ?? ""}${e.log ? `\n${e.log}` : ""}\n`;
  }
}

export function templatePage(main: HTMLElement, name: string): () => void {
  const facts = h("dl", { class: "facts" });
  const recipe = h("pre", { class: "out", id: "template-recipe", "aria-label": `Recipe of ${name}` });
  const actions = h("div", { class: "actions" });
  let stopped = false;
  main.append(
    h("p", {}, h("a", { href: "#/templates" }, "← Templates")),
    h("h1", {}, `Template ${name}`),
    facts,
    actions,
    h("h2", {}, "Recipe"),
    recipe,
  );

  void act(`Reading template ${name}`, () => api.getTemplate(name)).then((t) => {
    if (!t || stopped) return;
    const fact = (k: string, v: string) => [h("dt", {}, k), h("dd", {}, v)];
    replace(
      facts,
      fact(t.recipe.from ? "Image" : "Base", t.recipe.from ?? (t.base || "interpreter")),
      t.digest ? fact("Image digest", t.digest) : null,
      fact("Size", bytes(t.sizeBytes)),
      fact("Build time", buildTime(t.buildMs)),
      fact("Created", `${new Date(t.createdAt).toLocaleString()} (${ago(t.createdAt)} ago)`),
      fact("Key", t.key),
    );
    recipe.textContent = JSON.stringify(t.recipe, null, 2);
    const create = h("button", { type: "button", class: "small", "aria-label": `New sandbox from ${name}` }, "New sandbox");
    create.addEventListener("click", async () => {
      say(`Creating a sandbox from ${name}…`);
      const sb = await act(`Creating a sandbox from ${name}`, () => api.createSandbox({ template: name }));
      if (sb) go(`#/sandboxes/${encodeURIComponent(sb.sandboxId)}`);
    });
    replace(actions, create, deleteButton(name, () => go("#/templates")));
  });
  return () => {
    stopped = true;
  };
}
