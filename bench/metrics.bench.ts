// What the metrics cost at 10,000 services x 10 endpoints (100 nodes, every
// 4th service Local): the first revision counted (every service changed),
// one changed EndpointSlice's revision counted and synced, and a scrape of
// /metrics (the registry rendered as Prometheus text).

import { Brain, type Revision } from "../src/core/brain/brain.ts";
import { kinds, type K8sObject } from "../src/core/brain/k8s/objects.ts";
import { ProxyMetrics, TRIGGER_TIME_ANNOTATION } from "../src/core/node/metrics.ts";
import { syntheticCluster, syntheticSlice, type SyntheticOptions } from "../test/fixtures/synthetic.ts";

const ms = (t0: number) => (performance.now() - t0).toFixed(1) + " ms";

export default async function () {
  const o: SyntheticOptions = { services: 10_000, endpoints: 10, nodes: 100, localEvery: 4 };
  const brain = new Brain();
  const metrics = new ProxyMetrics({ brain, backends: ["nft"] });
  let last: Revision | undefined;
  brain.view("node-0").subscribe((rev) => (last = rev));
  brain.apply(syntheticCluster(o).map((object) => ({ type: "upsert" as const, object })));
  for (const k of kinds) brain.markSynced(k);
  brain.flush();

  let t0 = performance.now();
  metrics.queued(last!);
  metrics.synced("nft", last!.state, 0.5, null);
  console.log(`first revision (10k services changed), queued + synced: ${ms(t0)}`);

  const samples: number[] = [];
  for (let gen = 1; gen <= 200; gen++) {
    const i = 1 + ((gen * 37) % 9999);
    const s = syntheticSlice(i % 4 === 0 ? i + 1 : i, o, gen) as K8sObject & { metadata: { annotations?: Record<string, string> } };
    s.metadata.annotations = { [TRIGGER_TIME_ANNOTATION]: new Date().toISOString() };
    brain.apply([{ type: "upsert", object: s }]);
    brain.flush();
    const t = performance.now();
    metrics.queued(last!);
    metrics.synced("nft", last!.state, 0.001, last!.change);
    samples.push(performance.now() - t);
  }
  samples.sort((a, b) => a - b);
  console.log(`one changed EndpointSlice, queued + synced:  p50 ${samples[100].toFixed(3)} ms, p99 ${samples[198].toFixed(3)} ms`);

  const scrapes: number[] = [];
  let bytes = 0;
  for (let n = 0; n < 20; n++) {
    t0 = performance.now();
    bytes = (await metrics.registry.metrics()).length;
    scrapes.push(performance.now() - t0);
  }
  scrapes.sort((a, b) => a - b);
  console.log(
    `scrape /metrics (${(bytes / 1024).toFixed(0)} KiB of text):       p50 ${scrapes[10].toFixed(2)} ms, max ${scrapes[19].toFixed(2)} ms`,
  );
}
