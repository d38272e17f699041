// A process's WebSocket shown in xterm.js: its kept output replayed, then
// live output; keystrokes and the terminal's size go back when the process
// has a terminal. xterm renders the bytes itself (never as HTML in the
// console's document). The key travels as a subprotocol, as a browser's
// WebSocket cannot send Authorization (docs/console.md).
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import { processSocketURL, socketProtocols, type ProcessControl } from "./api";
import { h } from "./dom";

export interface TermView {
  el: HTMLElement;
  /** The size the terminal has in its box now, for starting a process with. */
  size(): { cols: number; rows: number };
  /** attach follows pid's output (and sends input if interactive). */
  attach(pid: number): void;
  dispose(): void;
}

// The close codes of a socket the sandbox's end (410) or a pause (409) cut.
const SOCKET_GONE = 4410;
const SOCKET_PAUSED = 4409;

/**
 * termView makes a terminal in a box that follows its container's size.
 * label names it for assistive technology; onEnd runs once the stream has
 * ended, with the message shown and whether the sandbox itself is gone.
 */
export function termView(id: string, label: string, opts: { interactive: boolean; onEnd?: (msg: string, sandboxGone: boolean) => void }): TermView {
  const box = h("div", { class: "term-box" });
  const state = h("p", { class: "muted term-state", role: "status", "aria-live": "polite" });
  const el = h("div", { class: "term", role: "group", "aria-label": label }, box, state);
  const term = new Terminal({
    disableStdin: !opts.interactive,
    convertEol: !opts.interactive,
    fontFamily: 'ui-monospace, "SFMono-Regular", Menlo, monospace',
    fontSize: 13,
    scrollback: 5000,
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  let opened = false;
  let ws: WebSocket | undefined;
  let ended = false;
  const enc = new TextEncoder();

  const refit = () => {
    if (!opened || !box.isConnected || box.clientWidth === 0) return;
    try {
      fit.fit();
    } catch {
      /* not laid out yet */
    }
  };
  const ro = new ResizeObserver(() => refit());
  // xterm needs its element in the document to measure characters.
  const open = () => {
    if (opened || !box.isConnected) return;
    term.open(box);
    opened = true;
    refit();
  };

  const end = (msg: string, sandboxGone = false) => {
    if (ended) return;
    ended = true;
    state.textContent = msg;
    term.write(`\r\n\x1b[7m ${msg.replace(/[\x00-\x1f\x7f]/g, " ")} \x1b[0m\r\n`);
    opts.onEnd?.(msg, sandboxGone);
  };

  return {
    el,
    size() {
      open();
      refit();
      return { cols: term.cols, rows: term.rows };
    },
    attach(pid: number) {
      open();
      ro.observe(box);
      state.textContent = `Connecting to process ${pid}…`;
      const sock = new WebSocket(processSocketURL(id, pid), socketProtocols());
      ws = sock;
      sock.binaryType = "arraybuffer";
      const sendSize = () => {
        if (opts.interactive && sock.readyState === WebSocket.OPEN) sock.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
      };
      sock.onopen = () => {
        state.textContent = opts.interactive ? `Connected to process ${pid}.` : `Following the output of process ${pid}.`;
        el.dataset.pid = String(pid);
        el.dataset.state = "open";
        sendSize();
        if (opts.interactive) term.focus();
      };
      sock.onmessage = (ev) => {
        if (ev.data instanceof ArrayBuffer) {
          term.write(new Uint8Array(ev.data));
          return;
        }
        let m: ProcessControl;
        try {
          m = JSON.parse(String(ev.data)) as ProcessControl;
        } catch {
          return;
        }
        if (m.type === "dropped") term.write(`\r\n\x1b[7m [${m.dropped} bytes of output dropped] \x1b[0m\r\n`);
        else if (m.type === "error") state.textContent = `The process refused input: ${m.error ?? ""}`;
        else if (m.type === "end") end(m.error ? `Process ${pid} exited with code ${m.exitCode}: ${m.error}` : `Process ${pid} exited with code ${m.exitCode}.`);
      };
      sock.onclose = (ev) => {
        el.dataset.state = "closed";
        if (ws !== sock) return; // disposed
        if (ev.code === SOCKET_GONE) end(`The sandbox has ended: ${ev.reason || "it is gone"}. This terminal is closed.`, true);
        else if (ev.code === SOCKET_PAUSED) end(`The sandbox was paused: ${ev.reason || "paused"}. Process ${pid} runs on after a resume: open it from the Processes tab.`);
        else if (!ended) end(ev.code === 1006 ? `Connection to process ${pid} lost (or refused: is it still listed?).` : `Connection to process ${pid} closed (${ev.code}${ev.reason ? `: ${ev.reason}` : ""}).`);
      };
      if (opts.interactive) {
        term.onData((d) => {
          if (sock.readyState === WebSocket.OPEN) sock.send(enc.encode(d));
        });
        term.onBinary((d) => {
          if (sock.readyState === WebSocket.OPEN) sock.send(Uint8Array.from(d, (c) => c.charCodeAt(0)));
        });
        term.onResize(sendSize);
      }
    },
    dispose() {
      const sock = ws;
      ws = undefined;
      sock?.close(1000);
      ro.disconnect();
      term.dispose();
    },
  };
}
