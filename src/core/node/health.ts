// The proxy's own health, as kube-proxy reports it (pkg/proxy/healthcheck,
// proxy_health.go): /healthz and /livez with kube-proxy's JSON bodies.
//
// Healthy = no backend has had a change waiting longer than the health
// timeout (2 x syncPeriod), as upstream. A backend that never synced yet
// counts as healthy, as upstream ("healthy while starting up"). kpng adds
// what it knows sooner than upstream would: a backend whose rules are known
// to be gone (someone flushed them; Backend.watchRules) or whose syncs keep
// failing (FAILURES_UNHEALTHY in a row) is unhealthy at once, until its next
// successful sync; upstream waits for the timeout. /healthz also reports
// 503 when this node is being deleted or is tainted
// ToBeDeletedByClusterAutoscaler (load balancers should drain it); /livez
// ignores the node. kpng also reports unhealthy while its Kubernetes source
// is stale: watch events of a kind keep failing to decode
// (kube-reflector.ts DECODE_FAILURES_STALE), so the rules no longer follow
// the cluster, whatever the backends do; upstream would sit on stale state
// silently.

import { bindHostPort, serveHttp, type HttpServer } from "./http-serve.ts";
import type { Logger } from "../log.ts";

export const TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler";

/**
 * Failed syncs in a row that make a backend unhealthy. One failure is
 * retried as a full sync a second later and usually heals; a second says the
 * rules are not being kept up to date.
 */
export const FAILURES_UNHEALTHY = 2;

export interface Clock {
  /** wall clock, ms since the epoch */
  now(): number;
  /** monotonic, ms since process start (Go prints it as m=+…) */
  mono(): number;
}

export const realClock: Clock = { now: () => Date.now(), mono: () => performance.now() };

/** a moment on both clocks: the wall clock (ms since the epoch) and the monotonic one (ms since process start) */
export interface Stamp {
  wall: number;
  mono: number;
}

export const stampNow = (clock: Clock = realClock): Stamp => ({ wall: clock.now(), mono: clock.mono() });

export class ProxyHealth {
  private readonly lastUpdated = new Map<string, Stamp>();
  /** backend -> when its oldest unapplied change was queued, and the newest revision queued */
  private readonly pending = new Map<string, { since: Stamp; rev: number }>();
  /** backends whose rules are known to be missing, or whose syncs failed, since their last successful sync */
  private readonly broken = new Map<string, { lost: boolean; failures: number }>();

  constructor(
    private readonly opts: {
      timeoutMs: number;
      clock?: Clock;
      nodeEligible?: () => boolean;
      /** the cluster source is known not to follow the cluster (kinds whose watch events do not decode) */
      sourceStale?: () => boolean;
    },
  ) {}

  private get clock() {
    return this.opts.clock ?? realClock;
  }

  /** A revision reached `backend`'s queue (`at`: when, if it was reported later). */
  queued(backend: string, rev: number, at: Stamp = stampNow(this.clock)): void {
    const p = this.pending.get(backend);
    if (p) p.rev = Math.max(p.rev, rev);
    else this.pending.set(backend, { since: at, rev });
  }

  /** `backend`'s rules were changed or removed by someone else; a full sync is on its way. */
  rulesLost(backend: string): void {
    const b = this.broken.get(backend) ?? { lost: false, failures: 0 };
    this.broken.set(backend, { ...b, lost: true });
  }

  /** a sync of `backend` failed (it is retried) */
  failed(backend: string): void {
    const b = this.broken.get(backend) ?? { lost: false, failures: 0 };
    this.broken.set(backend, { ...b, failures: b.failures + 1 });
  }

  /** `backend` applied revision `rev` (`at`: when, if it was reported later). */
  updated(backend: string, rev: number, now: Stamp = stampNow(this.clock)): void {
    this.lastUpdated.set(backend, now);
    this.broken.delete(backend);
    const p = this.pending.get(backend);
    if (!p) return;
    // A newer revision was queued while this one was applied: it waits from now on.
    if (p.rev > rev) p.since = now;
    else this.pending.delete(backend);
  }

  nodeEligible(): boolean {
    return this.opts.nodeEligible?.() ?? true;
  }

  /** The proxier's health (node ignored) and the latest sync time. */
  check(): { healthy: boolean; lastUpdated: Stamp | null } {
    const now = this.clock.mono();
    let last: Stamp | null = null;
    if (this.opts.sourceStale?.()) {
      for (const stamp of this.lastUpdated.values()) if (!last || stamp.mono > last.mono) last = stamp;
      return { healthy: false, lastUpdated: last };
    }
    for (const [backend, b] of this.broken)
      if (b.lost || b.failures >= FAILURES_UNHEALTHY) return { healthy: false, lastUpdated: this.lastUpdated.get(backend) ?? null };
    for (const [backend, stamp] of this.lastUpdated) {
      if (!last || stamp.mono > last.mono) last = stamp;
      const p = this.pending.get(backend);
      if (p && now - p.since.mono >= this.opts.timeoutMs) return { healthy: false, lastUpdated: stamp };
    }
    return { healthy: true, lastUpdated: last };
  }

  isHealthy(): boolean {
    return this.check().healthy;
  }
}

/** A Node is eligible unless it is being deleted or the cluster autoscaler is about to delete it. */
export function nodeIsEligible(node: { metadata?: { deletionTimestamp?: unknown }; spec?: { taints?: unknown } } | undefined): boolean {
  if (!node) return true;
  if (node.metadata?.deletionTimestamp) return false;
  const taints = Array.isArray(node.spec?.taints) ? (node.spec.taints as Array<{ key?: unknown }>) : [];
  return !taints.some((t) => t?.key === TO_BE_DELETED_TAINT);
}

const pad = (n: number, w = 2) => String(n).padStart(w, "0");

/** Go's time.Time.String() in UTC: `2006-01-02 15:04:05.999999999 +0000 UTC m=+1.500000001`. */
export function goTime(stamp: Stamp | null): string {
  if (!stamp) return "0001-01-01 00:00:00 +0000 UTC";
  const d = new Date(stamp.wall);
  const ms = d.getUTCMilliseconds();
  const frac = ms ? `.${pad(ms, 3).replace(/0+$/, "")}` : "";
  const monoS = stamp.mono / 1000;
  const mono = `${monoS < 0 ? "-" : "+"}${Math.abs(monoS).toFixed(9)}`;
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}${frac} +0000 UTC m=${mono}`;
}

export interface HealthServerOptions {
  address: string;
  health: ProxyHealth;
  log: Logger;
  /** counts answers: kubeproxy_proxy_healthz_total / _livez_total */
  onAnswer?: (path: "healthz" | "livez", code: number) => void;
}

/** Body and status of /healthz or /livez, byte for byte as kube-proxy writes them. */
export function healthAnswer(health: ProxyHealth, path: "healthz" | "livez", clock: Clock = realClock): { status: number; body: string } {
  const { healthy: proxier, lastUpdated } = health.check();
  const eligible = health.nodeEligible();
  const healthy = path === "healthz" ? proxier && eligible : proxier;
  const now = stampNow(clock);
  // Upstream reports "now" as lastUpdated while healthy, for compatibility with older releases.
  const last = goTime(healthy ? now : lastUpdated);
  const body =
    path === "healthz"
      ? `{"lastUpdated": ${JSON.stringify(last)},"currentTime": ${JSON.stringify(goTime(now))}, "nodeEligible": ${eligible}}`
      : `{"lastUpdated": ${JSON.stringify(last)},"currentTime": ${JSON.stringify(goTime(now))}}`;
  return { status: healthy ? 200 : 503, body };
}

export function startHealthServer(opts: HealthServerOptions): HttpServer {
  return serveHttp({
    ...bindHostPort(opts.address),
    what: "healthz",
    log: opts.log,
    handle(url) {
      const path = url.pathname === "/healthz" ? "healthz" : url.pathname === "/livez" ? "livez" : null;
      if (!path) return { status: 404, body: "404 page not found\n", type: "text/plain; charset=utf-8" };
      const a = healthAnswer(opts.health, path);
      opts.onAnswer?.(path, a.status);
      return { status: a.status, body: a.body, type: "application/json", headers: { "X-Content-Type-Options": "nosniff" } };
    },
  });
}
