// Partial restores against the real kernel, shape by shape: each service
// shape is reached from the previous one (type, policies, ports, affinity,
// firewall change in place), deleted, and created again, each step a partial
// restore (never the fallback full one). After each step the tables and the
// hairpin set must be what a full restore of the same state leaves: no stale
// chain, rule or member, nothing missing. Compared normalized (counters and
// rule order inside a chain aside: a new dispatch rule is inserted at the head
// by a partial restore, appended by a full one).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import type { Endpoint } from "../../src/core/brain/state.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { base, both, IP, lb, withNodePort } from "../fixtures/shapes.ts";
import { ep, svc, testConfig, testContext, v4, v6, type EpSpec, type SvcSpec } from "./fixtures.ts";

let topo: Topology;
let b: IptablesBackend;
let clock = 0;
const hour = 3_600_000;

beforeAll(async () => {
  topo = await createTopology({ pods: 0, prefix: "kpis" });
  b = new IptablesBackend(testContext(testConfig()), {
    executor: topo.executor(topo.node.ns),
    monitorPeriodMs: 0,
    now: () => clock,
    fullSyncPeriodMs: hour,
  });
  await b.setup();
});
afterAll(async () => {
  await b?.close();
  await topo?.destroy();
});

const eps = (...specs: EpSpec[]) => new Map(specs.map((e, i) => [`p${i}`, ep(e)]));

/** one entry per kind of chain a service can own, and per way its chains refer to each other */
const shapes: { name: string; spec: SvcSpec; eps: Map<string, Endpoint> }[] = [
  { name: "ClusterIP, one endpoint", spec: base, eps: eps(both(1)) },
  { name: "ClusterIP, two target ports", spec: base, eps: eps(both(1), both(2, { ports: { http: 9090 } })) },
  { name: "ClusterIP without endpoints (filter REJECT)", spec: base, eps: eps() },
  { name: "NodePort, eTP=Cluster (EXT chain)", spec: withNodePort, eps: eps(both(1), both(2, { local: false })) },
  {
    name: "NodePort, eTP=Local (EXT goes to SVC, SVL)",
    spec: { ...withNodePort, eTPLocal: true },
    eps: eps(both(1, { local: true }), both(2, { local: false, external: false })),
  },
  {
    name: "NodePort, eTP=Local, no local endpoint (DROP, short-circuit kept)",
    spec: { ...withNodePort, eTPLocal: true },
    eps: eps(both(2, { local: false, external: false })),
  },
  {
    name: "LoadBalancer with source ranges (FW chain)",
    spec: { ...lb, sourceRanges: ["198.18.128.0/24", "2001:db8:5::/64"] },
    eps: eps(both(1), both(2)),
  },
  {
    name: "LoadBalancer, eTP=Local, source ranges",
    spec: { ...lb, eTPLocal: true, sourceRanges: ["198.18.128.0/24"] },
    eps: eps(both(1, { local: true }), both(2, { local: false, external: false })),
  },
  { name: "ClientIP affinity (SEP chains)", spec: { ...base, affinitySeconds: 30 }, eps: eps(both(1), both(2), both(3)) },
  {
    name: "ClientIP affinity, NodePort eTP=Local",
    spec: { ...withNodePort, eTPLocal: true, affinitySeconds: 60 },
    eps: eps(both(1, { local: true }), both(2, { local: false, external: false })),
  },
  {
    name: "iTP=Local without a local endpoint (DROP)",
    spec: { ...base, iTPLocal: true },
    eps: eps(both(2, { local: false, internal: false })),
  },
  {
    name: "TCP and UDP ports, external IPs, health check node port",
    spec: {
      ...base,
      externalIPs: [v4.external(IP + 1)],
      healthCheckNodePort: 32000,
      ports: [
        { name: "http", port: 80, nodePort: 30080 },
        { name: "dns", protocol: "UDP", port: 53 },
      ],
    },
    eps: eps(both(1), both(2)),
  },
];

/** a service that never changes beside the one that does */
const bystander = {
  spec: {
    ...base,
    name: "bystander",
    clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)],
    ports: [{ name: "http", port: 80, nodePort: 30001 }],
  },
  eps: eps(both(9)),
};

let current = new Map<string, Endpoint>();
/** the incremental calls the feed would make to go from the current endpoints to `next` (undefined: the service is deleted) */
function apply(next: (typeof shapes)[number] | undefined) {
  for (const key of current.keys()) if (!next?.eps.has(key)) b.deleteEndpoint("default", "shape", key);
  if (!next) b.deleteService("default", "shape");
  else {
    b.setService(svc(next.spec));
    for (const [key, e] of next.eps) b.setEndpoint("default", "shape", key, e);
  }
  current = next?.eps ?? new Map();
}

/** everything kpng owns in the namespace, normalized: iptables-save of both families without counters, lines sorted per table; the hairpin sets' members */
async function owned(): Promise<string> {
  const out: string[] = [];
  for (const save of ["iptables-save", "ip6tables-save"]) {
    let table = "";
    const lines: string[] = [];
    for (const raw of (await topo.exec(topo.node.ns, [save])).split("\n")) {
      if (raw.startsWith("*")) table = raw;
      if (!raw.includes("KPNG")) continue;
      lines.push(`${save} ${table} ${raw.replace(/ \[\d+:\d+\]$/, "")}`);
    }
    out.push(...lines.sort());
  }
  for (const set of ["KPNG-HAIRPIN-V4", "KPNG-HAIRPIN-V6"]) {
    const text = await topo.exec(topo.node.ns, ["ipset", "list", set]);
    out.push(
      ...text
        .slice(text.indexOf("Members:"))
        .split("\n")
        .slice(1)
        .filter(Boolean)
        .sort()
        .map((m) => `${set} ${m}`),
    );
  }
  return out.join("\n");
}

/** a partial sync to `next`, then the same state by a full one: both leave the same tables */
async function step(next: (typeof shapes)[number] | undefined) {
  apply(next);
  await b.sync();
  expect(b.lastSync?.full).toBe(false);
  await b.sync(); // nothing changed: waits for the hairpin deletions that follow a sync
  const partial = await owned();
  clock += hour; // the periodic full restore is due
  await b.sync();
  expect(b.lastSync?.full).toBe(true);
  expect(partial).toEqual(await owned());
}

describe("iptables partial restores, shape by shape, real kernel", () => {
  beforeAll(async () => {
    b.setService(svc(bystander.spec));
    for (const [key, e] of bystander.eps) b.setEndpoint("default", "bystander", key, e);
    await b.sync();
  });

  for (const shape of shapes) {
    test(`${shape.name}: reached from the previous shape, deleted, created again`, async () => {
      await step(shape);
      await step(undefined);
      await step(shape);
    });
  }

  test("the bystander kept its dispatch rule and chain through it all", async () => {
    const nat = await topo.exec(topo.node.ns, ["iptables-save", "-t", "nat"]);
    expect(nat).toMatch(/^-A KPNG-SERVICES .*default\/bystander:http cluster IP.* -j KPNG-SVC-/m);
  });
});
