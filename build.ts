// `bun run build`: the single executable (dist/kpng), as `bun build --compile
// --bytecode --format=esm src/main.ts` makes it. `bun run release`: one
// binary per node kind (linux/amd64, linux/arm64, windows/amd64), their
// SHA256SUMS and a CycloneDX SBOM of the npm dependencies, in dist/release/.
// A module, not a package.json one-liner, so that tests and benchmarks build
// exactly what users run.
//
//   bun build.ts [--outfile dist/kpng] [--target bun-linux-arm64]
//   bun build.ts --release [--outdir dist/release]
//
// Every binary carries version.Info's stamp (src/core/version.ts): the
// commit, whether the tree had uncommitted changes, and the build date
// (SOURCE_DATE_EPOCH when set, for reproducible builds). Bun fetches the
// other platforms' runtimes from the npm registry, as it fetches itself.

import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { ensureGenerated } from "./plugins/ebpf/compile.ts";

const ROOT = import.meta.dir;

/** The release's binaries: file name → Bun's compile target. */
export const RELEASE_TARGETS = {
  "kpng-linux-amd64": "bun-linux-x64",
  "kpng-linux-arm64": "bun-linux-arm64",
  "kpng-windows-amd64.exe": "bun-windows-x64",
} as const;

export interface BuildStamp {
  gitCommit: string;
  gitTreeState: "clean" | "dirty" | "unknown";
  buildDate: string;
}

/** This checkout's stamp: HEAD, clean or dirty (tracked files changed), and now (or SOURCE_DATE_EPOCH). */
export function buildStamp(): BuildStamp {
  const git = (args: string[]) =>
    execFileSync("git", ["-C", ROOT, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  let gitCommit = "unknown";
  let gitTreeState: BuildStamp["gitTreeState"] = "unknown";
  try {
    gitCommit = git(["rev-parse", "HEAD"]);
    gitTreeState = git(["status", "--porcelain", "--untracked-files=no"]) ? "dirty" : "clean";
  } catch {
    // not a git checkout (a source tarball): the stamp says so
  }
  const epoch = process.env.SOURCE_DATE_EPOCH;
  const date = epoch ? new Date(Number(epoch) * 1000) : new Date();
  return { gitCommit, gitTreeState, buildDate: date.toISOString().replace(/\.\d+Z$/, "Z") };
}

/** Builds the executable at `outfile` for `target` (default: this host); throws with the bundler's messages on failure. */
export async function buildBinary(outfile: string, opts: { target?: string; stamp?: BuildStamp } = {}): Promise<void> {
  ensureGenerated(); // the ebpf backend's BPF object, embedded as a string
  const res = await Bun.build({
    entrypoints: [join(ROOT, "src/main.ts")],
    // JavaScriptCore's tier-up thresholds x8 until start-up is over (src/main.ts normalJIT): code that runs once
    // is not compiled. See README, Performance.
    compile: { outfile, jitPolicy: 8, ...(opts.target ? { target: opts.target as Bun.Build.CompileTarget } : {}) },
    // One chunk per lazily imported part (each backend, the API server, the sources...), each embedded in the
    // binary and loaded by its first import(): a process loads and evaluates only the code it runs, where one
    // bundle was loaded whole at every start (`kpng --version` too). See README, Performance.
    splitting: true,
    bytecode: true,
    format: "esm",
    target: "bun",
    define: { KPNG_BUILD: JSON.stringify(opts.stamp ?? buildStamp()) },
  });
  if (!res.success) throw new AggregateError(res.logs, `build failed: ${res.logs.map(String).join("\n")}`);
}

/** `bun run release`: the three binaries (one stamp), SHA256SUMS over them, and sbom.cdx.json. Returns the files written. */
export async function buildRelease(outdir: string): Promise<string[]> {
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const stamp = buildStamp();
  const files: string[] = [];
  for (const [name, target] of Object.entries(RELEASE_TARGETS)) {
    const out = join(outdir, name);
    await buildBinary(out, { target, stamp });
    files.push(out);
  }
  const sums = files.map((f) => `${createHash("sha256").update(readFileSync(f)).digest("hex")}  ${basename(f)}\n`).join("");
  writeFileSync(join(outdir, "SHA256SUMS"), sums);
  // The dependencies the binaries embed (production only), as npm resolved them (package-lock.json).
  const sbom = join(outdir, "sbom.cdx.json");
  execFileSync(
    join(ROOT, "node_modules/.bin/cyclonedx-npm"),
    ["--omit", "dev", "--output-format", "JSON", "--output-file", sbom, "--package-lock-only", join(ROOT, "package.json")],
    { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] },
  );
  return [...files, join(outdir, "SHA256SUMS"), sbom];
}

if (import.meta.main) {
  const flag = (name: string) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  if (process.argv.includes("--release")) {
    const t0 = performance.now();
    const files = await buildRelease(flag("--outdir") ?? join(ROOT, "dist/release"));
    console.log(`built ${files.join(", ")} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } else {
    const outfile = flag("--outfile") ?? join(ROOT, "dist/kpng");
    await buildBinary(outfile, { target: flag("--target") });
    console.log(`built ${outfile}`);
  }
}
