// The health and metrics servers of the run command start once every backend
// holds its first sync, or `latestMs` after the process started if that comes
// first (an API server that is slow or down; a first sync already under way
// then gets as long again, as the servers would only slow it; they start
// after that whatever happens): until the rules are in, kpng's
// one thread has better things to do than loading prom-client, opening
// servers and counting a whole first revision into the metrics. What happens
// before they start (the API client's requests, the revisions queued, the
// first sync, the backends' own reports) is held with the time it happened
// and handed to them in order, so they answer as if they had run from the
// start: /healthz's lastUpdated is the first sync's, the metrics count it.
// Revisions queued before the first sync is reported stay held even when the
// servers started first (at their deadline): counting a whole first revision
// into the metrics would only slow that sync, and /healthz answers the same
// meanwhile (a backend that never synced is healthy, as upstream). A first
// sync that never reports (hung) holds them `holdRevisionsMs` at most: each
// held revision keeps its state alive.

import type { GlobalSourceStats } from "../sources/global.ts";
import type { RestClientObserver } from "../kube-http/access.ts";
import { stampNow } from "./health.ts";
import type { ProxyMetrics } from "./metrics.ts";
import type { ProxyReports, ProxyServers } from "./proxy-servers.ts";

/** What backends report from inside their syncs (src/host/backend.ts BackendMetrics). */
type BackendReports = Pick<ProxyMetrics, "transactionFailed" | "conntrackReconciled" | "iptablesRules" | "rulesDrift">;

export interface LateServersOptions {
  /** loads and starts the servers; throws when they cannot (a port taken with bindAddressHardFail) */
  start: () => Promise<ProxyServers>;
  /** ms since the process started by which they start without a first sync (twice that if a sync is under way then) */
  latestMs: number;
  /** the longest revisions wait for a sync's report (default HOLD_REVISIONS_MS) */
  holdRevisionsMs?: number;
}

const HOLD_REVISIONS_MS = 10_000;

export class LateServers implements ProxyReports {
  private held: Array<{ tell: (s: ProxyServers) => void; revision?: boolean }> = [];
  /** a sync was reported (done or failed): revisions are told as they come */
  private released = false;
  private releaseTimer?: ReturnType<typeof setTimeout>;
  private servers?: ProxyServers;
  private starting?: Promise<void>;
  private closed = false;
  /** a revision was queued and no sync reported since */
  private syncing = false;
  private timer: ReturnType<typeof setTimeout>;
  private readonly failure = Promise.withResolvers<never>();
  /** rejects with the reason the servers could not start */
  readonly cannotStart = this.failure.promise;

  /** where the API client reports its requests (rest_client_*) */
  readonly restClient: RestClientObserver = { request: (r) => this.tell((s) => s.metrics.restClient.request(r)) };
  /** the backends' BackendContext.metrics */
  readonly backendMetrics: BackendReports = {
    transactionFailed: (backend, family, partial) => this.tell((s) => s.metrics.transactionFailed(backend, family, partial)),
    conntrackReconciled: (family, seconds, deleted) => this.tell((s) => s.metrics.conntrackReconciled(family, seconds, deleted)),
    iptablesRules: (family, table, total, written) => this.tell((s) => s.metrics.iptablesRules(family, table, total, written)),
    rulesDrift: (backend, differences) => this.tell((s) => s.metrics.rulesDrift(backend, differences)),
  };

  constructor(private readonly opts: LateServersOptions) {
    this.cannotStart.catch(() => {}); // the caller races it; never an unhandled rejection of its own
    const wait = Math.max(0, opts.latestMs - performance.now());
    this.timer = setTimeout(() => this.deadline(wait), wait);
  }

  /** `more`: the wait a sync under way gets, 0 once it has had it */
  private deadline(more: number): void {
    if (more && this.syncing) this.timer = setTimeout(() => this.deadline(0), more);
    else void this.start();
  }

  /** Starts the servers now, if they are not started yet; resolves once they run (or could not start). */
  start(): Promise<void> {
    clearTimeout(this.timer);
    this.starting ??= (async () => {
      if (this.closed) return;
      let servers: ProxyServers;
      try {
        servers = await this.opts.start();
      } catch (err) {
        this.failure.reject(err);
        return;
      }
      if (this.closed) return servers.close();
      this.servers = servers;
      this.hand(servers);
    })();
    return this.starting;
  }

  setSource(source: Parameters<ProxyReports["setSource"]>[0]): void {
    this.tell((s) => s.setSource(source));
  }
  followGlobal(stats: GlobalSourceStats): void {
    this.tell((s) => s.metrics.followGlobal(stats));
  }
  followApi(api: Parameters<ProxyMetrics["followApi"]>[0]): void {
    this.tell((s) => s.metrics.followApi(api));
  }
  queued(...[rev, at = stampNow()]: Parameters<ProxyReports["queued"]>): void {
    this.syncing = true;
    this.tell((s) => s.queued(rev, at), true);
  }
  synced(...[backend, state, seconds, change, at = stampNow()]: Parameters<ProxyReports["synced"]>): void {
    this.syncing = false;
    this.release();
    this.tell((s) => s.synced(backend, state, seconds, change, at));
  }
  failed(backend: string, err: unknown): void {
    this.release();
    this.tell((s) => s.failed(backend, err));
  }
  rulesLost(backend: string, reason: string): void {
    this.tell((s) => s.rulesLost(backend, reason));
  }
  foreignProxy(...[sign, present]: Parameters<ProxyReports["foreignProxy"]>): void {
    this.tell((s) => s.foreignProxy(sign, present));
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    clearTimeout(this.releaseTimer);
    this.held = [];
    this.servers?.close();
  }

  /** to the servers now, or held until they start (a `revision`: until they start and a sync is reported) */
  private tell(f: (s: ProxyServers) => void, revision = false): void {
    if (this.servers && (this.released || !revision)) {
      f(this.servers);
      return;
    }
    if (this.closed) return;
    this.held.push({ tell: f, revision });
    if (revision && !this.releaseTimer)
      this.releaseTimer = setTimeout(() => this.release(), this.opts.holdRevisionsMs ?? HOLD_REVISIONS_MS);
  }

  /** what may be told now, in the order it came; revisions wait for a sync's report */
  private hand(servers: ProxyServers): void {
    const keep = this.held.filter((h) => h.revision && !this.released);
    for (const h of this.held) if (!h.revision || this.released) h.tell(servers);
    this.held = keep;
  }

  private release(): void {
    clearTimeout(this.releaseTimer);
    this.released = true;
    if (this.servers) this.hand(this.servers);
  }
}
