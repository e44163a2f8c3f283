// Prometheus metrics under kube-proxy's names, types, labels and buckets
// (pkg/proxy/metrics of kube-proxy 1.36), so dashboards and alerts written
// for kube-proxy keep working; client-go's rest_client_* for the API client
// and kubernetes_build_info (client-metrics.ts); plus kpng's own: API events
// in, node-local revisions out, open watches. One registry per run (no
// global state), served on /metrics with /proxyMode, /healthz and /configz
// beside it, as kube-proxy's metrics server does.
//
// ip_family: kube-proxy runs one proxier per family whenever the backend can
// program both, and labels each family's syncs. Every kpng backend programs
// both families in one sync, so that sync is recorded under both.

import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Brain, Revision } from "../brain/brain.ts";
import { bindHostPort, serveHttp, type HttpServer } from "./http-serve.ts";
import type { Logger } from "../log.ts";
import type { GlobalSourceStats } from "../sources/global.ts";
import type { SourceStats } from "../sources/kube.ts";
import type { NodeState, ServiceEndpoints, StateChange } from "../brain/state.ts";
import { registerBuildInfo, RestClientMetrics } from "./client-metrics.ts";

/** Set by the EndpointSlice controller: when the change that produced this slice happened. */
export const TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time";

export type IPFamily = "IPv4" | "IPv6";
/** the families every built-in backend programs, in one sync */
export const FAMILIES: readonly IPFamily[] = ["IPv4", "IPv6"];

const exponential = (start: number, factor: number, count: number) => Array.from({ length: count }, (_, i) => start * factor ** i);
const linear = (start: number, width: number, count: number) => Array.from({ length: count }, (_, i) => start + width * i);
/** kube-proxy's sync (and conntrack reconcile) buckets: 1 ms .. 16 s */
export const SYNC_BUCKETS = exponential(0.001, 2, 15);
/**
 * kube-proxy's buckets for network programming latency: 0, 0.25s .. 5min.
 * The leading 0 is component-base's MergeBuckets, which starts its result
 * with one zero bucket.
 */
export const PROGRAMMING_BUCKETS = [0, ...linear(0.25, 0.25, 2), ...linear(1, 1, 59), ...linear(60, 5, 12), ...linear(120, 30, 7)];

/**
 * kube-proxy's mode-specific failure counters (RegisterMetrics registers them
 * per mode), all labelled ip_family. `partial`: counts only failed partial
 * syncs (each falls back to a full one); `never`: kpng has no such failure.
 */
const MODE_FAILURE_COUNTERS: Record<string, ReadonlyArray<{ name: string; help: string; partial?: boolean; never?: boolean }>> = {
  nft: [
    { name: "kubeproxy_sync_proxy_rules_nftables_sync_failures_total", help: "Cumulative proxy nftables sync failures" },
    // kube-proxy deletes stale chains in a later, separate transaction that
    // can fail on its own; kpng deletes them in the sync's own transaction,
    // so this stays 0 (present, so alerts on it see a value).
    { name: "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", help: "Cumulative proxy nftables cleanup failures", never: true },
  ],
  iptables: [
    { name: "kubeproxy_sync_proxy_rules_iptables_restore_failures_total", help: "Cumulative proxy iptables restore failures" },
    {
      name: "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
      help: "Cumulative proxy iptables partial restore failures",
      partial: true,
    },
  ],
  ipvs: [{ name: "kubeproxy_sync_proxy_rules_iptables_restore_failures_total", help: "Cumulative proxy iptables restore failures" }],
};

/** a sign of another proxy programming the node, as the foreign-proxy watch reports it */
export interface ForeignProxySign {
  proxy: string;
  /** how its rules were written: "nftables", "iptables-nft", "iptables-legacy" */
  rules: string;
  family: IPFamily;
}

export interface MetricsOptions {
  brain: Brain;
  backends: readonly string[];
  /** the Kubernetes source's counters (absent for --input and --api) */
  source?: () => SourceStats | undefined;
  /** process_* and nodejs_* metrics; off in tests that count series */
  defaultMetrics?: boolean;
}

type Pending = Map<string, number>;

const familyOf = (f: 4 | 6): IPFamily => (f === 6 ? "IPv6" : "IPv4");

const NO_LOCAL_CLASSES = FAMILIES.flatMap((ip_family) => ["internal", "external"].map((traffic_policy) => ({ ip_family, traffic_policy })));
const classKey = (c: { ip_family: string; traffic_policy: string }) => `${c.ip_family}/${c.traffic_policy}`;

/**
 * Where a service counts in no_local_endpoints_total: each family of its
 * cluster IPs, each traffic class whose Local policy leaves it no endpoint
 * (of that family) on this node.
 */
function noLocalClasses(se: ServiceEndpoints): string[] {
  const svc = se.service;
  if (!svc.InternalTrafficToLocal && !svc.ExternalTrafficToLocal) return [];
  const out: string[] = [];
  for (const family of FAMILIES) {
    const field = family === "IPv4" ? "V4" : "V6";
    if (!svc.IPs?.ClusterIPs?.[field]?.length) continue;
    const none = (scope: "Internal" | "External") => {
      for (const e of se.endpoints.values()) if (e.Scopes?.[scope] && e.IPs?.[field]?.length) return false;
      return true;
    };
    if (svc.InternalTrafficToLocal && none("Internal")) out.push(`${family}/internal`);
    if (svc.ExternalTrafficToLocal && none("External")) out.push(`${family}/external`);
  }
  return out;
}

/** Also the backends' BackendMetrics (src/host/backend.ts): what happens inside their syncs. */
export class ProxyMetrics {
  readonly registry = new Registry();
  /** what the API client records: hand it to the Kubernetes source and the event recorder */
  readonly restClient: RestClientMetrics;
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
  /** kube-proxy's sync histogram has only ip_family: with several backends, this one says which cost what */
  private readonly backendSync: Histogram;
  private readonly foreign: Gauge;
  private readonly drift: Gauge;
  /** kube-proxy's iptables-mode rule counts, registered with an iptables backend */
  private readonly iptablesRuleCounts?: { total: Gauge; last: Gauge };
  private readonly conntrackDuration: Histogram;
  private readonly conntrackDeleted: Counter;
  /** per backend, kube-proxy's failure counters of its mode */
  private readonly modeFailures = new Map<string, Array<{ counter: Counter; partial?: boolean }>>();
  private last: NodeState | null = null;
  private followedGlobal = false;
  /** service key -> the no_local_endpoints classes it counts in (only services that count) */
  private readonly noLocalOf = new Map<string, string[]>();
  private readonly noLocalTotals = new Map(NO_LOCAL_CLASSES.map((c) => [classKey(c), 0]));
  /** "service key/family" -> trigger time (ms) of a change waiting to be programmed, and the revision carrying it */
  private readonly triggers = new Map<string, { at: number; rev: number; family: IPFamily }>();
  /** "service key/family" -> the trigger time last observed, so one change is observed once */
  private readonly observed = new Map<string, number>();
  /** service key -> revision of its oldest change no backend has applied yet */
  private readonly pendingServices: Pending = new Map();
  private readonly pendingEndpoints: Pending = new Map();
  /** backend -> the revision it last applied */
  private readonly appliedRev = new Map<string, number>();

  constructor(private readonly opts: MetricsOptions) {
    const registers = [this.registry];
    if (opts.defaultMetrics !== false) {
      // prom-client samples the event loop's delay on a timer of this period:
      // at its default, 10 ms, an idle kpng woke 100 times a second for a
      // metric no dashboard of kube-proxy's reads (about 10 ms of CPU a
      // second, issue 40 goal 4). Once a second still shows a loop held for
      // longer, which is what costs a proxy.
      collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 1000 });
      // Under Bun, v8.getHeapSpaceStatistics walks the whole heap: with a big
      // cluster in memory every scrape would stall the event loop (and the
      // syncs) for a while. process_resident_memory_bytes says what matters.
      for (const n of ["nodejs_heap_space_size_total_bytes", "nodejs_heap_space_size_used_bytes", "nodejs_heap_space_size_available_bytes"])
        this.registry.removeSingleMetric(n);
    }
    const labelNames = ["ip_family"];
    const buckets = SYNC_BUCKETS;
    this.syncDuration = new Histogram({
      name: "kubeproxy_sync_proxy_rules_duration_seconds",
      help: "SyncProxyRules latency in seconds",
      labelNames,
      buckets,
      registers,
    });
    this.fullSyncDuration = new Histogram({
      name: "kubeproxy_sync_full_proxy_rules_duration_seconds",
      help: "SyncProxyRules latency in seconds for full resyncs",
      labelNames,
      buckets,
      registers,
    });
    this.partialSyncDuration = new Histogram({
      name: "kubeproxy_sync_partial_proxy_rules_duration_seconds",
      help: "SyncProxyRules latency in seconds for partial resyncs",
      labelNames,
      buckets,
      registers,
    });
    this.lastSync = new Gauge({
      name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
      help: "The last time proxy rules were successfully synced",
      labelNames,
      registers,
    });
    this.lastQueued = new Gauge({
      name: "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
      help: "The last time a sync of proxy rules was queued",
      labelNames,
      registers,
    });
    this.programming = new Histogram({
      name: "kubeproxy_network_programming_duration_seconds",
      help: "In Cluster Network Programming Latency in seconds",
      labelNames,
      buckets: PROGRAMMING_BUCKETS,
      registers,
    });
    this.serviceChanges = new Counter({
      name: "kubeproxy_sync_proxy_rules_service_changes_total",
      help: "Cumulative proxy rules Service changes",
      registers,
    });
    this.endpointChanges = new Counter({
      name: "kubeproxy_sync_proxy_rules_endpoint_changes_total",
      help: "Cumulative proxy rules Endpoint changes",
      registers,
    });
    const pending = this.pendingServices;
    const pendingEndpoints = this.pendingEndpoints;
    new Gauge({
      name: "kubeproxy_sync_proxy_rules_service_changes_pending",
      help: "Pending proxy rules Service changes",
      registers,
      collect() {
        this.set(pending.size);
      },
    });
    new Gauge({
      name: "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
      help: "Pending proxy rules Endpoint changes",
      registers,
      collect() {
        this.set(pendingEndpoints.size);
      },
    });
    this.noLocal = new Gauge({
      name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
      help: "Number of services with a Local traffic policy and no endpoints",
      labelNames: ["ip_family", "traffic_policy"],
      registers,
    });
    this.answerCounters = {
      healthz: new Counter({
        name: "kubeproxy_proxy_healthz_total",
        help: "Cumulative proxy healthz HTTP status",
        labelNames: ["code"],
        registers,
      }),
      livez: new Counter({
        name: "kubeproxy_proxy_livez_total",
        help: "Cumulative proxy livez HTTP status",
        labelNames: ["code"],
        registers,
      }),
    };
    this.failures = new Counter({
      name: "kpng_backend_sync_failures_total",
      help: "Failed backend syncs (each is retried as a full sync)",
      labelNames: ["backend"],
      registers,
    });
    // kube-proxy has no counter for this (its iptables canary only forces a sync): a kpng_ name.
    this.lost = new Counter({
      name: "kpng_backend_rules_lost_total",
      help: "Times a backend found its rules changed or removed by another process (each answered with a full sync)",
      labelNames: ["backend"],
      registers,
    });
    this.backendSync = new Histogram({
      name: "kpng_backend_sync_duration_seconds",
      help: "Backend sync latency in seconds, by backend and sync (full or partial)",
      labelNames: ["backend", "sync"],
      buckets,
      registers,
    });
    // Zero from the start, per backend, so a dashboard shows 0 rather than "no data" (kube-proxy's failure counters do the same).
    for (const backend of new Set(opts.backends)) {
      this.failures.inc({ backend }, 0);
      this.lost.inc({ backend }, 0);
    }
    // kube-proxy has no such gauge (it does not look for other proxies): a kpng_ name, one series per sign looked for.
    this.foreign = new Gauge({
      name: "kpng_foreign_proxy_detected",
      help: "1 while another proxy's rules are on this node after kpng removed them (another proxy is programming the node), by proxy, how its rules were written and IP family",
      labelNames: ["proxy", "rules", "ip_family"],
      registers,
    });
    // kube-proxy reads nothing back; kpng's check of what the kernel holds (Backend.verify)
    this.drift = new Gauge({
      name: "kpng_backend_rules_drift",
      help: "Differences between what a backend programmed and what the kernel holds, found at its last check (kpng verify, or rules reported changed by another process)",
      labelNames: ["backend"],
      registers,
    });
    const counters = new Map<string, Counter>(); // by name: iptables and ipvs share one
    for (const b of new Set(opts.backends)) {
      const mine: Array<{ counter: Counter; partial?: boolean }> = [];
      for (const c of MODE_FAILURE_COUNTERS[b] ?? []) {
        let counter = counters.get(c.name);
        if (!counter) {
          counter = new Counter({ name: c.name, help: c.help, labelNames, registers });
          for (const ip_family of FAMILIES) counter.inc({ ip_family }, 0);
          counters.set(c.name, counter);
        }
        if (!c.never) mine.push({ counter, partial: c.partial });
      }
      this.modeFailures.set(b, mine);
    }
    if (opts.backends.includes("iptables")) {
      const labelNames = ["ip_family", "table"];
      this.iptablesRuleCounts = {
        total: new Gauge({
          name: "kubeproxy_sync_proxy_rules_iptables_total",
          help: "Total number of iptables rules owned by kube-proxy",
          labelNames,
          registers,
        }),
        last: new Gauge({
          name: "kubeproxy_sync_proxy_rules_iptables_last",
          help: "Number of iptables rules written by kube-proxy in last sync",
          labelNames,
          registers,
        }),
      };
    }
    this.conntrackDuration = new Histogram({
      name: "kubeproxy_conntrack_reconciler_sync_duration_seconds",
      help: "ReconcileConntrackFlowsLatency latency in seconds",
      labelNames,
      buckets,
      registers,
    });
    this.conntrackDeleted = new Counter({
      name: "kubeproxy_conntrack_reconciler_deleted_entries_total",
      help: "Cumulative conntrack flows deleted by conntrack reconciler",
      labelNames,
      registers,
    });
    this.restClient = new RestClientMetrics(registers);
    registerBuildInfo(registers);
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
    new Counter({
      name: "kpng_api_events_total",
      help: "Objects received from the API server (list items and watch events)",
      labelNames: ["kind"],
      registers,
      collect() {
        const s = source?.();
        this.reset();
        for (const [kind, n] of Object.entries(s?.events ?? {})) this.inc({ kind }, n);
      },
    });
    // kube-proxy has no such metric: objects a source refused (docs/architecture.md, Reading objects as kube-proxy does)
    new Counter({
      name: "kpng_objects_dropped_total",
      help: "Objects from the API server or the input file that were refused, by kind and reason",
      labelNames: ["kind", "reason"],
      registers,
      collect() {
        this.reset();
        for (const d of brain.dropped.values()) this.inc({ kind: d.kind, reason: d.reason }, d.n);
      },
    });
    new Counter({
      name: "kpng_brain_events_total",
      help: "Cluster changes applied to the brain (no-op updates already dropped)",
      registers,
      collect() {
        setTo(this, brain.stats.events);
      },
    });
    new Counter({
      name: "kpng_node_revisions_total",
      help: "Node-local state revisions published",
      registers,
      collect() {
        setTo(this, brain.stats.revisions);
      },
    });
    new Gauge({
      name: "kpng_api_watchers",
      help: "Watch connections to the API server currently open",
      registers,
      collect() {
        setTo(this, source?.()?.watchers ?? 0);
      },
    });
    // kube-proxy has no such metric (client-go's reflector only logs): issue 33's stalled watch, counted
    new Counter({
      name: "kpng_kube_watch_decode_errors_total",
      help: "Watch events from the API server that kpng could not decode (skipped, or refused by name) and watch streams whose framing broke (listed again), by kind",
      labelNames: ["kind"],
      registers,
      collect() {
        const s = source?.();
        this.reset();
        for (const [kind, n] of Object.entries(s?.decodeErrors ?? {})) this.inc({ kind }, n);
      },
    });
    new Counter({
      name: "kpng_api_relists_total",
      help: "Lists repeated after 410 Gone",
      registers,
      collect() {
        setTo(this, source?.()?.relists ?? 0);
      },
    });
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
      new Counter({
        name,
        help,
        registers,
        collect() {
          this.reset();
          this.inc(value());
        },
      });
    new Gauge({
      name: "kpng_global_brain_connected",
      help: "1 for the brain (--api) whose stream this node agent follows, 0 for the others",
      labelNames: ["api"],
      registers,
      collect() {
        for (const api of stats.apis) this.set({ api }, api === stats.connectedTo ? 1 : 0);
      },
    });
    counter(
      "kpng_global_connects_total",
      "Streams from a brain that delivered a change set: the first, then each reconnect",
      () => stats.connects,
    );
    counter("kpng_global_failovers_total", "Reconnects to another brain than the one followed before", () => stats.failovers);
    new Counter({
      name: "kpng_global_stream_failures_total",
      help: "Streams from a brain that ended or broke, and connections to it that failed",
      labelNames: ["api"],
      registers,
      collect() {
        this.reset();
        for (const [api, n] of Object.entries(stats.failures)) this.inc({ api }, n);
      },
    });
    counter(
      "kpng_global_refused_total",
      "Connections to a brain refused: it refused this agent's credentials, or this agent its certificate",
      () => stats.refused,
    );
    counter("kpng_global_change_sets_total", "Change sets received from the brain and applied", () => stats.changeSets);
    counter("kpng_global_ops_total", "Set and Delete ops received from the brain", () => stats.ops);
    counter(
      "kpng_global_unchanged_items_total",
      "Items a brain sent again unchanged (after a reconnect): no event, nothing recomputed",
      () => stats.unchanged,
    );
    new Gauge({
      name: "kpng_global_last_change_set_timestamp_seconds",
      help: "When the last change set from the brain was applied",
      registers,
      collect() {
        this.set(stats.lastChangeSetMs / 1000);
      },
    });
  }

  /** A brain serving the API (--listen): clients refused (TLS, authentication) and streams dropped for not reading. */
  followApi(api: { readonly refused: Readonly<Record<string, number>>; readonly stats: { readonly stuckDropped: number } }): void {
    const registers = [this.registry];
    new Counter({
      name: "kpng_listen_refused_total",
      help: "API clients refused, by reason (no_credentials, bad_certificate, token_rejected, token_review_failed, tls_handshake)",
      labelNames: ["reason"],
      registers,
      collect() {
        this.reset();
        for (const [reason, n] of Object.entries(api.refused)) this.inc({ reason }, n);
      },
    });
    new Counter({
      name: "kpng_listen_stuck_streams_dropped_total",
      help: "API streams dropped because their client stopped reading",
      registers,
      collect() {
        this.reset();
        this.inc(api.stats.stuckDropped);
      },
    });
  }

  /** A new node-local revision is about to reach the backends. */
  queued(rev: Revision, now = Date.now()): void {
    for (const ip_family of FAMILIES) this.lastQueued.set({ ip_family }, now / 1000);
    const prev = this.last;
    const next = rev.state;
    const keys = rev.change ?? new Set([...next.services.keys(), ...(prev?.services.keys() ?? [])]);
    let serviceChanges = 0;
    let endpointChanges = 0;
    for (const key of keys) {
      const a = prev?.services.get(key);
      const b = next.services.get(key);
      if (a !== b) this.recountNoLocal(key, b);
      if (a?.service !== b?.service) {
        serviceChanges++;
        if (!this.pendingServices.has(key)) this.pendingServices.set(key, next.rev);
      }
      if (a?.endpoints !== b?.endpoints) {
        endpointChanges++;
        if (!this.pendingEndpoints.has(key)) this.pendingEndpoints.set(key, next.rev);
      }
      if (!b) {
        for (const family of FAMILIES) {
          this.observed.delete(`${key}/${family}`);
          this.triggers.delete(`${key}/${family}`);
        }
        continue;
      }
      const times = this.triggerTimes(key);
      for (const family of times ? FAMILIES : []) {
        const id = `${key}/${family}`;
        const at = times?.[family];
        if (at !== undefined && at > (this.observed.get(id) ?? 0)) this.triggers.set(id, { at, rev: next.rev, family });
      }
    }
    this.serviceChanges.inc(serviceChanges);
    this.endpointChanges.inc(endpointChanges);
    for (const c of NO_LOCAL_CLASSES) this.noLocal.set(c, this.noLocalTotals.get(classKey(c))!);
    this.last = next;
  }

  /** `backend` applied `state`; `change` null = a full sync. */
  synced(backend: string, state: NodeState, seconds: number, change: StateChange, now = Date.now()): void {
    this.backendSync.observe({ backend, sync: change === null ? "full" : "partial" }, seconds);
    for (const ip_family of FAMILIES) {
      this.syncDuration.observe({ ip_family }, seconds);
      (change === null ? this.fullSyncDuration : this.partialSyncDuration).observe({ ip_family }, seconds);
      this.lastSync.set({ ip_family }, now / 1000);
    }
    for (const [id, t] of this.triggers) {
      if (t.rev > state.rev) continue;
      // The trigger time comes from the control plane's clock; skew can make it negative.
      if (now >= t.at) this.programming.observe({ ip_family: t.family }, (now - t.at) / 1000);
      this.observed.set(id, t.at);
      this.triggers.delete(id);
    }
    this.appliedRev.set(backend, Math.max(state.rev, this.appliedRev.get(backend) ?? 0));
    // A change stops being pending once every backend holds it.
    const everywhere = Math.min(...this.opts.backends.map((b) => this.appliedRev.get(b) ?? 0));
    for (const pending of [this.pendingServices, this.pendingEndpoints]) {
      for (const [key, rev] of pending) if (rev <= everywhere) pending.delete(key);
    }
  }

  /** `backend` failed to apply a change (the feed retries it as a full sync). */
  failed(backend: string): void {
    this.failures.inc({ backend });
  }

  transactionFailed(backend: string, family: 4 | 6, partial: boolean): void {
    for (const c of this.modeFailures.get(backend) ?? []) if (partial || !c.partial) c.counter.inc({ ip_family: familyOf(family) });
  }

  iptablesRules(family: 4 | 6, table: string, total: number, written: number): void {
    const labels = { ip_family: familyOf(family), table };
    this.iptablesRuleCounts?.total.set(labels, total);
    this.iptablesRuleCounts?.last.set(labels, written);
  }

  conntrackReconciled(family: 4 | 6, seconds: number, deleted: number): void {
    this.conntrackDuration.observe({ ip_family: familyOf(family) }, seconds);
    this.conntrackDeleted.inc({ ip_family: familyOf(family) }, deleted);
  }

  rulesLost(backend: string): void {
    this.lost.inc({ backend });
  }

  /** another proxy's sign (leftovers/foreign.ts) seen, or gone */
  foreignProxy(s: ForeignProxySign, present: boolean): void {
    this.foreign.set({ proxy: s.proxy, rules: s.rules, ip_family: s.family }, present ? 1 : 0);
  }

  rulesDrift(backend: string, differences: number): void {
    this.drift.set({ backend }, differences);
  }

  answered(path: "healthz" | "livez", code: number): void {
    this.answerCounters[path].inc({ code: String(code) });
  }

  /** The newest trigger time (ms) among the service's slices, per family; undefined when none has one. */
  private triggerTimes(key: string): Partial<Record<IPFamily, number>> | undefined {
    let best: Partial<Record<IPFamily, number>> | undefined;
    for (const s of this.opts.brain.cluster.slices.get(key)?.values() ?? []) {
      const v = s.metadata.annotations?.[TRIGGER_TIME_ANNOTATION];
      const t = v ? Date.parse(v) : NaN;
      const family = s.addressType;
      // FQDN slices, and address types newer than kpng, program nothing
      if (Number.isNaN(t) || (family !== "IPv4" && family !== "IPv6")) continue;
      best ??= {};
      if (t > (best[family] ?? -Infinity)) best[family] = t;
    }
    return best;
  }

  /** Adds to the no_local_endpoints gauges what `key` counts now in place of what it counted before. */
  private recountNoLocal(key: string, se: ServiceEndpoints | undefined) {
    const before = this.noLocalOf.get(key) ?? [];
    const now = se ? noLocalClasses(se) : [];
    if (before.length === 0 && now.length === 0) return;
    for (const c of before) this.noLocalTotals.set(c, this.noLocalTotals.get(c)! - 1);
    for (const c of now) this.noLocalTotals.set(c, this.noLocalTotals.get(c)! + 1);
    if (now.length) this.noLocalOf.set(key, now);
    else this.noLocalOf.delete(key);
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
  return serveHttp({
    ...bindHostPort(opts.address),
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
