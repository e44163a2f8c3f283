// Prometheus metrics under kube-proxy's names (pkg/proxy/metrics), so
// dashboards and alerts written for kube-proxy keep working, plus kpng's own:
// API events in, node-local revisions out, open watches. One registry per
// run (no global state), served on /metrics with /proxyMode, /healthz and
// /configz beside it, as kube-proxy's metrics server does.

import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Brain, Revision } from "../brain/brain.ts";
import { bindHostPort, serveHttp, type HttpServer } from "./http-serve.ts";
import type { Logger } from "../log.ts";
import type { GlobalSourceStats } from "../sources/global.ts";
import type { SourceStats } from "../sources/kube.ts";
import type { NodeState, ServiceEndpoints, StateChange } from "../brain/state.ts";

/** Set by the EndpointSlice controller: when the change that produced this slice happened. */
export const TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time";

const exponential = (start: number, factor: number, count: number) => Array.from({ length: count }, (_, i) => start * factor ** i);
const linear = (start: number, width: number, count: number) => Array.from({ length: count }, (_, i) => start + width * i);
/** kube-proxy's buckets for network programming latency: 0.25s .. 5min */
const programmingBuckets = [...linear(0.25, 0.25, 2), ...linear(1, 1, 59), ...linear(60, 5, 12), ...linear(120, 30, 7)];

/** kube-proxy's backend-specific failure counters, for the built-ins that have one. */
const upstreamFailureCounter: Record<string, string> = {
  nft: "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
  iptables: "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
};

export interface MetricsOptions {
  brain: Brain;
  backends: readonly string[];
  /** the Kubernetes source's counters (absent for --input and --api) */
  source?: () => SourceStats | undefined;
  /** process_* and nodejs_* metrics; off in tests that count series */
  defaultMetrics?: boolean;
}

export class ProxyMetrics {
  readonly registry = new Registry();
  private readonly syncDuration: Histogram;
  private readonly fullSyncDuration: Histogram;
  private readonly partialSyncDuration: Histogram;
  private readonly lastSync: Gauge;
  private readonly lastQueued: Gauge;
  private readonly programming: Histogram;
  private readonly serviceChanges: Counter;
  private readonly endpointChanges: Counter;
  private readonly noLocal: Gauge;
  private readonly answerCounters: Record<"healthz" | "livez", Counter>;
  private readonly failures: Counter;
  private readonly lost: Counter;
  private readonly upstreamFailures = new Map<string, Counter>();
  private last: NodeState | null = null;
  private followedGlobal = false;
  /** service key -> trigger time (ms) of a change waiting to be programmed, and the revision carrying it */
  private readonly triggers = new Map<string, { at: number; rev: number }>();
  /** service key -> the trigger time last observed, so one change is observed once */
  private readonly observed = new Map<string, number>();

  constructor(private readonly opts: MetricsOptions) {
    const registers = [this.registry];
    if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry });
    const buckets = exponential(0.001, 2, 15);
    this.syncDuration = new Histogram({ name: "kubeproxy_sync_proxy_rules_duration_seconds", help: "SyncProxyRules latency in seconds", buckets, registers });
    this.fullSyncDuration = new Histogram({ name: "kubeproxy_sync_full_proxy_rules_duration_seconds", help: "SyncProxyRules latency in seconds for full resyncs", buckets, registers });
    this.partialSyncDuration = new Histogram({ name: "kubeproxy_sync_partial_proxy_rules_duration_seconds", help: "SyncProxyRules latency in seconds for partial resyncs", buckets, registers });
    this.lastSync = new Gauge({ name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds", help: "The last time proxy rules were successfully synced", registers });
    this.lastQueued = new Gauge({ name: "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", help: "The last time a sync of proxy rules was queued", registers });
    this.programming = new Histogram({ name: "kubeproxy_network_programming_duration_seconds", help: "In Cluster Network Programming Latency in seconds", buckets: programmingBuckets, registers });
    this.serviceChanges = new Counter({ name: "kubeproxy_sync_proxy_rules_service_changes_total", help: "Cumulative proxy rules Service changes", registers });
    this.endpointChanges = new Counter({ name: "kubeproxy_sync_proxy_rules_endpoint_changes_total", help: "Cumulative proxy rules Endpoint changes", registers });
    this.noLocal = new Gauge({ name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total", help: "Number of services with a Local traffic policy and no endpoints", labelNames: ["traffic_policy"], registers });
    this.answerCounters = {
      healthz: new Counter({ name: "kubeproxy_proxy_healthz_total", help: "Cumulative proxy healthz HTTP status", labelNames: ["code"], registers }),
      livez: new Counter({ name: "kubeproxy_proxy_livez_total", help: "Cumulative proxy livez HTTP status", labelNames: ["code"], registers }),
    };
    this.failures = new Counter({ name: "kpng_backend_sync_failures_total", help: "Failed backend syncs (each is retried as a full sync)", labelNames: ["backend"], registers });
    // kube-proxy has no counter for this (its iptables canary only forces a sync): a kpng_ name.
    this.lost = new Counter({ name: "kpng_backend_rules_lost_total", help: "Times a backend found its rules changed or removed by another process (each answered with a full sync)", labelNames: ["backend"], registers });
    for (const b of opts.backends) {
      const name = upstreamFailureCounter[b];
      if (name && !this.upstreamFailures.has(b)) this.upstreamFailures.set(b, new Counter({ name, help: `Cumulative proxy ${b} sync failures`, registers }));
    }
    this.registerKpng(registers);
  }

  /** kpng's own: read at scrape time from the brain and the source. */
  private registerKpng(registers: Registry[]) {
    const { brain, source } = this.opts;
    const setTo = (m: Counter | Gauge, v: number, labels?: Record<string, string>) => {
      if (m instanceof Counter) {
        m.reset();
        m.inc(labels ?? {}, v);
      } else m.set(labels ?? {}, v);
    };
    new Counter({ name: "kpng_api_events_total", help: "Objects received from the API server (list items and watch events)", labelNames: ["kind"], registers, collect() {
      const s = source?.();
      this.reset();
      for (const [kind, n] of Object.entries(s?.events ?? {})) this.inc({ kind }, n);
    } });
    new Counter({ name: "kpng_brain_events_total", help: "Cluster changes applied to the brain (no-op updates already dropped)", registers, collect() {
      setTo(this, brain.stats.events);
    } });
    new Counter({ name: "kpng_node_revisions_total", help: "Node-local state revisions published", registers, collect() {
      setTo(this, brain.stats.revisions);
    } });
    new Gauge({ name: "kpng_api_watchers", help: "Watch connections to the API server currently open", registers, collect() {
      setTo(this, source?.()?.watchers ?? 0);
    } });
    new Counter({ name: "kpng_api_relists_total", help: "Lists repeated after 410 Gone", registers, collect() {
      setTo(this, source?.()?.relists ?? 0);
    } });
  }

  /**
   * A node agent's stream from its brains (--api): which brain it follows,
   * reconnects and failovers, what the stream brought, when it last did.
   * Registered only for an agent (kube-proxy has no such thing: kpng_ names).
   */
  followGlobal(stats: GlobalSourceStats): void {
    // Called as the agent starts (refusals show before any stream delivers) and again once it has.
    if (this.followedGlobal) return;
    this.followedGlobal = true;
    const registers = [this.registry];
    const counter = (name: string, help: string, value: () => number) =>
      new Counter({ name, help, registers, collect() {
        this.reset();
        this.inc(value());
      } });
    new Gauge({ name: "kpng_global_brain_connected", help: "1 for the brain (--api) whose stream this node agent follows, 0 for the others", labelNames: ["api"], registers, collect() {
      for (const api of stats.apis) this.set({ api }, api === stats.connectedTo ? 1 : 0);
    } });
    counter("kpng_global_connects_total", "Streams from a brain that delivered a change set: the first, then each reconnect", () => stats.connects);
    counter("kpng_global_failovers_total", "Reconnects to another brain than the one followed before", () => stats.failovers);
    new Counter({ name: "kpng_global_stream_failures_total", help: "Streams from a brain that ended or broke, and connections to it that failed", labelNames: ["api"], registers, collect() {
      this.reset();
      for (const [api, n] of Object.entries(stats.failures)) this.inc({ api }, n);
    } });
    counter("kpng_global_refused_total", "Connections to a brain refused: it refused this agent's credentials, or this agent its certificate", () => stats.refused);
    counter("kpng_global_change_sets_total", "Change sets received from the brain and applied", () => stats.changeSets);
    counter("kpng_global_ops_total", "Set and Delete ops received from the brain", () => stats.ops);
    counter("kpng_global_unchanged_items_total", "Items a brain sent again unchanged (after a reconnect): no event, nothing recomputed", () => stats.unchanged);
    new Gauge({ name: "kpng_global_last_change_set_timestamp_seconds", help: "When the last change set from the brain was applied", registers, collect() {
      this.set(stats.lastChangeSetMs / 1000);
    } });
  }

  /** A brain serving the API (--listen): clients refused (TLS, authentication) and streams dropped for not reading. */
  followApi(api: { readonly refused: Readonly<Record<string, number>>; readonly stats: { readonly stuckDropped: number } }): void {
    const registers = [this.registry];
    new Counter({ name: "kpng_listen_refused_total", help: "API clients refused, by reason (no_credentials, bad_certificate, token_rejected, token_review_failed, tls_handshake)", labelNames: ["reason"], registers, collect() {
      this.reset();
      for (const [reason, n] of Object.entries(api.refused)) this.inc({ reason }, n);
    } });
    new Counter({ name: "kpng_listen_stuck_streams_dropped_total", help: "API streams dropped because their client stopped reading", registers, collect() {
      this.reset();
      this.inc(api.stats.stuckDropped);
    } });
  }

  /** A new node-local revision is about to reach the backends. */
  queued(rev: Revision, now = Date.now()): void {
    this.lastQueued.set(now / 1000);
    const prev = this.last;
    const next = rev.state;
    const keys = rev.change ?? new Set([...next.services.keys(), ...(prev?.services.keys() ?? [])]);
    for (const key of keys) {
      const a = prev?.services.get(key);
      const b = next.services.get(key);
      if (a?.service !== b?.service) this.serviceChanges.inc();
      if (a?.endpoints !== b?.endpoints) this.endpointChanges.inc();
      if (!b) {
        this.observed.delete(key);
        this.triggers.delete(key);
        continue;
      }
      const at = this.triggerTime(key);
      if (at !== null && at > (this.observed.get(key) ?? 0)) this.triggers.set(key, { at, rev: next.rev });
    }
    this.countNoLocal(next);
    this.last = next;
  }

  /** `backend` applied `state`; `change` null = a full sync. */
  synced(backend: string, state: NodeState, seconds: number, change: StateChange, now = Date.now()): void {
    void backend;
    this.syncDuration.observe(seconds);
    (change === null ? this.fullSyncDuration : this.partialSyncDuration).observe(seconds);
    this.lastSync.set(now / 1000);
    for (const [key, t] of this.triggers) {
      if (t.rev > state.rev) continue;
      // The trigger time comes from the control plane's clock; skew can make it negative.
      if (now >= t.at) this.programming.observe((now - t.at) / 1000);
      this.observed.set(key, t.at);
      this.triggers.delete(key);
    }
  }

  failed(backend: string): void {
    this.failures.inc({ backend });
    this.upstreamFailures.get(backend)?.inc();
  }

  rulesLost(backend: string): void {
    this.lost.inc({ backend });
  }

  answered(path: "healthz" | "livez", code: number): void {
    this.answerCounters[path].inc({ code: String(code) });
  }

  /** The newest trigger time among the service's slices (ms), or null. */
  private triggerTime(key: string): number | null {
    let best: number | null = null;
    for (const s of this.opts.brain.index.slices.get(key)?.values() ?? []) {
      const v = s.metadata.annotations?.[TRIGGER_TIME_ANNOTATION];
      const t = v ? Date.parse(v) : NaN;
      if (!Number.isNaN(t) && (best === null || t > best)) best = t;
    }
    return best;
  }

  /** Services whose Local policy leaves a traffic class with no endpoint on this node. */
  private countNoLocal(state: NodeState) {
    let internal = 0;
    let external = 0;
    const none = (se: ServiceEndpoints, scope: "Internal" | "External") => ![...se.endpoints.values()].some((e) => e.Scopes?.[scope]);
    for (const se of state.services.values()) {
      if (se.service.InternalTrafficToLocal && none(se, "Internal")) internal++;
      if (se.service.ExternalTrafficToLocal && none(se, "External")) external++;
    }
    this.noLocal.set({ traffic_policy: "internal" }, internal);
    this.noLocal.set({ traffic_policy: "external" }, external);
  }
}

export interface MetricsServerOptions {
  address: string;
  metrics: ProxyMetrics;
  /** what /proxyMode answers: kube-proxy's mode names */
  proxyMode: string;
  /** what /configz answers */
  config: unknown;
  log: Logger;
}

export function startMetricsServer(opts: MetricsServerOptions): HttpServer {
  const { host, port } = bindHostPort(opts.address);
  return serveHttp({
    host,
    port,
    what: "metrics",
    log: opts.log,
    async handle(url) {
      switch (url.pathname) {
        case "/metrics":
          return { status: 200, body: await opts.metrics.registry.metrics(), type: opts.metrics.registry.contentType };
        case "/proxyMode":
          return { status: 200, body: opts.proxyMode };
        case "/healthz":
          return { status: 200, body: "ok" };
        case "/configz":
          return { status: 200, body: JSON.stringify({ "kubeproxy.config.k8s.io": opts.config }), type: "application/json" };
        default:
          return { status: 404, body: "404 page not found\n" };
      }
    },
  });
}
