// The CPU of kpng's first sync outside the kernel: the brain's first compute
// (the flush after the lists) and the nft render (NftSync.plan, then printing
// the transaction), at 1,000 and 10,000 services x 10 endpoints, in process.
// At start-up this code runs cold (not compiled yet), so each figure is
// given cold (the first run in a fresh process) and warm (later runs of the
// same process), as the median of KPNG_BENCH_RUNS fresh processes (default 5).
// Besides the wall clock, the main thread's own CPU time
// (/proc/thread-self/schedstat): on a shared machine it leaves out the time
// spent waiting for a core.
//
// The render's state: v4 ClusterIP services with one TCP port, 1 endpoint in
// 100 on this node. The brain's: test/fixtures/synthetic.ts (100 nodes, 1
// service in 4 with Local policies), as bench brain.

import { readFileSync } from "node:fs";
import { NftSync } from "../plugins/nft/plan.ts";
import { Brain } from "../src/core/brain/brain.ts";
import { kinds, parseObject, type K8sObject } from "../src/core/brain/k8s/objects.ts";
import { defaultConfig } from "../src/core/config/config.ts";
import { plan as addressPlan, v4, v6 } from "../test/fixtures/addresses.ts";
import { rawCluster } from "../test/fixtures/synthetic.ts";
import { entry, ep, nodeState, svc } from "../test/nft/fixtures.ts";

const SIZES = [1_000, 10_000];
const WARM_RUNS = 3;

/** this thread's time on a CPU, in ms */
const threadCpu = () => Number(readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]) / 1e6;

function timed(fn: () => void): { ms: number; cpu: number } {
  Bun.gc(true);
  const c0 = threadCpu();
  const t0 = performance.now();
  fn();
  return { ms: performance.now() - t0, cpu: threadCpu() - c0 };
}

/** n v4 cluster IPs beyond the plan's /20 (4,096 addresses), still inside its RFC 2544 range: no kernel sees them here */
const clusterIP = (i: number) => `198.18.${(i >> 8) & 63}.${i & 255}`;
const podIP = (x: number) => `198.19.${(x >> 8) & 255}.${x & 255}`;

function renderState(n: number) {
  return nodeState(
    Array.from({ length: n }, (_, i) => {
      const s = svc({ namespace: `ns${i % 50}`, name: `svc${i}`, clusterIPs: [clusterIP(i)], ports: [{ name: "http", port: 80 }] });
      const eps: Record<string, ReturnType<typeof ep>> = {};
      for (let j = 0; j < 10; j++) {
        const x = i * 10 + j;
        eps[`p${j}`] = ep({ ips: [podIP(x % 65_000)], local: x % 100 === 0, ports: { http: 8080 } });
      }
      return entry(s, eps);
    }),
  );
}

interface Figures {
  compute: { ms: number; cpu: number }[];
  plan: { ms: number; cpu: number }[];
  print: { ms: number; cpu: number }[];
}

/** one fresh process's runs: the first of each list is cold */
function child(n: number): Figures {
  const out: Figures = { compute: [], plan: [], print: [] };
  const objects = rawCluster({ services: n, endpoints: 10, nodes: 100, localEvery: 4 }).map(
    (r) => (parseObject(r) as { object: K8sObject }).object,
  );
  const state = renderState(n);
  const config = defaultConfig({
    nodeName: "node0",
    nodeIPs: [v4.node(0), v6.node(0)],
    clusterCIDRs: [addressPlan.v4.clusterCIDR, addressPlan.v6.clusterCIDR],
  });
  const empty = { chains: new Map(), sets: new Map() };
  for (let r = 0; r <= WARM_RUNS; r++) {
    // as at start-up: the objects arrive with the lists, the first state is the flush after the last
    const brain = new Brain();
    brain.view("node-0");
    brain.apply(objects.map((object) => ({ type: "upsert" as const, object })));
    for (const k of kinds) brain.markSynced(k);
    out.compute.push(timed(() => brain.flush()));
    // a first start: a full sync in place over tables that hold nothing
    let p: ReturnType<NftSync["plan"]> | undefined;
    out.plan.push(timed(() => (p = new NftSync(config).plan(state, null, { ip: empty, ip6: empty }))));
    out.print.push(timed(() => p!.tx.print()));
  }
  return out;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const f = (xs: number[]) => median(xs).toFixed(1).padStart(6);

export default async function firstSyncCpu() {
  const runs = Number(process.env.KPNG_BENCH_RUNS ?? 5);
  console.log(`load ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}; median of ${runs} fresh processes`);
  console.log("ms: wall / main-thread CPU      cold               warm");
  for (const n of SIZES) {
    const all: Figures[] = [];
    for (let i = 0; i < runs; i++) {
      const p = Bun.spawnSync([process.execPath, import.meta.path, "child", String(n)], { stderr: "inherit" });
      if (!p.success) throw new Error(`bench child failed: ${p.exitCode}`);
      all.push(JSON.parse(p.stdout.toString()) as Figures);
    }
    for (const k of ["compute", "plan", "print"] as const) {
      const cold = all.map((x) => x[k][0]);
      const warm = all.flatMap((x) => x[k].slice(1));
      const label = { compute: "brain first compute", plan: "nft plan", print: "nft print" }[k];
      console.log(
        `${label.padEnd(20)} ${n.toLocaleString("en").padStart(6)}: ${f(cold.map((x) => x.ms))} / ${f(cold.map((x) => x.cpu))}    ${f(warm.map((x) => x.ms))} / ${f(warm.map((x) => x.cpu))}`,
      );
    }
  }
}

if (import.meta.main && process.argv[2] === "child") console.log(JSON.stringify(child(Number(process.argv[3]))));
