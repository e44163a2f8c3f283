// Real packets through real iptables-restore (nf_tables flavour) rules in
// network namespaces: client -> node -> pods. Every Service behaviour the
// backend implements is one named case: its services are programmed together
// in one full restore, then each case probes and asserts who answered and
// which source address the pod saw.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Topology } from "../harness/netns.ts";
import { plan } from "../fixtures/addresses.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { svc, testConfig, testContext, v4, v6, type SvcSpec, type EpSpec } from "./fixtures.ts";
import { createWorld, podEp, runChecks, type Check } from "./world.ts";

interface Case {
  name: string;
  services: { spec: SvcSpec; eps: [pod: number, opts?: Omit<EpSpec, "ips">][] }[];
  checks: (t: Topology) => Check[];
}

const node4 = v4.node(0);
const node6 = v6.node(0);
const http = (port = 80, nodePort?: number) => ({ name: "http", port, nodePort });
const remote = { local: false, external: false }; // an endpoint on another node, under eTP=Local
const tcp = (ip: string, port: number) => ({ ip, port, proto: "tcp" as const });
const drop = (ip: string, port: number, proto: "tcp" | "udp" | "sctp" = "tcp") => ({ ip, port, proto, timeout: 0.5 });

const cases: Case[] = [
  {
    name: "ClusterIP TCP from a client: load-balanced, masqueraded (source outside clusterCIDRs)",
    services: [{ spec: { name: "c1", clusterIPs: [v4.clusterIP(1)], ports: [http()] }, eps: [[0], [1]] }],
    checks: () => [{ from: "client", probe: tcp(v4.clusterIP(1), 80), expect: { ok: true, who: ["pod0", "pod1"], source: "node" } }],
  },
  {
    name: "ClusterIP from a pod: source preserved (inside clusterCIDRs)",
    services: [],
    checks: () => [{ from: "pod2", probe: tcp(v4.clusterIP(1), 80), expect: { ok: true, who: ["pod0", "pod1"], source: "pod2" } }],
  },
  {
    name: "hairpin: a pod reaching itself through its service is masqueraded",
    services: [{ spec: { name: "c2", clusterIPs: [v4.clusterIP(2)], ports: [http()] }, eps: [[0]] }],
    checks: () => [{ from: "pod0", probe: tcp(v4.clusterIP(2), 80), expect: { ok: true, who: ["pod0"], source: "node" } }],
  },
  {
    // No endpoint has a SEP chain, on this node or not (hairpin is the ipset's `dst,dst,src` match): only an endpoint reaching itself is masqueraded.
    name: "endpoint on another node: DNATed straight from the balancing rule, both families; other pods keep their source",
    services: [{ spec: { name: "c5", clusterIPs: [v4.clusterIP(5), v6.clusterIP(5)], ports: [http()] }, eps: [[1, { local: false }]] }],
    checks: () => [
      { from: "client", probe: tcp(v4.clusterIP(5), 80), expect: { ok: true, who: ["pod1"], source: "node" } },
      { from: "pod0", probe: tcp(v4.clusterIP(5), 80), expect: { ok: true, who: ["pod1"], source: "pod0" } },
      { from: "pod0", probe: tcp(v6.clusterIP(5), 80), expect: { ok: true, who: ["pod1"], source: "pod0" } },
    ],
  },
  {
    name: "UDP and SCTP cluster IP ports reach the endpoint's named target ports",
    services: [
      {
        spec: {
          name: "c3",
          clusterIPs: [v4.clusterIP(3)],
          ports: [
            { name: "dns", protocol: "UDP", port: 53 },
            { name: "sc", protocol: "SCTP", port: 9000 },
          ],
        },
        eps: [[1]],
      },
    ],
    checks: () => [
      { from: "client", probe: { ip: v4.clusterIP(3), port: 53, proto: "udp" }, expect: { ok: true, who: ["pod1"] } },
      { from: "client", probe: { ip: v4.clusterIP(3), port: 9000, proto: "sctp" }, expect: { ok: true, who: ["pod1"] } },
    ],
  },
  {
    name: "IPv6 cluster IP: client masqueraded, pod preserved",
    services: [{ spec: { name: "c4", clusterIPs: [v4.clusterIP(4), v6.clusterIP(4)], ports: [http()] }, eps: [[2]] }],
    checks: () => [
      { from: "client", probe: tcp(v6.clusterIP(4), 80), expect: { ok: true, who: ["pod2"], source: "node" } },
      { from: "pod0", probe: tcp(v6.clusterIP(4), 80), expect: { ok: true, who: ["pod2"], source: "pod0" } },
    ],
  },
  {
    name: "node to cluster IP (OUTPUT hook)",
    services: [],
    checks: () => [{ from: "node", probe: tcp(v4.clusterIP(1), 80), expect: { ok: true, who: ["pod0", "pod1"] } }],
  },
  {
    name: "NodePort eTP=Cluster on the node IP: masqueraded, v4 and v6",
    services: [{ spec: { name: "n1", clusterIPs: [v4.clusterIP(10), v6.clusterIP(10)], ports: [http(80, 30010)] }, eps: [[0]] }],
    checks: () => [
      { from: "client", probe: tcp(node4, 30010), expect: { ok: true, who: ["pod0"], source: "node" } },
      { from: "client", probe: tcp(node6, 30010), expect: { ok: true, who: ["pod0"], source: "node" } },
    ],
  },
  {
    name: "NodePort eTP=Local with a local endpoint: client source preserved, only local endpoints",
    services: [
      {
        spec: { name: "n2", clusterIPs: [v4.clusterIP(11)], ports: [http(80, 30011)], eTPLocal: true },
        eps: [
          [0, { local: true }],
          [1, remote],
        ],
      },
    ],
    checks: () => [
      { from: "client", probe: tcp(node4, 30011), expect: { ok: true, who: ["pod0"], source: "client" } },
      { from: "client", probe: tcp(node4, 30011), expect: { ok: true, who: ["pod0"], source: "client" } },
    ],
  },
  {
    name: "NodePort eTP=Local without a local endpoint: external traffic dropped",
    services: [{ spec: { name: "n3", clusterIPs: [v4.clusterIP(12)], ports: [http(80, 30012)], eTPLocal: true }, eps: [[1, remote]] }],
    checks: () => [{ from: "client", probe: drop(node4, 30012), expect: { error: "timeout" } }],
  },
  {
    name: "eTP=Local short-circuit: a pod reaching the node port uses cluster-wide endpoints, unmasqueraded",
    services: [],
    checks: () => [{ from: "pod2", probe: tcp(node4, 30012), expect: { ok: true, who: ["pod1"], source: "pod2" } }],
  },
  {
    name: "eTP=Local from the node itself: cluster-wide endpoints",
    services: [],
    checks: () => [{ from: "node", probe: tcp(node4, 30012), expect: { ok: true, who: ["pod1"], source: "node" } }],
  },
  {
    name: "external IP: reachable from a client, masqueraded under eTP=Cluster",
    services: [
      {
        spec: {
          name: "e1",
          clusterIPs: [v4.clusterIP(20), v6.clusterIP(20)],
          externalIPs: [v4.external(1), v6.external(1)],
          ports: [http()],
        },
        eps: [[2]],
      },
    ],
    checks: () => [
      { from: "client", probe: tcp(v4.external(1), 80), expect: { ok: true, who: ["pod2"], source: "node" } },
      { from: "client", probe: tcp(v6.external(1), 80), expect: { ok: true, who: ["pod2"], source: "node" } },
    ],
  },
  {
    name: "LB IP with eTP=Local: client source preserved",
    services: [
      {
        spec: { name: "l1", clusterIPs: [v4.clusterIP(21)], lbIPs: [v4.external(2)], ports: [http(80, 30021)], eTPLocal: true },
        eps: [[1, { local: true }]],
      },
    ],
    checks: () => [{ from: "client", probe: tcp(v4.external(2), 80), expect: { ok: true, who: ["pod1"], source: "client" } }],
  },
  {
    name: "loadBalancerSourceRanges: a client inside the ranges is accepted",
    services: [
      {
        spec: { name: "l2", clusterIPs: [v4.clusterIP(22)], lbIPs: [v4.external(3)], ports: [http()], sourceRanges: [plan.v4.clientCIDR] },
        eps: [[0]],
      },
    ],
    checks: () => [{ from: "client", probe: tcp(v4.external(3), 80), expect: { ok: true, who: ["pod0"] } }],
  },
  {
    name: "loadBalancerSourceRanges: a client outside the ranges is dropped",
    services: [
      {
        spec: { name: "l3", clusterIPs: [v4.clusterIP(23)], lbIPs: [v4.external(4)], ports: [http()], sourceRanges: ["198.18.129.0/24"] },
        eps: [[0]],
      },
    ],
    checks: () => [{ from: "client", probe: drop(v4.external(4), 80), expect: { error: "timeout" } }],
  },
  {
    name: "no endpoints: cluster IP, external IP and node port rejected (TCP, UDP)",
    services: [
      {
        spec: {
          name: "z1",
          clusterIPs: [v4.clusterIP(30)],
          externalIPs: [v4.external(5)],
          ports: [http(80, 30030), { name: "dns", protocol: "UDP", port: 53, nodePort: 30031 }],
        },
        eps: [],
      },
    ],
    checks: () => [
      { from: "client", probe: tcp(v4.clusterIP(30), 80), expect: { error: "refused" } },
      { from: "client", probe: tcp(v4.external(5), 80), expect: { error: "refused" } },
      { from: "client", probe: tcp(node4, 30030), expect: { error: "refused" } },
      { from: "client", probe: { ip: v4.clusterIP(30), port: 53, proto: "udp" }, expect: { error: "refused" } },
      { from: "pod0", probe: tcp(v4.clusterIP(30), 80), expect: { error: "refused" } },
      { from: "node", probe: tcp(v4.clusterIP(30), 80), expect: { error: "refused" } },
    ],
  },
  {
    name: "iTP=Local without a local endpoint: cluster IP traffic dropped",
    services: [
      {
        spec: { name: "z2", clusterIPs: [v4.clusterIP(31)], ports: [http()], iTPLocal: true },
        eps: [[1, { local: false, internal: false }]],
      },
    ],
    checks: () => [{ from: "pod0", probe: drop(v4.clusterIP(31), 80), expect: { error: "timeout" } }],
  },
  {
    name: "iTP=Local with a local endpoint: only it is used",
    services: [
      {
        spec: { name: "z3", clusterIPs: [v4.clusterIP(32)], ports: [http()], iTPLocal: true },
        eps: [
          [0, { local: true }],
          [1, { local: false, internal: false }],
        ],
      },
    ],
    checks: () =>
      Array.from({ length: 4 }, () => ({
        from: "pod2" as const,
        probe: tcp(v4.clusterIP(32), 80),
        expect: { ok: true as const, who: ["pod0"] },
      })),
  },
  {
    name: "session affinity ClientIP: one client sticks to one endpoint",
    services: [{ spec: { name: "a1", clusterIPs: [v4.clusterIP(40)], ports: [http()], affinitySeconds: 60 }, eps: [[0], [1], [2]] }],
    checks: () => [],
  },
];

let topo: Topology;
let backend: IptablesBackend;

beforeAll(async () => {
  topo = await createWorld(3);
  backend = new IptablesBackend(testContext(testConfig()), { executor: topo.executor(topo.node.ns), monitorPeriodMs: 0 });
  await backend.setup();
  for (const c of cases) {
    for (const s of c.services) {
      backend.setService(svc(s.spec));
      s.eps.forEach(([pod, opts], i) => backend.setEndpoint("default", s.spec.name, `ep${i}`, podEp(topo, pod, opts)));
    }
  }
  await backend.sync();
});

afterAll(async () => {
  await backend?.close();
  await topo?.destroy();
});

describe("iptables backend, real packets", () => {
  for (const c of cases) {
    if (c.name.startsWith("session affinity")) continue;
    test(c.name, async () => {
      await runChecks(topo, c.checks(topo));
    });
  }

  test("session affinity ClientIP: one client sticks to one endpoint", async () => {
    const results = await runChecks(
      topo,
      Array.from({ length: 8 }, () => ({ from: "client" as const, probe: tcp(v4.clusterIP(40), 80), expect: { ok: true as const } })),
    );
    const who = new Set(results.map((r) => (r.ok ? r.who : r.error)));
    expect(who.size).toBe(1);
  });

  test("without affinity, connections spread over the endpoints", async () => {
    // 20 connections over 2 endpoints all landing on one: probability 2 * 2^-20.
    const results = await runChecks(
      topo,
      Array.from({ length: 20 }, () => ({ from: "client" as const, probe: tcp(v4.clusterIP(1), 80), expect: { ok: true as const } })),
    );
    expect(new Set(results.map((r) => (r.ok ? r.who : r.error))).size).toBe(2);
  });
});
