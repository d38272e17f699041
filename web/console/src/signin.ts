// Sign in: the key is checked with one authenticated call, then kept in
// sessionStorage (this tab only, gone when it closes).
import { api, ApiError, setApiKey } from "./api";
import { field, h } from "./dom";
import { go, say } from "./ui";

export function signInPage(main: HTMLElement): () => void {
  const key = h("input", { type: "password", name: "apiKey", autocomplete: "off", spellcheck: "false", required: true, placeholder: "lz_..." });
  const err = h("p", { class: "form-error", role: "alert" });
  const submit = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { class: "card narrow", "aria-labelledby": "signin-h" },
    field("API key", key, "A project's key, as `lizard admin create-project` prints it. Kept in this tab's session storage only and sent only in the Authorization header."),
    err,
    submit,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const k = key.value.trim();
    err.textContent = "";
    submit.disabled = true;
    try {
      await api.listSandboxes({ state: ["running"] }, k);
      setApiKey(k);
      say("Signed in.");
      go("#/sandboxes");
    } catch (e) {
      err.textContent = e instanceof ApiError ? `${e.message} (HTTP ${e.status} ${e.code})` : String(e);
      key.focus();
    } finally {
      submit.disabled = false;
    }
  });
  main.append(h("h1", { id: "signin-h" }, "Sign in"), form);
  key.focus();
  return () => {};
}
