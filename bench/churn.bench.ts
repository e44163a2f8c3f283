// Latency under churn, as a rolling update makes it: one EndpointSlice
// change every 100 ms (10 a second) against kpng --kubeconfig --backend nft
// (the compiled binary) in a network namespace, with the cluster of `bench
// startup` (1,000 and 10,000 services x 10 endpoints) in the real
// kube-apiserver + etcd (KPNG_BENCH_API=fake: the in-repo API server;
// bench/bench-api.ts). Each change replaces the last service's endpoint; its
// latency is the time from the API server applying it (the PATCH answered;
// the in-repo server's `changed` line) to the end of the first nft sync that
// started after it (kpng logs `synced` once nft has committed; `nft monitor`
// cannot serve: it reads the whole ruleset before it listens, far too long at
// 10,000 services).
//
// Two runs per size: kpng's default (no minSyncPeriod: syncs paced by their
// cost, src/core/pacing.ts) and `--min-sync-period 1s` (kube-proxy's default,
// honoured when an operator sets it). Printed: median and p99 latency, the
// number of nft syncs, and kpng's CPU share during the churn. Figures only.
// KPNG_BENCH_SIZES (default "1000,10000"), KPNG_BENCH_CHANGES (default 100).
// KPNG_BENCH_CONTENT_TYPE=json: kpng asks for JSON (default: protobuf, as
// kube-proxy). KPNG_BENCH_KPNG measures another tree's kpng, or several in turn
// (bench/kpng-under-test.ts), against the same API server.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createTopology, type Topology } from "../test/harness/netns.ts";
import { apiKind, apiLabel, type BenchApi, closeApis, openApi } from "./bench-api.ts";
import { kpngsUnderTest } from "./kpng-under-test.ts";
import { lines } from "./lines.ts";
import { NODE_NAME } from "./startup-api-server.ts";
import { FIRST_SYNC_TIMEOUT_MS, quietNft } from "./startup.bench.ts";

const ROOT = join(import.meta.dir, "..");
const PERIOD_MS = 100;

/** user + system CPU seconds of a process */
const cpuSeconds = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
};

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))];

async function churn(opts: { topo: Topology; api: BenchApi; kpng: string[]; changes: number; extra: string[] }) {
  const { topo, api, kpng: kpngArgv, changes, extra } = opts;
  const kubeconfig = await api.begin();
  try {
    for (const family of ["ip", "ip6"])
      Bun.spawnSync(["ip", "netns", "exec", topo.node.ns, "nft", "delete", "table", family, "kpng"], { stderr: "ignore" });
    await quietNft(30_000);
    const kpng = Bun.spawn(
      [
        "ip",
        "netns",
        "exec",
        topo.node.ns,
        ...kpngArgv,
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
      await log.wait(/ synced backend=nft /, 1, FIRST_SYNC_TIMEOUT_MS);
      await Bun.sleep(1000);
      const syncsBefore = log.count(/ synced backend=nft /);
      const kpid = kpng.pid; // `ip netns exec` execs kpng in its own place
      const cpu0 = cpuSeconds(kpid);
      const t0 = Date.now();
      const applied: Array<Promise<number>> = [];
      for (let n = 1; n <= changes; n++) {
        const due = t0 + n * PERIOD_MS;
        if (due > Date.now()) await Bun.sleep(due - Date.now());
        applied.push(api.change(n)); // not awaited: one every PERIOD_MS, however long the API server takes
      }
      const changedAt = await Promise.all(applied);
      const lastAt = Math.max(...changedAt);
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
    await api.end();
  }
}

const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

export default async function churnBench() {
  const sizes = (process.env.KPNG_BENCH_SIZES ?? "1000,10000").split(",").map(Number);
  const changes = Number(process.env.KPNG_BENCH_CHANGES ?? 100);
  const kind = apiKind();
  const contentType = process.env.KPNG_BENCH_CONTENT_TYPE === "json" ? "application/json" : "application/vnd.kubernetes.protobuf";
  const dir = mkdtempSync(join(tmpdir(), "kpng-bench-churn-"));
  const topo = await createTopology({ pods: 1, prefix: "kpc" });
  try {
    const kpngs = await kpngsUnderTest(dir);
    const width = Math.max(4, ...kpngs.map((k) => k.name.length));
    console.log(
      `one endpoint change every ${PERIOD_MS} ms (${changes} changes), kpng --kubeconfig --backend nft (${kpngs.map((k) => k.name).join(", ")}, compiled, asking for ${contentType}) against ${apiLabel(kind)}; latency = API server applied -> nft committed a sync started after it`,
    );
    for (const services of sizes) {
      console.log(`\n${services} services x 10 endpoints, 100 nodes (load ${load()})`);
      const api = await openApi({ kind, topo, services, dir });
      try {
        console.log(`  services | ${"kpng".padEnd(width)} | minSyncPeriod     | median ms | p99 ms | max ms | nft syncs | kpng CPU | load`);
        for (const [label, extra] of [
          ["none (paced)", []],
          ["1s (explicit)", ["--min-sync-period", "1s"]],
        ] as const)
          for (const k of kpngs) {
            const before = load();
            const r = await churn({ topo, api, kpng: [...k.argv, "--kube-api-content-type", contentType], changes, extra: [...extra] });
            const l = r.latencies;
            const ms = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? "never" : x.toFixed(0));
            console.log(
              `  ${String(services).padStart(8)} | ${k.name.padEnd(width)} | ${label.padEnd(17)} | ${ms(pct(l, 50)).padStart(9)} | ${ms(pct(l, 99)).padStart(6)} | ${ms(
                l.length ? Math.max(...l) : undefined,
              ).padStart(
                6,
              )} | ${String(r.syncs).padStart(9)} | ${(r.cpuShare * 100).toFixed(0)}% of a core${l.length < changes ? ` (${changes - l.length} changes not seen)` : ""} | ${before}`,
            );
          }
      } finally {
        await api.close();
      }
    }
  } finally {
    await topo.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  await churnBench();
  await closeApis();
}
