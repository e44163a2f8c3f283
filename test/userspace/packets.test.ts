// Real sockets through the userspace backend: the relays run in the node
// namespace (driver.ts), tiny servers in pod namespaces, a client outside.
// The behaviour table of the nft suite (test/nft/packets.test.ts) where it
// applies, with what a relay changes written in each case: every relayed
// connection reaches the pod from the node's address (a relay is a new
// connection, so no source is preserved), a refusal is the node's own (no
// listener: TCP reset, ICMP port unreachable) where kernel backends drop.
// Then the changes: relays that stay keep their connections, a removed
// endpoint's connections are closed, new connections go to the new set.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
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
  web as table,
} from "../harness/packet-table.ts";
import { v4 } from "../fixtures/addresses.ts";
import type { SvcSpec } from "../nft/fixtures.ts";
import { check, type Expectation } from "../nft/packet-cases.ts";
import type { ServiceEndpoints } from "../../src/core/brain/state.ts";
import { holdServer, holder, startProxy, type RelayProxy } from "./rig.ts";

let topo: Topology;
let proxy: RelayProxy;
const ports = { http: 8080, alt: 8081, bad: 8082, dns: 5353, long: 7000 };
const stops: Array<() => Promise<void>> = [];

beforeAll(async () => {
  topo = await createTopology({ pods: 3, prefix: "kptu" });
  for (const p of topo.pods) await topo.serve(p, { tcp: [8080, 8081], udp: [5353] });
  for (const p of topo.pods) stops.push(await holdServer(p, ports.long));
  await topo.exec(topo.node.ns, ["ip", "addr", "add", `${secondNodeIP}/24`, "dev", "ext0"]);
  proxy = await startProxy(topo);
}, 60_000);
afterAll(async () => {
  await proxy?.stop();
  for (const s of stops) await s();
  await topo?.destroy();
});

/** the table's service, and a port whose connections stay open (holdServer) */
const web = (over: Partial<SvcSpec> = {}) => table(over, [{ name: "long", port: 70 }]);
const rows = packetRows({ topo: () => topo, ports, web });
const common = commonRows(rows);

interface Case {
  name: string;
  services: () => ServiceEndpoints[];
  expect: Expectation[];
}

const cases: Case[] = [
  {
    name: "ClusterIP: an endpoint answers the client, from the node's address (relayed)",
    ...common.clusterIP,
  },
  {
    name: "ClusterIP: pod traffic is relayed too (source: the node; nft keeps the pod's)",
    services: () => rows.on([1]),
    expect: perFamily((f) => [{ from: "pod0", to: cip[f], port: 80, answer: "pod1", source: "node" }]),
  },
  {
    name: "ClusterIP: UDP; SCTP is not relayed (the node's kernel answers as for any unknown protocol)",
    services: () => rows.on([1]),
    expect: perFamily((f) => [
      { from: "client", to: cip[f], port: 53, proto: "udp", answer: "pod1", source: "node" },
      { from: "pod0", to: cip[f], port: 53, proto: "udp", answer: "pod1", source: "node" },
      // no SCTP in this kernel: IPv4 answers "protocol unreachable", IPv6 stays silent
      { from: "client", to: cip[f], port: 90, proto: "sctp", error: (f === "v4" ? "unreachable" : "timeout") as "refused" },
    ]),
  },
  {
    name: "multi-port: each service port reaches its own target port; a refusing endpoint resets the client",
    services: rows.multiPort,
    expect: perFamily((f) => [
      { from: "pod0", to: cip[f], port: 80, answer: "pod2" },
      { from: "pod0", to: cip[f], port: 81, answer: "pod2" },
      // nothing listens on 8082 in the pod: the relay had accepted, so the client gets a reset, not a refusal
      { from: "pod0", to: cip[f], port: 82, error: "error" as "refused" },
    ]),
  },
  {
    name: "NodePort: answered on the node's IP (TCP, UDP)",
    services: () => rows.on([1]),
    expect: perFamily((f) => [
      { from: "client", to: node(f), port: 30080, answer: "pod1", source: "node" },
      { from: "client", to: node(f), port: 30053, proto: "udp", answer: "pod1", source: "node" },
    ]),
  },
  {
    name: "NodePort: the node IPs only, never loopback nor another local address",
    ...common.nodePortAddresses,
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
    name: "loadBalancerSourceRanges: others turned away on LB IPs only (TCP reset after accept, UDP dropped)",
    services: () => rows.on([0], { sourceRanges: ["203.0.113.0/24", "2001:db8:3::/64"] }),
    expect: perFamily((f) => [
      { from: "client", to: lb[f], port: 80, error: "error" as "refused" },
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
    name: "iTP=Local without local endpoints: cluster IP refused (nft drops), external traffic still served",
    services: rows.iTPLocalNone,
    expect: perFamily((f) => [
      { from: "pod0", to: cip[f], port: 80, error: "refused" },
      { from: "pod0", to: cip[f], port: 53, proto: "udp", error: "refused" },
      { from: "client", to: lb[f], port: 80, answer: ["pod1", "pod2"] },
    ]),
  },
  {
    name: "eTP=Local: external traffic reaches the local endpoint only (source: the node, not the client)",
    services: rows.eTPLocal,
    expect: perFamily((f) => [
      ...Array.from({ length: 3 }, () => ({ from: "client" as const, to: lb[f], port: 80, answer: "pod0", source: "node" as const })),
      { from: "client", to: node(f), port: 30080, answer: "pod0" },
      { from: "client", to: lb[f], port: 53, proto: "udp", answer: "pod0" },
    ]),
  },
  {
    name: "eTP=Local without local endpoints: outside clients turned away, pods and the node short-circuit to the cluster's endpoints",
    services: rows.eTPLocalNone,
    expect: perFamily((f) => [
      // the relay listens for the pods' sake: an outside TCP client is reset, its UDP dropped (nft drops both)
      { from: "client", to: lb[f], port: 80, error: "error" as "refused" },
      { from: "client", to: node(f), port: 30080, error: "error" as "refused" },
      { from: "client", to: lb[f], port: 53, proto: "udp", error: "timeout" },
      { from: "pod0", to: lb[f], port: 80, answer: ["pod1", "pod2"] },
      { from: "pod0", to: node(f), port: 30080, answer: ["pod1", "pod2"] },
      { from: "pod0", to: lb[f], port: 53, proto: "udp", answer: ["pod1", "pod2"] },
      { from: "node", to: lb[f], port: 80, answer: ["pod1", "pod2"] },
      { from: "node", to: node(f), port: 30080, answer: ["pod1", "pod2"] },
      { from: "client", to: cip[f], port: 80, answer: ["pod1", "pod2"] },
    ]),
  },
  {
    name: "eTP=Local without any endpoint for pods either: refused",
    services: () => rows.on([[1, { local: false, external: false, internal: false }]], { eTPLocal: true, iTPLocal: true }),
    expect: perFamily((f) => [
      { from: "client", to: lb[f], port: 80, error: "refused" },
      { from: "client", to: node(f), port: 30080, error: "refused" },
      { from: "client", to: lb[f], port: 53, proto: "udp", error: "refused" },
    ]),
  },
  {
    name: "hairpin: a pod reaching itself through its service",
    ...common.hairpin,
  },
  {
    name: "no endpoints: refused on every frontend and protocol",
    services: rows.none,
    expect: perFamily((f) => [
      { from: "client", to: cip[f], port: 80, error: "refused" },
      { from: "pod0", to: cip[f], port: 53, proto: "udp", error: "refused" },
      { from: "client", to: lb[f], port: 80, error: "refused" },
      { from: "client", to: node(f), port: 30080, error: "refused" },
      { from: "client", to: node(f), port: 30053, proto: "udp", error: "refused" },
      { from: "node", to: cip[f], port: 80, error: "refused" },
    ]),
  },
  {
    name: "undefined port of a cluster IP: refused",
    ...common.undefinedPort,
  },
  {
    name: "a deleted service: its addresses leave the node (nothing answers)",
    services: () => [],
    expect: perFamily((f) => [{ from: "client", to: cip[f], port: 80, error: "timeout" }]),
  },
];

describe("userspace relays, bind mode: the behaviour table", () => {
  for (const c of cases)
    test(c.name, async () => {
      await proxy.apply(c.services());
      await check(topo, c.expect);
    });

  test("load balancing: round-robin gives every endpoint its turn", async () => {
    await proxy.apply(rows.on([0, 1, 2]));
    const rs = await topo.probeMany(
      topo.client.ns,
      Array.from({ length: 9 }, () => ({ ip: cip.v4, port: 80 })),
    );
    const count = new Map<string, number>();
    for (const r of rs) count.set(r.ok ? r.who : r.error, (count.get(r.ok ? r.who : r.error) ?? 0) + 1);
    expect(Object.fromEntries(count)).toEqual({ pod0: 3, pod1: 3, pod2: 3 });
  });

  for (const fam of fams)
    test(`ClientIP affinity: one client sticks to one endpoint (${fam}, TCP and UDP)`, async () => {
      await proxy.apply(rows.on([0, 1, 2], { affinitySeconds: 60 }));
      const rs = await topo.probeMany(topo.client.ns, [
        ...Array.from({ length: 6 }, () => ({ ip: cip[fam], port: 80 })),
        ...Array.from({ length: 6 }, () => ({ ip: cip[fam], port: 53, proto: "udp" as const })),
      ]);
      const tcp = new Set(rs.slice(0, 6).map((r) => (r.ok ? r.who : r.error)));
      const udp = new Set(rs.slice(6).map((r) => (r.ok ? r.who : r.error)));
      expect(tcp.size).toBe(1);
      expect(allPods).toContain([...tcp][0]);
      expect(udp.size).toBe(1);
    });

  test("ClientIP affinity: the timeout expires the client's entry", async () => {
    // 2 s: a loaded machine's gap between two probes stays well inside it
    await proxy.apply(rows.on([0, 1], { affinitySeconds: 2 }));
    const first = await topo.probeMany(
      topo.client.ns,
      Array.from({ length: 3 }, () => ({ ip: cip.v4, port: 80 })),
    );
    const who = new Set(first.map((r) => (r.ok ? r.who : r.error)));
    expect(who.size).toBe(1);
    await Bun.sleep(2500);
    // the entry expired: the next connection is a new pick, and round-robin moved on
    const after = await topo.probe(topo.client.ns, { ip: cip.v4, port: 80 });
    expect(after.ok && !who.has(after.who)).toBe(true);
  });
});

describe("userspace relays, bind mode: changes", () => {
  const long = (pods: number[]) => rows.on(pods);

  test("an established connection survives changes that keep its endpoint; new connections use the new set at once", async () => {
    await proxy.apply(long([0]));
    const h = await holder(topo.client.ns);
    try {
      const opened = await h.open(1, cip.v4, 70);
      expect(opened).toEqual({ id: 1, ok: true, answer: `pod0 ${topo.node.v4}` });
      // pod1 and pod2 join
      await proxy.apply(long([0, 1, 2]));
      expect(await h.ping(1)).toEqual({ id: 1, ok: true, answer: "pod0 ping" });
      const probes = await topo.probeMany(
        topo.client.ns,
        Array.from({ length: 3 }, () => ({ ip: cip.v4, port: 80 })),
      );
      expect(new Set(probes.map((r) => (r.ok ? r.who : r.error)))).toEqual(new Set(allPods));
      // pod1 leaves, pod0 stays
      await proxy.apply(long([0, 2]));
      expect(await h.ping(1)).toEqual({ id: 1, ok: true, answer: "pod0 ping" });
      const after = await topo.probeMany(
        topo.client.ns,
        Array.from({ length: 6 }, () => ({ ip: cip.v4, port: 80 })),
      );
      expect(new Set(after.map((r) => (r.ok ? r.who : r.error)))).toEqual(new Set(["pod0", "pod2"]));
    } finally {
      await h.stop();
    }
  });

  test("a removed endpoint's open connections are closed, the others' kept", async () => {
    await proxy.apply(long([0, 1]));
    const h = await holder(topo.client.ns);
    try {
      const a = await h.open(1, cip.v4, 70);
      const b = await h.open(2, cip.v6, 70);
      const c = await h.open(3, cip.v4, 70);
      const on = (r: typeof a) => (r.ok ? r.answer.split(" ")[0] : r.error);
      // round-robin: a and b went to different pods (per frontend: v4 then v4 again for c)
      expect(on(a)).not.toBe(on(c));
      const gone = on(a);
      const stays = on(c);
      await proxy.apply(long([Number(stays.slice(3))]));
      expect((await h.ping(1)).ok).toBe(false); // reset or closed: the endpoint is gone
      expect(await h.ping(3)).toEqual({ id: 3, ok: true, answer: `${stays} ping` });
      const pb = await h.ping(2);
      expect(pb.ok).toBe(on(b) !== gone);
    } finally {
      await h.stop();
    }
  });

  test("UDP: a flow whose endpoint was removed moves to the new set (one client port throughout)", async () => {
    await proxy.apply(long([1]));
    const probe = { ip: cip.v4, port: 53, proto: "udp" as const, sport: 40_053 };
    expect(await topo.probe(topo.client.ns, probe)).toMatchObject({ ok: true, who: "pod1" });
    await proxy.apply(long([2]));
    expect(await topo.probe(topo.client.ns, probe)).toMatchObject({ ok: true, who: "pod2" });
  });

  test("the relay's open connections are reported per frontend", async () => {
    await proxy.apply(long([0]));
    const h = await holder(topo.client.ns);
    try {
      await h.open(1, cip.v4, 70);
      await h.open(2, cip.v4, 70);
      const conns = await proxy.apply(long([0, 1]));
      expect(conns[`tcp/${cip.v4}/70`]).toBe(2);
    } finally {
      await h.stop();
    }
  });
});

describe("userspace relays, redirect mode (nftables redirect)", () => {
  let redirect: RelayProxy;
  beforeAll(async () => {
    await proxy.apply([]);
    await proxy.stop();
    // bind mode's routes go; redirect mode needs none
    for (const fam of ["-4", "-6"]) await topo.exec(topo.node.ns, ["ip", fam, "route", "flush", "table", "local", "proto", "156"]);
    redirect = await startProxy(topo, { userspaceMode: "redirect" });
  }, 30_000);
  afterAll(() => redirect?.stop());

  test("ClusterIP, LB IP and NodePort, TCP and UDP, both families; from outside, a pod and the node", async () => {
    await redirect.apply(rows.on([1]));
    await check(
      topo,
      perFamily((f) => [
        { from: "client", to: cip[f], port: 80, answer: "pod1", source: "node" },
        { from: "client", to: cip[f], port: 53, proto: "udp", answer: "pod1" },
        { from: "client", to: lb[f], port: 80, answer: "pod1" },
        { from: "client", to: node(f), port: 30080, answer: "pod1" },
        { from: "pod0", to: cip[f], port: 80, answer: "pod1" },
        { from: "node", to: cip[f], port: 80, answer: "pod1" },
      ]),
    );
  });

  test("no endpoints: refused by the table's reject rules (cluster IP) and by the node (node port)", async () => {
    await redirect.apply(rows.none());
    await check(
      topo,
      perFamily((f) => [
        { from: "client", to: cip[f], port: 80, error: "refused" },
        { from: "client", to: cip[f], port: 53, proto: "udp", error: "refused" },
        { from: "client", to: node(f), port: 30080, error: "refused" },
        { from: "node", to: cip[f], port: 80, error: "refused" },
      ]),
    );
  });

  test("the tables: one rule per frontend and hook, rewritten whole at each sync", async () => {
    await redirect.apply(rows.on([1]));
    const rules = await topo.exec(topo.node.ns, ["nft", "list", "table", "ip", "kpng-userspace"]);
    // arriving packets go to the node IP (a pod's veth has no address to redirect to), local ones to loopback
    expect(rules).toContain(`ip daddr ${cip.v4} tcp dport 80 dnat to ${node("v4")}:`);
    expect(rules).toContain(`ip daddr ${cip.v4} tcp dport 80 redirect to :`);
    expect(rules).toContain(`ip daddr ${node("v4")} udp dport 30053 dnat to ${node("v4")}:`);
    await redirect.apply([]);
    const after = await topo.exec(topo.node.ns, ["nft", "list", "table", "ip", "kpng-userspace"]);
    expect(after).not.toContain("redirect");
    expect(after).not.toContain("dnat");
  });
});

describe("userspace relays, bind mode with --nodeport-addresses", () => {
  let cidr: RelayProxy;
  beforeAll(async () => {
    cidr = await startProxy(topo, { nodePortAddresses: ["203.0.113.0/24"] });
  }, 30_000);
  afterAll(() => cidr?.stop());

  test("NodePort: a CIDR opens every node address inside it, and no other", async () => {
    await cidr.apply(rows.on([1]));
    await check(topo, [
      { from: "client", to: secondNodeIP, port: 30080, answer: "pod1" },
      { from: "client", to: v4.node(0), port: 30080, answer: "pod1" },
      { from: "client", to: secondNodeIP, port: 30053, proto: "udp", answer: "pod1" },
      { from: "client", to: nodeIP.v6, port: 30080, error: "refused" },
    ]);
  });
});
