// `kpng verify` for iptables (issue 36), against the real kernel in a
// namespace: after kpng restores a few Services, `iptables-save` and the
// hairpin ipset read back hold what it wrote; a rule deleted by hand, one
// added, a chain flushed, a hairpin member removed: each named by Service and
// frontend; every whole check sets the drift metric.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { driftMetrics, hasDrift } from "../fixtures/drift-metrics.ts";
import { canonical6, createTopology, type Topology } from "../harness/netns.ts";
import { ep, svc, testConfig, testContext, v4, v6 } from "./fixtures.ts";

let topo: Topology;
let b: IptablesBackend;
let clock = 0;
const hour = 3_600_000;
const { metrics, drift } = driftMetrics();

const ipt = (...argv: string[]) => topo.exec(topo.node.ns, ["iptables", ...argv]);
/** deletes, by its number, the first rule of `chain` in the nat table whose saved line matches `pred`; gives the line */
async function deleteRule(chain: string, pred: (line: string) => boolean): Promise<string> {
  const rules = (await topo.exec(topo.node.ns, ["iptables-save", "-t", "nat"])).split("\n").filter((l) => l.startsWith(`-A ${chain} `));
  const i = rules.findIndex(pred);
  expect(i).toBeGreaterThanOrEqual(0);
  await ipt("-t", "nat", "-D", chain, String(i + 1));
  return rules[i];
}

/** kpng's next full restore puts back whatever the case removed (as the repair does) */
async function resync() {
  clock += hour; // the full-restore period is over
  await b.sync();
  expect(b.lastSync?.full).toBe(true);
  expect(await b.verify()).toEqual([]);
}

beforeAll(async () => {
  topo = await createTopology({ pods: 0, prefix: "kpvi" });
  b = new IptablesBackend(
    { ...testContext(testConfig()), metrics },
    {
      executor: topo.executor(topo.node.ns),
      monitorPeriodMs: 0,
      now: () => clock,
      fullSyncPeriodMs: hour,
    },
  );
  await b.setup();
  b.setService(
    svc({
      name: "web",
      clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)],
      ports: [
        { name: "http", port: 80, nodePort: 30080 },
        { name: "dns", protocol: "UDP", port: 53 },
      ],
    }),
  );
  for (const i of [1, 2])
    b.setEndpoint("default", "web", `p${i}`, ep({ ips: [v4.pod(0, i), v6.pod(0, i)], local: true, ports: { http: 8080, dns: 5353 } }));
  b.setService(svc({ name: "sticky", clusterIPs: [v4.clusterIP(2)], affinitySeconds: 30, ports: [{ name: "http", port: 80 }] }));
  b.setEndpoint("default", "sticky", "p", ep({ ips: [v4.pod(0, 3)], ports: { http: 8080 } }));
  b.setService(svc({ name: "empty", clusterIPs: [v4.clusterIP(3)], ports: [{ name: "http", port: 80 }] }));
  // the other shapes, so that none reads back as a difference: LB IPs with source ranges (FW chain), eTP=Local (SVL, EXT)
  b.setService(
    svc({
      name: "lb",
      clusterIPs: [v4.clusterIP(6), v6.clusterIP(6)],
      lbIPs: [v4.external(6), v6.external(6)],
      sourceRanges: ["198.18.128.0/24", "2001:db8:5::/64"],
      eTPLocal: true,
      ports: [{ name: "http", port: 80, nodePort: 30086 }],
    }),
  );
  b.setEndpoint("default", "lb", "l", ep({ ips: [v4.pod(0, 6), v6.pod(0, 6)], local: true, ports: { http: 8080 } }));
  b.setEndpoint("default", "lb", "r", ep({ ips: [v4.pod(1, 6), v6.pod(1, 6)], local: false, external: false, ports: { http: 8080 } }));
  await b.sync();
});
afterAll(async () => {
  await b?.close();
  await topo?.destroy();
});

describe("iptables verify: the kernel read back (real kernel)", () => {
  test("after a full restore: no difference, the metric says 0", async () => {
    expect(await b.verify()).toEqual([]);
    expect(drift.at(-1)).toEqual({ backend: "iptables", differences: 0 });
  });

  test("after a partial restore (an endpoint gone, a Service added): still none", async () => {
    b.deleteEndpoint("default", "web", "p2");
    b.setService(svc({ name: "late", clusterIPs: [v4.clusterIP(4)], ports: [{ name: "http", port: 81 }] }));
    b.setEndpoint("default", "late", "p", ep({ ips: [v4.pod(0, 4)], ports: { http: 8080 } }));
    await b.sync();
    expect(b.lastSync?.full).toBe(false);
    expect(await b.verify()).toEqual([]);
  });

  test("a cluster IP's dispatch rule deleted by hand: that Service and frontend named as missing", async () => {
    await deleteRule("KPNG-SERVICES", (l) => l.includes(`-d ${v4.clusterIP(1)}/32 `) && l.includes("--dport 80 "));
    const drifts = await b.verify();
    expect(drifts).toHaveLength(1);
    hasDrift(drifts, { service: "default/web", frontend: `${v4.clusterIP(1)}:80/TCP`, kind: "missing" });
    expect(drift.at(-1)).toEqual({ backend: "iptables", differences: 1 });
    expect(await b.verify("default/web")).toEqual(drifts);
    expect(await b.verify("default/sticky")).toEqual([]);
    await resync();
  });

  test("a node port rule deleted, a rule added, a Service chain flushed: each named", async () => {
    await deleteRule("KPNG-NODEPORTS", (l) => l.includes("--dport 30080 "));
    await ipt("-t", "nat", "-I", "KPNG-SERVICES", "-d", v4.clusterIP(9), "-j", "RETURN");
    const sticky = (await topo.exec(topo.node.ns, ["iptables-save", "-t", "nat"]))
      .split("\n")
      .find((l) => l.includes("default/sticky:http cluster IP") && l.startsWith("-A KPNG-SERVICES"))!;
    const stickyChain = /-j (KPNG-SVC-\S+)/.exec(sticky)![1];
    await ipt("-t", "nat", "-F", stickyChain);
    const drifts = await b.verify();
    hasDrift(drifts, { service: "default/web", frontend: "nodePort 30080/TCP", kind: "missing" });
    hasDrift(drifts, { service: "", kind: "extra" });
    expect(drifts.find((d) => d.kind === "extra")!.detail).toContain(v4.clusterIP(9));
    const lost = drifts.filter((d) => d.service === "default/sticky");
    expect(lost.length).toBeGreaterThanOrEqual(2); // its masquerade rule and its endpoint rules
    expect(lost.every((d) => d.kind === "missing" && d.detail.includes(stickyChain))).toBe(true);
    await resync();
  });

  test("a hairpin member deleted from the ipset: the Service named", async () => {
    const pod = canonical6(v6.pod(0, 1));
    await topo.exec(topo.node.ns, ["ipset", "del", "KPNG-HAIRPIN-V6", `${pod},tcp:8080,${pod}`]);
    const drifts = await b.verify();
    expect(drifts).toHaveLength(1);
    hasDrift(drifts, { service: "default/web", kind: "missing" });
    expect(drifts[0].detail).toContain("KPNG-HAIRPIN-V6");
    await resync();
  });
  test("a change not restored yet is no difference: the Service is left out until its sync", async () => {
    b.deleteEndpoint("default", "web", "p1");
    b.setService(svc({ name: "later", clusterIPs: [v4.clusterIP(5)], ports: [{ name: "http", port: 80 }] }));
    expect(await b.verify()).toEqual([]);
    await b.sync();
    expect(await b.verify()).toEqual([]);
    // the endpoint back, restored partially: still none
    b.setEndpoint("default", "web", "p1", ep({ ips: [v4.pod(0, 1), v6.pod(0, 1)], local: true, ports: { http: 8080, dns: 5353 } }));
    expect(await b.verify()).toEqual([]);
    await b.sync();
    expect(await b.verify()).toEqual([]);
    await resync();
  });
});

// kube-proxy's default, localhostNodePorts on, adds a guard chain and its
// jumps from INPUT and OUTPUT (render-fixed.ts): they are kpng's, not extra.
describe("iptables verify with localhost node ports on (real kernel)", () => {
  test("the localnet guard's chain and jumps read back as programmed; the guard deleted is named", async () => {
    const t = await createTopology({ pods: 0, prefix: "kpvl" });
    const g = new IptablesBackend(testContext(testConfig({ iptables: { localhostNodePorts: true } })), {
      executor: t.executor(t.node.ns),
      monitorPeriodMs: 0,
    });
    try {
      await g.setup();
      g.setService(svc({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ name: "http", port: 80, nodePort: 30080 }] }));
      g.setEndpoint("default", "web", "p", ep({ ips: [v4.pod(0, 1)], ports: { http: 8080 } }));
      await g.sync();
      expect(await t.exec(t.node.ns, ["iptables", "-S", "INPUT"])).toContain("KPNG-LOCALNET-GUARD");
      expect(await g.verify()).toEqual([]);
      await t.exec(t.node.ns, [
        "iptables",
        "-D",
        "INPUT",
        "-m",
        "comment",
        "--comment",
        "kpng localnet guard",
        "-j",
        "KPNG-LOCALNET-GUARD",
      ]);
      const drifts = await g.verify();
      expect(drifts).toHaveLength(1);
      hasDrift(drifts, { service: "", kind: "missing" });
    } finally {
      await g.close();
      await t.destroy();
    }
  });
});
