// `bun run bench`: prints figures, asserts nothing. Each bench/*.bench.ts
// module default-exports an async function that prints its own section.
// `bun run bench nft` runs only the sections whose file name contains "nft".
// KPNG_BENCH_RESULTS=docs/results/<name>.md also appends what is printed to
// that file, under a heading with the date, the commit and the machine's load:
// the dated runs live there, not in prose or code comments (docs/performance.md).

import { Glob } from "bun";
import { appendFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { format } from "node:util";
import { closeApis } from "./bench-api.ts";

const filter = process.argv.slice(2);
const results = process.env.KPNG_BENCH_RESULTS;
if (results) {
  const commit = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: import.meta.dir })
    .stdout.toString()
    .trim();
  const dirty = Bun.spawnSync(["git", "status", "--porcelain"], { cwd: import.meta.dir }).stdout.length > 0;
  const load = loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
  appendFileSync(
    results,
    `\n## ${new Date().toISOString().slice(0, 16)}Z: bun run bench ${filter.join(" ")}\n\n` +
      `Commit ${commit || "unknown"}${dirty ? " (with uncommitted changes)" : ""}, ${cpus().length} cores, load ${load} at the start.\n\n`,
  );
  // every section prints through console.log: a copy of each line goes to the file, in a text block
  appendFileSync(results, "```\n");
  const print = console.log;
  console.log = (...args: unknown[]) => {
    print(...args);
    appendFileSync(results, `${format(...args)}\n`);
  };
}
const files = [...new Glob("*.bench.ts").scanSync(import.meta.dir)].sort();
for (const f of files) {
  if (filter.length && !filter.some((w) => f.includes(w))) continue;
  const mod = (await import(join(import.meta.dir, f))) as { default: () => Promise<void> };
  console.log(`\n## ${f.replace(".bench.ts", "")}`);
  await mod.default();
}
await closeApis(); // the real API servers filled once for several benches (bench/bench-api.ts)
if (results) appendFileSync(results, "```\n");
