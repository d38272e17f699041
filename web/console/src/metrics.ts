// A sandbox's use of CPU and memory over the last minutes
// (GET /v1/sandboxes/{id}/metrics, a sample every 5 s), as a small live
// chart: two lines in an SVG built element by element, and the latest
// values as text.
import { api, type SandboxMetric } from "./api";
import { bytes, h } from "./dom";

const POLL_MS = 5000;
const W = 300;
const H = 60;
const SVG = "http://www.w3.org/2000/svg";

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

/** points lays out values (0..100) over the samples' 5 minutes. */
function points(ms: SandboxMetric[], pct: (m: SandboxMetric) => number): string {
  const last = new Date(ms[ms.length - 1].timestamp).getTime();
  return ms
    .map((m) => {
      const x = W - ((last - new Date(m.timestamp).getTime()) / 300_000) * W;
      const y = H - (Math.min(100, Math.max(0, pct(m))) / 100) * H;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(" ");
}

export function metricsChart(id: string): { el: HTMLElement; running(on: boolean): void; stop(): void } {
  const cpu = svg("polyline", { class: "m-cpu", points: "" });
  const mem = svg("polyline", { class: "m-mem", points: "" });
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: String(W), height: String(H), class: "metrics-chart", "aria-hidden": "true" });
  chart.append(svg("rect", { x: "0", y: "0", width: String(W), height: String(H), class: "m-bg" }), cpu, mem);
  const text = h("p", { class: "small metrics-text", "aria-live": "off" }, "No samples yet.");
  const el = h(
    "div",
    { class: "metrics", role: "group", "aria-label": "Usage over the last 5 minutes" },
    chart,
    h("p", { class: "small muted" }, h("span", { class: "key-cpu" }, "CPU %"), " and ", h("span", { class: "key-mem" }, "memory %"), ", last 5 minutes"),
    text,
  );
  let timer: number | undefined;
  let on = false;

  async function poll(): Promise<void> {
    window.clearTimeout(timer);
    try {
      const ms = await api.metrics(id);
      if (!on) return;
      if (ms.length) {
        cpu.setAttribute("points", points(ms, (m) => m.cpuUsedPct));
        mem.setAttribute("points", points(ms, (m) => (m.memTotal ? (100 * m.memUsed) / m.memTotal : 0)));
        const m = ms[ms.length - 1];
        text.textContent = `CPU ${m.cpuUsedPct.toFixed(1)}% of ${m.cpuCount}, memory ${bytes(m.memUsed)} of ${bytes(m.memTotal)}, disk ${bytes(m.diskUsed)} of ${bytes(m.diskTotal)}`;
      }
    } catch {
      /* paused or gone: the page says so; try again while it runs */
    }
    if (on) timer = window.setTimeout(poll, POLL_MS);
  }
  return {
    el,
    running(now: boolean) {
      if (now === on) return;
      on = now;
      if (on) void poll();
      else window.clearTimeout(timer);
    },
    stop() {
      on = false;
      window.clearTimeout(timer);
    },
  };
}
