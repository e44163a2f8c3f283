// A node agent's RSS against the full binary's on the same node (issue 12's
// goal: no more). One central brain (its own process) holds a 10,000-service
// x 10-endpoint cluster of 1,000 nodes; a node agent (`kpng --api`) and the
// full binary (`kpng --input`, the same cluster as a file) each program the
// nft backend for node-1 in their own network namespace. RSS is read 3 s
// after each one's first sync (both have collected and shrunk their start-up
// garbage by then), in rounds that alternate which starts first. Needs root.
// `bun run bench agent-memory`; AGENT_MEMORY_ROUNDS=N (default 3),
// AGENT_MEMORY_SETTLE_MS (default 3000) for a later reading.

import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { genCluster } from "../test/api/gen-cluster.ts";
import { FREE_PORTS } from "../test/harness/kpng-process.ts";
import { netns, rssOf, spawn, type Proc } from "./global.bench.ts";

const ROOT = resolve(import.meta.dir, "..");
const BUN = join(ROOT, "node_modules/.bin/bun");
const GEN = { services: 10_000, endpoints: 10, nodes: 1_000 };
const ROUNDS = Number(process.env.AGENT_MEMORY_ROUNDS ?? 3);
const SETTLE_MS = Number(process.env.AGENT_MEMORY_SETTLE_MS ?? 3000);
const mb = (n: number) => (n / 1e6).toFixed(0);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

export default async function main() {
  console.log(
    `\n${GEN.services} services x ${GEN.endpoints} endpoints, ${GEN.nodes} nodes; node-1, nft backend; RSS ${SETTLE_MS / 1000} s after the first sync (load average ${load()})`,
  );
  const dir = mkdtempSync(join(tmpdir(), "kpng-bench-agent-memory-"));
  const sock = join(dir, "brain.sock");
  const file = join(dir, "cluster.json");
  writeFileSync(file, JSON.stringify(genCluster(GEN)));
  const suffix = randomBytes(3).toString("hex");
  const ns = { agent: `kpngm-${suffix}-a`, full: `kpngm-${suffix}-f` };
  const procs: Proc[] = [];
  const common = ["--node-name", "node-1", "--backend", "nft", ...FREE_PORTS];
  const args = { agent: ["--api", `unix://${sock}`], full: ["--input", file] };
  const rss: Record<"agent" | "full", number[]> = { agent: [], full: [] };
  try {
    const brain = spawn([BUN, join(ROOT, "bench/global-brain.ts"), sock, String(GEN.services), String(GEN.endpoints), String(GEN.nodes)]);
    procs.push(brain);
    await brain.wait(/^ready/);
    for (const n of Object.values(ns)) await netns(n);
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 ? (["full", "agent"] as const) : (["agent", "full"] as const);
      const got: Partial<Record<"agent" | "full", Proc>> = {};
      for (const who of order) {
        const p = spawn(["ip", "netns", "exec", ns[who], BUN, join(ROOT, "src/main.ts"), ...args[who], ...common]);
        procs.push(p);
        await p.wait(/synced backend=nft rev=1 /, 0, "err");
        got[who] = p;
      }
      await Bun.sleep(SETTLE_MS);
      for (const who of order) rss[who].push(rssOf(got[who]!.p.pid));
      console.log(
        `  round ${round + 1} (${order.join(" first, ")} second): agent ${mb(rss.agent.at(-1)!)} MB, full binary ${mb(rss.full.at(-1)!)} MB (load ${load()})`,
      );
      for (const who of order) {
        got[who]!.p.kill("SIGTERM");
        await got[who]!.p.exited;
      }
    }
    const line = (who: "agent" | "full") => `best ${mb(Math.min(...rss[who]))} MB, median ${mb(median(rss[who]))} MB`;
    console.log(`  agent: ${line("agent")}; full binary: ${line("full")}`);
  } finally {
    for (const p of procs) if (p.p.exitCode === null) p.p.kill("SIGKILL");
    await Promise.all(procs.map((p) => p.p.exited));
    for (const n of Object.values(ns)) await Bun.spawn(["ip", "netns", "del", n], { stderr: "ignore" }).exited;
    rmSync(dir, { recursive: true, force: true });
  }
}
