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
// number of nft syncs, the proxy's CPU share during the churn, the time from
// its start to its first sync and its RSS after the changes. Figures only.
// KPNG_BENCH_SIZES (default "1000,10000"), KPNG_BENCH_CHANGES (default 100).
// KPNG_BENCH_CONTENT_TYPE=json: kpng asks for JSON (default: protobuf, as
// kube-proxy). KPNG_BENCH_KPNG measures another tree's kpng, or several in turn
// (bench/kpng-under-test.ts), against the same API server.
//
// Against the real API server the same churn is then measured on the real
// kube-proxy 1.36.2 in nftables mode, as kubeadm deploys it (its default
// minSyncPeriod, 1s), in the same namespace (test/harness/kube-proxy.ts): a
// change is in once a "SyncProxyRules complete" of the IPv6 proxier (the
// bench's services are IPv6) that started after it has been logged (klog's
// time and `elapsed`). KPNG_BENCH_KUBE_PROXY=0 leaves it out.
//
// CPU (issue 40 goal 4), for kpng's default run and kube-proxy, as CPU time
// of each process tree (bench/proc-cpu.ts: its nft children included, alive
// or reaped): from process start to its first sync; idle, KPNG_BENCH_IDLE_S
// (default 60; 0 leaves it out) with no change, from 1 s after the first
// sync (its first 15 s also apart: kpng's collections after start-up); one
// change alone, KPNG_BENCH_SINGLES times (default 5): the CPU from
// the PATCH to 500 ms after the end of the sync that took it in, less the idle
// rate after those 15 s over that window; and per change under the churn (its CPU over its
// changes; every run). Printed as a second table per size, with kpng's share of
// kube-proxy's.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { requireK8s } from "../test/harness/kube-apiserver.ts";
import { startKubeProxy } from "../test/harness/kube-proxy.ts";
import type { Topology } from "../test/harness/netns.ts";
import { apiKind, apiLabel, type BenchApi, inBenchNode, runAlone, withApi } from "./bench-api.ts";
import { deleteNftTables, kpngInNode, kpngsUnderTest } from "./kpng-under-test.ts";
import { lines } from "./lines.ts";
import { treeCpuMs } from "./proc-cpu.ts";
import { NODE_NAME } from "./startup-api-server.ts";
import { FIRST_SYNC_TIMEOUT_MS, quietNft } from "./startup.bench.ts";

const ROOT = join(import.meta.dir, "..");
const PERIOD_MS = 100;

/** CPU seconds of a process and its children (nft), alive or reaped */
const cpuSeconds = (pid: number) => treeCpuMs(pid) / 1000;
const IDLE_S = Number(process.env.KPNG_BENCH_IDLE_S ?? 60);
const SINGLES = Number(process.env.KPNG_BENCH_SINGLES ?? 5);
/** after a sync ends: the log lines and follow-up work of the change are done by then */
const SETTLE_MS = 500;
/**
 * The first seconds of the idle window, reported apart: kpng collects and
 * shrinks its heap after the first sync and again 10 s after the last sync
 * (src/core/release-memory.ts), a cost that grows with the cluster and comes
 * once, not the idle cost that goes on.
 */
const SETTLE_IDLE_S = 15;
/** kube-proxy's sync of one change took 15-31 s at 10,000 services on a loaded host */
const SINGLE_TIMEOUT_MS = 120_000;

/** resident memory of a process, MB (VmRSS) */
const rssMB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))];

interface Sync {
  start: number;
  end: number;
}

/**
 * One change every PERIOD_MS (not awaited: the pace holds however long the API server takes), then
 * waits (bounded) for a sync that started after the last one. A change is in the kernel once a sync
 * that started after the API server applied it has ended: its latency.
 */
async function paceChanges(api: BenchApi, changes: number, syncs: () => Sync[]): Promise<{ latencies: number[]; seconds: number }> {
  const t0 = Date.now();
  const applied: Array<Promise<number>> = [];
  for (let n = 1; n <= changes; n++) {
    const due = t0 + n * PERIOD_MS;
    if (due > Date.now()) await Bun.sleep(due - Date.now());
    applied.push(api.change(n));
  }
  const changedAt = await Promise.all(applied);
  const lastAt = Math.max(...changedAt);
  const end = Date.now() + 30_000;
  while (!syncs().some((x) => x.start >= lastAt) && Date.now() < end) await Bun.sleep(50);
  const seconds = (Date.now() - t0) / 1000;
  const all = syncs();
  const latencies: number[] = [];
  for (const at of changedAt) {
    const x = all.find((y) => y.start >= at);
    if (x) latencies.push(x.end - at);
  }
  return { latencies, seconds };
}

/** CPU seconds at idle and for one change alone, between the first sync and the churn (see the header) */
interface IdleAndSingle {
  /** CPU s over IDLE_S with no change; undefined when not measured */
  idle?: number;
  /** of it, the first SETTLE_IDLE_S: what follows a first sync (kpng: the collection and shrink after start-up, and 10 s later at rest) */
  idleSettle?: number;
  /** CPU ms of each change alone, the rest of the idle time's rate over its window taken out */
  singles: number[];
}

async function idleAndSingles(o: { pid: number; api: BenchApi; syncs: () => Sync[]; first: number }): Promise<IdleAndSingle> {
  let idleRate = 0;
  let idle: number | undefined;
  let idleSettle: number | undefined;
  if (IDLE_S > 0) {
    const settle = Math.min(SETTLE_IDLE_S, IDLE_S / 2);
    const c0 = cpuSeconds(o.pid);
    await Bun.sleep(settle * 1000);
    const c1 = cpuSeconds(o.pid);
    await Bun.sleep((IDLE_S - settle) * 1000);
    idle = cpuSeconds(o.pid) - c0;
    idleSettle = c1 - c0;
    idleRate = (idle - idleSettle) / (IDLE_S - settle);
  }
  const singles: number[] = [];
  for (let k = 1; k <= SINGLES; k++) {
    const c0 = cpuSeconds(o.pid);
    const t0 = Date.now();
    const at = await o.api.change(o.first + k);
    const end = Date.now() + SINGLE_TIMEOUT_MS;
    let sync: Sync | undefined;
    while (!(sync = o.syncs().find((x) => x.start >= at)) && Date.now() < end) await Bun.sleep(20);
    if (!sync) continue;
    await Bun.sleep(Math.max(0, sync.end + SETTLE_MS - Date.now()));
    singles.push((cpuSeconds(o.pid) - c0 - idleRate * ((Date.now() - t0) / 1000)) * 1000);
  }
  return { idle, idleSettle, singles };
}

async function churn(opts: {
  topo: Topology;
  api: BenchApi;
  kpng: string[];
  changes: number;
  extra: string[];
  cpu: boolean;
}): Promise<Churned> {
  const { topo, api, kpng: kpngArgv, changes, extra } = opts;
  const kubeconfig = await api.begin();
  try {
    deleteNftTables(topo.node.ns, "kpng");
    await quietNft(30_000);
    const spawnedAt = Date.now();
    const kpng = Bun.spawn([...kpngInNode(topo.node.ns, kpngArgv, kubeconfig, "nft"), ...extra], {
      cwd: ROOT,
      stdout: "ignore",
      stderr: "pipe",
      env: { ...process.env, HOME: "/dev/null" },
    });
    const log = lines(kpng.stderr);
    try {
      const firstSync = await log.wait(/ synced backend=nft /, 1, FIRST_SYNC_TIMEOUT_MS);
      const kpid = kpng.pid; // `ip netns exec` execs kpng in its own place
      const firstCpu = cpuSeconds(kpid);
      await Bun.sleep(1000);
      // kpng logs `synced` when nft has committed; ms= is how long the sync took
      const synced = () =>
        log.all
          .filter((l) => / synced backend=nft /.test(l.line))
          .map((l) => ({ end: l.at, start: l.at - Number(/ ms=(\d+)/.exec(l.line)?.[1] ?? 0) }));
      // the idle and one-change figures are the default run's; every run's churn is counted
      const quiet = opts.cpu ? await idleAndSingles({ pid: kpid, api, syncs: synced, first: changes }) : { singles: [] };
      const syncsBefore = log.count(/ synced backend=nft /);
      const cpu0 = cpuSeconds(kpid);
      const { latencies, seconds } = await paceChanges(api, changes, synced);
      const cpu = cpuSeconds(kpid) - cpu0;
      return {
        latencies,
        syncs: log.count(/ synced backend=nft /) - syncsBefore,
        cpuShare: cpu / seconds,
        cpu: { first: firstCpu, ...quiet, churnPerChangeMs: (cpu * 1000) / changes },
        startMs: firstSync.at - spawnedAt,
        rssMB: rssMB(kpid),
      };
    } finally {
      kpng.kill("SIGTERM");
      await kpng.exited;
    }
  } finally {
    await api.end();
  }
}

/** klog's header time (`I1129 08:30:00.123456`, local time) as epoch ms */
function klogTime(line: string): number | undefined {
  const m = /^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})/.exec(line);
  if (!m) return undefined;
  const [mo, d, h, mi, sec, us] = m.slice(1).map(Number);
  return new Date(new Date().getFullYear(), mo - 1, d, h, mi, sec, us / 1000).getTime();
}

/** Go's duration text (`12.3ms`, `1.2s`, `850µs`) in ms */
function goMs(text: string): number {
  const m = /^([\d.]+)(ns|µs|us|ms|s)$/.exec(text);
  if (!m) return 0;
  return Number(m[1]) * { ns: 1e-6, µs: 1e-3, us: 1e-3, ms: 1, s: 1000 }[m[2] as "ns" | "µs" | "us" | "ms" | "s"];
}

/** The same churn on the real kube-proxy (nftables mode, kubeadm's settings), its syncs read from its log. */
async function churnKubeProxy(opts: {
  topo: Topology;
  api: BenchApi;
  changes: number;
  dir: string;
}): Promise<Churned & { syncMs: number }> {
  const { topo, api, changes } = opts;
  if (!api.server) throw new Error("kube-proxy runs against the real API server only");
  await api.begin();
  deleteNftTables(topo.node.ns, "kube-proxy");
  await quietNft(30_000);
  const spawnedAt = Date.now();
  const proxy = await startKubeProxy({ api: api.server, ns: topo.node.ns, mode: "nftables", nodeName: NODE_NAME, dir: opts.dir });
  try {
    const syncs = () =>
      proxy.log
        .filter((l) => l.includes('"SyncProxyRules complete"') && l.includes('ipFamily="IPv6"'))
        .map((l) => {
          const end = klogTime(l) ?? 0;
          return { end, start: end - goMs(/elapsed="([^"]+)"/.exec(l)?.[1] ?? "") };
        });
    const first = Date.now() + 180_000;
    while (!syncs().length && Date.now() < first && proxy.proc.exitCode === null) await Bun.sleep(100);
    if (!syncs().length) throw new Error(`kube-proxy never synced; its log:\n${proxy.log.slice(-20).join("\n")}`);
    const firstCpu = cpuSeconds(proxy.proc.pid);
    await Bun.sleep(1000);
    const quiet = await idleAndSingles({ pid: proxy.proc.pid, api, syncs, first: changes });
    const before = syncs().length;
    const cpu0 = cpuSeconds(proxy.proc.pid);
    const { latencies, seconds } = await paceChanges(api, changes, syncs);
    const cpu = cpuSeconds(proxy.proc.pid) - cpu0;
    const all = syncs();
    const took = all.slice(before).map((x) => x.end - x.start);
    return {
      latencies,
      syncs: all.length - before,
      cpuShare: cpu / seconds,
      cpu: { first: firstCpu, ...quiet, churnPerChangeMs: (cpu * 1000) / changes },
      syncMs: pct(took, 50),
      startMs: all[0].end - spawnedAt,
      rssMB: rssMB(proxy.proc.pid),
    };
  } finally {
    await proxy.stop();
  }
}

/** One row of the table. */
function row(
  o: { services: number; name: string; width: number; label: string; changes: number; load: string; tail?: string },
  r: Churned,
) {
  const l = r.latencies;
  const ms = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? "never" : x.toFixed(0));
  const unseen = l.length < o.changes ? ` (${o.changes - l.length} changes not seen)` : "";
  console.log(
    `  ${String(o.services).padStart(8)} | ${o.name.padEnd(o.width)} | ${o.label.padEnd(17)} | ${ms(pct(l, 50)).padStart(9)} | ${ms(pct(l, 99)).padStart(6)} | ${ms(
      l.length ? Math.max(...l) : undefined,
    ).padStart(
      6,
    )} | ${String(r.syncs).padStart(9)} | ${(r.cpuShare * 100).toFixed(0)}% of a core${unseen} | ${(r.startMs / 1000).toFixed(2).padStart(7)} s | ${r.rssMB.toFixed(0).padStart(4)} MB | ${o.load}${o.tail ?? ""}`,
  );
}

interface Churned {
  latencies: number[];
  syncs: number;
  cpuShare: number;
  /** process start to its first sync's end (kube-proxy: its IPv6 proxier's), ms */
  startMs: number;
  /** the process's RSS after the changes, MB */
  rssMB: number;
  /** CPU of the process tree (idle and one change alone: the default run and kube-proxy only) */
  cpu?: CpuFigures;
}

interface CpuFigures extends IdleAndSingle {
  /** CPU s from process start to its first sync */
  first: number;
  /** CPU ms of the churn over its changes */
  churnPerChangeMs: number;
}

/** The CPU table of one size: each proxy's row, then kpng's share of kube-proxy's per change. */
function cpuTable(rows: Array<{ name: string; cpu: CpuFigures }>, width: number) {
  const f = (x: number | undefined, digits: number) => (x === undefined || !Number.isFinite(x) ? "-" : x.toFixed(digits));
  console.log(
    `\n  CPU of the process tree (nft children included) | first sync s | idle ${IDLE_S} s: s (of it the first ${SETTLE_IDLE_S} s) | one change alone ms, median (min-max of ${SINGLES}) | per change under churn ms`,
  );
  for (const { name, cpu } of rows) {
    const s = cpu.singles;
    console.log(
      `  ${name.padEnd(width)} | ${f(cpu.first, 2).padStart(7)} | ${f(cpu.idle, 2).padStart(6)} (${f(cpu.idleSettle, 2)}) | ${f(pct(s, 50), 1).padStart(7)} (${f(Math.min(...s), 1)} to ${f(Math.max(...s), 1)}) | ${f(cpu.churnPerChangeMs, 1).padStart(7)}`,
    );
  }
  const kp = rows.find((r) => r.name === "kube-proxy")?.cpu;
  if (!kp) return;
  const ok = (x: number) => (!Number.isFinite(x) ? "" : x <= 1 / 20 ? "; goal 1/20 met" : "; goal 1/20 not met");
  const share = (x: number) => `${f(x * 100, 1)}% (1/${f(1 / x, 0)}${ok(x)})`;
  for (const { name, cpu } of rows.filter((r) => r.name !== "kube-proxy")) {
    // kube-proxy's minSyncPeriod (1 s) takes ~10 of the churn's changes in each sync: kpng's 1s run is the like-for-like one under churn
    const alone = cpu.singles.length ? `alone ${share(pct(cpu.singles, 50) / pct(kp.singles, 50))}, ` : "";
    const steady = (c: CpuFigures) => f((c.idle ?? Number.NaN) - (c.idleSettle ?? 0), 2);
    const idle = cpu.idle === undefined ? "" : `; idle after the first ${SETTLE_IDLE_S} s ${steady(cpu)} s against ${steady(kp)} s`;
    console.log(
      `  ${name} / kube-proxy, CPU per change: ${alone}under churn ${share(cpu.churnPerChangeMs / kp.churnPerChangeMs)}; first sync ${f((cpu.first / kp.first) * 100, 0)}%${idle}`,
    );
  }
}

const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

export default async function churnBench() {
  const sizes = (process.env.KPNG_BENCH_SIZES ?? "1000,10000").split(",").map(Number);
  const changes = Number(process.env.KPNG_BENCH_CHANGES ?? 100);
  const kind = apiKind();
  const contentType = process.env.KPNG_BENCH_CONTENT_TYPE === "json" ? "application/json" : "application/vnd.kubernetes.protobuf";
  await inBenchNode({ prefix: "kpc", dirPrefix: "kpng-bench-churn-" }, async (topo, dir) => {
    const kpngs = await kpngsUnderTest(dir);
    const width = Math.max(4, ...kpngs.map((k) => k.name.length));
    console.log(
      `one endpoint change every ${PERIOD_MS} ms (${changes} changes), kpng --kubeconfig --backend nft (${kpngs.map((k) => k.name).join(", ")}, compiled, asking for ${contentType}) against ${apiLabel(kind)}; latency = API server applied -> nft committed a sync started after it`,
    );
    for (const services of sizes) {
      console.log(`\n${services} services x 10 endpoints, 100 nodes (load ${load()})`);
      await withApi({ kind, topo, services, dir }, async (api) => {
        const cpus: Array<{ name: string; cpu: CpuFigures }> = [];
        console.log(
          `  services | ${"kpng".padEnd(width)} | minSyncPeriod     | median ms | p99 ms | max ms | nft syncs | CPU | start->first sync | RSS after | load`,
        );
        for (const [label, extra] of [
          ["none (paced)", []],
          ["1s (explicit)", ["--min-sync-period", "1s"]],
        ] as const)
          for (const k of kpngs) {
            const before = load();
            const cpu = extra.length === 0; // idle and one change alone: kpng's default's
            const r = await churn({
              topo,
              api,
              kpng: [...k.argv, "--kube-api-content-type", contentType],
              changes,
              extra: [...extra],
              cpu,
            });
            row({ services, name: k.name, width, label, changes, load: before }, r);
            if (r.cpu) cpus.push({ name: `${k.name} ${label}`, cpu: r.cpu });
          }
        if (api.server && process.env.KPNG_BENCH_KUBE_PROXY !== "0") {
          requireK8s();
          const before = load();
          const r = await churnKubeProxy({ topo, api, changes, dir: join(dir, `kube-proxy-${services}`) });
          const tail = ` | its sync ${Number.isFinite(r.syncMs) ? r.syncMs.toFixed(0) : "-"} ms median`;
          row({ services, name: "kube-proxy", width, label: "1s (its default)", changes, load: before, tail }, r);
          if (r.cpu) cpus.push({ name: "kube-proxy", cpu: r.cpu });
        }
        cpuTable(cpus, width + 16);
      });
    }
  });
}

if (import.meta.main) await runAlone(churnBench);
