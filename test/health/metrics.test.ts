// kube-proxy's metric names and meanings, fed from node-local revisions and
// backend syncs; kpng's own counters; the metrics server over HTTP.

import { afterAll, describe, expect, test } from "bun:test";
import { Brain, type Revision } from "../../src/core/brain/brain.ts";
import { kinds, type K8sObject, type Kind } from "../../src/core/brain/k8s/objects.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { ProxyMetrics, startMetricsServer, TRIGGER_TIME_ANNOTATION } from "../../src/core/node/metrics.ts";
import type { SourceStats } from "../../src/core/sources/kube.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";

/** The value of one series in Prometheus text, or undefined. */
function value(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

function rig(source?: SourceStats) {
  const brain = new Brain();
  const metrics = new ProxyMetrics({ brain, backends: ["nft", "my-plugin"], source: () => source, defaultMetrics: false });
  const revs: Revision[] = [];
  brain.view("node-1").subscribe((rev) => {
    revs.push(rev);
    metrics.queued(rev);
  });
  const apply = (...objects: K8sObject[]) => {
    brain.apply(objects.map((object) => ({ type: "upsert" as const, object })));
    for (const k of kinds) brain.markSynced(k as Kind);
    brain.flush();
    return revs.at(-1)!;
  };
  return { brain, metrics, apply, text: () => metrics.registry.metrics() };
}

const web = (eps: Array<{ i: number; node: string }>, annotations?: Record<string, string>) => {
  const s = slice({ service: "web", endpoints: eps.map((e) => ({ ip: v4.pod(1, e.i), node: e.node })) }) as K8sObject & { metadata: { annotations?: Record<string, string> } };
  if (annotations) s.metadata.annotations = annotations;
  return s;
};

describe("kube-proxy metrics from revisions and syncs", () => {
  test("service and endpoint changes count what changed for this node", async () => {
    const { apply, text } = rig();
    apply(node("node-1"), svc({ name: "web" }), web([{ i: 1, node: "node-1" }]), svc({ name: "api", clusterIPs: [v4.clusterIP(11)] }));
    let t = await text();
    // first revision: both services and both endpoint sets are new
    expect([value(t, "kubeproxy_sync_proxy_rules_service_changes_total"), value(t, "kubeproxy_sync_proxy_rules_endpoint_changes_total")]).toEqual([2, 2]);
    apply(web([{ i: 2, node: "node-1" }]));
    t = await text();
    // one slice changed: one endpoint change, no service change
    expect([value(t, "kubeproxy_sync_proxy_rules_service_changes_total"), value(t, "kubeproxy_sync_proxy_rules_endpoint_changes_total")]).toEqual([2, 3]);
    expect(value(t, "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds")).toBeGreaterThan(Date.now() / 1000 - 60);
  });

  test("no_local_endpoints counts Local-policy services without a local endpoint, per policy", async () => {
    const { apply, text } = rig();
    apply(
      node("node-1"),
      svc({ name: "web", iTP: "Local" }),
      web([{ i: 1, node: "node-2" }]),
      svc({ name: "lb", type: "LoadBalancer", eTP: "Local", clusterIPs: [v4.clusterIP(12)], ports: [{ name: "http", port: 80, nodePort: 30080 }] }),
      svc({ name: "fine", iTP: "Local", clusterIPs: [v4.clusterIP(13)] }),
      slice({ service: "fine", endpoints: [{ ip: v4.pod(1, 9), node: "node-1" }] }),
    );
    const t = await text();
    expect(value(t, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy="internal"}')).toBe(1);
    expect(value(t, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy="external"}')).toBe(1);
  });

  test("sync durations: all, full and partial; last sync timestamp", async () => {
    const { apply, metrics, text } = rig();
    const r1 = apply(node("node-1"), svc({ name: "web" }), web([{ i: 1, node: "node-1" }]));
    metrics.synced("nft", r1.state, 0.004, null);
    const r2 = apply(web([{ i: 2, node: "node-1" }]));
    metrics.synced("nft", r2.state, 0.0005, r2.change);
    const t = await text();
    expect(value(t, "kubeproxy_sync_proxy_rules_duration_seconds_count")).toBe(2);
    expect(value(t, "kubeproxy_sync_full_proxy_rules_duration_seconds_count")).toBe(1);
    expect(value(t, "kubeproxy_sync_partial_proxy_rules_duration_seconds_count")).toBe(1);
    expect(value(t, 'kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.001"}')).toBe(1);
    expect(value(t, "kubeproxy_sync_proxy_rules_last_timestamp_seconds")).toBeGreaterThan(Date.now() / 1000 - 60);
  });

  test("network programming latency: from the slice's trigger time to the sync, observed once", async () => {
    const { apply, metrics, text } = rig();
    const trigger = new Date(Date.now() - 2000).toISOString();
    const r1 = apply(node("node-1"), svc({ name: "web" }), web([{ i: 1, node: "node-1" }], { [TRIGGER_TIME_ANNOTATION]: trigger }));
    metrics.synced("nft", r1.state, 0.001, null);
    metrics.synced("my-plugin", r1.state, 0.001, null); // a second backend does not observe it again
    let t = await text();
    expect(value(t, "kubeproxy_network_programming_duration_seconds_count")).toBe(1);
    expect(value(t, "kubeproxy_network_programming_duration_seconds_sum")).toBeGreaterThanOrEqual(2);
    expect(value(t, "kubeproxy_network_programming_duration_seconds_sum")).toBeLessThan(10);
    const r2 = apply(svc({ name: "web", ports: [{ name: "http", port: 81, targetPort: 8080 }] }));
    metrics.synced("nft", r2.state, 0.001, r2.change);
    t = await text();
    expect(value(t, "kubeproxy_network_programming_duration_seconds_count")).toBe(1);
  });

  test("failures: kube-proxy's nftables counter for nft, kpng's per-backend counter for all", async () => {
    const { metrics, text } = rig();
    metrics.failed("nft");
    metrics.failed("my-plugin");
    metrics.failed("my-plugin");
    const t = await text();
    expect(value(t, "kubeproxy_sync_proxy_rules_nftables_sync_failures_total")).toBe(1);
    expect(value(t, 'kpng_backend_sync_failures_total{backend="nft"}')).toBe(1);
    expect(value(t, 'kpng_backend_sync_failures_total{backend="my-plugin"}')).toBe(2);
    expect(t).not.toContain("iptables_restore_failures_total");
  });

  test("rules lost: kpng_backend_rules_lost_total per backend (kube-proxy has no such counter)", async () => {
    const { metrics, text } = rig();
    metrics.rulesLost("nft");
    metrics.rulesLost("nft");
    const t = await text();
    expect(value(t, 'kpng_backend_rules_lost_total{backend="nft"}')).toBe(2);
  });

  test("kpng's own: API events in, brain events, revisions out, watchers, relists", async () => {
    const source: SourceStats = { events: { Service: 7, EndpointSlice: 9, Node: 2 }, watchers: 3, relists: 1, flushes: 4 };
    const { apply, text, brain } = rig(source);
    apply(node("node-1"), svc({ name: "web" }));
    const t = await text();
    expect(value(t, 'kpng_api_events_total{kind="EndpointSlice"}')).toBe(9);
    expect(value(t, "kpng_brain_events_total")).toBe(brain.stats.events);
    expect(value(t, "kpng_node_revisions_total")).toBe(1);
    expect(value(t, "kpng_api_watchers")).toBe(3);
    expect(value(t, "kpng_api_relists_total")).toBe(1);
  });
});

describe("metrics server over HTTP", () => {
  const { metrics } = rig();
  metrics.answered("healthz", 200);
  const server = startMetricsServer({ address: "127.0.0.1:0", metrics, proxyMode: "nftables", config: { mode: "nftables" }, log: memoryLogger() });
  afterAll(() => server.close());

  test("/metrics is Prometheus text with kube-proxy's names", async () => {
    const r = await fetch(`${server.url}/metrics`);
    expect(r.headers.get("content-type")).toStartWith("text/plain; version=0.0.4");
    const t = await r.text();
    for (const name of ["kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_sync_proxy_rules_last_timestamp_seconds", "kubeproxy_network_programming_duration_seconds", "kubeproxy_sync_proxy_rules_endpoint_changes_total", "kubeproxy_sync_proxy_rules_service_changes_total", "kubeproxy_sync_proxy_rules_no_local_endpoints_total", "kpng_api_events_total", "kpng_node_revisions_total", "kpng_api_watchers"]) {
      expect(t).toContain(`# TYPE ${name} `);
    }
    expect(value(t, 'kubeproxy_proxy_healthz_total{code="200"}')).toBe(1);
  });

  test("/proxyMode, /healthz, /configz", async () => {
    expect(await (await fetch(`${server.url}/proxyMode`)).text()).toBe("nftables");
    expect(await (await fetch(`${server.url}/healthz`)).text()).toBe("ok");
    expect(await (await fetch(`${server.url}/configz`)).json()).toEqual({ "kubeproxy.config.k8s.io": { mode: "nftables" } });
    expect((await fetch(`${server.url}/nope`)).status).toBe(404);
  });
});
