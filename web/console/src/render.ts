// Rendering of what code in a sandbox produced. All of it is untrusted.
// Raster images become <img> with a data: URL (no script can run in one).
// HTML, SVG and Markdown (which may hold HTML) are shown only in an iframe
// whose sandbox attribute is empty: an opaque origin, no scripts, no forms,
// no popups, no top navigation. Its srcdoc adds a CSP that blocks every
// load but data: images and the frame's stylesheet. It can neither read
// the console's sessionStorage (the API key) nor its DOM, nor call the API
// with the key. The markup is also scrubbed of everything that fetches or
// runs, before it reaches the frame. Everything else is set as text.
import { marked } from "marked";
import type { ExecutionError, Result } from "./api";
import { h } from "./dom";

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;

export function stripAnsi(s: string): string {
  return s.replace(ANSI, "");
}

// Elements that load or run something, or change how the frame's URLs
// resolve: dropped before the markup reaches the frame.
const DROP = "script, noscript, iframe, frame, frameset, object, embed, applet, link, base, meta, style, template, portal";
// Attributes holding URLs: kept only for data: images and in-page anchors.
const URL_ATTRS = ["src", "srcset", "href", "xlink:href", "action", "formaction", "poster", "background", "data", "ping", "lowsrc", "codebase", "cite", "longdesc", "manifest", "imagesrcset"];

/** scrub removes from untrusted markup everything that would make the
 * browser fetch or run something. It parses with DOMParser, into an inert
 * document of its own (no scripts run, nothing loads), never into ours. It
 * backs up the frame's sandbox and CSP, which already forbid all of it:
 * a preloader may fetch an <img> before a <meta> CSP is read. */
export function scrub(markup: string): string {
  const doc = new DOMParser().parseFromString(`<!doctype html><body>${markup}`, "text/html");
  for (const el of doc.body.querySelectorAll(DROP)) el.remove();
  for (const el of doc.body.querySelectorAll("*")) {
    for (const a of [...el.attributes]) {
      const name = a.name.toLowerCase();
      if (name.startsWith("on") || name === "style" || name === "srcdoc") el.removeAttribute(a.name);
      else if (URL_ATTRS.includes(name) && !/^(data:image\/(png|jpeg|gif|webp);|#)/i.test(a.value.trim())) el.removeAttribute(a.name);
    }
  }
  return doc.body.innerHTML;
}

/** frame shows untrusted markup in a script-less, opaque-origin iframe. */
export function frame(markup: string, title: string, height: number): HTMLElement {
  const origin = location.origin;
  const doc =
    `<!doctype html><html><head><meta charset="utf-8">` +
    `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src ${origin}/frame.css">` +
    `<link rel="stylesheet" href="${origin}/frame.css"></head><body>${markup}</body></html>`;
  const f = h("iframe", { class: "result-frame", title, sandbox: "", referrerpolicy: "no-referrer", loading: "lazy" });
  // Set as a property: srcdoc is parsed in the iframe's own sandboxed
  // document, never in ours.
  f.srcdoc = doc;
  // Script-less and cross-origin, the frame cannot be measured: size it by
  // an estimate and let the user drag it taller.
  const wrap = h("div", { class: "frame-wrap" }, f);
  wrap.style.height = `${Math.max(40, Math.min(height, 520))}px`;
  return wrap;
}

function estimateHeight(markup: string, perLine: number): number {
  const rows = (markup.match(/<tr[\s>]/gi) ?? []).length;
  if (rows) return rows * 27 + 30;
  return (markup.split("\n").length + 1) * perLine + 20;
}

function base64(s: string): string {
  const bytes = new TextEncoder().encode(s);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

function svgHeight(svg: string): number {
  const m = /<svg[^>]*\sheight="([\d.]+)(pt|px)?"/i.exec(svg);
  if (!m) return 360;
  const n = parseFloat(m[1]);
  return (m[2] === "pt" ? n * 1.34 : n) + 20;
}

export function result(r: Result): HTMLElement {
  const label = r.type === "result" ? "Result" : "Display";
  let body: HTMLElement;
  switch (r.mime) {
    case "image/png":
    case "image/jpeg":
      body = h("img", { src: `data:${r.mime};base64,${r.data.replace(/\s/g, "")}`, alt: `${label}: ${r.mime === "image/png" ? "PNG" : "JPEG"} image made by the code`, class: "result-img" });
      break;
    case "image/svg+xml": {
      // As an <img> inside the frame: an SVG image runs no script and
      // loads nothing, and keeps its own inline styles (matplotlib's).
      const src = `data:image/svg+xml;base64,${base64(r.data)}`;
      body = frame(`<img alt="SVG image made by the code" src="${src}">`, `${label}: SVG image made by the code`, svgHeight(r.data));
      break;
    }
    case "text/html":
      body = frame(scrub(r.data), `${label}: HTML made by the code`, estimateHeight(r.data, 20));
      break;
    case "text/markdown": {
      const html = scrub(marked.parse(r.data, { async: false }) as string);
      body = frame(html, `${label}: Markdown made by the code`, estimateHeight(html, 22));
      break;
    }
    case "application/json": {
      let text = r.data;
      try {
        text = JSON.stringify(JSON.parse(r.data), null, 2);
      } catch {
        /* show as sent */
      }
      body = h("pre", { class: "out json" }, text);
      break;
    }
    default: // text/latex, text/plain and anything newer: as text
      body = h("pre", { class: "out" }, r.data);
  }
  return h("div", { class: `result ${r.type}`, "data-mime": r.mime }, h("span", { class: "visually-hidden" }, `${label} (${r.mime}):`), body);
}

export function error(e: ExecutionError): HTMLElement {
  const tb = stripAnsi(e.traceback || "");
  return h(
    "div",
    { class: "exec-error", "data-error-name": e.name },
    h("strong", {}, `${e.name}: ${e.message}`),
    tb ? h("pre", { class: "out traceback" }, tb) : null,
  );
}
