// Deleting a service, and changing its shape, is a partial sync against the
// real kernel: never the fallback full sync. A service owns chains that
// refer to each other (an eTP=Local external chain goes to the cluster
// chain; dispatch rules go to affinity endpoint chains), firewall chains,
// affinity sets and map elements; the kernel refuses to delete a chain a rule
// still refers to (EBUSY, the whole transaction refused), which on a real
// cluster turned every deletion of an eTP=Local service into a full sync.
// Each shape below is deleted, and turned into every other shape, and the
// ruleset after each step is compared with one full sync of the same state.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { processSpawner } from "../../plugins/nft/executor.ts";
import { createNftBackend, type NftBackend } from "../../plugins/nft/index.ts";
import type { NodeState, ServiceEndpoints } from "../../src/core/brain/state.ts";
import { v4 } from "../fixtures/addresses.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { context, entry, ep, nextState, nodeConfig, nodeState, svc, type EpSpec, type SvcSpec } from "./fixtures.ts";
import { canonicalRuleset } from "./ruleset.ts";
import { base, both, IP, lb, withNodePort } from "../fixtures/shapes.ts";

let topo: Topology;
let ref: Topology;
beforeAll(async () => {
  topo = await createTopology({ pods: 0, prefix: "kpsh" });
  ref = await createTopology({ pods: 0, prefix: "kpsr" });
});
afterAll(async () => {
  await topo?.destroy();
  await ref?.destroy();
});

const eps = (...specs: EpSpec[]) => Object.fromEntries(specs.map((e, i) => [`p${i}`, ep(e)]));

/** one entry per kind of object a service can own, and per way its objects refer to each other */
const shapes: { name: string; spec: SvcSpec; eps: ReturnType<typeof eps> }[] = [
  { name: "ClusterIP, one endpoint (shared dispatch chain)", spec: base, eps: eps(both(1)) },
  {
    name: "ClusterIP, endpoints on two target ports (a cluster chain of its own)",
    spec: base,
    eps: eps(both(1), both(2, { ports: { http: 9090 } })),
  },
  { name: "ClusterIP without endpoints (reject)", spec: base, eps: {} },
  { name: "NodePort, eTP=Cluster (external chain)", spec: withNodePort, eps: eps(both(1), both(2, { local: false })) },
  {
    name: "NodePort, eTP=Local (external chain goes to the cluster chain)",
    spec: { ...withNodePort, eTPLocal: true },
    eps: eps(both(1), both(2, { local: false, external: false })),
  },
  {
    name: "NodePort, eTP=Local, no local endpoint (external dropped, short-circuit kept)",
    spec: { ...withNodePort, eTPLocal: true },
    eps: eps(both(2, { local: false, external: false })),
  },
  {
    name: "LoadBalancer with source ranges (firewall chain)",
    spec: { ...lb, sourceRanges: ["198.18.128.0/24", "2001:db8:5::/64"] },
    eps: eps(both(1), both(2)),
  },
  {
    name: "LoadBalancer, eTP=Local, source ranges",
    spec: { ...lb, eTPLocal: true, sourceRanges: ["198.18.128.0/24"] },
    eps: eps(both(1), both(2, { local: false, external: false })),
  },
  {
    name: "ClientIP affinity (endpoint chains and affinity sets)",
    spec: { ...base, affinitySeconds: 30 },
    eps: eps(both(1), both(2), both(3)),
  },
  { name: "ClientIP affinity, one endpoint", spec: { ...base, affinitySeconds: 30 }, eps: eps(both(1)) },
  {
    name: "ClientIP affinity, NodePort eTP=Local",
    spec: { ...withNodePort, eTPLocal: true, affinitySeconds: 60 },
    eps: eps(both(1), both(2, { local: false, external: false })),
  },
  { name: "iTP=Local without a local endpoint (drop)", spec: { ...base, iTPLocal: true }, eps: {} },
  {
    name: "TCP and UDP ports, external IPs",
    spec: {
      ...base,
      externalIPs: [v4.external(IP + 1)],
      ports: [
        { name: "http", port: 80, nodePort: 30080 },
        { name: "dns", protocol: "UDP", port: 53 },
      ],
    },
    eps: eps(both(1), both(2)),
  },
];

const bystander: ServiceEndpoints = entry(
  svc({ ...base, name: "bystander", clusterIPs: [v4.clusterIP(1)], ports: [{ name: "http", port: 80, nodePort: 30001 }] }),
  eps(both(9)),
);

describe("nft: deleting or reshaping a service is a partial sync (real kernel)", () => {
  let backend: NftBackend;
  let lines: string[];
  let state: NodeState;

  beforeAll(async () => {
    const ctx = context(nodeConfig());
    lines = ctx.lines;
    backend = createNftBackend(ctx, {
      exec: topo.executor(topo.node.ns),
      interactive: processSpawner(["ip", "netns", "exec", topo.node.ns]),
    });
    state = nodeState([bystander]);
    await backend.apply(state, null);
  });
  afterAll(() => backend?.close());

  /** one change set; it must be partial, and (`compare`) leave what one full sync of the same state writes */
  const step = async (what: string, set: ServiceEndpoints[], remove: string[] = [], compare = true) => {
    const next = nextState(state, set, remove);
    const logged = lines.length;
    await backend.apply(next.state, next.change);
    state = next.state;
    const fallbacks = lines.slice(logged).filter((l) => l.includes("partial sync failed"));
    expect(`${what}: ${backend.last?.full ? "full" : "partial"} ${fallbacks.join(" ")}`).toBe(`${what}: partial `);
    if (!compare) return;
    const full = createNftBackend(context(nodeConfig()), { exec: ref.executor(ref.node.ns) });
    await full.apply(state, null);
    const [got, want] = await Promise.all([canonicalRuleset(topo, topo.node.ns), canonicalRuleset(ref, ref.node.ns)]);
    expect(`${what}\n${got}`).toBe(`${what}\n${want}`);
  };
  const put = (s: (typeof shapes)[number]) => entry(svc(s.spec), s.eps);

  test.each(shapes.map((s) => [s.name, s] as const))("created, then deleted: %s", async (name, s) => {
    await step(`create ${name}`, [put(s)]);
    await step(`delete ${name}`, [], ["default/shape"]);
  });

  // Every ordered pair is a partial sync; the ruleset is compared once per
  // starting shape (a stale or missing object would still be there).
  test.each(shapes.map((s) => [s.name, s] as const))("turned into every other shape, from: %s", async (name, from) => {
    for (const to of shapes) {
      if (from === to) continue;
      await step(`${name} (set)`, [put(from)], [], false);
      await step(`${name} -> ${to.name}`, [put(to)], [], false);
    }
    await step(`${name}: last shape deleted`, [], ["default/shape"]);
  });
});
