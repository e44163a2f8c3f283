// A rolling update through the nft backend on the real kernel: every step is
// a partial sync (the `nft -i` session) that keeps dispatch positions in
// place (plugins/nft/positions.ts). Traffic keeps reaching only live
// endpoints: after each step only the pods of the step answer (the pods left
// behind keep serving, so a stale map element would show), all of them do,
// and connections made while the steps are applied never fail (no packet
// draws a position without an endpoint while counts and elements change in
// one transaction). A bigger list, rolled beside it, is read back from the
// kernel after each step: positions [0, n), holding exactly the live
// endpoints.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { processSpawner } from "../../plugins/nft/executor.ts";
import { createNftBackend } from "../../plugins/nft/index.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import { v4 } from "../fixtures/addresses.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { context, entry, ep, nextState, nodeConfig, nodeState, svc } from "./fixtures.ts";

let topo: Topology;
beforeAll(async () => {
  topo = await createTopology({ pods: 6, prefix: "kptr" });
  await Promise.all(topo.pods.map((p) => topo.serve(p, { tcp: [8080] })));
});
afterAll(() => topo?.destroy());

const web = { ip: v4.clusterIP(20), port: 80 };
const big = { ip: v4.clusterIP(21), size: 200 };

/** a Deployment roll with one surge pod: pods [0, 3) become [3, 6), then a scale-down and up */
const steps: { name: string; pods: number[]; big: { gone: number; added: number } }[] = [
  { name: "surge: a 4th pod", pods: [0, 1, 2, 3], big: { gone: 0, added: 30 } },
  { name: "an old pod goes (the last position moves into its place)", pods: [1, 2, 3], big: { gone: 30, added: 30 } },
  { name: "surge again", pods: [1, 2, 3, 4], big: { gone: 30, added: 60 } },
  { name: "another old pod goes", pods: [2, 3, 4], big: { gone: 60, added: 60 } },
  { name: "the last old pod replaced at once", pods: [3, 4, 5], big: { gone: 90, added: 90 } },
  { name: "scale down to 2", pods: [4, 5], big: { gone: 150, added: 90 } },
  { name: "scale up to 4", pods: [0, 1, 4, 5], big: { gone: 150, added: 150 } },
];

const webEntry = (pods: number[]) =>
  entry(
    svc({ name: "web", clusterIPs: [web.ip], ports: [{ name: "http", port: web.port }] }),
    Object.fromEntries(pods.map((i) => [topo.pods[i].name, ep({ ips: [topo.pods[i].v4], ports: { http: 8080 } })])),
  );

/** endpoints of the big service: [gone, size) of the first generation, [0, added) of the second (unroutable: never probed) */
const bigAddresses = (s: { gone: number; added: number }) => [
  ...Array.from({ length: big.size - s.gone }, (_, k) => v4.pod(5, s.gone + k)),
  ...Array.from({ length: s.added }, (_, k) => v4.pod(6, k)),
];
const bigEntry = (s: { gone: number; added: number }) =>
  entry(
    svc({ name: "big", clusterIPs: [big.ip], ports: [{ name: "http", port: 80 }] }),
    Object.fromEntries(bigAddresses(s).map((ip) => [ip, ep({ ips: [ip], local: false, ports: { http: 8080 } })])),
  );

/** the big service's positions and endpoints as the kernel holds them */
async function bigInKernel() {
  const out = await topo.exec(topo.node.ns, ["nft", "-j", "list", "map", "ip", "kpng", "cluster-endpoints-tcp"]);
  const elems = (JSON.parse(out).nftables as { map?: { elem?: [{ concat: [string, number] }, string][] } }[]).flatMap(
    (x) => x.map?.elem ?? [],
  );
  const mine = elems.filter(([k]) => k.concat[0] === big.ip);
  return { positions: mine.map(([k]) => k.concat[1]).sort((a, b) => a - b), endpoints: mine.map(([, v]) => v).sort() };
}

const answers = async (n: number) =>
  topo.probeMany(
    topo.client.ns,
    Array.from({ length: n }, () => ({ ...web, timeout: 1 })),
  );

describe("nft rolling update (real kernel)", () => {
  test("only live endpoints answer at every step, every one of them does, and no connection fails meanwhile", async () => {
    const interactive = processSpawner(["ip", "netns", "exec", topo.node.ns]);
    const backend = createNftBackend(context(nodeConfig()), { exec: topo.executor(topo.node.ns), interactive });
    let state: NodeState = nodeState([webEntry([0, 1, 2]), bigEntry({ gone: 0, added: 0 })]);
    await backend.apply(state, null);
    expect(new Set((await answers(30)).map((r) => (r.ok ? r.who : r.error)))).toEqual(new Set(["pod0", "pod1", "pod2"]));

    // connections made all along the roll, one after another
    const meanwhile = answers(600);
    const seen: string[] = [];
    for (const step of steps) {
      const next = nextState(state, [webEntry(step.pods), bigEntry(step.big)]);
      await backend.apply(next.state, next.change);
      state = next.state;
      // 30 connections over <= 4 pods: a live pod missed by chance 4 x (3/4)^30 = 7e-4
      const who = new Set((await answers(30)).map((r) => (r.ok ? r.who : r.error)));
      const kernel = await bigInKernel();
      seen.push(
        `${step.name}: ${backend.last?.full ? "full" : "partial"}; answered ${[...who].sort().join(" ")}; ` +
          `big: ${kernel.positions.every((p, i) => p === i) ? "dense" : "holes"}, ${kernel.endpoints.join() === bigAddresses(step.big).sort().join() ? "live endpoints" : "WRONG endpoints"}`,
      );
    }
    const roll = await meanwhile;
    await backend.close();
    expect(seen).toEqual(
      steps.map((s) => `${s.name}: partial; answered ${s.pods.map((i) => `pod${i}`).join(" ")}; big: dense, live endpoints`),
    );
    expect(roll.filter((r) => !r.ok)).toEqual([]);
  }, 60_000);
});
