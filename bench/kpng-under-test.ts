// Which kpng a bench measures. KPNG_BENCH_KPNG: a comma-separated list of
// kpng source trees (a directory: its own build.ts builds its binary, as
// `bun run build` does there) or binaries (a file, run as it is); default:
// this tree. With several, a bench runs them in turn within each size
// (A, B, A, B...), against the same API server, so load on the host falls
// on all of them alike: before/after figures of a change, e.g.
//
//   git worktree add ../before <commit> && (cd ../before && npm ci)
//   KPNG_BENCH_KPNG=../before,. bun run bench startup
//
// KPNG_BENCH_SOURCE=1 runs `bun TREE/src/main.ts` instead of the binary.

import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { NODE_NAME } from "./startup-api-server.ts";

const ROOT = resolve(import.meta.dir, "..");

export interface KpngUnderTest {
  /** for the figures: the tree's directory name and commit, or the binary's name */
  name: string;
  /** the command, without flags */
  argv: string[];
}

function treeName(tree: string): string {
  const git = (args: string[]) => execFileSync("git", ["-C", tree, ...args], { encoding: "utf8" }).trim();
  try {
    const dirty = git(["status", "--porcelain", "--untracked-files=no"]) ? "+" : "";
    return `${basename(tree)}@${git(["rev-parse", "--short", "HEAD"])}${dirty}`;
  } catch {
    return basename(tree);
  }
}

/** Builds (or finds) each kpng of KPNG_BENCH_KPNG; binaries go to `dir`. */
export async function kpngsUnderTest(dir: string): Promise<KpngUnderTest[]> {
  const entries = (process.env.KPNG_BENCH_KPNG ?? ROOT)
    .split(",")
    .filter(Boolean)
    .map((p) => resolve(p));
  const out: KpngUnderTest[] = [];
  for (const [i, entry] of entries.entries()) {
    if (!existsSync(entry)) throw new Error(`KPNG_BENCH_KPNG: ${entry} does not exist`);
    if (statSync(entry).isFile()) {
      out.push({ name: basename(entry), argv: [entry] });
      continue;
    }
    const name = treeName(entry);
    if (process.env.KPNG_BENCH_SOURCE) {
      out.push({ name: `${name} (source)`, argv: [process.execPath, join(entry, "src/main.ts")] });
      continue;
    }
    const bin = join(dir, String(i), "kpng"); // named kpng: the bench finds its threads and RSS by that name
    mkdirSync(join(dir, String(i)));
    const built = Bun.spawnSync([process.execPath, join(entry, "build.ts"), "--outfile", bin], {
      cwd: entry,
      stdout: "ignore",
      stderr: "pipe",
    });
    if (built.exitCode !== 0) throw new Error(`building ${entry}: ${built.stderr.toString()}`);
    out.push({ name, argv: [bin] });
  }
  return out;
}

/**
 * The command that runs kpng (`argv`: a KpngUnderTest's) in the node's network
 * namespace `ns` as the benches' node, following the API server of
 * `kubeconfig`, `backend` programming the node; more flags go after it.
 */
export const kpngInNode = (ns: string, argv: readonly string[], kubeconfig: string, backend: string): string[] => [
  ...["ip", "netns", "exec", ns, ...argv],
  ...["--kubeconfig", kubeconfig, "--backend", backend, "--hostname-override", NODE_NAME],
];

/** Deletes the nft tables named `table` (both families) in `ns`, so that a run starts from an empty node; none there: nothing. */
export function deleteNftTables(ns: string, table: string): void {
  for (const family of ["ip", "ip6"])
    Bun.spawnSync(["ip", "netns", "exec", ns, "nft", "delete", "table", family, table], { stderr: "ignore" });
}
