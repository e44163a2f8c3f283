// Rules lost, named and measured (issue 36), against the real kernel in a
// namespace: the nft backend with its watch, fed as kpng feeds it. When
// someone deletes an element of kpng's by hand, the watch reports it, the
// feed reads the tables back before the repair and logs one line naming the
// Service and frontend that lost it, kpng_backend_rules_drift says how many
// differences that check found, and the repair puts the rules back.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { NftBackend } from "../../plugins/nft/index.ts";
import { Brain } from "../../src/core/brain/brain.ts";
import { ProxyMetrics } from "../../src/core/node/metrics.ts";
import { type Feed, feedBackend } from "../../src/host/feed.ts";
import { v4 } from "../fixtures/addresses.ts";
import { LOADED_WAIT_MS } from "../harness/kpng-process.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { nftInNode } from "./in-node.ts";
import { value } from "../node/prom-text.ts";
import { context, entry, ep, nodeConfig, nodeState, svc } from "./fixtures.ts";

let topo: Topology;
let backend: NftBackend;
let feed: Feed;
let ctx: ReturnType<typeof context>;
const metrics = new ProxyMetrics({ brain: new Brain(), backends: ["nft"], defaultMetrics: false });
let fulls = 0;

const nft = (...argv: string[]) => topo.exec(topo.node.ns, ["nft", ...argv]);
const driftGauge = async () => value(await metrics.registry.metrics(), 'kpng_backend_rules_drift{backend="nft"}');

async function until(what: string, ok: () => boolean, ms = LOADED_WAIT_MS) {
  const end = performance.now() + ms;
  while (!ok()) {
    if (performance.now() > end) throw new Error(`${what}: not within ${ms} ms\n${ctx.lines.slice(-8).join("\n")}`);
    await Bun.sleep(10);
  }
}

beforeAll(async () => {
  topo = await createTopology({ pods: 0, prefix: "kpvr" });
  ctx = context(nodeConfig());
  ctx.metrics = metrics;
  backend = nftInNode(ctx, topo);
  feed = feedBackend(backend, {
    log: ctx.log,
    // a loaded machine must not cut the check short (the default bounds it for repairs at scale)
    lostCheckMs: 20_000,
    onSynced: (_s, _secs, change) => {
      if (change === null) fulls++;
    },
  });
  const web = entry(svc({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ name: "http", port: 80, nodePort: 30080 }] }), {
    p1: ep({ ips: [v4.pod(1, 1)], ports: { http: 8080 } }),
  });
  const db = entry(svc({ name: "db", clusterIPs: [v4.clusterIP(2)], ports: [{ name: "pg", port: 5432 }] }), {
    p2: ep({ ips: [v4.pod(1, 2)], ports: { pg: 5432 } }),
  });
  feed.push({ state: nodeState([web, db]), change: null });
  await until("first sync", () => fulls === 1);
  await backend.watching();
});
afterAll(async () => {
  feed?.stop();
  await backend?.close();
  await topo?.destroy();
});

describe("nft: rules lost are named before the repair (real kernel)", () => {
  test("an element deleted by hand: one log line names the Service and frontend, the drift gauge counts it, the repair restores it", async () => {
    await nft("delete", "element", "ip", "kpng", "service-ips", `{ ${v4.clusterIP(1)} . tcp . 80 }`);
    await until("the rules-lost line", () => ctx.lines.some((l) => l.includes("rules lost")));
    const line = ctx.lines.find((l) => l.includes("rules lost"))!;
    expect(line).toContain(`default/web ${v4.clusterIP(1)}:80/TCP`);
    expect(line).toContain("service-ips");
    expect(line).not.toContain("default/db");
    expect(line).toContain("differences=1");
    expect(await driftGauge()).toBe(1);
    await until("the repair", () => fulls === 2);
    expect(await backend.verify()).toEqual([]);
    expect(await driftGauge()).toBe(0);
  }, 30_000);
});
