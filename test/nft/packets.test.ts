// Real packets through the nft backend: rules programmed in a node network
// namespace, tiny servers in pod namespaces, a client outside. Each case
// full-syncs its own state, then probes and checks who answered and which
// source address the pod saw.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createNftBackend } from "../../plugins/nft/index.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import {
  allPods,
  commonRows,
  cip,
  ext,
  fams,
  lb,
  node,
  nodeIP,
  packetRows,
  perFamily,
  secondNodeIP,
  web,
} from "../harness/packet-table.ts";
import { v4 } from "../fixtures/addresses.ts";
import { context, nodeConfig, nodeState } from "./fixtures.ts";
import { check, type PacketCase } from "./packet-cases.ts";

let topo: Topology;
const ports = { http: 8080, alt: 8081, bad: 8082, dns: 5353, sctp: 9000 };

beforeAll(async () => {
  topo = await createTopology({ pods: 3, prefix: "kptn" });
  for (const p of topo.pods) await topo.serve(p, { tcp: [8080, 8081], udp: [5353], sctp: [9000] });
  await topo.exec(topo.node.ns, ["ip", "addr", "add", `${secondNodeIP}/24`, "dev", "ext0"]);
});
afterAll(() => topo?.destroy());

const rows = packetRows({ topo: () => topo, ports, web });
const common = commonRows(rows);

const cases: PacketCase[] = [
  {
    name: "ClusterIP: an endpoint answers the client, off-cluster source masqueraded",
    ...common.clusterIP,
  },
  {
    name: "ClusterIP: pod traffic keeps the pod source",
    services: () => rows.on([1]),
    expect: perFamily((f) => [{ from: "pod0", to: cip[f], port: 80, answer: "pod1", source: "self" }]),
  },
  {
    name: "ClusterIP: UDP and SCTP",
    services: () => rows.on([1]),
    expect: perFamily((f) => [
      { from: "client", to: cip[f], port: 53, proto: "udp", answer: "pod1", source: "node" },
      { from: "pod0", to: cip[f], port: 90, proto: "sctp", answer: "pod1", source: "self" },
    ]),
  },
  {
    name: "multi-port: each service port reaches its own target port",
    services: rows.multiPort,
    expect: perFamily((f) => [
      { from: "pod0", to: cip[f], port: 80, answer: "pod2" },
      { from: "pod0", to: cip[f], port: 81, answer: "pod2" },
      // nothing listens on 8082 in the pod: the pod's own kernel refuses
      { from: "pod0", to: cip[f], port: 82, error: "refused" },
    ]),
  },
  {
    name: "NodePort: answered on the node's IP, masqueraded (eTP=Cluster)",
    services: () => rows.on([1]),
    expect: perFamily((f) => [
      { from: "client", to: node(f), port: 30080, answer: "pod1", source: "node" },
      { from: "client", to: node(f), port: 30053, proto: "udp", answer: "pod1", source: "node" },
      { from: "client", to: node(f), port: 30090, proto: "sctp", answer: "pod1", source: "node" },
    ]),
  },
  {
    name: "NodePort: default addresses are the node IPs, never loopback",
    ...common.nodePortAddresses,
  },
  {
    name: "NodePort: nodePortAddresses CIDR opens every local address inside it",
    config: { nodePortAddresses: ["203.0.113.0/24"] },
    services: () => rows.on([1]),
    expect: [
      { from: "client", to: secondNodeIP, port: 30080, answer: "pod1" },
      { from: "client", to: v4.node(0), port: 30080, answer: "pod1" },
      { from: "client", to: nodeIP.v6, port: 30080, error: "refused" },
    ],
  },
  {
    name: "LoadBalancer IP and externalIP reach the endpoints",
    ...common.lbAndExternalIPs,
  },
  {
    name: "loadBalancerSourceRanges: a listed client gets in",
    ...common.sourceRangesListed,
  },
  {
    name: "loadBalancerSourceRanges: others dropped on LB IPs only",
    services: () => rows.on([0], { sourceRanges: ["203.0.113.0/24", "2001:db8:3::/64"] }),
    expect: perFamily((f) => [
      { from: "client", to: lb[f], port: 80, error: "timeout" },
      { from: "client", to: lb[f], port: 53, proto: "udp", error: "timeout" },
      { from: "client", to: cip[f], port: 80, answer: "pod0" },
      { from: "client", to: ext[f], port: 80, answer: "pod0" },
      { from: "client", to: node(f), port: 30080, answer: "pod0" },
    ]),
  },
  {
    name: "iTP=Local: cluster IP traffic goes to local endpoints only",
    ...common.iTPLocal,
  },
  {
    name: "iTP=Local without local endpoints: cluster IP traffic dropped",
    services: rows.iTPLocalNone,
    expect: perFamily((f) => [
      { from: "pod0", to: cip[f], port: 80, error: "timeout" },
      { from: "pod0", to: cip[f], port: 53, proto: "udp", error: "timeout" },
      // external traffic (eTP=Cluster) still reaches them
      { from: "client", to: lb[f], port: 80, answer: ["pod1", "pod2"] },
    ]),
  },
  {
    name: "eTP=Local: external traffic reaches the local endpoint with the client source",
    services: rows.eTPLocal,
    expect: perFamily((f) => [
      { from: "client", to: lb[f], port: 80, answer: "pod0", source: "client" },
      { from: "client", to: node(f), port: 30080, answer: "pod0", source: "client" },
      { from: "client", to: lb[f], port: 53, proto: "udp", answer: "pod0", source: "client" },
    ]),
  },
  {
    name: "eTP=Local without local endpoints: outside traffic dropped, pods short-circuit, node masqueraded",
    services: rows.eTPLocalNone,
    expect: perFamily((f) => [
      { from: "client", to: lb[f], port: 80, error: "timeout" },
      { from: "client", to: node(f), port: 30080, error: "timeout" },
      { from: "pod0", to: lb[f], port: 80, answer: ["pod1", "pod2"], source: "self" },
      { from: "pod0", to: node(f), port: 30080, answer: ["pod1", "pod2"], source: "self" },
      { from: "node", to: lb[f], port: 80, answer: ["pod1", "pod2"], source: "node" },
    ]),
  },
  {
    name: "masqueradeAll: even pod traffic to a cluster IP is masqueraded",
    config: { masqueradeAll: true },
    services: () => rows.on([1]),
    expect: perFamily((f) => [{ from: "pod0", to: cip[f], port: 80, answer: "pod1", source: "node" }]),
  },
  {
    name: "no clusterCIDRs and no masqueradeAll: off-cluster source kept",
    config: { clusterCIDRs: [] },
    services: () => rows.on([1]),
    expect: perFamily((f) => [{ from: "client", to: cip[f], port: 80, answer: "pod1", source: "client" }]),
  },
  {
    name: "hairpin: a pod reaching itself through its service is masqueraded",
    ...common.hairpin,
  },
  {
    name: "no endpoints: rejected on every frontend and protocol",
    services: rows.none,
    expect: perFamily((f) => [
      { from: "client", to: cip[f], port: 80, error: "refused" },
      { from: "pod0", to: cip[f], port: 53, proto: "udp", error: "refused" },
      { from: "client", to: cip[f], port: 90, proto: "sctp", error: "refused" },
      { from: "client", to: lb[f], port: 80, error: "refused" },
      { from: "client", to: node(f), port: 30080, error: "refused" },
      { from: "node", to: cip[f], port: 80, error: "refused" },
    ]),
  },
  {
    name: "undefined port of a cluster IP: rejected",
    ...common.undefinedPort,
  },
];

async function program(c: Pick<PacketCase, "config" | "services">) {
  const backend = createNftBackend(context(nodeConfig(c.config)), { exec: topo.executor(topo.node.ns) });
  await backend.apply(nodeState(c.services()), null);
  return backend;
}

describe("nft real packets", () => {
  for (const c of cases)
    test(c.name, async () => {
      await program(c);
      await check(topo, c.expect);
    });

  test("load balancing: every endpoint gets traffic", async () => {
    await program({ services: () => rows.on([0, 1, 2]) });
    const rs = await topo.probeMany(
      topo.client.ns,
      Array.from({ length: 30 }, () => ({ ip: cip.v4, port: 80 })),
    );
    // P(some pod never picked in 30 tries) = 3 * (2/3)^30 < 2e-5
    expect(new Set(rs.map((r) => (r.ok ? r.who : r.error)))).toEqual(new Set(allPods));
  });

  for (const fam of fams)
    test(`ClientIP affinity: one client sticks to one endpoint (${fam})`, async () => {
      await program({ services: () => rows.on([0, 1, 2], { affinitySeconds: 60 }) });
      const rs = await topo.probeMany(
        topo.client.ns,
        Array.from({ length: 12 }, () => ({ ip: cip[fam], port: 80 })),
      );
      const who = new Set(rs.map((r) => (r.ok ? r.who : r.error)));
      expect(who.size).toBe(1);
      expect(allPods).toContain([...who][0]);
    });

  test("ClientIP affinity: the timeout expires the client's entry", async () => {
    await program({ services: () => rows.on([0, 1], { affinitySeconds: 1 }) });
    const r = await topo.probe(topo.client.ns, { ip: cip.v4, port: 80 });
    expect(r.ok).toBe(true);
    const affinityEntries = async () => {
      const out = await topo.exec(topo.node.ns, ["nft", "list", "table", "ip", "kpng"]);
      return out.match(/198\.18\.128\.1 (timeout|expires)/g)?.length ?? 0;
    };
    expect(await affinityEntries()).toBeGreaterThan(0);
    await Bun.sleep(1500);
    expect(await affinityEntries()).toBe(0);
  });
});
