// A desktop sandbox's live screen (docs/desktop.md): noVNC's RFB client,
// bundled into the console, on the stream's WebSocket through the API
// (nothing from the sandbox is loaded as a page or script). The sandbox
// page's Desktop tab mints a view-only viewer and offers "Take control",
// which mints a control viewer; a viewer link (the API's DesktopViewer.url,
// #/sandboxes/ID/desktop?token=lzv_...) shows the screen without a key.
import type RFB from "@novnc/novnc";
import { api, ApiError, desktopSocketURL, type DesktopViewer } from "./api";
import { h } from "./dom";
import type { Tab } from "./processes";

interface Screen {
  el: HTMLElement;
  /** connect shows the stream of a viewer's token: onOpen runs once it shows, onEnd when it closes by itself. */
  connect(token: string, viewOnly: boolean, on: { onOpen?: () => void; onEnd: (msg: string) => void }): void;
  disconnect(): void;
}

/** screenView is noVNC's canvas in a box that it scales to (its canvas keeps the screen's own pixels). */
function screenView(id: string, label: string): Screen {
  const box = h("div", { class: "desktop-screen", role: "img", "aria-label": label });
  let rfb: RFB | undefined;
  // Bumped by each connect and disconnect: a client loaded or opened for
  // an older one is dropped.
  let generation = 0;

  function disconnect(): void {
    generation++;
    const r = rfb;
    rfb = undefined;
    r?.disconnect();
    box.dataset.state = "closed";
  }

  function open(r: RFB, viewOnly: boolean, on: Parameters<Screen["connect"]>[2]): void {
    rfb = r;
    r.viewOnly = viewOnly;
    r.scaleViewport = true;
    r.background = "#222";
    r.addEventListener("connect", () => {
      if (rfb !== r) return;
      box.dataset.state = "connected";
      on.onOpen?.();
    });
    r.addEventListener("disconnect", (ev) => {
      if (rfb !== r) return; // replaced or disconnected on purpose
      rfb = undefined;
      box.dataset.state = "closed";
      const clean = (ev as CustomEvent<{ clean: boolean }>).detail?.clean;
      on.onEnd(clean
        ? "The stream closed (its viewer was revoked, or the sandbox paused or ended)."
        : "The stream could not be opened or was cut (the viewer's token revoked or expired, or the sandbox paused or ended).");
    });
  }

  return {
    el: box,
    connect(token, viewOnly, on) {
      disconnect();
      box.dataset.state = "connecting";
      box.dataset.control = String(!viewOnly);
      const mine = generation;
      // noVNC is loaded with the first screen: pages without one do not carry it.
      void import("@novnc/novnc").then(({ default: Client }) => {
        if (mine === generation) open(new Client(box, desktopSocketURL(id, token), { shared: true }), viewOnly, on);
      }, (e: unknown) => on.onEnd(`The viewer could not be loaded: ${String(e)}`));
    },
    disconnect,
  };
}

/**
 * desktopTab shows the sandbox's screen, view-only until "Take control".
 * Each viewer it mints is revoked when it is replaced, the page is left or
 * the browser's tab closed.
 */
export function desktopTab(id: string): Tab {
  const status = h("p", { class: "muted", role: "status", "aria-live": "polite" }, "Shown once the sandbox is running.");
  const screen = screenView(id, `The desktop of sandbox ${id}`);
  const toggle = h("button", { type: "button", disabled: true }, "Take control");
  const again = h("button", { type: "button", hidden: true }, "Reconnect");
  let viewer: DesktopViewer | undefined;
  let stopped = false;
  let busy = false;

  const revoke = (v: DesktopViewer | undefined) => {
    if (v) void api.revokeDesktopViewer(id, v.viewerId).catch(() => {});
  };

  async function show(control: boolean): Promise<void> {
    if (busy) return;
    busy = true;
    toggle.disabled = true;
    again.hidden = true;
    status.textContent = control ? "Taking control…" : "Connecting…";
    try {
      const v = await api.startDesktopStream(id, control);
      if (stopped) {
        revoke(v);
        return;
      }
      const old = viewer;
      viewer = v;
      screen.connect(v.token, !control, {
        onEnd: (msg) => {
          status.textContent = msg;
          again.hidden = false;
          toggle.disabled = true;
        },
      });
      revoke(old);
      status.textContent = control
        ? "In control: your mouse and keyboard drive the desktop."
        : "View-only: the desktop is shown live, and your mouse and keyboard do nothing to it.";
      toggle.textContent = control ? "Release control" : "Take control";
      toggle.dataset.control = String(control);
      toggle.disabled = false;
    } catch (e) {
      // 409: a sandbox without a desktop says so (and what to do) in the API's words.
      status.textContent = e instanceof ApiError ? `No live desktop: ${e.message} (HTTP ${e.status} ${e.code})` : String(e);
      again.hidden = !(e instanceof ApiError && e.status !== 409);
    } finally {
      busy = false;
    }
  }

  toggle.addEventListener("click", () => void show(toggle.dataset.control !== "true"));
  again.addEventListener("click", () => void show(false));
  // Closing the browser's tab leaves no page either: its viewer is revoked
  // then too, not left holding one of the sandbox's 8 until it expires.
  const leave = () => {
    stopped = true;
    window.removeEventListener("pagehide", leave);
    screen.disconnect();
    revoke(viewer);
    viewer = undefined;
  };
  window.addEventListener("pagehide", leave);
  return {
    el: h(
      "section",
      { class: "card", "aria-labelledby": "desk-h" },
      h("h2", { id: "desk-h" }, "Desktop"),
      h("div", { class: "row desktop-bar" }, status, h("span", { class: "grow" }), toggle, again),
      screen.el,
    ),
    start: () => void show(false),
    stop: leave,
  };
}

/**
 * desktopViewerPage is a viewer link's page: the screen of the token's
 * sandbox, no key needed. Whether the mouse and keyboard reach it is the
 * token's (the server drops a view-only viewer's input), so the page sends
 * them either way.
 */
export function desktopViewerPage(main: HTMLElement, id: string, token: string): () => void {
  const status = h("p", { class: "muted", role: "status", "aria-live": "polite" }, "Connecting…");
  const screen = screenView(id, `The desktop of sandbox ${id}`);
  main.append(
    h("h1", {}, `Desktop of ${id}`),
    h("p", { class: "muted small" }, "A viewer link: it shows this sandbox's screen until its token expires or is revoked. A view-only link ignores the mouse and keyboard; a control link passes them on."),
    status,
    screen.el,
  );
  screen.connect(token, false, {
    onOpen: () => (status.textContent = "Connected."),
    onEnd: (msg) => (status.textContent = msg),
  });
  return () => screen.disconnect();
}
