// nft backend figures, measured with the real `nft` inside a network
// namespace (test/harness/netns.ts): never the host's ruleset.
//
//   1. first full sync of 10,000 services x 10 endpoints: render and apply
//      (`nft -f -` for the skeleton, the elements on kpng's netlink socket);
//      then a new backend's full sync over those tables (a restart: the
//      tables listed, then rewritten in place by `nft -f -`)
//   2. one endpoint change at 10 and at 10,000 services: statements, apply time
//      (through the `nft -i` session; its first change also starts it)
//   3. TCP connect latency to a service with 10 vs 10,000 services programmed
//   4. a first load into empty tables at 1,000 and 10,000 services, its
//      apply both ways, interleaved: elements through `nft -f` (in
//      batches side by side at 10,000) and through kpng's own netlink batch
//      (plugins/nft/netlink-batch.ts), with the encoding's own time; and the
//      whole sync (the netlink way loads the tables' base while it renders,
//      so its apply alone leaves that out)
//
// The services are IPv6 single-stack: the address plan's IPv4 service range
// (/20) holds only 4,096 cluster IPs. Endpoints sit on 100 nodes, so 1% of
// them are local to this node (only those get hairpin entries), as on a real
// node of a large cluster.

import { processSpawner } from "../plugins/nft/executor.ts";
import type { NftOptions } from "../plugins/nft/backend.ts";
import { createNftBackend, type NftBackend } from "../plugins/nft/index.ts";
import { encodeElements } from "../plugins/nft/netlink-batch.ts";
import { NftSync } from "../plugins/nft/plan.ts";
import { defaultConfig } from "../src/core/config/config.ts";
import { createLogger } from "../src/core/log.ts";
import type { NodeState, ServiceEndpoints } from "../src/core/brain/state.ts";
import { plan, v4, v6 } from "../test/fixtures/addresses.ts";
import { createTopology, type Topology } from "../test/harness/netns.ts";
import { entry, ep, nextState, nodeState, svc } from "../test/nft/fixtures.ts";

const ENDPOINTS = 10;
const NODES = 100;

function service(i: number, topo: Topology, endpoints = ENDPOINTS, salt = 0): ServiceEndpoints {
  const s = svc({ namespace: `ns${i % 50}`, name: `svc${i}`, clusterIPs: [v6.clusterIP(i + 1)], ports: [{ name: "http", port: 80 }] });
  if (i === 0) return entry(s, { p0: ep({ ips: [topo.pods[0].v6], ports: { http: 8080 } }) }); // the one we connect to
  const eps = Object.fromEntries(
    Array.from({ length: endpoints }, (_, j) => {
      const x = i * ENDPOINTS + j + salt;
      return [`p${j}`, ep({ ips: [v6.pod(x % NODES, 2 + Math.floor(x / NODES))], local: x % NODES === 0, ports: { http: 8080 } })];
    }),
  );
  return entry(s, eps);
}

const cluster = (n: number, topo: Topology) => nodeState(Array.from({ length: n }, (_, i) => service(i, topo)));

const benchConfig = () =>
  defaultConfig({
    nodeName: "node0",
    nodeIPs: [v4.node(0), v6.node(0)],
    clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR],
  });

function backend(topo: Topology, opts: NftOptions = {}): NftBackend {
  return createNftBackend(
    { config: benchConfig(), log: createLogger("bench", { level: "warn" }), out: () => {} },
    { exec: topo.executor(topo.node.ns), netns: topo.node.ns, interactive: processSpawner(["ip", "netns", "exec", topo.node.ns]), ...opts },
  );
}

const ms = (x: number) => `${x.toFixed(1)} ms`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)];

async function endpointChange(b: NftBackend, state: NodeState, topo: Topology) {
  const runs: { statements: number; applyMs: number; renderMs: number }[] = [];
  let s = state;
  for (let r = 1; r <= 5; r++) {
    // service 5 gets one endpoint replaced (a new pod IP), as a rollout does
    const next = nextState(s, [service(5, topo, ENDPOINTS, r * 7919)]);
    await b.apply(next.state, next.change);
    runs.push({ statements: b.last!.statements, applyMs: b.last!.applyMs, renderMs: b.last!.renderMs });
    s = next.state;
  }
  return {
    statements: median(runs.map((r) => r.statements)),
    applyMs: median(runs.map((r) => r.applyMs)),
    firstApplyMs: runs[0].applyMs,
    renderMs: median(runs.map((r) => r.renderMs)),
    state: s,
  };
}

/** 3 rounds of 300 sequential connects from the client; the quietest round counts (the machine is shared) */
async function latency(topo: Topology) {
  const rounds: { median: number; p90: number }[] = [];
  for (let r = 0; r < 3; r++) {
    const probes = Array.from({ length: 300 }, () => ({ ip: v6.clusterIP(1), port: 80 }));
    const rs = await topo.probeMany(topo.client.ns, probes);
    const ok = rs.flatMap((x) => (x.ok && x.connectMs !== undefined ? [x.connectMs] : []));
    if (ok.length !== probes.length) throw new Error(`only ${ok.length}/${probes.length} connects succeeded`);
    rounds.push({ median: median(ok), p90: p90(ok) });
  }
  return rounds.sort((a, b) => a.median - b.median)[0];
}

const FIRST_LOAD_ROUNDS = 3;

/** a first load's apply (empty tables) both ways, interleaved: `nft -f` for everything, and the elements on kpng's netlink socket */
async function firstLoads(topo: Topology) {
  for (const n of [1000, 10_000]) {
    const state = cluster(n, topo);
    const apply: Record<"nft" | "netlink", number[]> = { nft: [], netlink: [] };
    const whole: Record<"nft" | "netlink", number[]> = { nft: [], netlink: [] };
    for (let r = 0; r < FIRST_LOAD_ROUNDS; r++)
      for (const mode of ["nft", "netlink"] as const) {
        await topo.exec(topo.node.ns, ["nft", "-f", "-"], "table ip kpng\ndelete table ip kpng\ntable ip6 kpng\ndelete table ip6 kpng\n");
        const b = backend(topo, { firstLoad: mode });
        const t = performance.now();
        await b.apply(state, null);
        whole[mode].push(performance.now() - t);
        apply[mode].push(b.last!.applyMs);
        await b.close();
      }
    const empty = { chains: new Map(), sets: new Map() };
    const tx = new NftSync(benchConfig()).plan(state, null, { ip: empty, ip6: empty }).tx;
    const t0 = performance.now();
    const { batch } = encodeElements(tx);
    const encodeMs = performance.now() - t0;
    const each = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(", ");
    console.log(
      `first load, ${n} services x ${ENDPOINTS} endpoints, apply: nft -f ${ms(median(apply.nft))} (${each(apply.nft)}), ` +
        `elements on kpng's netlink socket ${ms(median(apply.netlink))} (${each(apply.netlink)}); ` +
        `whole sync (render and apply): ${ms(median(whole.nft))} (${each(whole.nft)}) and ${ms(median(whole.netlink))} (${each(whole.netlink)}); ` +
        `medians of ${FIRST_LOAD_ROUNDS}, interleaved; encoding ${batch?.elements} elements, ${batch?.bytes.byteLength} bytes: ${ms(encodeMs)}`,
    );
  }
}

export default async function nftBench() {
  const topo = await createTopology({ pods: 1, prefix: "kpb" });
  try {
    await firstLoads(topo);
    await topo.serve(topo.pods[0], { tcp: [8080] });
    const results: Record<number, { change: Awaited<ReturnType<typeof endpointChange>>; lat: { median: number; p90: number } }> = {};
    for (const n of [10, 10_000]) {
      const b = backend(topo);
      const state = cluster(n, topo);
      await b.apply(state, null);
      const full = b.last!;
      console.log(
        `full sync, ${n} services x ${ENDPOINTS} endpoints: render ${ms(full.renderMs)}, apply ${ms(full.applyMs)}, total ${ms(full.renderMs + full.applyMs)} (${full.statements} statements)`,
      );
      // a restart: a new process's first full sync over the tables the last one left (rewritten in place, plugins/nft/rewrite-in-place.ts)
      const again = backend(topo);
      await again.apply(state, null);
      const re = again.last!;
      await again.close();
      console.log(
        `full sync over the same tables (a restart), ${n} services: list ${ms(re.listMs)}, render ${ms(re.renderMs)}, apply ${ms(re.applyMs)}, total ${ms(re.listMs + re.renderMs + re.applyMs)} (${re.statements} statements)`,
      );
      await latency(topo); // warm-up: ARP/ND, server accept queue
      const lat = await latency(topo);
      const change = await endpointChange(b, state, topo);
      console.log(
        `one endpoint change at ${n} services: ${change.statements} statements, render ${ms(change.renderMs)}, apply ${ms(change.applyMs)} (median of 5; the first, starting nft -i: ${ms(change.firstApplyMs)})`,
      );
      console.log(
        `connect latency with ${n} services: median ${lat.median.toFixed(3)} ms, p90 ${lat.p90.toFixed(3)} ms (best of 3 x 300 connects)`,
      );
      results[n] = { change, lat };
      await b.cleanup();
      await b.close();
    }
    console.log(
      `endpoint change statements 10 vs 10,000 services: ${results[10].change.statements} vs ${results[10_000].change.statements}; ` +
        `connect latency ratio 10,000/10: ${(results[10_000].lat.median / results[10].lat.median).toFixed(2)}`,
    );
  } finally {
    await topo.destroy();
  }
}
