// UDP conntrack cleanup with real flows: a client keeps one source port (one
// conntrack entry) across syncs, as DNS clients and UDP streams do.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createNftBackend, type NftBackend } from "../../plugins/nft/index.ts";
import type { ServiceEndpoints } from "../../src/core/brain/state.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { context, entry, key, nextState, nodeConfig, nodeState, svc } from "./fixtures.ts";
import { podEndpoints } from "./packet-cases.ts";

let topo: Topology;
beforeAll(async () => {
  topo = await createTopology({ pods: 2, prefix: "kptc" });
  for (const p of topo.pods) await topo.serve(p, { udp: [5353] });
});
afterAll(() => topo?.destroy());

const dns = (i: number) =>
  svc({
    name: `dns${i}`,
    clusterIPs: [v4.clusterIP(i), v6.clusterIP(i)],
    ports: [{ name: "dns", protocol: "UDP", port: 53, nodePort: 30000 + i }],
  });

const conntrackTo = (ip: string, fam: string) =>
  topo.exec(topo.node.ns, ["conntrack", "-L", "-f", fam, "-p", "udp", "--orig-dst", ip]).catch(() => "");

describe("nft UDP conntrack cleanup (real flows)", () => {
  for (const [fam, ip, sport] of [
    ["ipv4", v4.clusterIP(20), 40020],
    ["ipv6", v6.clusterIP(20), 40021],
  ] as const)
    test(`a UDP flow follows its service when its endpoint is replaced (${fam})`, async () => {
      const backend = createNftBackend(context(nodeConfig()), { exec: topo.executor(topo.node.ns) });
      const first = nodeState([entry(dns(20), podEndpoints(topo, [0], { dns: 5353 }))]);
      await backend.apply(first, null);
      const probe = { ip, port: 53, proto: "udp" as const, sport };
      expect(await topo.probe(topo.client.ns, probe)).toMatchObject({ ok: true, who: "pod0" });
      expect(await conntrackTo(ip, fam)).toContain(`sport=${sport}`);

      // pod0 still runs and would still answer: only the cleanup can move the flow
      const { state, change } = nextState(first, [entry(dns(20), podEndpoints(topo, [1], { dns: 5353 }))]);
      await backend.apply(state, change);
      expect(backend.last?.conntrackDeletes).toBeGreaterThan(0);
      expect(await topo.probe(topo.client.ns, probe)).toMatchObject({ ok: true, who: "pod1" });
    });

  test("a UDP flow that started before its service existed reaches the new endpoints", async () => {
    const backend: NftBackend = createNftBackend(context(nodeConfig()), { exec: topo.executor(topo.node.ns) });
    const other: ServiceEndpoints = entry(dns(31), podEndpoints(topo, [0], { dns: 5353 }));
    const before = nodeState([other]);
    await backend.apply(before, null);
    // no rule knows 198.18.0.30 yet: the packet is routed out un-NATed and conntrack remembers that
    const probe = { ip: v4.clusterIP(30), port: 53, proto: "udp" as const, sport: 40030, timeout: 0.3 };
    expect(await topo.probe(topo.client.ns, probe)).toMatchObject({ ok: false, error: "timeout" });
    expect(await conntrackTo(v4.clusterIP(30), "ipv4")).toContain("UNREPLIED");

    const { state, change } = nextState(before, [entry(dns(30), podEndpoints(topo, [1], { dns: 5353 }))]);
    await backend.apply(state, change);
    expect(change).toEqual(new Set([key(dns(30))]));
    expect(await topo.probe(topo.client.ns, { ...probe, timeout: 1 })).toMatchObject({ ok: true, who: "pod1" });
  });

  test("a UDP flow to a node port follows a replaced endpoint", async () => {
    const backend = createNftBackend(context(nodeConfig()), { exec: topo.executor(topo.node.ns) });
    const first = nodeState([entry(dns(40), podEndpoints(topo, [0], { dns: 5353 }))]);
    await backend.apply(first, null);
    const probe = { ip: topo.node.v4, port: 30040, proto: "udp" as const, sport: 40040 };
    expect(await topo.probe(topo.client.ns, probe)).toMatchObject({ ok: true, who: "pod0" });
    const { state, change } = nextState(first, [entry(dns(40), podEndpoints(topo, [1], { dns: 5353 }))]);
    await backend.apply(state, change);
    expect(await topo.probe(topo.client.ns, probe)).toMatchObject({ ok: true, who: "pod1" });
  });
});
