// The namespace topology itself, without any proxy rules: if these fail, a
// backend's real-packet failures mean nothing.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createTopology, run, type Proto, type Topology } from "./netns.ts";

let topo: Topology;
beforeAll(async () => {
  topo = await createTopology({ pods: 2, prefix: "kpth" });
  await topo.serve(topo.pods[0], { tcp: [8080], udp: [5353], sctp: [9000] });
  await topo.serve(topo.pods[1], { tcp: [8080] });
});
afterAll(() => topo?.destroy());

describe("netns topology", () => {
  const families = ["v4", "v6"] as const;
  const protos: Proto[] = ["tcp", "udp", "sctp"];
  const ports = { tcp: 8080, udp: 5353, sctp: 9000 };

  for (const fam of families)
    for (const proto of protos)
      test(`client reaches a pod directly over ${proto}/${fam}, source preserved`, async () => {
        const r = await topo.probe(topo.client.ns, { ip: topo.pods[0][fam], port: ports[proto], proto });
        expect(r).toMatchObject({ ok: true, who: "pod0", source: topo.client[fam] });
      });

  test("pod to pod keeps the pod source", async () => {
    const r = await topo.probe(topo.pods[1].ns, { ip: topo.pods[0].v4, port: 8080 });
    expect(r).toMatchObject({ ok: true, who: "pod0", source: topo.pods[1].v4 });
  });

  test("node reaches a pod", async () => {
    const r = await topo.probe(topo.node.ns, { ip: topo.pods[1].v6, port: 8080 });
    expect(r).toMatchObject({ ok: true, who: "pod1" });
  });

  const closed = [
    { name: "closed TCP port is refused", probe: { port: 1, proto: "tcp" as const } },
    { name: "closed UDP port is refused", probe: { port: 1, proto: "udp" as const } },
  ];
  for (const c of closed)
    test(c.name, async () => {
      const r = await topo.probe(topo.client.ns, { ip: topo.pods[0].v4, ...c.probe });
      expect(r).toMatchObject({ ok: false, error: "refused" });
    });

  test("a dropped packet times out", async () => {
    await topo.exec(
      topo.node.ns,
      ["nft", "-f", "-"],
      "table ip drop_test {\n chain f {\n type filter hook forward priority 0; tcp dport 8080 drop\n }\n}\n",
    );
    try {
      const r = await topo.probe(topo.client.ns, { ip: topo.pods[0].v4, port: 8080, timeout: 0.3 });
      expect(r).toMatchObject({ ok: false, error: "timeout" });
    } finally {
      await topo.exec(topo.node.ns, ["nft", "delete", "table", "ip", "drop_test"]);
    }
  });

  test("a fixed source port keeps one UDP conntrack flow", async () => {
    // conntrack only tracks a namespace once a ruleset there uses it
    await topo.exec(
      topo.node.ns,
      ["nft", "-f", "-"],
      "table ip ct_test {\n chain f {\n type filter hook forward priority 0; ct state new counter\n }\n}\n",
    );
    try {
      const [a, b] = await topo.probeMany(topo.client.ns, [
        { ip: topo.pods[0].v4, port: 5353, proto: "udp", sport: 40123 },
        { ip: topo.pods[0].v4, port: 5353, proto: "udp", sport: 40123 },
      ]);
      expect(a.ok && b.ok).toBe(true);
      const ct = await topo.exec(topo.node.ns, ["conntrack", "-L", "-p", "udp", "--orig-port-src", "40123"]);
      expect(ct.trim().split("\n")).toHaveLength(1);
    } finally {
      await topo.exec(topo.node.ns, ["nft", "delete", "table", "ip", "ct_test"]);
    }
  });

  test("destroy removes every namespace", async () => {
    const t = await createTopology({ pods: 1, prefix: "kpth" });
    await t.serve(t.pods[0], { tcp: [80] });
    await t.destroy();
    const names = await run(["ip", "netns", "list"]);
    for (const ns of [t.node.ns, t.client.ns, t.pods[0].ns]) expect(names).not.toContain(ns);
  });
});
