// Renders docs/dashboard.png: deploy/grafana-dashboard.json's panels, laid
// out by their gridPos, each drawn as an SVG chart of what its queries
// returned from Prometheus over a run of test/node/dashboard.test.ts, then
// photographed by headless Chromium (Debian's `chromium`). There is no
// Grafana here (not packaged by Debian, and its release is a download kpng's
// tests do not make): the picture shows the same queries over the same data,
// drawn plainly. Not a test; run:
//   KPNG_DASHBOARD_DATA=/tmp/dash.json bun test test/node/dashboard.test.ts -t "kubernetes-mixin Proxy"
//   bun test/node/dashboard-render.ts /tmp/dash.json docs/dashboard.png

import { readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

interface Series {
  metric: Record<string, string>;
  values: [number, string][];
}
interface Query {
  panel: string;
  ref: number;
  expr: string;
  legend?: string;
  result: Series[];
}
interface Panel {
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  fieldConfig?: { defaults?: { unit?: string } };
}

const [dataFile, outFile] = process.argv.slice(2);
if (!dataFile || !outFile) throw new Error("usage: bun test/node/dashboard-render.ts DATA.json OUT.png");
const root = resolve(import.meta.dir, "../..");
const dashboard = JSON.parse(readFileSync(join(root, "deploy/grafana-dashboard.json"), "utf8")) as { title: string; panels: Panel[] };
const data = JSON.parse(readFileSync(dataFile, "utf8")) as { start: number; end: number; queries: Query[] };

const WIDTH = 1600;
const UNIT = 30; // px per gridPos height unit
const COL = WIDTH / 24;
const COLORS = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0"];
const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);
const legendOf = (q: Query, s: Series) => (q.legend ?? "").replace(/\{\{(\w+)\}\}/g, (_, k: string) => s.metric[k] ?? "").trim() || "value";

function fmt(v: number, unit = "short"): string {
  if (!Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (unit === "s")
    return a >= 1 ? `${v.toFixed(a >= 100 ? 0 : 1)} s` : a >= 0.001 ? `${(v * 1000).toFixed(1)} ms` : `${(v * 1e6).toFixed(0)} µs`;
  const n =
    a >= 1e6
      ? `${(v / 1e6).toFixed(1)}M`
      : a >= 1e3
        ? `${(v / 1e3).toFixed(1)}k`
        : a >= 10 || v === 0
          ? v.toFixed(0)
          : Number(v.toPrecision(2)).toString();
  return unit === "ops" ? `${n}/s` : n;
}

function chart(p: Panel, w: number, h: number): string {
  const lines = data.queries
    .filter((q) => q.panel === p.title)
    .flatMap((q) => q.result.map((s) => ({ name: legendOf(q, s), points: s.values.map(([t, v]) => [t, Number(v)] as const) })));
  const unit = p.fieldConfig?.defaults?.unit;
  const finite = lines.flatMap((l) => l.points.map(([, v]) => v)).filter(Number.isFinite);
  const max = Math.max(...finite, 0);
  const min = Math.min(...finite, 0);
  const top = max === min ? min + 1 : max;
  const pad = { l: 62, r: 8, t: 6, b: 18 };
  const pw = w - pad.l - pad.r;
  const ph = h - pad.t - pad.b;
  const x = (t: number) => pad.l + ((t - data.start) / (data.end - data.start)) * pw;
  const y = (v: number) => pad.t + ph - ((v - min) / (top - min)) * ph;
  const grid = [0, 0.5, 1]
    .map((f) => min + f * (top - min))
    .map(
      (v) =>
        `<line x1="${pad.l}" x2="${w - pad.r}" y1="${y(v)}" y2="${y(v)}" class="g"/><text x="${pad.l - 4}" y="${y(v) + 4}" class="ax" text-anchor="end">${esc(fmt(v, unit))}</text>`,
    )
    .join("");
  const paths = lines
    .map((l, i) => {
      let d = "";
      let pen = "M";
      for (const [t, v] of l.points) {
        if (!Number.isFinite(v)) {
          pen = "M";
          continue;
        }
        d += `${pen}${x(t).toFixed(1)},${y(v).toFixed(1)} `;
        pen = "L";
      }
      return `<path d="${d}" stroke="${COLORS[i % COLORS.length]}" fill="none" stroke-width="1.5"/>`;
    })
    .join("");
  const legend = lines
    .map((l, i) => {
      const last = [...l.points].reverse().find(([, v]) => Number.isFinite(v))?.[1];
      return `<span><i style="background:${COLORS[i % COLORS.length]}"></i>${esc(l.name)} <b>${esc(fmt(last ?? Number.NaN, unit))}</b></span>`;
    })
    .join("");
  const axis = `<text x="${pad.l}" y="${h - 4}" class="ax">-60 s</text><text x="${w - pad.r}" y="${h - 4}" class="ax" text-anchor="end">now</text>`;
  return `<svg width="${w}" height="${h}">${grid}${paths}${axis}</svg><div class="lg">${legend || "<span>no data</span>"}</div>`;
}

const blocks = dashboard.panels.map((p) => {
  const { x, y, w, h } = p.gridPos;
  const box = `left:${x * COL + 4}px;top:${y * UNIT + 4}px;width:${w * COL - 8}px;height:${h * UNIT - 8}px`;
  if (p.type === "row") return `<div class="row" style="${box}">${esc(p.title)}</div>`;
  return `<div class="panel" style="${box}"><div class="t">${esc(p.title)}</div>${chart(p, w * COL - 18, h * UNIT - 70)}</div>`;
});
const height = Math.max(...dashboard.panels.map((p) => (p.gridPos.y + p.gridPos.h) * UNIT)) + 60;
const html = `<!doctype html><meta charset="utf-8"><style>
body{margin:0;background:#111217;color:#ccccdc;font:12px sans-serif;width:${WIDTH}px}
h1{font-size:16px;margin:0;padding:12px 8px;height:24px}
.grid{position:relative;height:${height - 48}px}
.panel{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:2px;padding:4px;box-sizing:border-box;overflow:hidden}
.row{position:absolute;font-weight:bold;font-size:14px;padding-top:6px}
.t{font-weight:bold;margin-bottom:2px}
.g{stroke:#2c3235}.ax{fill:#8e8e8e;font-size:10px}
.lg span{margin-right:10px;white-space:nowrap;display:inline-block}.lg i{display:inline-block;width:10px;height:3px;margin-right:4px;vertical-align:middle}
</style><h1>${esc(dashboard.title)} — deploy/grafana-dashboard.json, each query from Prometheus over the last 60 s of a test run</h1><div class="grid">${blocks.join("")}</div>`;

const page = join(tmpdir(), `kpng-dashboard-${process.pid}.html`);
writeFileSync(page, html);
const chromium = Bun.which("chromium") ?? Bun.which("chromium-browser");
if (!chromium) throw new Error("chromium is not installed: apt-get install --no-install-recommends chromium");
const shot = Bun.spawnSync(
  [
    chromium,
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    `--window-size=${WIDTH},${height}`,
    `--screenshot=${resolve(outFile)}`,
    `file://${page}`,
  ],
  { stdout: "inherit", stderr: "inherit" },
);
if (shot.exitCode !== 0) throw new Error(`chromium exited ${shot.exitCode}`);
console.log(`wrote ${outFile} (${WIDTH}x${height})`);
