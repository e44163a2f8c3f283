// `kpng verify` for nft (issue 36), against the real kernel in a namespace:
// after kpng programs a few Services, reading its tables back finds nothing
// missing; after someone deletes an element or a rule by hand, or adds one,
// verify names the Service and the frontend it concerns; a narrowed check
// concerns one Service only; every whole check sets the drift metric.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createNftBackend, type NftBackend } from "../../plugins/nft/index.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import { driftMetrics, hasDrift } from "../fixtures/drift-metrics.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { context, entry, ep, nextState, nodeConfig, nodeState, svc } from "./fixtures.ts";

let topo: Topology;
let backend: NftBackend;
let state: NodeState;
const { metrics, drift } = driftMetrics();

const nft = (...argv: string[]) => topo.exec(topo.node.ns, ["nft", ...argv]);
const eps = (n: number, from = 1) =>
  Object.fromEntries(
    Array.from({ length: n }, (_, i) => [
      `p${from + i}`,
      ep({ ips: [v4.pod(1, from + i), v6.pod(1, from + i)], ports: { http: 8080, dns: 5353 } }),
    ]),
  );
const web = (n: number) =>
  entry(
    svc({
      name: "web",
      clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)],
      ports: [
        { name: "http", port: 80, nodePort: 30080 },
        { name: "dns", protocol: "UDP", port: 53 },
      ],
    }),
    eps(n),
  );
const services = () => [
  web(2),
  // ClientIP affinity: sets the packets fill, whose elements are not compared
  entry(svc({ name: "sticky", clusterIPs: [v4.clusterIP(2)], ports: [{ name: "http", port: 80 }], affinitySeconds: 60 }), eps(2, 10)),
  entry(svc({ name: "empty", clusterIPs: [v4.clusterIP(3)], ports: [{ name: "http", port: 80 }] }), {}),
  // the other shapes, so that none reads back as a difference: LB IPs with source ranges, eTP=Local with external IPs
  entry(
    svc({
      name: "lb",
      clusterIPs: [v4.clusterIP(4), v6.clusterIP(4)],
      lbIPs: [v4.external(4), v6.external(4)],
      sourceRanges: ["198.18.128.0/24", "2001:db8:5::/64"],
      ports: [{ name: "http", port: 80, nodePort: 30084 }],
    }),
    eps(2, 20),
  ),
  entry(
    svc({
      name: "local",
      clusterIPs: [v4.clusterIP(5)],
      externalIPs: [v4.external(5)],
      eTPLocal: true,
      ports: [{ name: "http", port: 80, nodePort: 30085 }],
    }),
    { ...eps(1, 30), r: ep({ ips: [v4.pod(1, 31)], local: false, ports: { http: 8080 } }) },
  ),
];

/** kpng's next full sync puts back whatever the case removed (as the repair does) */
async function resync() {
  await backend.apply(state, null);
  expect(await backend.verify()).toEqual([]);
}

beforeAll(async () => {
  topo = await createTopology({ pods: 0, prefix: "kpvn" });
  const ctx = { ...context(nodeConfig()), metrics };
  backend = createNftBackend(ctx, { exec: topo.executor(topo.node.ns), netns: topo.node.ns });
  state = nodeState(services());
  await backend.apply(state, null);
});
afterAll(async () => {
  await backend?.close();
  await topo?.destroy();
});

describe("nft verify: the kernel read back (real kernel)", () => {
  test("after a full sync the tables hold what kpng programmed: no difference, the metric says 0", async () => {
    expect(await backend.verify()).toEqual([]);
    expect(drift.at(-1)).toEqual({ backend: "nft", differences: 0 });
  });

  test("after partial syncs (endpoints added, a Service removed and back) still none", async () => {
    state = nextState(state, [web(3)]).state;
    await backend.apply(state, new Set(["default/web"]));
    expect(await backend.verify()).toEqual([]);
    const without = nextState(state, [], ["default/empty"]).state;
    await backend.apply(without, new Set(["default/empty"]));
    expect(await backend.verify()).toEqual([]);
    state = nextState(without, [services()[2]]).state;
    await backend.apply(state, new Set(["default/empty"]));
    expect(await backend.verify()).toEqual([]);
  });

  test("a cluster IP's element deleted by hand: that Service and frontend named as missing", async () => {
    await nft("delete", "element", "ip", "kpng", "service-ips", `{ ${v4.clusterIP(1)} . tcp . 80 }`);
    const drifts = await backend.verify();
    expect(drifts).toHaveLength(1);
    hasDrift(drifts, { service: "default/web", frontend: `${v4.clusterIP(1)}:80/TCP`, kind: "missing" });
    expect(drifts[0].detail).toContain("service-ips");
    expect(drift.at(-1)).toEqual({ backend: "nft", differences: 1 });
    // narrowed: only that Service's differences
    expect(await backend.verify("default/web")).toEqual(drifts);
    expect(await backend.verify("default/sticky")).toEqual([]);
    await resync();
  });

  test("an IPv6 cluster IP and a node port deleted by hand: named with their frontends", async () => {
    await nft("delete", "element", "ip6", "kpng", "service-ips", `{ ${v6.clusterIP(1)} . udp . 53 }`);
    await nft("delete", "element", "ip", "kpng", "service-nodeports", "{ tcp . 30080 }");
    const drifts = await backend.verify();
    hasDrift(drifts, { service: "default/web", frontend: `[${v6.clusterIP(1)}]:53/UDP`, kind: "missing" });
    hasDrift(drifts, { service: "default/web", frontend: "nodePort 30080/TCP", kind: "missing" });
    expect(drifts).toHaveLength(2);
    await resync();
  });

  test("an endpoint's map element changed by hand: named as differing, with what the kernel holds", async () => {
    // the shared dispatch of web's http port keeps its endpoints under the cluster IP (names.ts)
    const key = `${v4.clusterIP(1)} . 0`;
    await nft("delete", "element", "ip", "kpng", "cluster-endpoints-tcp", `{ ${key} }`);
    await nft("add", "element", "ip", "kpng", "cluster-endpoints-tcp", `{ ${key} : ${v4.pod(1, 99)} }`);
    const drifts = await backend.verify("default/web");
    expect(drifts).toHaveLength(1);
    hasDrift(drifts, { service: "default/web", frontend: v4.clusterIP(1), kind: "differs" });
    expect(drifts[0].detail).toContain(v4.pod(1, 99));
    await resync();
  });

  test("a rule deleted from a Service's chain and one added to a base chain: both named", async () => {
    // sticky has a chain of its own (affinity); its first rule is the affinity check
    const listing = JSON.parse(await nft("-j", "-a", "list", "table", "ip", "kpng")) as { nftables: Array<Record<string, any>> };
    const rule = listing.nftables.find(
      (x) => x.rule && String(x.rule.chain).startsWith("svc-") && String(x.rule.chain).includes("default/sticky"),
    )!.rule;
    await nft("delete", "rule", "ip", "kpng", rule.chain, "handle", String(rule.handle));
    await nft("insert", "rule", "ip", "kpng", "services", "ip", "daddr", v4.clusterIP(9), "drop");
    const drifts = await backend.verify();
    hasDrift(drifts, { service: "default/sticky", kind: "missing" });
    hasDrift(drifts, { service: "", kind: "extra" });
    // named by its handle (kpng reads rules' comments, not their expressions): the one nft gave the rule added
    const added = (await nft("-a", "list", "chain", "ip", "kpng", "services")).split("\n").find((l) => l.includes(v4.clusterIP(9)))!;
    const handle = /# handle (\d+)/.exec(added)![1];
    expect(drifts.find((d) => d.kind === "extra")!.detail).toMatch(new RegExp(`handle ${handle}$`));
    expect(drifts).toHaveLength(2);
    await resync();
  });

  test("a table deleted: every object named, the metric counts them all", async () => {
    await nft("delete", "table", "ip6", "kpng");
    const drifts = await backend.verify();
    expect(drifts.length).toBeGreaterThan(10);
    expect(drifts.every((d) => d.kind === "missing")).toBe(true);
    hasDrift(drifts, { service: "default/web", frontend: `[${v6.clusterIP(1)}]:80/TCP` });
    expect(drift.at(-1)).toEqual({ backend: "nft", differences: drifts.length });
    // a narrowed check does not stand for the backend: the metric is left as it was
    await backend.verify("default/web");
    expect(drift.at(-1)).toEqual({ backend: "nft", differences: drifts.length });
    await resync();
  });
  test("without a netlink socket of its own (nft -j list table, one per family): the same check, the same names", async () => {
    // another backend over the same tables, its executor in the namespace but none named: no socket of its own
    const viaNft = createNftBackend({ ...context(nodeConfig()), metrics }, { exec: topo.executor(topo.node.ns) });
    await viaNft.apply(state, null);
    expect(await viaNft.verify()).toEqual([]);
    await nft("delete", "element", "ip", "kpng", "service-nodeports", "{ tcp . 30080 }");
    await nft("delete", "element", "ip6", "kpng", "cluster-ips", `{ ${v6.clusterIP(1)} }`);
    const drifts = await viaNft.verify();
    expect(drifts).toHaveLength(2);
    hasDrift(drifts, { service: "default/web", frontend: "nodePort 30080/TCP", kind: "missing" });
    hasDrift(drifts, { service: "default/web", frontend: v6.clusterIP(1), kind: "missing" });
    await viaNft.apply(state, null);
    expect(await viaNft.verify()).toEqual([]);
    await viaNft.close();
  });
});
