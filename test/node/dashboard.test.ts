// The kubernetes-mixin "Proxy" dashboard against kpng as deployed: kpng runs
// with an operator's flags inside the node namespace, the nft backend
// programming real rules; a real Prometheus (Debian's) scrapes its /metrics
// there on loopback every 500 ms, as a cluster's Prometheus scrapes
// kube-proxy, and every query of the dashboard is evaluated by Prometheus
// itself after a few changes moved the counters. Then the same for iptables
// mode's own families. kpng reads an API server (--kubeconfig), not a file:
// the dashboard's API-client panels need one. For nft, the in-repo imitation
// (test/harness/api-server.ts): the panels of 4xx and 5xx answers and of
// relist GETs need a 500, a compacted history and cut watches on cue, which
// the real kube-apiserver gives no way to ask for. iptables mode's families
// are scraped from kpng following the real kube-apiserver
// (test/harness/kube-apiserver.ts).
//
// Why a real Prometheus rather than a small evaluator: the dashboard's
// queries lean on PromQL's semantics (rate over counters, histogram_quantile
// over `le` buckets, label regexes, `up`, which only a scraper produces);
// an evaluator written here would test our reading of PromQL, not what a
// user's dashboard shows.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type KpngProcess, LOADED_WAIT_MS, nftDryRun, ROOT, startKpng, tempDir } from "../harness/kpng-process.ts";
import { agentTls, listenTls, makeMutualTls } from "../harness/tls-flags.ts";
import { slice } from "../fixtures/k8s.ts";
import { deploy, type BackendName, type Deployed } from "../deployed/rig.ts";
import { haveK8s } from "../harness/kube-apiserver.ts";

/**
 * The queries of kubernetes-monitoring/kubernetes-mixin
 * dashboards/proxy.libsonnet (commit acdade96d1fe4ebc886664b410e75035e1ea7615),
 * panel by panel, with the mixin's defaults substituted:
 * %(clusterLabel)s = cluster, %(kubeProxySelector)s = job="kube-proxy".
 * $cluster and $instance are the dashboard's variables (filled below the way
 * Grafana fills them). `want`: "data" = a non-empty result whose values are
 * numbers (`positive`: and > 0, for what the test moved); "empty" with the
 * reason kpng has nothing there.
 */
// "series": the panel has a line, whose value may be NaN (a quantile of a rate that was 0 in the window)
const DASHBOARD: Array<{ panel: string; expr: string; want: "data" | "empty" | "series"; positive?: boolean; why?: string }> = [
  { panel: "Up", expr: 'sum(up{cluster="$cluster", job="kube-proxy"})', want: "data", positive: true },
  {
    panel: "Rules Sync Rate",
    expr: 'sum(rate(kubeproxy_sync_proxy_rules_duration_seconds_count{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[5m]))',
    want: "data",
    positive: true,
  },
  {
    panel: "Rule Sync Latency 99th Quantile",
    expr: 'histogram_quantile(0.99,rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[5m]))',
    want: "data",
    positive: true,
  },
  {
    panel: "Network Programming Rate",
    expr: 'sum(rate(kubeproxy_network_programming_duration_seconds_count{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[5m]))',
    want: "data",
    positive: true,
  },
  {
    panel: "Network Programming Latency 99th Quantile",
    expr: 'histogram_quantile(0.99, sum(rate(kubeproxy_network_programming_duration_seconds_bucket{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[5m])) by (instance, le))',
    want: "data",
    positive: true,
  },
  {
    panel: "Kube API Request Rate (2xx)",
    expr: 'sum(rate(rest_client_requests_total{cluster="$cluster", job="kube-proxy", instance=~"$instance",code=~"2.."}[5m]))',
    want: "data",
    positive: true,
  },
  {
    panel: "Kube API Request Rate (3xx)",
    expr: 'sum(rate(rest_client_requests_total{cluster="$cluster", job="kube-proxy", instance=~"$instance",code=~"3.."}[5m]))',
    want: "empty",
    why: "the API server never redirects (nor does it redirect kube-proxy)",
  },
  {
    panel: "Kube API Request Rate (4xx)",
    expr: 'sum(rate(rest_client_requests_total{cluster="$cluster", job="kube-proxy", instance=~"$instance",code=~"4.."}[5m]))',
    want: "data",
    positive: true,
  },
  {
    panel: "Kube API Request Rate (5xx)",
    expr: 'sum(rate(rest_client_requests_total{cluster="$cluster", job="kube-proxy", instance=~"$instance",code=~"5.."}[5m]))',
    want: "data",
    positive: true,
  },
  {
    panel: "Post Request Latency 99th Quantile",
    expr: 'histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{cluster="$cluster", job="kube-proxy",instance=~"$instance",verb="POST"}[5m])) by (verb, url, le))',
    want: "series",
    why: "kpng POSTs Node events: here RulesLost and RulesRestored when the test deletes kpng's table (backend-events.ts); when they fall in the 5 m window depends on the scrapes",
  },
  {
    panel: "Get Request Latency 99th Quantile",
    expr: 'histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{cluster="$cluster", job="kube-proxy", instance=~"$instance", verb="GET"}[5m])) by (verb, url, le))',
    want: "data",
    positive: true,
  },
  {
    panel: "Memory",
    expr: 'process_resident_memory_bytes{cluster="$cluster", job="kube-proxy",instance=~"$instance"}',
    want: "data",
    positive: true,
  },
  {
    panel: "CPU usage",
    expr: 'rate(process_cpu_seconds_total{cluster="$cluster", job="kube-proxy",instance=~"$instance"}[5m])',
    want: "data",
  },
  {
    panel: "Goroutines",
    expr: 'go_goroutines{cluster="$cluster", job="kube-proxy",instance=~"$instance"}',
    want: "empty",
    why: "kpng is not a Go program: it has no goroutines, and does not invent the series",
  },
];
/** the dashboard's $instance variable: label_values(<this>, instance) */
const INSTANCE_VARIABLE = 'kubeproxy_network_programming_duration_seconds_bucket{cluster="$cluster", job="kube-proxy"}';

const CLUSTER = "kpng-test";
const PROM = "127.0.0.1:9090";
/** kube-proxy's (and kpng's) default metrics address; in the node namespace, its own loopback */
const METRICS = "127.0.0.1:10249";
const TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time";
const httpSlice = [{ name: "http", protocol: "TCP" as const, port: 8080 }];

type Sample = { metric: Record<string, string>; value: [number, string] };

/**
 * kpng's own dashboard (deploy/grafana-dashboard.json): every query of every
 * panel, with the dashboard's variables filled as Grafana fills them with
 * "All" selected ($job, $instance: their allValue).
 */
interface GrafanaPanel {
  title: string;
  type: string;
  targets?: { expr: string; legendFormat?: string }[];
}
const KPNG_DASHBOARD_FILE = join(ROOT, "deploy/grafana-dashboard.json");
const kpngPanels = (JSON.parse(readFileSync(KPNG_DASHBOARD_FILE, "utf8")) as { panels: GrafanaPanel[] }).panels.filter(
  (p) => p.type !== "row",
);
const KPNG_QUERIES = kpngPanels.flatMap((p) =>
  (p.targets ?? []).map((t, i) => ({ panel: p.title, ref: i, expr: t.expr, legend: t.legendFormat })),
);
const fillKpng = (expr: string) => expr.replaceAll("$job", ".+").replaceAll("$instance", ".+");
/** panels whose counters the test moves: more than zero */
const MOVED = new Set([
  "Syncs per second, by backend",
  "Rules lost and repaired, by backend",
  "Differences found at the last check, by backend",
  "Refused API peers (brain side), by reason",
  "Refused by the brain (agent side)",
  "API server events per second, by kind",
]);
/** Where the brain and node agents of kpng's own job serve, in the node namespace (scraped as job "kpng"). */
const BRAIN_API = "tcp://127.0.0.1:7443";
const KPNG_TARGETS = { brain: "127.0.0.1:10251", agent: "127.0.0.1:10252", refused: "127.0.0.1:10253" };

async function waitFor<T>(what: string, get: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = LOADED_WAIT_MS): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: T | undefined;
  let error: unknown;
  while (Date.now() < end) {
    try {
      last = await get();
      if (ok(last)) return last;
    } catch (err) {
      error = err;
    }
    await Bun.sleep(250);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms (last: ${JSON.stringify(last)}${error ? `, error: ${error}` : ""})`);
}

/** kpng as deployed with `backend`, and a Prometheus in its node namespace scraping it. */
class Scraped {
  d!: Deployed;
  private prom?: ReturnType<typeof Bun.spawn>;
  private readonly dir = tempDir("kpng-prometheus-");

  /** a brain (kpng serve --listen, TLS), a node agent following it, and one it refuses: kpng's own metrics families */
  readonly peers: KpngProcess[] = [];

  async start(backend: BackendName, opts: { fakeApi?: boolean; peers?: boolean } = {}): Promise<void> {
    if (!Bun.which("prometheus"))
      throw new Error("prometheus is not installed: apt-get install --no-install-recommends prometheus (.ci/run does)");
    this.dir.create();
    this.d = await deploy({ source: "api", backend, prefix: "kpm", fakeApi: opts.fakeApi });
    if (opts.peers) await this.startPeers();
    const config = join(this.dir.path, "prometheus.yml");
    writeFileSync(
      config,
      [
        "global: { scrape_interval: 500ms, evaluation_interval: 500ms }",
        "scrape_configs:",
        "  - job_name: kube-proxy",
        `    static_configs: [{ targets: ["${METRICS}"], labels: { cluster: ${CLUSTER} } }]`,
        ...(opts.peers
          ? [
              "  - job_name: kpng",
              `    static_configs: [{ targets: [${Object.values(KPNG_TARGETS)
                .map((t) => `"${t}"`)
                .join(", ")}], labels: { cluster: ${CLUSTER} } }]`,
            ]
          : []),
        "",
      ].join("\n"),
    );
    this.prom = Bun.spawn(
      [
        "ip",
        "netns",
        "exec",
        this.d.topo.node.ns,
        "prometheus",
        `--config.file=${config}`,
        `--storage.tsdb.path=${join(this.dir.path, "data")}`,
        `--web.listen-address=${PROM}`,
        "--log.level=warn",
      ],
      { stdout: "ignore", stderr: "pipe" },
    );
    await waitFor(
      "Prometheus scrapes kpng",
      () => this.query(`up{job="kube-proxy"}`),
      (r) => r.result.some((s) => s.value[1] === "1"),
    );
    // The counters move after Prometheus has their first values: rates need two samples.
    await this.scrapes(2);
  }

  /**
   * In the node namespace: `kpng serve` over TLS (examples/cluster.yaml), an
   * agent with its client certificate (nft, dry run) and one without, which
   * the brain refuses; each with its own metrics address.
   */
  private async startPeers(): Promise<void> {
    const f = (name: string) => join(this.dir.path, name);
    makeMutualTls(this.dir.path);
    const inNode = { wrap: ["ip", "netns", "exec", this.d.topo.node.ns] };
    const serve = startKpng(
      [
        "serve",
        "--input",
        join(ROOT, "examples/cluster.yaml"),
        "--node-name",
        "node-1",
        "--listen",
        BRAIN_API,
        ...listenTls(this.dir.path),
        "--metrics-bind-address",
        KPNG_TARGETS.brain,
      ],
      inNode,
    );
    this.peers.push(serve);
    await serve.waitFor(/serving the API/);
    const agent = (metrics: string, tls: string[]) => startKpng(["--api", BRAIN_API, ...tls, ...nftDryRun("node-1", metrics)], inNode);
    const following = agent(KPNG_TARGETS.agent, agentTls(this.dir.path));
    const refused = agent(KPNG_TARGETS.refused, ["--tls-ca", f("brain.crt")]);
    this.peers.push(following, refused);
    await following.waitFor(/synced backend=nft rev=1 /);
    await refused.waitFor(/global stream failed.*\[unauthenticated\]/);
  }

  async stop(): Promise<void> {
    for (const p of this.peers) await p.stop();
    this.prom?.kill();
    await this.prom?.exited;
    await this.d?.destroy();
    this.dir.remove();
  }

  /** GET a Prometheus API path from inside the node namespace, as JSON. */
  async get(path: string, params: Record<string, string> = {}): Promise<{ status: string; data: unknown }> {
    const args = Object.entries(params).flatMap(([k, v]) => ["--data-urlencode", `${k}=${v}`]);
    return JSON.parse(
      await this.d.topo.exec(this.d.topo.node.ns, ["curl", "-sS", "--max-time", "10", "--get", ...args, `http://${PROM}${path}`]),
    );
  }

  query = async (expr: string) => (await this.get("/api/v1/query", { query: expr })).data as { resultType: string; result: Sample[] };

  /**
   * Resolves once Prometheus has stored `n` scrapes of every target that began after this call, so
   * that what it holds then shows what kpng did before it. Counted by Prometheus, not by a clock
   * (a fixed sleep of n scrape intervals fell short on a loaded machine).
   */
  async scrapes(n: number): Promise<void> {
    // Prometheus may stamp a scrape up to 2 ms off its start (--scrape.timestamp-tolerance): a
    // margin keeps a scrape begun before this call out of the count.
    const since = Date.now() + 10;
    await waitFor(
      `${n} scrapes of every target`,
      async () => {
        const now = Date.now();
        const window = `${Math.max(1, now - since)}ms`;
        const r = await this.get("/api/v1/query", { query: `min(count_over_time(up[${window}]))`, time: String(now / 1000) });
        return Number((r.data as { result: Sample[] }).result[0]?.value[1] ?? 0);
      },
      (count) => count >= n,
    );
  }

  /** The cluster-ip service's slice: pod0, and pod1 for odd `i` (as deployed); stamped as the EndpointSlice controller stamps it; resolves once synced. */
  async changeEndpoints(i: number): Promise<void> {
    const pods = this.d.topo.pods;
    const endpoints = [
      { ip: pods[0].v4, node: "node-a", pod: "pod0" },
      ...(i % 2 ? [{ ip: pods[1].v4, node: "node-a", pod: "pod1" }] : []),
    ];
    const s = slice({ service: "cluster-ip", ports: httpSlice, endpoints });
    (s.metadata as { annotations?: Record<string, string> }).annotations = { [TRIGGER]: new Date().toISOString() };
    const before = this.d.syncs();
    await this.d.apply(s);
    await this.d.syncedAfter(before);
  }
}

const nft = new Scraped();
const query = (expr: string) => nft.query(expr);

describe("the kubernetes-mixin Proxy dashboard against kpng's /metrics (nft)", () => {
  beforeAll(async () => {
    await nft.start("nft", { fakeApi: true, peers: true });
    for (let i = 0; i < 2; i++) {
      await nft.changeEndpoints(i);
      await nft.scrapes(1);
    }
    // Watches cut, twice (a series' first value is no increase to rate()): a
    // reconnect answered 500, then 410 Gone for the kinds that did not change
    // since they were listed (the history is compacted: kpng lists again),
    // then 200.
    const api = nft.d.fake!;
    api.goneAs = "http";
    // Relists by pages (an API server without streamed lists, WatchList off): a streamed list is a
    // watch, which client-go counts but does not time, and the GET latency panel shows timed GETs.
    api.watchList = false;
    for (let round = 0; round < 2; round++) {
      await nft.changeEndpoints(round);
      api.failNext(1, 500);
      api.compact();
      api.dropConnections();
      await waitFor(
        "the watches are back",
        async () => api.openWatches,
        (n) => n >= 3,
      );
      await nft.scrapes(2);
    }
    // Someone else removes kpng's IPv4 table: kpng sees its rules lost and repairs them with a full sync.
    const before = nft.d.syncs();
    await nft.d.topo.exec(nft.d.topo.node.ns, ["nft", "delete", "table", "ip", "kpng"]);
    await nft.d.syncedAfter(before);
    // a few more scrapes after the last change
    await nft.scrapes(3);
    // kpng's sync, Prometheus's first scrape, the three peers, four endpoint changes synced, the
    // watches back twice, the repair, and six waits for scrapes: eighteen loaded waits (LOADED_WAIT_MS each)
  }, 1_110_000);

  afterAll(() => nft.stop(), 30_000);

  let instances: string[] = [];
  const fill = (expr: string) => expr.replaceAll("$cluster", CLUSTER).replaceAll("$instance", instances.join("|"));

  test("the $instance variable lists kpng (label_values over network programming buckets)", async () => {
    const r = await nft.get("/api/v1/label/instance/values", { "match[]": fill(INSTANCE_VARIABLE) });
    instances = r.data as string[];
    expect(instances).toEqual([METRICS]);
  }, 90_000);

  test.each(DASHBOARD)(
    "$panel: $want",
    async (q) => {
      if (!instances.length) instances = [METRICS];
      const r = await query(fill(q.expr));
      const values = r.result.map((s) => Number(s.value[1]));
      if (q.want === "empty") {
        expect({ panel: q.panel, result: r.result }).toEqual({ panel: q.panel, result: [] });
        return;
      }
      expect({ panel: q.panel, series: values.length }).not.toEqual({ panel: q.panel, series: 0 });
      if (q.want === "series") return;
      for (const v of values) {
        expect(Number.isFinite(v)).toBe(true);
        if (q.positive) expect(v).toBeGreaterThan(0);
      }
    },
    90_000,
  );

  test("kpng's dashboard: its queries are its panels' (a panel without one would show nothing)", () => {
    expect(kpngPanels.length).toBeGreaterThan(0);
    for (const p of kpngPanels)
      expect({ panel: p.title, queries: (p.targets ?? []).length > 0 }).toEqual({ panel: p.title, queries: true });
  });

  test.each(KPNG_QUERIES)(
    "kpng's dashboard, $panel (query $ref): data",
    async (q) => {
      const r = await query(fillKpng(q.expr));
      const values = r.result.map((s) => Number(s.value[1]));
      expect({ panel: q.panel, expr: q.expr, series: values.length > 0 }).toEqual({ panel: q.panel, expr: q.expr, series: true });
      expect({ panel: q.panel, finite: values.some((v) => Number.isFinite(v)) }).toEqual({ panel: q.panel, finite: true });
      if (MOVED.has(q.panel)) expect({ panel: q.panel, moved: values.some((v) => v > 0) }).toEqual({ panel: q.panel, moved: true });
    },
    20_000,
  );

  // For the screenshot (docs/dashboard.png, rendered by test/node/dashboard-render.ts): each query over the run.
  test.skipIf(!process.env.KPNG_DASHBOARD_DATA)(
    "kpng's dashboard over the run, written for the screenshot",
    async () => {
      const end = Date.now() / 1000;
      const data = [];
      for (const q of KPNG_QUERIES) {
        const r = (await nft.get("/api/v1/query_range", { query: fillKpng(q.expr), start: String(end - 60), end: String(end), step: "1" }))
          .data as { result: { metric: Record<string, string>; values: [number, string][] }[] };
        data.push({ ...q, result: r.result });
      }
      writeFileSync(process.env.KPNG_DASHBOARD_DATA!, JSON.stringify({ start: end - 60, end, queries: data }));
    },
    60_000,
  );

  test("every ip_family kube-proxy labels is there: both families' syncs and conntrack cleanups, the IPv4 slice's programming latency", async () => {
    const byFamily = async (expr: string) => (await query(`sum by (ip_family) (${expr})`)).result.map((s) => s.metric.ip_family).sort();
    expect(await byFamily('kubeproxy_sync_proxy_rules_duration_seconds_count{job="kube-proxy"}')).toEqual(["IPv4", "IPv6"]);
    expect(await byFamily('kubeproxy_sync_proxy_rules_last_timestamp_seconds{job="kube-proxy"}')).toEqual(["IPv4", "IPv6"]);
    expect(await byFamily('kubeproxy_network_programming_duration_seconds_count{job="kube-proxy"}')).toEqual(["IPv4"]);
    expect(await byFamily('kubeproxy_sync_proxy_rules_nftables_sync_failures_total{job="kube-proxy"}')).toEqual(["IPv4", "IPv6"]);
    expect(await byFamily('kubeproxy_conntrack_reconciler_sync_duration_seconds_count{job="kube-proxy"}')).toEqual(["IPv4", "IPv6"]);
  }, 90_000);

  test("kubernetes_build_info and the API client's codes as Prometheus stored them", async () => {
    const info = (await query('kubernetes_build_info{job="kube-proxy"}')).result;
    expect(info.length).toBe(1);
    expect(info[0].metric.git_version).toMatch(/^v\d+\.\d+\.\d+/);
    const codes = (await query('sum by (code, method) (rest_client_requests_total{job="kube-proxy"})')).result
      .map((s) => `${s.metric.method} ${s.metric.code}`)
      .sort();
    // 422: the streamed lists the API server refused once its WatchList was off (above); POST 201: the Node events of the table deleted
    expect(codes).toEqual(["GET 200", "GET 410", "GET 422", "GET 500", "POST 201"]);
  }, 90_000);
});

// kube-proxy's default mode on Linux: its own families, through the same pipeline.
describe.skipIf(!haveK8s("iptables mode's families against the real kube-apiserver"))(
  "iptables mode's families, scraped by Prometheus",
  () => {
    const ipt = new Scraped();
    beforeAll(async () => {
      await ipt.start("iptables");
      await ipt.changeEndpoints(0);
      await ipt.scrapes(3);
      // kpng's sync, Prometheus's first scrape, the change synced, two waits for scrapes: five loaded waits
    }, 330_000);
    afterAll(() => ipt.stop(), 30_000);

    const by = async (expr: string, ...labels: string[]) =>
      Object.fromEntries((await ipt.query(expr)).result.map((s) => [labels.map((l) => s.metric[l]).join(" "), Number(s.value[1])]));

    test("rules kpng owns, per family and table; rules the last restore wrote", async () => {
      const total = await by('kubeproxy_sync_proxy_rules_iptables_total{job="kube-proxy"}', "ip_family", "table");
      const last = await by('kubeproxy_sync_proxy_rules_iptables_last{job="kube-proxy"}', "ip_family", "table");
      for (const k of ["IPv4 nat", "IPv4 filter", "IPv6 nat", "IPv6 filter"])
        expect({ k, owned: total[k] > 0 }).toEqual({ k, owned: true });
      // the last sync was partial (one slice changed): it wrote less than kpng owns
      expect(last["IPv4 nat"]).toBeGreaterThan(0);
      expect(last["IPv4 nat"]).toBeLessThan(total["IPv4 nat"]);
    }, 90_000);

    test("restore failures (none), both families; syncs and conntrack cleanups under both", async () => {
      expect(await by('kubeproxy_sync_proxy_rules_iptables_restore_failures_total{job="kube-proxy"}', "ip_family")).toEqual({
        IPv4: 0,
        IPv6: 0,
      });
      expect(await by('kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total{job="kube-proxy"}', "ip_family")).toEqual({
        IPv4: 0,
        IPv6: 0,
      });
      expect(Object.keys(await by('kubeproxy_sync_proxy_rules_duration_seconds_count{job="kube-proxy"}', "ip_family")).sort()).toEqual([
        "IPv4",
        "IPv6",
      ]);
      expect(
        Object.keys(await by('kubeproxy_conntrack_reconciler_sync_duration_seconds_count{job="kube-proxy"}', "ip_family")).sort(),
      ).toEqual(["IPv4", "IPv6"]);
      const rate = (await ipt.query('sum(rate(kubeproxy_sync_proxy_rules_duration_seconds_count{job="kube-proxy"}[5m]))')).result;
      expect(Number(rate[0]?.value[1])).toBeGreaterThan(0);
    }, 90_000);
  },
);
