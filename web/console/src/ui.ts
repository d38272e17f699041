// What every page shares: the alert and status regions, running an action
// with its error shown, and moving between pages.
import { ApiError, setApiKey } from "./api";
import { h, replace } from "./dom";

const alertBox = document.getElementById("alert")!;
const statusBox = document.getElementById("status")!;

/** showError puts an error, with the API's message, in the alert region. */
export function showError(e: unknown, doing?: string): void {
  let text: string;
  if (e instanceof ApiError) {
    text = e.status ? `${e.message} (HTTP ${e.status} ${e.code})` : e.message;
    if (e.status === 401) {
      // The key was revoked or is wrong: back to sign in.
      setApiKey(null);
      location.hash = "#/signin";
    }
  } else if (e instanceof Error) text = e.message;
  else text = String(e);
  replace(alertBox, h("span", {}, doing ? `${doing} failed: ${text}` : text), " ", h("button", { type: "button", class: "link", onclick: clearError }, "Dismiss"));
  alertBox.hidden = false;
}

export function clearError(): void {
  alertBox.hidden = true;
  alertBox.replaceChildren();
}

/** say announces a short status message to screen readers and sighted users. */
export function say(text: string): void {
  statusBox.textContent = text;
}

/** act runs an action, showing its error (with the API's message) if it fails. */
export async function act<T>(doing: string, f: () => Promise<T>): Promise<T | undefined> {
  try {
    clearError();
    return await f();
  } catch (e) {
    showError(e, doing);
    return undefined;
  }
}

export function go(hash: string): void {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = hash;
}
