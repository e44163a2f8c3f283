// `bun run bench`: prints figures, asserts nothing. Each bench/*.bench.ts
// module default-exports an async function that prints its own section.
// `bun run bench nft` runs only the sections whose file name contains "nft".

import { Glob } from "bun";
import { join } from "node:path";
import { closeApis } from "./bench-api.ts";

const filter = process.argv.slice(2);
const files = [...new Glob("*.bench.ts").scanSync(import.meta.dir)].sort();
for (const f of files) {
  if (filter.length && !filter.some((w) => f.includes(w))) continue;
  const mod = (await import(join(import.meta.dir, f))) as { default: () => Promise<void> };
  console.log(`\n## ${f.replace(".bench.ts", "")}`);
  await mod.default();
}
await closeApis(); // the real API servers filled once for several benches (bench/bench-api.ts)
