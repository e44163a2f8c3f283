// The floor: what an idle kpng with nothing to serve keeps resident. The
// compiled binary (built as `bun run build` does) runs `--input` a file that
// holds only its Node, `--backend nft`, in a network namespace of its own;
// once start-up has settled (the second "released the executable's start-up
// pages" line, src/core/release-memory.ts) and a second more has passed, /proc/PID/smaps
// of kpng and of its children (`nft -i`) is read and split:
//
//   - code: the executable's text pages (Bun's runtime: JSC, its JIT
//     tiers, the parsers, TLS; kpng's own code is bytecode in the bundle);
//   - rodata: the executable's read-only data;
//   - data+bundle: the executable's writable segment (.data, .bss and the
//     embedded JS bundle with its bytecode), file pages and private copies;
//   - anon: anonymous memory (the JS heap, malloc, JIT code, stacks);
//   - libs: shared libraries (libc, libm, ...);
//   - nft -i: the interactive nft that partial syncs go through.
//
// `bun run bench memory`; KPNG_BENCH_RUNS (default 3) runs. Needs root (a
// network namespace, nftables in it). Figures only; nothing asserted.

import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { buildBinary } from "../build.ts";
import { parseSmaps } from "../src/core/release-pages.ts";
import { FREE_PORTS } from "../test/harness/kpng-process.ts";
import { netns, spawn, type Proc } from "./global.bench.ts";

const RUNS = Number(process.env.KPNG_BENCH_RUNS ?? 3);
const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

const NODE_ONLY = {
  apiVersion: "v1",
  kind: "List",
  items: [
    {
      apiVersion: "v1",
      kind: "Node",
      metadata: { name: "node-1" },
      status: { addresses: [{ type: "InternalIP", address: "203.0.113.11" }] },
    },
  ],
};

type Parts = { code: number; rodata: number; data: number; anon: number; libs: number };

/** kpng's resident kB by kind of mapping (see the header) */
function split(pid: number, exe: string): Parts {
  const parts: Parts = { code: 0, rodata: 0, data: 0, anon: 0, libs: 0 };
  for (const m of parseSmaps(readFileSync(`/proc/${pid}/smaps`, "utf8"))) {
    if (m.path === exe) {
      if (m.perms.includes("x")) parts.code += m.rssKB;
      else if (m.perms.includes("w")) parts.data += m.rssKB;
      else parts.rodata += m.rssKB;
    } else if (m.path.startsWith("/")) parts.libs += m.rssKB;
    else parts.anon += m.rssKB;
  }
  return parts;
}

const children = (pid: number) => readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
const rssKB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
const comm = (pid: number) =>
  readFileSync(`/proc/${pid}/cmdline`, "utf8")
    .split("\0")
    .slice(0, 2)
    .join(" ")
    .replace(/^\S*\//, "");
const mb = (kb: number) => (kb / 1024).toFixed(1);

export default async function memoryBench() {
  const dir = mkdtempSync(join(tmpdir(), "kpng-bench-memory-"));
  const bin = join(dir, "kpng");
  const input = join(dir, "cluster.json");
  const ns = `kpngmem-${randomBytes(3).toString("hex")}`;
  const procs: Proc[] = [];
  try {
    await buildBinary(bin);
    writeFileSync(input, JSON.stringify(NODE_ONLY));
    await netns(ns);
    console.log(
      `\nidle kpng, nothing to serve: compiled binary, --input (one Node) --backend nft, in a namespace (load average ${load()})`,
    );
    console.log("  run | first sync ms | tree MB = kpng (code + rodata + data+bundle + anon + libs) + children");
    const totals: number[] = [];
    const all: Parts[] = [];
    for (let r = 1; r <= RUNS; r++) {
      const t0 = Date.now();
      const p = spawn([
        "ip",
        "netns",
        "exec",
        ns,
        bin,
        "--input",
        input,
        "--backend",
        "nft",
        "--node-name",
        "node-1",
        "-v=2",
        ...FREE_PORTS,
      ]);
      procs.push(p);
      await p.wait(/ synced backend=nft /, 0, "err", 60_000);
      const firstSync = Date.now() - t0;
      await p.wait(/released the executable's start-up pages when=settled/, 0, "err", 60_000);
      await Bun.sleep(1000);
      // `ip netns exec` execs kpng: the spawned pid is kpng's
      const pid = p.p.pid;
      const parts = split(pid, realpathSync(bin));
      const kids = children(pid).map((c) => ({ name: comm(c), kb: rssKB(c) }));
      const kpng = rssKB(pid);
      const total = kpng + kids.reduce((n, k) => n + k.kb, 0);
      totals.push(total);
      all.push(parts);
      console.log(
        `  ${String(r).padStart(3)} | ${String(firstSync).padStart(13)} | ${mb(total)} = kpng ${mb(kpng)} (${mb(parts.code)} + ${mb(parts.rodata)} + ${mb(parts.data)} + ${mb(parts.anon)} + ${mb(parts.libs)})${kids.map((k) => ` + ${k.name} ${mb(k.kb)}`).join("")}`,
      );
      p.p.kill("SIGTERM");
      await p.p.exited;
    }
    const m = (k: keyof Parts) => mb(median(all.map((p) => p[k])));
    console.log(
      `  median: tree ${mb(median(totals))} MB; kpng code ${m("code")}, rodata ${m("rodata")}, data+bundle ${m("data")}, anon ${m("anon")}, libs ${m("libs")} MB`,
    );
  } finally {
    for (const p of procs) if (p.p.exitCode === null) p.p.kill("SIGKILL");
    await Promise.all(procs.map((p) => p.p.exited));
    await Bun.spawn(["ip", "netns", "del", ns], { stderr: "ignore" }).exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await memoryBench();
