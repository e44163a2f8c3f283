// The brain at 10,000 services x 10 endpoints on 100 nodes: cold compute,
// memory, one changed slice, and a churn run counting node-local revisions.

import { Brain } from "../src/core/brain/brain.ts";
import { kinds, parseObject, type K8sObject } from "../src/core/brain/k8s/objects.ts";
import { rawCluster, syntheticSlice, type SyntheticOptions } from "../test/fixtures/synthetic.ts";

const mb = (n: number) => (n / 1024 / 1024).toFixed(0) + " MB";
const ms = (t0: number) => (performance.now() - t0).toFixed(1) + " ms";

export default async function () {
  const o: SyntheticOptions = { services: 10_000, endpoints: 10, nodes: 100, localEvery: 4 };
  const raw = rawCluster(o);
  let t0 = performance.now();
  const objects = raw.map((r) => (parseObject(r) as { object: K8sObject }).object);
  console.log(`validate ${objects.length} objects (valibot):        ${ms(t0)}`);

  Bun.gc(true);
  const rss0 = process.memoryUsage().rss;
  t0 = performance.now();
  const brain = new Brain();
  const view = brain.view("node-0");
  brain.apply(objects.map((object) => ({ type: "upsert" as const, object })));
  for (const k of kinds) brain.markSynced(k);
  brain.flush();
  console.log(`cold compute 10k svc x 10 ep, 100 nodes:     ${ms(t0)}  (target <= 1500 ms)`);
  Bun.gc(true);
  console.log(
    `RSS after cold compute:                      ${mb(process.memoryUsage().rss)} (+${mb(process.memoryUsage().rss - rss0)} for the brain; target <= 400 MB)`,
  );

  // One changed slice, on a Cluster-policy service (so it is a real change for this node).
  const samples: number[] = [];
  for (let gen = 1; gen <= 200; gen++) {
    const i = 1 + ((gen * 37) % 9999);
    const s = syntheticSlice(i % 4 === 0 ? i + 1 : i, o, gen);
    const t = performance.now();
    brain.apply([{ type: "upsert", object: s }]);
    brain.flush();
    samples.push(performance.now() - t);
  }
  samples.sort((a, b) => a - b);
  console.log(
    `one changed EndpointSlice -> new revision:   p50 ${samples[100].toFixed(3)} ms, p99 ${samples[198].toFixed(3)} ms (target <= 1 ms)`,
  );

  // Churn: 10,000 random endpoint changes, 90% on other nodes' pods of Local-policy services.
  const rev0 = view.state!.rev;
  let seed = 42;
  const rnd = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  const syntheticChanges = 10_000;
  const ev0 = brain.stats.events;
  t0 = performance.now();
  let touchingThisNode = 0;
  for (let n = 0; n < syntheticChanges; n++) {
    const localPolicy = rnd() < 0.9;
    let i = Math.floor(rnd() * 2500) * 4; // multiple of 4: Local policy
    if (!localPolicy) i = i + 1 + Math.floor(rnd() * 3);
    // pick an endpoint index j on another node than node-0 unless the change is "anywhere"
    let j = Math.floor(rnd() * o.endpoints);
    if (localPolicy && (i + j) % o.nodes === 0) j = (j + 1) % o.endpoints;
    if ((i + j) % o.nodes === 0 || !localPolicy) touchingThisNode++;
    brain.apply([{ type: "upsert", object: syntheticSlice(i, o, 1000 + n, j) }]);
    brain.flush();
  }
  const revs = view.state!.rev - rev0;
  console.log(
    `churn: ${brain.stats.events - ev0} endpoint changes (${touchingThisNode} touch node-0's result) -> ${revs} node-local revisions in ${ms(t0)}`,
  );
}
