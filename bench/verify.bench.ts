// `kpng verify` figures (docs/verify.md), measured in a network namespace
// (test/harness/netns.ts), never the host's tables: what one check of every
// Service costs, wall time and CPU (kpng's and its children's: nft,
// iptables-save), at 1,000 and 5,000 IPv6 Services of 10 endpoints.
//
//   nft: the tables read on kpng's own netlink socket (netlink-dump.ts)
//        against `nft -j list table`, the same records, alternated;
//   iptables: `iptables-save` and the hairpin set read, the Services'
//        chains rendered again (the sync keeps digests only).

import { IptablesBackend } from "../plugins/iptables/index.ts";
import { createNftBackend, type NftBackend } from "../plugins/nft/index.ts";
import type { ServiceEndpoints } from "../src/core/brain/state.ts";
import { defaultConfig } from "../src/core/config/config.ts";
import { createLogger } from "../src/core/log.ts";
import { plan, v4, v6 } from "../test/fixtures/addresses.ts";
import { createTopology } from "../test/harness/netns.ts";
import { entry, ep, nodeState, svc } from "../test/nft/fixtures.ts";

const SIZES = [1000, 5000];
const ROUNDS = 3;

const config = () =>
  defaultConfig({ nodeName: "node0", nodeIPs: [v4.node(0), v6.node(0)], clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR] });

function services(n: number): ServiceEndpoints[] {
  return Array.from({ length: n }, (_, i) =>
    entry(
      svc({ namespace: `ns${i % 50}`, name: `svc${i}`, clusterIPs: [v6.clusterIP(i + 1)], ports: [{ name: "http", port: 80 }] }),
      Object.fromEntries(
        Array.from({ length: 10 }, (_, j) => {
          const x = i * 10 + j;
          return [`p${j}`, ep({ ips: [v6.pod(x % 100, 2 + Math.floor(x / 100))], local: x % 100 === 0, ports: { http: 8080 } })];
        }),
      ),
    ),
  );
}

/** this process's CPU and its reaped children's, ms (/proc/self/stat utime stime cutime cstime, 100 Hz ticks) */
const cpuMs = async () =>
  (await Bun.file("/proc/self/stat").text())
    .split(") ")[1]
    .split(" ")
    .slice(11, 15)
    .reduce((a, x) => a + Number(x), 0) * 10;

async function timed(check: () => Promise<unknown[]>): Promise<{ wall: number; cpu: number }> {
  const [t, c] = [performance.now(), await cpuMs()];
  const drifts = await check();
  if (drifts.length) throw new Error(`verify found ${drifts.length} differences in tables kpng just wrote`);
  return { wall: Math.round(performance.now() - t), cpu: (await cpuMs()) - c };
}

const line = (what: string, r: { wall: number; cpu: number }[]) =>
  console.log(`${what}: wall ${r.map((x) => x.wall).join(", ")} ms; cpu ${r.map((x) => x.cpu).join(", ")} ms`);

export default async function () {
  const log = createLogger("bench", { level: "error" });
  for (const n of SIZES) {
    const topo = await createTopology({ pods: 0, prefix: "kpbv" });
    try {
      const ctx = { config: config(), log, out: () => {} };
      const state = nodeState(services(n));
      const viaNetlink = createNftBackend(ctx, { exec: topo.executor(topo.node.ns), netns: topo.node.ns });
      await viaNetlink.apply(state, null);
      // no namespace named: no socket of its own, `nft -j list table`; then the same records as the first
      const viaNft = createNftBackend(ctx, { exec: topo.executor(topo.node.ns) });
      await viaNft.apply(state, null);
      const r = { netlink: [] as { wall: number; cpu: number }[], nft: [] as { wall: number; cpu: number }[] };
      for (let i = 0; i < ROUNDS; i++) {
        r.netlink.push(await timed(() => viaNetlink.verify()));
        r.nft.push(await timed(() => (viaNft as NftBackend).verify()));
      }
      line(`nft ${n} services, netlink dump`, r.netlink);
      line(`nft ${n} services, nft -j list table`, r.nft);
      await viaNft.cleanup();
      const ipt = new IptablesBackend(ctx, { executor: topo.executor(topo.node.ns), monitorPeriodMs: 0, families: ["v6"] });
      await ipt.setup();
      for (const [, se] of state.services) {
        ipt.setService(se.service);
        for (const [k, e] of se.endpoints) ipt.setEndpoint(se.service.Namespace, se.service.Name, k, e);
      }
      await ipt.sync();
      const ri: { wall: number; cpu: number }[] = [];
      for (let i = 0; i < ROUNDS; i++) ri.push(await timed(() => ipt.verify()));
      line(`iptables ${n} services`, ri);
      await ipt.close();
    } finally {
      await topo.destroy();
    }
  }
  console.log(`load average ${(await Bun.file("/proc/loadavg").text()).split(" ")[0]} (${navigator.hardwareConcurrency} cores)`);
}
