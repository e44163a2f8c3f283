// The backend's life in a real namespace, in order: partial restores with
// packets following them, UDP conntrack cleanup, a brain restart replaying
// every call, a restore failing behind kpng's back, someone flushing the
// tables (canary), cleanup, and another masquerade configuration. Foreign
// rules installed first must survive all of it except the flush; a bulk
// restore leaves their packet counters alone. Last, a first sync that is a
// bulk restore into a namespace whose tables do not exist yet.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Executor } from "../../src/host/backend.ts";
import type { Topology } from "../harness/netns.ts";
import type { RecordedCall } from "../../plugins/iptables/executor.ts";
import { bulkPreamble } from "../../plugins/iptables/render-restore.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { plan } from "../fixtures/addresses.ts";
import { svc, testConfig, testContext, v4, v6, type SvcSpec } from "./fixtures.ts";
import { serviceChain, servicePortId } from "../../plugins/iptables/names.ts";
import { createWorld, podEp, podPorts, runChecks } from "./world.ts";

let topo: Topology;
let b: IptablesBackend;
const calls: RecordedCall[] = [];
const restores = () => calls.filter((c) => c.argv[0].endsWith("-restore") && c.argv.includes("--noflush")).map((c) => c.stdin ?? "");

// The rule for TEST-NET-1 never matches here: its counters stay at what -c set them to unless something zeroes them.
const foreign = [
  "*nat",
  ":FOREIGN-NAT - [0:0]",
  "[5:500] -A FOREIGN-NAT -s 192.0.2.99/32 -j RETURN",
  "-A FOREIGN-NAT -j RETURN",
  "-A PREROUTING -j FOREIGN-NAT",
  "COMMIT",
  "*filter",
  '-A INPUT -p tcp -m tcp --dport 9999 -m comment --comment "foreign rule" -j ACCEPT',
  "COMMIT",
  "",
].join("\n");
const installForeign = () => topo.exec(topo.node.ns, ["iptables-restore", "--noflush", "-c"], foreign);
const save = async () => (await topo.exec(topo.node.ns, ["iptables-save"])) + (await topo.exec(topo.node.ns, ["ip6tables-save"]));

const s1: SvcSpec = { name: "s1", clusterIPs: [v4.clusterIP(101)], ports: [{ name: "http", port: 80 }] };
const u1: SvcSpec = { name: "u1", clusterIPs: [v4.clusterIP(102)], ports: [{ name: "dns", protocol: "UDP", port: 53 }] };
const tcp = (ip: string) => ({ ip, port: 80, proto: "tcp" as const });
const who = async (n: number, ip: string) =>
  (
    await runChecks(
      topo,
      Array.from({ length: n }, () => ({ from: "client" as const, probe: tcp(ip), expect: { ok: true as const } })),
    )
  ).map((r) => (r.ok ? r.who : r.error));

beforeAll(async () => {
  topo = await createWorld(2);
  await installForeign();
  const inner = topo.executor(topo.node.ns);
  const exec: Executor = {
    run(argv, stdin) {
      calls.push({ argv, stdin });
      return inner.run(argv, stdin);
    },
  };
  b = new IptablesBackend(testContext(testConfig()), { executor: exec, monitorPeriodMs: 0 });
  await b.setup();
  b.setService(svc(s1));
  b.setEndpoint("default", "s1", "a", podEp(topo, 0));
  b.setService(svc(u1));
  b.setEndpoint("default", "u1", "a", podEp(topo, 0));
  await b.sync();
});

afterAll(async () => {
  await b?.close();
  await topo?.destroy();
});

describe("iptables backend life cycle, real kernel", () => {
  test("partial restore after one endpoint change: packets follow, the input names only that service's chains", async () => {
    expect(await who(1, v4.clusterIP(101))).toEqual(["pod0"]);
    calls.length = 0;
    b.deleteEndpoint("default", "s1", "a");
    b.setEndpoint("default", "s1", "b", podEp(topo, 1));
    await b.sync();
    expect(b.lastSync?.full).toBe(false);
    const [text, ...more] = restores();
    expect(more).toEqual([]); // IPv6: s1 has no v6 address, nothing changed
    const named = new Set([...text.matchAll(/KPNG-[A-Z0-9-]+/g)].map((m) => m[0]));
    // s1's SVC chain (rewritten; it DNATs to the endpoint itself) and KPNG-MARK-MASQ as a jump target; nothing else
    const port = servicePortId("default", "s1", "tcp", 80);
    expect(named).toEqual(new Set([serviceChain("cluster", port), "KPNG-MARK-MASQ"]));
    expect(text).toContain(`--to-destination ${topo.pods[1].v4}:${podPorts.tcp}`);
    expect(text).not.toMatch(/^:KPNG-(SERVICES|NODEPORTS|MARK-MASQ)/m);
    // the hairpin set: the new endpoint in before the restore, the old one out after it
    const sets = calls.filter((c) => c.argv[0] === "ipset").map((c) => c.stdin?.trim());
    expect(sets).toEqual([
      `add KPNG-HAIRPIN-V4 ${topo.pods[1].v4},6:8080,${topo.pods[1].v4} -exist`,
      `del KPNG-HAIRPIN-V4 ${topo.pods[0].v4},6:8080,${topo.pods[0].v4} -exist`,
    ]);
    expect(await who(6, v4.clusterIP(101))).toEqual(Array(6).fill("pod1"));
  });

  test("UDP: a flow pinned to a removed endpoint moves to a live one (conntrack cleanup)", async () => {
    const probe = { ip: v4.clusterIP(102), port: 53, proto: "udp" as const, sport: 40123 };
    await runChecks(topo, [{ from: "client", probe, expect: { ok: true, who: ["pod0"] } }]);
    b.deleteEndpoint("default", "u1", "a");
    b.setEndpoint("default", "u1", "b", podEp(topo, 1));
    await b.sync();
    expect(calls.some((c) => c.argv[0] === "conntrack")).toBe(true);
    // pod0 still answers on 5353: without the conntrack cleanup this flow would stay with it.
    await runChecks(topo, [{ from: "client", probe, expect: { ok: true, who: ["pod1"] } }]);
  });

  test("brain restart: every set replayed with equal content, nothing restored, traffic unchanged", async () => {
    calls.length = 0;
    b.setService(svc(s1));
    b.setEndpoint("default", "s1", "b", podEp(topo, 1));
    b.setService(svc(u1));
    b.setEndpoint("default", "u1", "b", podEp(topo, 1));
    await b.sync();
    expect(calls).toEqual([]);
    expect(await who(2, v4.clusterIP(101))).toEqual(["pod1", "pod1"]);
  });

  test("foreign chains and rules survive full and partial restores", async () => {
    const text = await save();
    expect(text).toContain("-A PREROUTING -j FOREIGN-NAT");
    expect(text).toContain('--comment "foreign rule" -j ACCEPT');
  });

  test("a bulk restore (the bulk preamble above bulkThreshold operations) applies and leaves foreign rules and their counters as they were", async () => {
    calls.length = 0;
    // 250 services x (SVC chain + masquerade + 2 balancing rules + dispatch) = 1,250 nat operations
    for (let i = 0; i < 250; i++) {
      b.setService(svc({ name: `bulk${i}`, clusterIPs: [v4.clusterIP(200 + i)], ports: [{ name: "http", port: 80 }] }));
      b.setEndpoint("default", `bulk${i}`, "a", podEp(topo, i % 2));
      b.setEndpoint("default", `bulk${i}`, "b", podEp(topo, (i + 1) % 2));
    }
    await b.sync();
    expect(restores()[0]).toContain(`*nat\n${bulkPreamble("nat").join("\n")}\n`);
    const text = await save();
    expect(text).toContain("-A PREROUTING -j FOREIGN-NAT");
    expect(text).toContain("-A FOREIGN-NAT -j RETURN");
    // A `-Z` preamble would have zeroed these.
    expect(await topo.exec(topo.node.ns, ["iptables-save", "-c", "-t", "nat"])).toContain(
      "[5:500] -A FOREIGN-NAT -s 192.0.2.99/32 -j RETURN",
    );
    // 20 connections all landing on one of 2 endpoints: probability 2 * 2^-20 (with 6 connections it did happen).
    expect(new Set(await who(20, v4.clusterIP(449)))).toEqual(new Set(["pod0", "pod1"]));
  });

  test("a rule removed behind kpng's back: the partial restore fails, the next sync is full and repairs", async () => {
    const dispatch = (await topo.exec(topo.node.ns, ["iptables-save", "-t", "nat"]))
      .split("\n")
      .find((l) => l.includes("default/s1:http cluster IP") && l.startsWith("-A KPNG-SERVICES"))!;
    await topo.exec(topo.node.ns, [
      "iptables",
      "-t",
      "nat",
      ...dispatch
        .replace(/^-A/, "-D")
        .match(/"[^"]*"|\S+/g)!
        .map((t) => t.replace(/^"|"$/g, "")),
    ]);
    b.setService(svc({ ...s1, clusterIPs: [v4.clusterIP(103)] })); // the old dispatch rule must be deleted: it is gone
    await expect(b.sync()).rejects.toThrow();
    await b.sync();
    expect(b.lastSync?.full).toBe(true);
    expect(await who(2, v4.clusterIP(103))).toEqual(["pod1", "pod1"]);
  });

  test("canary: someone flushes every table, the monitor notices and a full restore brings traffic back", async () => {
    for (const table of ["nat", "filter", "mangle"]) {
      await topo.exec(topo.node.ns, ["iptables", "-t", table, "-F"]);
      await topo.exec(topo.node.ns, ["iptables", "-t", table, "-X"]);
    }
    await runChecks(topo, [{ from: "client", probe: { ...tcp(v4.clusterIP(103)), timeout: 0.3 }, expect: { error: "timeout" } }]);
    await b.monitor();
    expect(b.lastSync?.full).toBe(true);
    expect(await who(2, v4.clusterIP(103))).toEqual(["pod1", "pod1"]);
  });

  test("cleanup removes every KPNG chain and jump of both families; foreign rules stay", async () => {
    await installForeign();
    await b.cleanup();
    const text = await save();
    expect(text).not.toContain("KPNG");
    expect(await topo.exec(topo.node.ns, ["ipset", "list", "-n"])).not.toContain("KPNG");
    expect(text).toContain("-A PREROUTING -j FOREIGN-NAT");
    expect(text).toContain('--comment "foreign rule" -j ACCEPT');
  });

  test("masqueradeAll, masqueradeBit and nodePortAddresses come from Config", async () => {
    // Node ports only on addresses in the IPv6 node range: the IPv4 node IP no longer answers them.
    const ctx = testContext(testConfig({ masqueradeAll: true, masqueradeBit: 5, nodePortAddresses: [plan.v6.nodeCIDR] }));
    const other = new IptablesBackend(ctx, { executor: topo.executor(topo.node.ns), monitorPeriodMs: 0 });
    try {
      other.setService(
        svc({ name: "m1", clusterIPs: [v4.clusterIP(109), v6.clusterIP(109)], ports: [{ name: "http", port: 80, nodePort: 30109 }] }),
      );
      other.setEndpoint("default", "m1", "a", podEp(topo, 1));
      await other.sync();
      await runChecks(topo, [
        { from: "pod0", probe: tcp(v4.clusterIP(109)), expect: { ok: true, who: ["pod1"], source: "node" } },
        { from: "client", probe: { ip: v6.node(0), port: 30109 }, expect: { ok: true, who: ["pod1"], source: "node" } },
        { from: "client", probe: { ip: v4.node(0), port: 30109 }, expect: { error: "refused" } }, // no rule: the node's own stack resets
      ]);
      expect(await topo.exec(topo.node.ns, ["iptables-save", "-t", "nat"])).toContain("-A KPNG-MARK-MASQ -j MARK --set-xmark 0x20/0x20");
    } finally {
      await other.cleanup();
    }
  });

  test("without ipset (upstream's layout): SEP chains masquerade hairpin traffic, no set is made", async () => {
    const other = new IptablesBackend(testContext(testConfig()), {
      executor: topo.executor(topo.node.ns),
      monitorPeriodMs: 0,
      hairpinSet: false,
    });
    try {
      other.setService(svc({ name: "h1", clusterIPs: [v4.clusterIP(110)], ports: [{ name: "http", port: 80 }] }));
      other.setEndpoint("default", "h1", "a", podEp(topo, 0));
      await other.sync();
      await runChecks(topo, [{ from: "pod0", probe: tcp(v4.clusterIP(110)), expect: { ok: true, who: ["pod0"], source: "node" } }]);
      expect(await topo.exec(topo.node.ns, ["iptables-save", "-t", "nat"])).toMatch(/^:KPNG-SEP-/m);
      expect(await topo.exec(topo.node.ns, ["ipset", "list", "-n"])).not.toContain("KPNG");
    } finally {
      await other.cleanup();
    }
  });
});

describe("iptables first sync as a bulk restore, real kernel", () => {
  let fresh: Topology;
  beforeAll(async () => {
    fresh = await createWorld(1);
  });
  afterAll(async () => {
    await fresh?.destroy();
  });

  test("into a namespace without nat or filter tables: the preamble creates the built-in chains it jumps from, traffic flows", async () => {
    const seen: string[] = [];
    const inner = fresh.executor(fresh.node.ns);
    const exec: Executor = {
      run(argv, stdin) {
        if (argv[0] === "iptables-restore") seen.push(stdin ?? "");
        return inner.run(argv, stdin);
      },
    };
    expect(await fresh.exec(fresh.node.ns, ["nft", "list", "tables"])).toBe("");
    const first = new IptablesBackend(testContext(testConfig()), { executor: exec, families: ["v4"], monitorPeriodMs: 0 });
    // 300 services x (SVC chain + masquerade + balancing rule + dispatch) = 1,200 nat operations
    for (let i = 0; i < 300; i++) {
      first.setService(svc({ name: `f${i}`, clusterIPs: [v4.clusterIP(400 + i)], ports: [{ name: "http", port: 80 }] }));
      first.setEndpoint("default", `f${i}`, "a", podEp(fresh, 0));
    }
    await first.sync();
    expect(seen[0]).toContain(`*nat\n${bulkPreamble("nat").join("\n")}\n`);
    const nat = await fresh.exec(fresh.node.ns, ["iptables-save", "-t", "nat"]);
    for (const from of ["PREROUTING", "OUTPUT", "POSTROUTING"]) expect(nat).toMatch(new RegExp(`^-A ${from} .*-j KPNG-`, "m"));
    await runChecks(fresh, [{ from: "client", probe: tcp(v4.clusterIP(699)), expect: { ok: true, who: ["pod0"] } }]);
  });
});
