// Partial syncs against the real kernel: a series of changes, sent through
// the `nft -i` session, leaves exactly what one full sync writes (nothing
// stale, nothing missing); a refused transaction is followed by a full
// resync; cleanup removes kpng's tables and only them; dry-run touches
// nothing.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { SESSION_MAX_BYTES, processSpawner } from "../../plugins/nft/executor.ts";
import { createNftBackend } from "../../plugins/nft/index.ts";
import type { Executor } from "../../src/host/backend.ts";
import type { NodeState, ServiceEndpoints } from "../../src/core/brain/state.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { context, entry, ep, nextState, nodeConfig, nodeState, svc, type SvcSpec } from "./fixtures.ts";
import { canonicalRuleset } from "./ruleset.ts";

let topo: Topology;
let ref: Topology;
beforeAll(async () => {
  topo = await createTopology({ pods: 2, prefix: "kpts" });
  ref = await createTopology({ pods: 0, prefix: "kptr" });
  for (const p of topo.pods) await topo.serve(p, { tcp: [8080] });
});
afterAll(async () => {
  await topo?.destroy();
  await ref?.destroy();
});

const eps = (n: number, from = 1, local = true) =>
  Object.fromEntries(
    Array.from({ length: n }, (_, i) => [
      `p${from + i}`,
      ep({ ips: [v4.pod(1, from + i), v6.pod(1, from + i)], local, ports: { http: 8080, dns: 5353 } }),
    ]),
  );

const spec = (name: string, i: number, over: Partial<SvcSpec> = {}): SvcSpec => ({
  name,
  clusterIPs: [v4.clusterIP(i), v6.clusterIP(i)],
  ports: [
    { name: "http", port: 80, nodePort: 30000 + i },
    { name: "dns", protocol: "UDP", port: 53 },
  ],
  ...over,
});

type Step = { name: string; set?: ServiceEndpoints[]; remove?: string[] };
const steps: Step[] = [
  {
    name: "start: plain, affinity, no endpoints, eTP=Local with external IP",
    set: [
      entry(svc(spec("s1", 1, { lbIPs: [v4.external(1), v6.external(1)] })), eps(3)),
      entry(svc(spec("s2", 2, { affinitySeconds: 30 })), eps(2, 10)),
      entry(svc(spec("s3", 3)), {}),
      entry(svc(spec("s4", 4, { eTPLocal: true, externalIPs: [v4.external(4)] })), { ...eps(1, 20), ...eps(2, 21, false) }),
    ],
  },
  {
    name: "s1 loses its middle endpoint and gains another",
    set: [entry(svc(spec("s1", 1, { lbIPs: [v4.external(1), v6.external(1)] })), { ...eps(1, 1), ...eps(1, 3), ...eps(1, 7) })],
  },
  { name: "s2 drops affinity, s3 gets endpoints", set: [entry(svc(spec("s2", 2)), eps(2, 10)), entry(svc(spec("s3", 3)), eps(4, 30))] },
  { name: "s1 deleted, s5 takes its cluster IP", remove: ["default/s1"], set: [entry(svc(spec("s5", 1)), eps(2, 40))] },
  {
    name: "s4 becomes eTP=Cluster with source ranges",
    set: [entry(svc(spec("s4", 4, { lbIPs: [v4.external(5)], sourceRanges: ["198.18.128.0/24"] })), eps(3, 20))],
  },
  {
    name: "s5 loses all endpoints, s2 scales to 20",
    set: [entry(svc(spec("s5", 1)), {}), entry(svc(spec("s2", 2, { affinitySeconds: 30 })), eps(20, 50))],
  },
  { name: "everything deleted", remove: ["default/s2", "default/s3", "default/s4", "default/s5"] },
];

describe("nft partial sync (real kernel)", () => {
  test("every partial sync leaves what a full sync of the same state writes", async () => {
    const ctx = context(nodeConfig());
    // the partial transactions that ran as `nft -f -`, by size
    const oneShotPartials: number[] = [];
    const exec: Executor = {
      run: (argv, stdin = "") => {
        if (argv[0] === "nft" && argv.includes("-f") && !stdin.includes("add table")) oneShotPartials.push(stdin.length);
        return topo.executor(topo.node.ns).run(argv, stdin);
      },
    };
    const interactive = processSpawner(["ip", "netns", "exec", topo.node.ns]);
    const partial = createNftBackend(ctx, { exec, interactive });
    let state: NodeState = nodeState([]);
    await partial.apply(state, null);
    for (const step of steps) {
      const next = nextState(state, step.set ?? [], step.remove ?? []);
      await partial.apply(next.state, next.change);
      expect(`${step.name}: ${partial.last?.full ? "full" : "partial"} ${ctx.lines.filter((l) => l.includes("WARN")).join(" ")}`).toBe(
        `${step.name}: partial `,
      );
      state = next.state;
      const full = createNftBackend(context(nodeConfig()), { exec: ref.executor(ref.node.ns) });
      await full.apply(state, null);
      const [got, want] = await Promise.all([canonicalRuleset(topo, topo.node.ns), canonicalRuleset(ref, ref.node.ns)]);
      expect(`${step.name}\n${got}`).toBe(`${step.name}\n${want}`);
    }
    await partial.close();
    // partial syncs went through nft -i, but for the big ones
    expect(oneShotPartials.filter((n) => n <= SESSION_MAX_BYTES)).toEqual([]);
    expect(oneShotPartials.length).toBeLessThan(steps.length / 2);
  });

  test("a refused partial transaction is followed by a full resync", async () => {
    const ctx = context(nodeConfig());
    const interactive = processSpawner(["ip", "netns", "exec", topo.node.ns]);
    const backend = createNftBackend(ctx, { exec: topo.executor(topo.node.ns), interactive });
    const web = (n: number) =>
      entry(
        svc({ name: "web", clusterIPs: [v4.clusterIP(9)], ports: [{ name: "http", port: 80 }] }),
        Object.fromEntries(topo.pods.slice(0, n).map((p) => [p.name, ep({ ips: [p.v4], ports: { http: 8080 } })])),
      );
    const first = nodeState([web(2), entry(svc(spec("gone", 8)), eps(1))]);
    await backend.apply(first, null);
    // someone else removes kpng's map elements behind its back
    await topo.exec(topo.node.ns, ["nft", "flush", "map", "ip", "kpng", "service-ips"]);
    const next = nextState(first, [web(1)], ["default/gone"]);
    await backend.apply(next.state, next.change);
    expect(backend.last?.full).toBe(true);
    expect(ctx.lines.some((l) => l.includes("partial sync failed"))).toBe(true);
    expect(await topo.probe(topo.client.ns, { ip: v4.clusterIP(9), port: 80 })).toMatchObject({ ok: true, who: "pod0" });
    // and partial syncs work again, through a new nft -i
    const again = nextState(next.state, [web(2)]);
    await backend.apply(again.state, again.change);
    expect(backend.last?.full).toBe(false);
    await backend.close();
  });

  test("cleanup removes kpng's tables and leaves other tables alone", async () => {
    await topo.exec(topo.node.ns, ["nft", "add", "table", "ip", "someone-else"]);
    const backend = createNftBackend(context(nodeConfig()), { exec: topo.executor(topo.node.ns) });
    await backend.apply(nodeState([entry(svc(spec("web", 5)), eps(2))]), null);
    await backend.cleanup();
    const tables = await topo.exec(topo.node.ns, ["nft", "list", "tables"]);
    expect(tables.trim().split("\n")).toEqual(["table ip someone-else"]);
  });

  test("dry-run prints the transaction and applies nothing", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx, { exec: topo.executor(topo.node.ns) });
    await backend.apply(nodeState([entry(svc(spec("web", 6)), eps(2))]), null);
    expect(ctx.printed.join("")).toContain("add table ip kpng");
    expect(await topo.exec(topo.node.ns, ["nft", "list", "tables"])).not.toContain("kpng");
    // what was printed is a valid transaction
    await topo.exec(topo.node.ns, ["nft", "--check", "-f", "-"], ctx.printed.join(""));
  });
});
