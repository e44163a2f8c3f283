// `bun run build`: the single executable (dist/kpng), as `bun build --compile
// --bytecode --format=esm src/main.ts` makes it. A module, not a package.json
// one-liner, so that tests and benchmarks build exactly what users run.
//
//   bun build.ts --outfile dist/kpng

import { join } from "node:path";
import { ensureGenerated } from "./plugins/ebpf/compile.ts";

const ROOT = import.meta.dir;

/** Builds the executable at `outfile`; throws with the bundler's messages on failure. */
export async function buildBinary(outfile: string): Promise<void> {
  ensureGenerated(); // the ebpf backend's BPF object, embedded as a string
  const res = await Bun.build({
    entrypoints: [join(ROOT, "src/main.ts")],
    // JavaScriptCore's tier-up thresholds x8 until start-up is over (src/main.ts normalJIT): code that runs once
    // is not compiled. See README, Performance.
    compile: { outfile, jitPolicy: 8 },
    // One chunk per lazily imported part (each backend, the API server, the sources...), each embedded in the
    // binary and loaded by its first import(): a process loads and evaluates only the code it runs, where one
    // bundle was loaded whole at every start (`kpng --version` too). See README, Performance.
    splitting: true,
    bytecode: true,
    format: "esm",
    target: "bun",
  });
  if (!res.success) throw new AggregateError(res.logs, `build failed: ${res.logs.map(String).join("\n")}`);
}

if (import.meta.main) {
  const i = process.argv.indexOf("--outfile");
  const outfile = i > 0 && process.argv[i + 1] ? process.argv[i + 1] : join(ROOT, "dist/kpng");
  await buildBinary(outfile);
  console.log(`built ${outfile}`);
}
