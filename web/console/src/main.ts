// Lizard's web console: sign in with an API key, then the project's
// sandboxes, a playground per sandbox, the snapshots and the templates.
// Pages are chosen by the URL's hash (#/sandboxes, #/sandboxes/ID,
// #/snapshots, #/templates, #/templates/NAME), so the
// server only ever serves index.html and the assets.
import "./style.css";
import { apiKey, health, setApiKey } from "./api";
import { clearError, go, say } from "./ui";
import { signInPage } from "./signin";
import { sandboxesPage } from "./sandboxes";
import { sandboxPage, type SandboxTab } from "./sandbox";
import { desktopViewerPage } from "./desktop";
import { snapshotsPage } from "./snapshots";
import { templatePage, templatesPage } from "./templates";

const main = document.getElementById("main")!;
const nav = document.getElementById("nav")!;
/** A page's cleanup, run when the user leaves it (stops live refresh). */
let leave: (() => void) | undefined;

function route(): void {
  leave?.();
  leave = undefined;
  const signedIn = apiKey() !== null;
  nav.hidden = !signedIn;
  const [path, query = ""] = (location.hash.replace(/^#/, "") || "/sandboxes").split("?", 2) as [string, string?];
  main.replaceChildren();
  // A desktop viewer link (the API's DesktopViewer.url) carries its own
  // token in the fragment: it needs no key, and shows that screen alone.
  const viewer = /^\/sandboxes\/([^/]+)\/desktop$/.exec(path);
  const token = new URLSearchParams(query).get("token");
  if (viewer && token) {
    leave = desktopViewerPage(main, decodeURIComponent(viewer[1]), token);
  } else if (!signedIn || path === "/signin") {
    if (signedIn) {
      location.hash = "#/sandboxes";
      return;
    }
    leave = signInPage(main);
  } else {
    const m = /^\/sandboxes\/([^/]+)(?:\/(terminal|processes|network|desktop))?$/.exec(path);
    if (m) leave = sandboxPage(main, decodeURIComponent(m[1]), (m[2] as SandboxTab | undefined) ?? "playground");
    else if (path === "/snapshots") leave = snapshotsPage(main);
    else if (path === "/templates") leave = templatesPage(main);
    else if (/^\/templates\/[^/]+$/.test(path)) leave = templatePage(main, decodeURIComponent(path.slice("/templates/".length)));
    else leave = sandboxesPage(main);
  }
  for (const a of nav.querySelectorAll("a")) {
    if (a.getAttribute("href") === "#" + path) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  // Move focus to the new page's heading, as a page load would.
  const h1 = main.querySelector("h1");
  if (h1) {
    h1.tabIndex = -1;
    h1.focus();
    document.title = `${h1.textContent} · Lizard console`;
  }
}

document.getElementById("signout")!.addEventListener("click", () => {
  setApiKey(null);
  clearError();
  say("Signed out.");
  go("#/signin");
});
// The skip link must not change the route (the hash is the page).
document.querySelector(".skip")?.addEventListener("click", (ev) => {
  ev.preventDefault();
  main.focus();
});
window.addEventListener("hashchange", route);
route();
// The footer names the server's version, as `lizard version` does the CLI's;
// a server that does not answer leaves it empty (the pages say why).
health().then((h) => {
  if (h.version) document.getElementById("version")!.textContent = `Lizard ${h.version}`;
}, () => {});
