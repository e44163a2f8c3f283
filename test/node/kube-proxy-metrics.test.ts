// kube-proxy 1.36's metric families (pkg/proxy/metrics): names, types,
// labels (ip_family where kube-proxy has it) and buckets, fed from node-local
// revisions and backend syncs; kpng's own counters; the metrics server over
// HTTP.

import { afterAll, describe, expect, test } from "bun:test";
import { Brain, type Revision } from "../../src/core/brain/brain.ts";
import { kinds, type K8sObject, type Kind } from "../../src/core/brain/k8s/objects.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { ProxyMetrics, startMetricsServer, TRIGGER_TIME_ANNOTATION } from "../../src/core/node/metrics.ts";
import type { SourceStats } from "../../src/core/sources/kube.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { loadedBound } from "../harness/load.ts";
import { bucketsOf, typeOf, value } from "./prom-text.ts";

function rig(opts: { source?: SourceStats; backends?: string[] } = {}) {
  const brain = new Brain();
  const metrics = new ProxyMetrics({
    brain,
    backends: opts.backends ?? ["nft", "my-plugin"],
    source: () => opts.source,
    defaultMetrics: false,
  });
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
  const s = slice({ service: "web", endpoints: eps.map((e) => ({ ip: v4.pod(1, e.i), node: e.node })) }) as K8sObject & {
    metadata: { annotations?: Record<string, string> };
  };
  if (annotations) s.metadata.annotations = annotations;
  return s;
};
const v4only = '{ip_family="IPv4"}';
const v6only = '{ip_family="IPv6"}';

describe("kube-proxy 1.36's families: type, labels, buckets", () => {
  const exp = (start: number, n: number) => Array.from({ length: n }, (_, i) => start * 2 ** i);
  const lin = (start: number, width: number, n: number) => Array.from({ length: n }, (_, i) => start + width * i);
  const syncBuckets = exp(0.001, 15);
  // component-base's MergeBuckets starts with a 0 bucket
  const programmingBuckets = [0, ...lin(0.25, 0.25, 2), ...lin(1, 1, 59), ...lin(60, 5, 12), ...lin(120, 30, 7)];
  const cases: Array<{ name: string; type: string; labels: string; buckets?: number[] }> = [
    { name: "kubeproxy_sync_proxy_rules_duration_seconds", type: "histogram", labels: "ip_family", buckets: syncBuckets },
    { name: "kubeproxy_sync_full_proxy_rules_duration_seconds", type: "histogram", labels: "ip_family", buckets: syncBuckets },
    { name: "kubeproxy_sync_partial_proxy_rules_duration_seconds", type: "histogram", labels: "ip_family", buckets: syncBuckets },
    { name: "kubeproxy_network_programming_duration_seconds", type: "histogram", labels: "ip_family", buckets: programmingBuckets },
    { name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds", type: "gauge", labels: "ip_family" },
    { name: "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", type: "gauge", labels: "ip_family" },
    { name: "kubeproxy_sync_proxy_rules_endpoint_changes_pending", type: "gauge", labels: "" },
    { name: "kubeproxy_sync_proxy_rules_service_changes_pending", type: "gauge", labels: "" },
    { name: "kubeproxy_sync_proxy_rules_endpoint_changes_total", type: "counter", labels: "" },
    { name: "kubeproxy_sync_proxy_rules_service_changes_total", type: "counter", labels: "" },
    { name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total", type: "gauge", labels: "ip_family,traffic_policy" },
    { name: "kubeproxy_sync_proxy_rules_nftables_sync_failures_total", type: "counter", labels: "ip_family" },
    { name: "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", type: "counter", labels: "ip_family" },
    { name: "kubeproxy_conntrack_reconciler_sync_duration_seconds", type: "histogram", labels: "ip_family", buckets: syncBuckets },
    { name: "kubeproxy_conntrack_reconciler_deleted_entries_total", type: "counter", labels: "ip_family" },
    { name: "kubeproxy_proxy_healthz_total", type: "counter", labels: "code" },
    { name: "kubeproxy_proxy_livez_total", type: "counter", labels: "code" },
  ];

  test.each(cases)("$name: $type, labels [$labels]", async (c) => {
    const { apply, metrics, text } = rig();
    // something in every family, so each shows its series
    const r = apply(
      node("node-1"),
      svc({ name: "web", iTP: "Local" }),
      web([{ i: 1, node: "node-2" }], { [TRIGGER_TIME_ANNOTATION]: new Date(Date.now() - 1000).toISOString() }),
    );
    metrics.synced("nft", r.state, 0.01, null);
    metrics.synced("nft", r.state, 0.01, new Set());
    metrics.answered("healthz", 200);
    metrics.answered("livez", 200);
    metrics.conntrackReconciled(4, 0.001, 1);
    const t = await text();
    expect(typeOf(t, c.name)).toBe(c.type);
    const series = t.split("\n").filter((l) => l.startsWith(c.name) && !l.startsWith("#"));
    expect(series.length).toBeGreaterThan(0);
    for (const line of series) {
      const labels = [...(line.match(/\{(.*)\}/)?.[1] ?? "").matchAll(/(\w+)="/g)]
        .map((m) => m[1])
        .filter((l) => l !== "le")
        .sort();
      expect(labels.join(",")).toBe(c.labels);
    }
    if (c.buckets) expect(bucketsOf(t, c.name)).toEqual(c.buckets);
  });
});

describe("kube-proxy metrics from revisions and syncs", () => {
  test("service and endpoint changes count what changed for this node", async () => {
    const { apply, text } = rig();
    apply(node("node-1"), svc({ name: "web" }), web([{ i: 1, node: "node-1" }]), svc({ name: "api", clusterIPs: [v4.clusterIP(11)] }));
    let t = await text();
    // first revision: both services and both endpoint sets are new
    expect([
      value(t, "kubeproxy_sync_proxy_rules_service_changes_total"),
      value(t, "kubeproxy_sync_proxy_rules_endpoint_changes_total"),
    ]).toEqual([2, 2]);
    apply(web([{ i: 2, node: "node-1" }]));
    t = await text();
    // one slice changed: one endpoint change, no service change
    expect([
      value(t, "kubeproxy_sync_proxy_rules_service_changes_total"),
      value(t, "kubeproxy_sync_proxy_rules_endpoint_changes_total"),
    ]).toEqual([2, 3]);
    for (const f of [v4only, v6only])
      expect(value(t, `kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds${f}`)).toBeGreaterThan(Date.now() / 1000 - 60);
  });

  test("pending changes: queued and not yet applied by every backend", async () => {
    const { apply, metrics, text } = rig();
    const pending = async () => {
      const t = await text();
      return [
        value(t, "kubeproxy_sync_proxy_rules_service_changes_pending"),
        value(t, "kubeproxy_sync_proxy_rules_endpoint_changes_pending"),
      ];
    };
    const r1 = apply(
      node("node-1"),
      svc({ name: "web" }),
      web([{ i: 1, node: "node-1" }]),
      svc({ name: "api", clusterIPs: [v4.clusterIP(11)] }),
    );
    expect(await pending()).toEqual([2, 2]);
    metrics.synced("nft", r1.state, 0.01, null);
    expect(await pending()).toEqual([2, 2]); // my-plugin has not applied it yet
    metrics.synced("my-plugin", r1.state, 0.01, null);
    expect(await pending()).toEqual([0, 0]);
    const r2 = apply(web([{ i: 2, node: "node-1" }]));
    expect(await pending()).toEqual([0, 1]);
    metrics.synced("nft", r2.state, 0.01, r2.change);
    metrics.synced("my-plugin", r2.state, 0.01, r2.change);
    expect(await pending()).toEqual([0, 0]);
  });

  test("no_local_endpoints counts Local-policy services without a local endpoint, per family and policy", async () => {
    const { apply, text } = rig();
    apply(
      node("node-1"),
      svc({ name: "web", iTP: "Local" }),
      web([{ i: 1, node: "node-2" }]),
      svc({
        name: "lb",
        type: "LoadBalancer",
        eTP: "Local",
        clusterIPs: [v4.clusterIP(12)],
        ports: [{ name: "http", port: 80, nodePort: 30080 }],
      }),
      svc({ name: "fine", iTP: "Local", clusterIPs: [v4.clusterIP(13)] }),
      slice({ service: "fine", endpoints: [{ ip: v4.pod(1, 9), node: "node-1" }] }),
      // dual-stack, a local endpoint in IPv4 only: IPv6 has none
      svc({ name: "dual", iTP: "Local", clusterIPs: [v4.clusterIP(14), v6.clusterIP(14)] }),
      slice({ service: "dual", endpoints: [{ ip: v4.pod(1, 10), node: "node-1" }] }),
    );
    const t = await text();
    expect(value(t, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"}')).toBe(1);
    expect(value(t, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"}')).toBe(1);
    expect(value(t, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv6",traffic_policy="internal"}')).toBe(1);
    expect(value(t, 'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv6",traffic_policy="external"}')).toBe(0);
  });

  test("no_local_endpoints follows changes: a local endpoint arrives, a service goes", async () => {
    const { apply, brain, text } = rig();
    apply(
      node("node-1"),
      svc({ name: "web", iTP: "Local" }),
      web([{ i: 1, node: "node-2" }]),
      svc({ name: "api", iTP: "Local", clusterIPs: [v4.clusterIP(11)] }),
    );
    const internal4 = async () =>
      value(await text(), 'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"}');
    expect(await internal4()).toBe(2);
    apply(web([{ i: 1, node: "node-1" }]));
    expect(await internal4()).toBe(1);
    brain.apply([{ type: "delete", kind: "Service", namespace: "default", name: "api" }]);
    brain.flush();
    expect(await internal4()).toBe(0);
    apply(web([{ i: 1, node: "node-2" }]));
    expect(await internal4()).toBe(1);
  });

  test("sync durations: all, full and partial, under both families (one sync programs both); last sync timestamp", async () => {
    const { apply, metrics, text } = rig();
    const r1 = apply(node("node-1"), svc({ name: "web" }), web([{ i: 1, node: "node-1" }]));
    metrics.synced("nft", r1.state, 0.004, null);
    const r2 = apply(web([{ i: 2, node: "node-1" }]));
    metrics.synced("nft", r2.state, 0.0005, r2.change);
    const t = await text();
    for (const f of [v4only, v6only]) {
      expect(value(t, `kubeproxy_sync_proxy_rules_duration_seconds_count${f}`)).toBe(2);
      expect(value(t, `kubeproxy_sync_full_proxy_rules_duration_seconds_count${f}`)).toBe(1);
      expect(value(t, `kubeproxy_sync_partial_proxy_rules_duration_seconds_count${f}`)).toBe(1);
      expect(value(t, `kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.001",${f.slice(1)}`)).toBe(1);
      expect(value(t, `kubeproxy_sync_proxy_rules_last_timestamp_seconds${f}`)).toBeGreaterThan(Date.now() / 1000 - 60);
    }
  });

  test("network programming latency: from the slice's trigger time to the sync, observed once, in the slice's family", async () => {
    const { apply, metrics, text } = rig();
    const trigger = new Date(Date.now() - 2000).toISOString();
    const r1 = apply(node("node-1"), svc({ name: "web" }), web([{ i: 1, node: "node-1" }], { [TRIGGER_TIME_ANNOTATION]: trigger }));
    metrics.synced("nft", r1.state, 0.001, null);
    metrics.synced("my-plugin", r1.state, 0.001, null); // a second backend does not observe it again
    let t = await text();
    expect(value(t, `kubeproxy_network_programming_duration_seconds_count${v4only}`)).toBe(1);
    expect(value(t, `kubeproxy_network_programming_duration_seconds_count${v6only}`)).toBeUndefined();
    expect(value(t, `kubeproxy_network_programming_duration_seconds_sum${v4only}`)).toBeGreaterThanOrEqual(2);
    // the trigger's age and the few ms to the sync (8 s of slack, stretched by the load)
    expect(value(t, `kubeproxy_network_programming_duration_seconds_sum${v4only}`)).toBeLessThan(2 + loadedBound(8_000) / 1000);
    const r2 = apply(svc({ name: "web", ports: [{ name: "http", port: 81, targetPort: 8080 }] }));
    metrics.synced("nft", r2.state, 0.001, r2.change);
    t = await text();
    expect(value(t, `kubeproxy_network_programming_duration_seconds_count${v4only}`)).toBe(1);
    // an IPv6 slice's change is the IPv6 proxier's
    const s6 = slice({ service: "web", family: "IPv6", endpoints: [{ ip: v6.pod(1, 1), node: "node-1" }] }) as K8sObject & {
      metadata: { annotations?: Record<string, string> };
    };
    s6.metadata.annotations = { [TRIGGER_TIME_ANNOTATION]: new Date(Date.now() - 1000).toISOString() };
    const r3 = apply(svc({ name: "web", clusterIPs: [v4.clusterIP(10), v6.clusterIP(10)] }), s6);
    metrics.synced("nft", r3.state, 0.001, r3.change);
    t = await text();
    expect(value(t, `kubeproxy_network_programming_duration_seconds_count${v6only}`)).toBe(1);
    expect(value(t, `kubeproxy_network_programming_duration_seconds_count${v4only}`)).toBe(1);
  });

  // Backends report their refused transactions (nft -f, iptables-restore) per family; the feed, failed syncs.
  const failureCases: Array<{
    name: string;
    backend: string;
    failures: Array<[4 | 6, boolean]>;
    expected: Record<string, [number, number]>;
    absent: string[];
  }> = [
    {
      name: "nft, one transaction for both families refused: nftables sync failures in both; cleanup failures stay 0 (kpng cleans up in the sync's own transaction)",
      backend: "nft",
      failures: [
        [4, true],
        [6, true],
      ],
      expected: {
        kubeproxy_sync_proxy_rules_nftables_sync_failures_total: [1, 1],
        kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total: [0, 0],
      },
      absent: ["iptables_restore_failures_total"],
    },
    {
      name: "iptables, IPv6 full restore refused: restore failures in IPv6, no partial ones",
      backend: "iptables",
      failures: [[6, false]],
      expected: {
        kubeproxy_sync_proxy_rules_iptables_restore_failures_total: [0, 1],
        kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total: [0, 0],
      },
      absent: ["nftables"],
    },
    {
      name: "iptables, IPv4 partial restore refused: both counters",
      backend: "iptables",
      failures: [[4, true]],
      expected: {
        kubeproxy_sync_proxy_rules_iptables_restore_failures_total: [1, 0],
        kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total: [1, 0],
      },
      absent: ["nftables"],
    },
    {
      name: "ipvs: kube-proxy's ipvs mode counts iptables restore failures",
      backend: "ipvs",
      failures: [[4, false]],
      expected: { kubeproxy_sync_proxy_rules_iptables_restore_failures_total: [1, 0] },
      absent: ["nftables", "partial_restore"],
    },
  ];

  test.each(failureCases)("failures: $name", async (c) => {
    const { metrics, text } = rig({ backends: [c.backend, "my-plugin"] });
    for (const [family, partial] of c.failures) metrics.transactionFailed(c.backend, family, partial);
    metrics.failed(c.backend);
    metrics.failed("my-plugin");
    metrics.transactionFailed("my-plugin", 4, false); // no kube-proxy mode: nothing of kube-proxy's
    const t = await text();
    for (const [name, [n4, n6]] of Object.entries(c.expected)) expect([value(t, name + v4only), value(t, name + v6only)]).toEqual([n4, n6]);
    for (const a of c.absent) expect(t).not.toContain(a);
    expect(value(t, `kpng_backend_sync_failures_total{backend="${c.backend}"}`)).toBe(1);
    expect(value(t, 'kpng_backend_sync_failures_total{backend="my-plugin"}')).toBe(1);
  });

  test("conntrack reconciler: each family's cleanup timed, its deletions counted", async () => {
    const { metrics, text } = rig();
    metrics.conntrackReconciled(4, 0.003, 2);
    metrics.conntrackReconciled(6, 0.0005, 0);
    metrics.conntrackReconciled(4, 0.002, 1);
    const t = await text();
    expect(value(t, `kubeproxy_conntrack_reconciler_sync_duration_seconds_count${v4only}`)).toBe(2);
    expect(value(t, `kubeproxy_conntrack_reconciler_sync_duration_seconds_count${v6only}`)).toBe(1);
    expect(value(t, `kubeproxy_conntrack_reconciler_deleted_entries_total${v4only}`)).toBe(3);
    expect(value(t, `kubeproxy_conntrack_reconciler_deleted_entries_total${v6only}`)).toBe(0);
  });

  test("rules lost: kpng_backend_rules_lost_total per backend (kube-proxy has no such counter)", async () => {
    const { metrics, text } = rig();
    metrics.rulesLost("nft");
    metrics.rulesLost("nft");
    const t = await text();
    expect(value(t, 'kpng_backend_rules_lost_total{backend="nft"}')).toBe(2);
  });

  test("drift: kpng_backend_rules_drift per backend, the differences its last check found (a gauge: the next check replaces it)", async () => {
    const { metrics, text } = rig();
    metrics.rulesDrift("nft", 3);
    metrics.rulesDrift("iptables", 0);
    expect(value(await text(), 'kpng_backend_rules_drift{backend="nft"}')).toBe(3);
    metrics.rulesDrift("nft", 0);
    const t = await text();
    expect(value(t, 'kpng_backend_rules_drift{backend="nft"}')).toBe(0);
    expect(value(t, 'kpng_backend_rules_drift{backend="iptables"}')).toBe(0);
    expect(typeOf(t, "kpng_backend_rules_drift")).toBe("gauge");
  });

  test("kpng's own: API events in, brain events, revisions out, watchers, relists, watch decode errors", async () => {
    const source: SourceStats = {
      events: { Service: 7, EndpointSlice: 9, Node: 2 },
      watchers: 3,
      relists: 1,
      flushes: 4,
      decodeErrors: { Service: 5, EndpointSlice: 0, Node: 0 },
      stale: ["Service"],
    };
    const { apply, text, brain } = rig({ source });
    apply(node("node-1"), svc({ name: "web" }));
    const t = await text();
    expect(value(t, 'kpng_api_events_total{kind="EndpointSlice"}')).toBe(9);
    expect(value(t, "kpng_brain_events_total")).toBe(brain.stats.events);
    expect(value(t, "kpng_node_revisions_total")).toBe(1);
    expect(value(t, "kpng_api_watchers")).toBe(3);
    expect(value(t, "kpng_api_relists_total")).toBe(1);
    expect(value(t, 'kpng_kube_watch_decode_errors_total{kind="Service"}')).toBe(5);
    expect(value(t, 'kpng_kube_watch_decode_errors_total{kind="EndpointSlice"}')).toBe(0);
  });
});

describe("metrics server over HTTP", () => {
  const { metrics } = rig();
  metrics.answered("healthz", 200);
  const server = startMetricsServer({
    address: "127.0.0.1:0",
    metrics,
    proxyMode: "nftables",
    config: { mode: "nftables" },
    log: memoryLogger(),
  });
  afterAll(() => server.close());

  test("/metrics is Prometheus text with kube-proxy's names", async () => {
    const r = await fetch(`${server.url}/metrics`);
    expect(r.headers.get("content-type")).toStartWith("text/plain; version=0.0.4");
    const t = await r.text();
    for (const name of [
      "kubeproxy_sync_proxy_rules_duration_seconds",
      "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
      "kubeproxy_network_programming_duration_seconds",
      "kubeproxy_sync_proxy_rules_endpoint_changes_total",
      "kubeproxy_sync_proxy_rules_service_changes_total",
      "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
      "rest_client_requests_total",
      "kubernetes_build_info",
      "kpng_api_events_total",
      "kpng_node_revisions_total",
      "kpng_api_watchers",
    ]) {
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
