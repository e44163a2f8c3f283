// A watch event kpng cannot decode (issue 33: the watch resumed from the same
// resourceVersion and failed on the same event forever). Injected faults on
// the in-repo API server (test/harness/api-server.ts injectWatch), the one
// thing the real one cannot be made to send: the bad event is skipped and the
// watch goes on with the next one; a broken framing relists; each is counted
// (kpng_kube_watch_decode_errors_total); DECODE_FAILURES_STALE failures in a
// row make /healthz 503 until a watch event decodes again. The health and
// metrics servers are kpng's own (startProxyServers), read over HTTP.

import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { defaultKubeProxyConfig } from "../../../src/core/config/kube-proxy-config.ts";
import { defaultConfig } from "../../../src/core/config/config.ts";
import { memoryLogger } from "../../../src/core/log.ts";
import { startProxyServers, type ProxyServers } from "../../../src/core/node/proxy-servers.ts";
import { JSON_TYPE, PROTOBUF_TYPE } from "../../../src/core/kube-http/content.ts";
import { DECODE_FAILURES_STALE } from "../../../src/core/sources/kube-reflector.ts";
import { v4 } from "../../fixtures/addresses.ts";
import { node, slice, svc } from "../../fixtures/k8s.ts";
import { FakeApiServer } from "../../harness/api-server.ts";
import { value } from "../../node/prom-text.ts";
import { NODE, rig, tempDir, testCert, waitFor, type Rig } from "./helpers.ts";
import { LOADED_WAIT_MS } from "../../harness/kpng-process.ts";

// waits are bounded by their condition, up to LOADED_WAIT_MS each (issue 38: no test may depend
// on an idle machine): a test's own timeout leaves room for two
setDefaultTimeout(150_000);

const tmp = tempDir("kpng-decode-");
let cert: ReturnType<typeof testCert>;
const open: Array<{ close(): unknown }> = [];

beforeAll(() => {
  cert = testCert(tmp.dir);
});
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});
afterAll(() => tmp.remove());

/**
 * A frame whose length prefix is sound but whose WatchEvent is not: type
 * MODIFIED, its object's bytes without the k8s\0 prefix every object body has.
 */
function badFrame(): Uint8Array {
  const event = Buffer.concat([Buffer.from([0x0a, 8]), Buffer.from("MODIFIED"), Buffer.from([0x12, 5, 0x0a, 3, 1, 2, 3])]);
  const out = Buffer.alloc(4 + event.length);
  out.writeUInt32BE(event.length, 0);
  event.copy(out, 4);
  return out;
}
/** a JSON watch line that is no JSON */
const BAD_LINE = '{"type":"MODIFIED","object":{"metadata":\n';
const bad = { protobuf: badFrame(), json: BAD_LINE };

interface Started {
  api: FakeApiServer;
  r: Rig;
  servers: ProxyServers;
  healthz(): Promise<number>;
  metric(series: string): Promise<number | undefined>;
}

async function start(contentType: string): Promise<Started> {
  const api = await FakeApiServer.start(cert);
  open.push(api);
  api.apply(node(NODE, { ips: [v4.node(1)] }));
  api.apply(svc({ name: "web" }));
  api.apply(slice({ service: "web", endpoints: [{ ip: v4.pod(1, 5), node: NODE }] }));
  const kubeProxy = defaultKubeProxyConfig();
  kubeProxy.clientConnection.contentType = contentType;
  const r = await rig(api, tmp.dir, { kubeProxy });
  open.push(r);
  await waitFor("revision 1", () => r.rev() >= 1);
  const cfg = defaultConfig({ nodeName: NODE, healthzBindAddress: "127.0.0.1:0", metricsBindAddress: "127.0.0.1:0" });
  const servers = startProxyServers({ cfg, brain: r.brain, log: memoryLogger(), backends: [] });
  open.push(servers);
  servers.setSource({ stats: r.source.stats });
  return {
    api,
    r,
    servers,
    healthz: async () => (await fetch(`${servers.urls.healthz}/healthz`)).status,
    metric: async (series) => value(await (await fetch(`${servers.urls.metrics}/metrics`)).text(), series),
  };
}

const watchRequests = (api: FakeApiServer) => api.requests.filter((q) => q.watch && q.path === "/api/v1/services").length;
const SERVICE_ERRORS = 'kpng_kube_watch_decode_errors_total{kind="Service"}';

for (const [type, enc] of [
  [PROTOBUF_TYPE, "protobuf"],
  [JSON_TYPE, "json"],
] as const) {
  describe(`a watch event that does not decode (${enc})`, () => {
    test("is skipped and logged: the same watch goes on with the next good event; the metric counts it", async () => {
      const { api, r, metric } = await start(type);
      const watches = watchRequests(api);
      expect(api.injectWatch("Service", bad)).toBe(1);
      api.apply(svc({ name: "later", clusterIPs: [v4.clusterIP(31)] }));
      await waitFor("the event after the bad one", () => r.keys().includes("default/later"));
      expect(r.source.stats.decodeErrors).toEqual({ Service: 1, EndpointSlice: 0, Node: 0 });
      expect(await metric(SERVICE_ERRORS)).toBe(1);
      // no reconnect, no relist: the stream it came in goes on
      expect(watchRequests(api)).toBe(watches);
      expect(r.source.stats.relists).toBe(0);
      expect(r.log.lines.filter((l) => l.includes("watch event not decoded, skipped") && l.includes("kind=Service"))).toHaveLength(1);
      expect(r.log.lines.filter((l) => l.includes("watch failed"))).toEqual([]);
    });

    test(`${DECODE_FAILURES_STALE} in a row: /healthz 503 until a watch event decodes again; fewer in a row never`, async () => {
      const { api, r, healthz, metric } = await start(type);
      expect(await healthz()).toBe(200);
      // one short of the limit, then a good event: the count in a row starts over
      for (let i = 1; i < DECODE_FAILURES_STALE; i++) api.injectWatch("Service", bad);
      api.apply(svc({ name: "good", clusterIPs: [v4.clusterIP(32)] }));
      await waitFor("the good event", () => r.keys().includes("default/good"));
      expect(r.source.stats.stale).toEqual([]);
      expect(await healthz()).toBe(200);
      for (let i = 0; i < DECODE_FAILURES_STALE; i++) api.injectWatch("Service", bad);
      await waitFor("the kind stale", () => r.source.stats.stale.includes("Service"));
      expect(await healthz()).toBe(503);
      expect(await metric(SERVICE_ERRORS)).toBe(2 * DECODE_FAILURES_STALE - 1);
      expect(r.log.lines.some((l) => l.includes("ERROR") && l.includes("keep failing to decode") && l.includes("kind=Service"))).toBe(true);
      // another kind's events decoding says nothing of this one
      api.apply(slice({ service: "web", endpoints: [{ ip: v4.pod(1, 6), node: NODE }] }));
      await waitFor(
        "the slice change",
        () =>
          r.brain.view(NODE).state?.services.get("default/web")?.endpoints.size === 1 &&
          [...r.brain.view(NODE).state!.services.get("default/web")!.endpoints.values()][0].IPs?.V4?.[0] === v4.pod(1, 6),
      );
      expect(await healthz()).toBe(503);
      api.apply(svc({ name: "healed", clusterIPs: [v4.clusterIP(33)] }));
      // the source is followed again at once; the brain has the service after its next recomputation
      await waitFor("the kind followed again", () => r.source.stats.stale.length === 0 && r.keys().includes("default/healed"));
      expect(await healthz()).toBe(200);
    });
  });
}

describe("a protobuf watch whose framing breaks", () => {
  test("is dropped and the kind listed again (latest state); what changed meanwhile is picked up; counted", async () => {
    const { api, r, metric } = await start(PROTOBUF_TYPE);
    const streamedLists = () => api.requests.filter((q) => q.path === "/api/v1/services" && q.query.sendInitialEvents === "true").length;
    const lists = streamedLists();
    // a length no frame can have (4 GiB): nothing after it can be trusted
    expect(api.injectWatch("Service", { protobuf: Uint8Array.of(0xff, 0xff, 0xff, 0xff, 0x0a) })).toBe(1);
    await waitFor("a list again", () => streamedLists() > lists, LOADED_WAIT_MS);
    api.apply(svc({ name: "after", clusterIPs: [v4.clusterIP(34)] }));
    await waitFor("followed after the relist", () => r.keys().includes("default/after"), LOADED_WAIT_MS);
    expect(await metric(SERVICE_ERRORS)).toBe(1);
    expect(r.log.lines.some((l) => l.includes("watch stream unreadable, listing again") && l.includes("kind=Service"))).toBe(true);
  });
});
