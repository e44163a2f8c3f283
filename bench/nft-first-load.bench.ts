// The nft backend's first load as kpng runs it at start-up: compiled like the
// binary (bytecode, build.ts's JIT policy), in a fresh process, inside a
// network namespace with no kpng tables (test/harness/netns.ts), the
// backend as `--backend nft` builds it: its setup (the `nft --check` run
// while the lists are read), then the first full sync of 1,000 and 10,000
// IPv6 services x 10 endpoints on 100 nodes (1% local); KPNG_BENCH_SIZES
// picks other sizes ("1000,10000"). Printed per size, medians of
// KPNG_BENCH_RUNS fresh processes (default 8 at 1,000, 4 at 10,000): the
// main thread's own CPU time (render and apply: the code runs
// cold, and the kernel inserts the elements inside kpng's sends) and the
// wall clock of that sync, its render and apply split, and the setup's CPU.
// Figures only; nothing asserted.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createNftBackend } from "../plugins/nft/index.ts";
import { defaultConfig } from "../src/core/config/config.ts";
import { createLogger } from "../src/core/log.ts";
import { plan, v4, v6 } from "../test/fixtures/addresses.ts";
import { createTopology } from "../test/harness/netns.ts";
import { entry, ep, nodeState, svc } from "../test/nft/fixtures.ts";

const ENDPOINTS = 10;
const NODES = 100;
/** build.ts's: JavaScriptCore's tier-up thresholds x8 until start-up is over */
const JIT_POLICY = 8;

interface Figures {
  setupCpu: number;
  cpu: number;
  ms: number;
  renderMs: number;
  applyMs: number;
}

/** this thread's CPU time, in ms */
const threadCpu = () => {
  const u = process.threadCpuUsage();
  return (u.user + u.system) / 1000;
};

function service(i: number) {
  const s = svc({ namespace: `ns-${i % 50}`, name: `svc-${i}`, clusterIPs: [v6.clusterIP(i + 1)], ports: [{ name: "http", port: 80 }] });
  const eps: Record<string, ReturnType<typeof ep>> = {};
  for (let j = 0; j < ENDPOINTS; j++) {
    const x = i * ENDPOINTS + j;
    eps[`p${j}`] = ep({ ips: [v6.pod(x % NODES, 2 + Math.floor(x / NODES))], local: x % NODES === 0, ports: { http: 8080 } });
  }
  return entry(s, eps);
}

/** one first load, in this (fresh) process, in the namespace it runs in */
async function child(n: number): Promise<Figures> {
  const config = defaultConfig({
    nodeName: "node-0",
    nodeIPs: [v4.node(0), v6.node(0)],
    clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR],
  });
  const backend = createNftBackend({ config, log: createLogger("bench", { level: "warn" }), out: () => {} });
  let c0 = threadCpu();
  await backend.setup();
  const setupCpu = threadCpu() - c0;
  const state = nodeState(Array.from({ length: n }, (_, i) => service(i)));
  c0 = threadCpu();
  const t0 = performance.now();
  await backend.apply(state, null);
  const figures = {
    setupCpu,
    cpu: threadCpu() - c0,
    ms: performance.now() - t0,
    renderMs: backend.last!.renderMs,
    applyMs: backend.last!.applyMs,
  };
  await backend.close();
  return figures;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const f = (xs: number[]) => median(xs).toFixed(1);

export default async function nftFirstLoad() {
  const dir = mkdtempSync(join(tmpdir(), "kpng-first-load-"));
  const topo = await createTopology({ pods: 0, prefix: "kpfb" });
  try {
    const bin = join(dir, "first-load");
    const built = await Bun.build({
      entrypoints: [import.meta.path],
      compile: { outfile: bin, jitPolicy: JIT_POLICY },
      bytecode: true,
      format: "esm",
      target: "bun",
    });
    if (!built.success) throw new AggregateError(built.logs, "bench build failed");
    const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
    for (const n of (process.env.KPNG_BENCH_SIZES ?? "1000,10000").split(",").map(Number)) {
      const runs = Number(process.env.KPNG_BENCH_RUNS ?? (n > 1000 ? 4 : 8));
      const all: Figures[] = [];
      const before = load();
      for (let r = 0; r < runs; r++) {
        await topo.exec(topo.node.ns, ["nft", "-f", "-"], "table ip kpng\ndelete table ip kpng\ntable ip6 kpng\ndelete table ip6 kpng\n");
        const out = await topo.exec(topo.node.ns, [bin, "child", String(n)]);
        all.push(JSON.parse(out) as Figures);
      }
      console.log(
        `first load, ${n.toLocaleString("en")} services x ${ENDPOINTS} endpoints (load ${before} -> ${load()}, median of ${runs} fresh processes): ` +
          `main thread ${f(all.map((x) => x.cpu))} ms of CPU (${all.map((x) => x.cpu.toFixed(0)).join(", ")}), ` +
          `wall ${f(all.map((x) => x.ms))} ms (render ${f(all.map((x) => x.renderMs))}, apply ${f(all.map((x) => x.applyMs))}); ` +
          `setup (nft --check) ${f(all.map((x) => x.setupCpu))} ms of CPU`,
      );
    }
  } finally {
    await topo.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main && process.argv[2] === "child") {
  console.log(JSON.stringify(await child(Number(process.argv[3]))));
  process.exit(0);
}
