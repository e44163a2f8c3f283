// Repair after another process touched kpng's tables (issue 10 B), with the
// real `nft` in a network namespace: the nft backend fed as kpng feeds it,
// its watch on the kernel's events (plugins/nft/watch.ts): the netlink
// socket kpng reads itself, or `nft monitor` with KPNG_BENCH_WATCH=monitor. At 10, 1,000 and
// 10,000 services (x 10 endpoints) it prints:
//
//   1. repair time per fault (table deleted, ruleset flushed, chain flushed),
//      5 runs each: from the fault's commit (its `nft` exited) to kpng's full
//      sync applied, median and max; packets checked after each;
//   2. what watching costs kpng's own syncs: the full sync with and without
//      the watch, how long the restarted monitor takes to listen (proved by
//      an echoed stamp), an endpoint change with and without the stamp, and
//      the watch's CPU over 20 endpoint changes (the monitor's; with
//      netlink, kpng's whole process, syncs included) and the monitor's RSS.
//
// `bun run bench nft-repair` (SIZES=10,1000 to choose the sizes). Prints
// figures, asserts nothing.

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { processSpawner } from "../plugins/nft/executor.ts";
import { createNftBackend, type NftBackend } from "../plugins/nft/index.ts";
import type { Spawner } from "../plugins/nft/session.ts";
import type { NodeState, ServiceEndpoints } from "../src/core/brain/state.ts";
import { defaultConfig } from "../src/core/config/config.ts";
import { createLogger } from "../src/core/log.ts";
import { feedBackend, type Feed } from "../src/host/feed.ts";
import { plan, v4, v6 } from "../test/fixtures/addresses.ts";
import { createTopology, type Topology } from "../test/harness/netns.ts";
import { entry, ep, nextState, nodeState, svc } from "../test/nft/fixtures.ts";

const RUNS = 5;
const NODES = 100;

function service(i: number, topo: Topology, salt = 0): ServiceEndpoints {
  const s = svc({ namespace: `ns${i % 50}`, name: `svc${i}`, clusterIPs: [v6.clusterIP(i + 1)], ports: [{ name: "http", port: 80 }] });
  if (i === 0) return entry(s, { p0: ep({ ips: [topo.pods[0].v6], ports: { http: 8080 } }) }); // the one we connect to
  const eps = Object.fromEntries(
    Array.from({ length: 10 }, (_, j) => {
      const x = i * 10 + j + salt;
      return [`p${j}`, ep({ ips: [v6.pod(x % NODES, 2 + Math.floor(x / NODES))], local: x % NODES === 0, ports: { http: 8080 } })];
    }),
  );
  return entry(s, eps);
}

/** a Spawner that remembers the pid of each `nft monitor`, to read its CPU time */
function countingSpawner(prefix: string[], pids: number[]): Spawner {
  const inner = processSpawner(prefix);
  return {
    spawn(argv, on, env) {
      if (!argv.includes("monitor")) return inner.spawn(argv, on, env);
      const p = spawn(prefix[0], [...prefix.slice(1), ...argv], { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, ...env } });
      if (p.pid) pids.push(p.pid);
      p.stdout.setEncoding("utf8").on("data", (d: string) => on.stdout?.(d));
      p.stderr.setEncoding("utf8").on("data", (d: string) => on.stderr(d));
      p.on("close", (code) => on.exit(code));
      return { write: () => {}, kill: () => void p.kill() };
    },
  };
}

const cpuMs = (pid: number) => {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return 0;
  }
};

const rssMB = (pid: number) => {
  try {
    return Math.round(Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024);
  } catch {
    return 0;
  }
};

const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return `median ${s[Math.floor(s.length / 2)].toFixed(0)} ms, max ${s.at(-1)!.toFixed(0)} ms`;
};

async function size(n: number, topo: Topology) {
  const prefix = ["ip", "netns", "exec", topo.node.ns];
  const config = defaultConfig({
    nodeName: "node0",
    nodeIPs: [v4.node(0), v6.node(0)],
    clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR],
  });
  const ctx = { config, log: createLogger("bench", { level: "error" }), out: () => {} };
  const pids: number[] = [];
  let state: NodeState = nodeState(Array.from({ length: n }, (_, i) => service(i, topo)));

  // 2a. the full sync with and without the watch
  const plain = createNftBackend(ctx, { exec: topo.executor(topo.node.ns), interactive: processSpawner(prefix) });
  await plain.apply(state, null);
  await plain.apply(state, null);
  const plainMs = plain.last!.applyMs;
  const plainChange: number[] = [];
  for (let r = 1; r <= 10; r++) {
    const next = nextState(state, [service(5, topo, r * 7919)]);
    state = next.state;
    await plain.apply(state, next.change);
    plainChange.push(plain.last!.applyMs);
  }
  await plain.close();
  const events = process.env.KPNG_BENCH_WATCH === "monitor" ? "monitor" : "netlink";
  const b: NftBackend = createNftBackend(ctx, {
    exec: topo.executor(topo.node.ns),
    interactive: processSpawner(prefix),
    monitor: countingSpawner(prefix, pids),
    events,
    netns: topo.node.ns,
  });
  const syncs: Array<{ full: boolean }> = [];
  const feed: Feed = feedBackend(b, {
    log: ctx.log,
    onSynced: (_s, _t, change) => syncs.push({ full: change === null }),
    // 15 faults in a row would be a storm of repairs (feed.ts), each then delayed on purpose: measured here is one repair
    repairStorm: { burst: 1000, windowMs: 1, firstDelayMs: 0, maxDelayMs: 0 },
  });
  const waitSyncs = async (k: number) => {
    const end = performance.now() + 20_000;
    while (syncs.length < k) {
      if (performance.now() > end) throw new Error(`${n} services: no sync #${k} within 20 s`);
      await Bun.sleep(1);
    }
  };
  feed.push({ state, change: null });
  await waitSyncs(1);
  await b.watching();
  feed.push({ state, change: null });
  await waitSyncs(2);
  const t = performance.now();
  await b.watching();
  console.log(
    `${n} services: full sync apply ${plainMs.toFixed(0)} ms without the watch, ${b.last!.applyMs.toFixed(0)} ms with it; ` +
      `then the new monitor listens (proved) ${(performance.now() - t).toFixed(0)} ms later`,
  );

  // 2b. the monitor's CPU over 20 endpoint changes
  const monitorPid = pids.at(-1);
  const selfCpu = () => Math.round((process.cpuUsage().user + process.cpuUsage().system) / 1000);
  const cpu0 = monitorPid ? cpuMs(monitorPid) : selfCpu();
  const watchedChange: number[] = [];
  for (let r = 1; r <= 20; r++) {
    const next = nextState(state, [service(5, topo, 100_000 + r * 7919)]);
    state = next.state;
    feed.push({ state, change: next.change });
    await waitSyncs(2 + r);
    watchedChange.push(b.last!.applyMs);
  }
  console.log(
    `${n} services: one endpoint change applied in ${stats(plainChange)} without the watch, ${stats(watchedChange)} with it (its stamp); ` +
      (monitorPid
        ? `nft monitor CPU over those 20 changes: ${cpuMs(monitorPid) - cpu0} ms (10 ms ticks), its RSS ${rssMB(monitorPid)} MB`
        : `watch: netlink in kpng's process (no monitor process); kpng's whole CPU over those 20 changes: ${selfCpu() - cpu0} ms`),
  );

  // 1. repair time per fault
  const faults: Array<[string, string[]]> = [
    ["nft delete table ip6 kpng", ["delete", "table", "ip6", "kpng"]],
    ["nft flush ruleset", ["flush", "ruleset"]],
    ["nft flush chain ip6 kpng services", ["flush", "chain", "ip6", "kpng", "services"]],
  ];
  for (const [name, argv] of faults) {
    const times: number[] = [];
    let flowing = 0;
    for (let r = 0; r < RUNS; r++) {
      const before = syncs.length;
      await topo.exec(topo.node.ns, ["nft", ...argv]);
      const t0 = performance.now();
      await waitSyncs(before + 1);
      times.push(performance.now() - t0);
      if (!syncs.at(-1)!.full) throw new Error(`${name}: the repair was not a full sync`);
      if ((await topo.probe(topo.client.ns, { ip: v6.clusterIP(1), port: 80 })).ok) flowing++;
      // the next fault once the new monitor listens (a change before is seen only if it removes the tables)
      await b.watching();
    }
    console.log(`${n} services, ${name}: repaired ${stats(times)} over ${RUNS} runs; packets flow after ${flowing}/${RUNS}`);
  }
  const quiet = syncs.length;
  await Bun.sleep(1000);
  console.log(`${n} services: syncs in a quiet second after the faults: ${syncs.length - quiet}`);
  feed.stop();
  await b.cleanup();
  await b.close();
}

export default async function nftRepairBench() {
  const topo = await createTopology({ pods: 1, prefix: "kpbr" });
  try {
    await topo.serve(topo.pods[0], { tcp: [8080] });
    const load = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
    console.log(`load average before: ${load}`);
    for (const n of (process.env.SIZES ?? "10,1000,10000").split(",").map(Number)) await size(n, topo);
  } finally {
    await topo.destroy();
  }
}
