// Latency under churn, as a rolling update makes it: one EndpointSlice
// change every 100 ms (10 a second) against kpng --kubeconfig --backend nft
// (the compiled binary) in a network namespace, with the in-repo API server
// of `bench startup` (1,000 and 10,000 services x 10 endpoints). Each change
// replaces the last service's endpoint; its latency is the time from the API
// server applying it to the end of the first nft sync that started after it
// (kpng logs `synced` once nft has committed; `nft monitor` cannot serve: it
// reads the whole ruleset before it listens, far too long at 10,000 services).
//
// Two runs per size: kpng's default (no minSyncPeriod: syncs paced by their
// cost, src/core/pacing.ts) and `--min-sync-period 1s` (kube-proxy's default,
// honoured when an operator sets it). Printed: median and p99 latency, the
// number of nft syncs, and kpng's CPU share during the churn. Figures only.
// KPNG_BENCH_SIZES (default "1000,10000"), KPNG_BENCH_CHANGES (default 100).

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildBinary } from "../build.ts";
import { createTopology, type Topology } from "../test/harness/netns.ts";
import { NODE_NAME } from "./startup-api-server.ts";
import { lines, quietNft } from "./startup.bench.ts";

const ROOT = join(import.meta.dir, "..");
const BUN = process.execPath;
const PERIOD_MS = 100;

/** user + system CPU seconds of a process */
const cpuSeconds = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
};

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))];

async function churn(topo: Topology, bin: string, dir: string, services: number, changes: number, extra: string[]) {
  const api = Bun.spawn(
    ["ip", "netns", "exec", topo.node.ns, BUN, join(import.meta.dir, "startup-api-server.ts"), String(services), topo.pods[0].v6, dir],
    { stdin: "pipe", stdout: "pipe", stderr: "inherit" },
  );
  const apiOut = lines(api.stdout);
  try {
    const kubeconfig = (await apiOut.wait(/^ready /, 1, 120_000)).line.split(" ")[1];
    for (const family of ["ip", "ip6"])
      Bun.spawnSync(["ip", "netns", "exec", topo.node.ns, "nft", "delete", "table", family, "kpng"], { stderr: "ignore" });
    await quietNft(30_000);
    const kpng = Bun.spawn(
      [
        "ip",
        "netns",
        "exec",
        topo.node.ns,
        bin,
        "--kubeconfig",
        kubeconfig,
        "--backend",
        "nft",
        "--hostname-override",
        NODE_NAME,
        ...extra,
      ],
      { cwd: ROOT, stdout: "ignore", stderr: "pipe", env: { ...process.env, HOME: "/dev/null" } },
    );
    const log = lines(kpng.stderr);
    try {
      await log.wait(/ synced backend=nft /, 1, 120_000);
      await Bun.sleep(1000);
      const syncsBefore = log.count(/ synced backend=nft /);
      const kpid = kpng.pid; // `ip netns exec` execs kpng in its own place
      const cpu0 = cpuSeconds(kpid);
      const t0 = Date.now();
      for (let n = 1; n <= changes; n++) {
        const due = t0 + n * PERIOD_MS;
        if (due > Date.now()) await Bun.sleep(due - Date.now());
        api.stdin.write(`change ${n}\n`);
        await api.stdin.flush();
      }
      await apiOut.wait(/^changed /, changes);
      const changedAt = apiOut.all.filter((l) => l.line.startsWith("changed ")).map((l) => l.at);
      const lastAt = changedAt.at(-1)!;
      const synced = () =>
        log.all
          .filter((l) => / synced backend=nft /.test(l.line))
          .map((l) => ({ end: l.at, start: l.at - Number(/ ms=(\d+)/.exec(l.line)?.[1] ?? 0) }));
      const end = Date.now() + 30_000;
      while (!synced().some((s) => s.start >= lastAt) && Date.now() < end) await Bun.sleep(50);
      const wall = (Date.now() - t0) / 1000;
      const cpu = cpuSeconds(kpid) - cpu0;
      // A change is in the kernel once a sync that started after the API server applied it has
      // ended (kpng logs `synced` when nft has committed; ms= is how long the sync took).
      const syncs = synced();
      const latencies: number[] = [];
      for (const at of changedAt) {
        const s = syncs.find((x) => x.start >= at);
        if (s) latencies.push(s.end - at);
      }
      return { latencies, syncs: log.count(/ synced backend=nft /) - syncsBefore, cpuShare: cpu / wall };
    } finally {
      kpng.kill("SIGTERM");
      await kpng.exited;
    }
  } finally {
    api.kill();
    await api.exited;
  }
}

export default async function churnBench() {
  const sizes = (process.env.KPNG_BENCH_SIZES ?? "1000,10000").split(",").map(Number);
  const changes = Number(process.env.KPNG_BENCH_CHANGES ?? 100);
  const dir = mkdtempSync(join(tmpdir(), "kpng-bench-churn-"));
  const bin = join(dir, "kpng");
  await buildBinary(bin);
  const topo = await createTopology({ pods: 1, prefix: "kpc" });
  try {
    console.log(
      `one endpoint change every ${PERIOD_MS} ms (${changes} changes), kpng --kubeconfig --backend nft (compiled); latency = API server applied -> nft committed a sync started after it`,
    );
    console.log("  services | minSyncPeriod     | median ms | p99 ms | max ms | nft syncs | kpng CPU");
    for (const services of sizes)
      for (const [label, extra] of [
        ["none (paced)", []],
        ["1s (explicit)", ["--min-sync-period", "1s"]],
      ] as const) {
        const r = await churn(topo, bin, dir, services, changes, [...extra]);
        const l = r.latencies;
        console.log(
          `  ${String(services).padStart(8)} | ${label.padEnd(17)} | ${pct(l, 50).toFixed(0).padStart(9)} | ${pct(l, 99).toFixed(0).padStart(6)} | ${Math.max(
            ...l,
          )
            .toFixed(0)
            .padStart(
              6,
            )} | ${String(r.syncs).padStart(9)} | ${(r.cpuShare * 100).toFixed(0)}% of a core${l.length < changes ? ` (${changes - l.length} changes not seen)` : ""}`,
        );
      }
  } finally {
    await topo.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await churnBench();
