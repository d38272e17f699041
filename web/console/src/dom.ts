// A tiny element builder. Text is only ever set as text (textContent,
// attributes): the console never parses a string as HTML, so nothing a
// sandbox or the API returns can become markup in the console's document.

type Attrs = Record<string, string | number | boolean | undefined | ((e: Event) => void)>;
type Child = Node | string | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: (Child | Child[])[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.slice(2).toLowerCase(), v);
    else if (k === "class") el.className = String(v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el: Node, children: (Child | Child[])[]) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  }
}

/** replace empties el and fills it with children. */
export function replace(el: Element, ...children: (Child | Child[])[]): void {
  el.replaceChildren();
  append(el, children);
}

let ids = 0;
/** uid makes a unique element id, to tie labels to inputs. */
export function uid(prefix: string): string {
  return `${prefix}-${++ids}`;
}

/** field is a label and its control, tied by id. */
export function field(label: string, control: HTMLElement, hint?: string): HTMLElement {
  const id = control.id || uid("f");
  control.id = id;
  let hintEl: HTMLElement | null = null;
  if (hint) {
    hintEl = h("small", { id: `${id}-hint`, class: "hint" }, hint);
    control.setAttribute("aria-describedby", hintEl.id);
  }
  return h("div", { class: "field" }, h("label", { for: id }, label), control, hintEl);
}

/** ago says how long ago t was, roughly. */
export function ago(t: string | Date, now = Date.now()): string {
  return duration(now - new Date(t).getTime());
}

export function duration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr}h ${m % 60}m`;
  return `${Math.floor(hr / 24)}d ${hr % 24}h`;
}

export function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

/** pairs parses KEY=VALUE lines (or comma-separated pairs). */
export function pairs(text: string, what: string): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  let any = false;
  for (const raw of text.split(/[\n,]/)) {
    const line = raw.trim();
    if (!line) continue;
    const i = line.indexOf("=");
    if (i <= 0) throw new Error(`${what}: "${line}" is not KEY=VALUE`);
    out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    any = true;
  }
  return any ? out : undefined;
}
