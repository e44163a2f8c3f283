// Rules lost, named (issue 36), iptables on the real kernel in a namespace:
// someone flushes and deletes the nat table's chains (a firewall reload);
// the canary check reports it, the feed reads the rules back before the
// repair and logs one line naming the Services and frontends that lost
// rules, and the repair restores them.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { type Feed, feedBackend } from "../../src/host/feed.ts";
import { entry, nodeState } from "../fixtures/state.ts";
import { LOADED_WAIT_MS } from "../harness/kpng-process.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { ep, svc, testConfig, testContext, v4 } from "./fixtures.ts";

let topo: Topology;
let b: IptablesBackend;
let feed: Feed;
let ctx: ReturnType<typeof testContext>;
let synced = 0;

async function until(what: string, ok: () => boolean, ms = LOADED_WAIT_MS) {
  const end = performance.now() + ms;
  while (!ok()) {
    if (performance.now() > end) throw new Error(`${what}: not within ${ms} ms\n${ctx.log.lines.slice(-8).join("\n")}`);
    await Bun.sleep(20);
  }
}

beforeAll(async () => {
  topo = await createTopology({ pods: 0, prefix: "kpvj" });
  ctx = testContext(testConfig());
  b = new IptablesBackend(ctx, { executor: topo.executor(topo.node.ns), monitorPeriodMs: 100, families: ["v4"] });
  await b.setup();
  feed = feedBackend(b, { log: ctx.log, lostCheckMs: 20_000, onSynced: () => void synced++ });
  const web = svc({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ name: "http", port: 80, nodePort: 30080 }] });
  feed.push({
    state: nodeState({ nodeName: "node0", entries: [entry(web, { p1: ep({ ips: [v4.pod(0, 1)], local: true, ports: { http: 8080 } }) })] }),
    change: null,
  });
  await until("first sync", () => synced === 1);
});
afterAll(async () => {
  feed?.stop();
  await b?.close();
  await topo?.destroy();
});

describe("iptables: rules lost are named before the repair (real kernel)", () => {
  test("the nat table's chains flushed and deleted: the line names the Service's cluster IP and node port, the repair restores them", async () => {
    await topo.exec(topo.node.ns, ["iptables", "-t", "nat", "-F"]);
    await topo.exec(topo.node.ns, ["iptables", "-t", "nat", "-X"]);
    await until("the rules-lost line", () => ctx.log.lines.some((l) => l.includes("rules lost")));
    const line = ctx.log.lines.find((l) => l.includes("rules lost"))!;
    expect(line).toContain("canary");
    expect(line).toContain(`default/web ${v4.clusterIP(1)}:80/TCP`);
    expect(line).toContain("default/web nodePort 30080/TCP");
    await until("the repair", () => synced === 2);
    expect(await b.verify()).toEqual([]);
  }, 30_000);
});
