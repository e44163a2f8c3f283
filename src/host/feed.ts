// Feeds a backend from a stream of node-local revisions, in process (no
// serialization) or behind the API client. One apply runs at a time; while
// it runs, newer revisions coalesce into one (their change sets merged). A
// failed apply is retried as a full sync: after a failure we cannot know
// what the kernel holds. So is a backend's report that someone else changed
// its rules (Backend.watchRules): before that repair, a backend that can read
// its rules back (Backend.verify) is asked what was lost, and the log line
// names it (after the repair the kernel matches again, and nobody can tell).

import type { Revision } from "../core/brain/brain.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { sameIPs } from "../core/brain/node-ips.ts";
import { stateOps } from "../core/brain/ops.ts";
import type { NodeState, StateChange } from "../core/brain/state.ts";
import { pauseAfter } from "../core/pacing.ts";
import type { Backend, Drift, IncrementalBackend } from "./backend.ts";
import { driftSummary } from "./toolkit/drift.ts";

export interface FeedOptions {
  log: Logger;
  /** delay before retrying a failed sync */
  retryMs?: number;
  /** after each successful sync (metrics, --once); `change` null = it was a full sync */
  onSynced?: (state: NodeState, seconds: number, change: StateChange) => void;
  onError?: (err: unknown) => void;
  /** the backend reported that its rules were changed by someone else; a full sync follows */
  onRulesLost?: (reason: string) => void;
  /** the pause after a sync that took `ms` before the next one starts (default pacing.ts's pauseAfter) */
  pauseAfter?: (ms: number) => number;
  /** when repairs come this often, they wait (default REPAIR_STORM) */
  repairStorm?: RepairStorm;
  /** how long a repair waits for the check that names what was lost (default LOST_CHECK_MS) */
  lostCheckMs?: number;
}

/**
 * A repair waits this long at most for the read-back that names what was
 * lost: repairs come first. The read grows with the rules (nft at 5,000
 * services: 1.2-1.6 s of CPU, iptables 3 s, docs/verify.md); past this the line says the
 * check was cut short, and the repair runs.
 */
export const LOST_CHECK_MS = 2000;

/**
 * Repairs run at once, unless more than `burst` reports came within
 * `windowMs`: then each waits, from `firstDelayMs` doubling to `maxDelayMs`.
 * Two kpng processes on one node (a rolling update with surge) would
 * otherwise take each other's syncs for damage and repair forever.
 */
export interface RepairStorm {
  burst: number;
  windowMs: number;
  firstDelayMs: number;
  maxDelayMs: number;
}
export const REPAIR_STORM: RepairStorm = { burst: 5, windowMs: 30_000, firstDelayMs: 1000, maxDelayMs: 30_000 };

/**
 * The RepairStorm rule: called at each report with its time, says how long
 * the repair waits (undefined = it runs at once) and how many reports the
 * window holds.
 */
export function repairPacer(storm: RepairStorm): (now: number) => { delayMs?: number; reports: number } {
  const reports: number[] = [];
  let delayMs = 0;
  return (now) => {
    while (reports.length && now - reports[0] > storm.windowMs) reports.shift();
    reports.push(now);
    if (reports.length <= storm.burst) {
      delayMs = 0;
      return { reports: reports.length };
    }
    delayMs = Math.min(storm.maxDelayMs, delayMs ? delayMs * 2 : storm.firstDelayMs);
    return { delayMs, reports: reports.length };
  };
}

export interface Feed {
  push(rev: Revision): void;
  /** resolves when nothing is pending or running */
  idle(): Promise<void>;
  stop(): void;
}

const union = (a: StateChange | undefined, b: StateChange): StateChange =>
  a === undefined ? b : a === null || b === null ? null : new Set([...a, ...b]);

/** Applies a revision to an incremental backend through set/delete calls and one sync. */
export async function applyIncremental(b: IncrementalBackend, prev: NodeState | null, next: NodeState, change: StateChange) {
  if (next.nodeIPs && !sameIPs(prev?.nodeIPs, next.nodeIPs)) b.setNodeIPs?.(next.nodeIPs);
  for (const op of stateOps(prev?.services ?? new Map(), next.services, prev ? change : null)) {
    const s = op.service;
    if (op.op === "setService") b.setService(op.service);
    else if (op.op === "deleteService") b.deleteService(s.Namespace, s.Name);
    else if (op.op === "setEndpoint") b.setEndpoint(s.Namespace, s.Name, op.endpointKey, op.endpoint);
    else b.deleteEndpoint(s.Namespace, s.Name, op.endpointKey);
  }
  await b.sync();
}

/**
 * Before a repair: what the backend's rules lost, read back (Backend.verify,
 * one read; its every-Service check also sets the drift metric), on one log
 * line. Only then: kpng reads nothing back between reports, and after the
 * repair the kernel holds the rules again.
 */
async function nameWhatWasLost(backend: Backend, log: Logger, reason: string, limitMs: number) {
  let drifts: Drift[] | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), limitMs);
    });
    // past the limit its result is dropped (the repair may be under way by the time it comes)
    drifts = await Promise.race([backend.verify?.() ?? Promise.resolve([]), late]);
  } catch (err) {
    log.warn("rules changed by someone else: cannot read back what was lost", { backend: backend.name, reason, error: errorMessage(err) });
    return;
  } finally {
    clearTimeout(timer);
  }
  if (!drifts) {
    log.warn("rules lost: not named, reading them back took too long; repairing", { backend: backend.name, reason, limitMs });
    return;
  }
  // the Services first: the line shows the first few, and which Services lost rules is the news
  const ordered = [...drifts.filter((d) => d.service), ...drifts.filter((d) => !d.service)];
  const missing = ordered.filter((d) => d.kind === "missing");
  const other = ordered.filter((d) => d.kind !== "missing");
  log.warn("rules lost", {
    backend: backend.name,
    reason,
    differences: drifts.length,
    missing: driftSummary(missing),
    ...(other.length ? { changed: driftSummary(other, { withKind: true }) } : {}),
  });
}

export function feedBackend(backend: Backend, opts: FeedOptions): Feed {
  const feed = new BackendFeed(backend, opts);
  backend.watchRules?.((reason) => feed.rulesChanged(reason));
  return feed;
}

/** One backend's feed: what is pending, the sync under way, the pause and the retry before the next. */
class BackendFeed implements Feed {
  private applied: NodeState | null = null; // what the backend holds (incremental)
  private latest: NodeState | null = null;
  private pending: StateChange | undefined; // undefined = nothing pending
  private running: Promise<void> | null = null;
  private stopped = false;
  private retry: ReturnType<typeof setTimeout> | undefined;
  private nextAt = 0; // no sync starts before (performance.now())
  private lost: string | undefined; // the report of rules lost whose repair has not run yet
  private readonly pause: (ms: number) => number;
  private readonly pace: ReturnType<typeof repairPacer>;

  constructor(
    private readonly backend: Backend,
    private readonly opts: FeedOptions,
  ) {
    this.pause = opts.pauseAfter ?? pauseAfter;
    this.pace = repairPacer(opts.repairStorm ?? REPAIR_STORM);
  }

  push(rev: Revision): void {
    this.latest = rev.state;
    this.schedule(rev.change);
  }

  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
  }

  /** The backend's report that someone else changed its rules: a full sync, at once or, in a storm of reports, later. */
  rulesChanged(reason: string): void {
    const { backend } = this;
    const { log } = this.opts;
    if (this.stopped) return;
    this.opts.onRulesLost?.(reason);
    // only a backend that can read its rules back (an await before the repair: other reports coalesce into it)
    if (this.latest && backend.verify) this.lost ??= reason;
    const { delayMs, reports } = this.pace(Date.now());
    if (delayMs === undefined) {
      log.warn("rules changed by someone else, resyncing everything", { backend: backend.name, reason });
      // Before the first revision there is nothing to restore; the first sync is full anyway.
      if (this.latest) this.schedule(null);
      return;
    }
    log.warn("rules keep being changed by someone else (another kpng on this node?): resyncing everything after a delay", {
      backend: backend.name,
      reason,
      reports,
      delayMs,
    });
    this.pending = union(this.pending, null);
    if (this.latest && !this.retry) this.retryIn(delayMs);
  }

  /** A change to apply, merged into what is pending; the retry waiting, if any, is overtaken. */
  private schedule(change: StateChange): void {
    this.pending = union(this.pending, change);
    clearTimeout(this.retry);
    this.retry = undefined;
    this.kick();
  }

  /** Starts the sync loop unless it runs; when it ends with something pending (and no retry waits), again. */
  private kick(): void {
    if (this.running || this.stopped) return;
    this.running = this.run().finally(() => {
      this.running = null;
      if (this.pending !== undefined && !this.retry) this.kick();
    });
  }

  private retryIn(ms: number): void {
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.kick();
    }, ms);
  }

  /** Syncs until nothing is pending, pausing between syncs; ends at the first failure (its retry set). */
  private async run(): Promise<void> {
    while (this.pending !== undefined && this.latest && !this.stopped) {
      // Changes that come during the pause coalesce: syncs take a bounded share of the CPU.
      const rest = this.nextAt - performance.now();
      if (rest >= 1) {
        await Bun.sleep(rest);
        continue;
      }
      if (this.lost !== undefined && this.pending === null) {
        const reason = this.lost;
        this.lost = undefined;
        await nameWhatWasLost(this.backend, this.opts.log, reason, this.opts.lostCheckMs ?? LOST_CHECK_MS);
        if (this.stopped) return;
      }
      const state = this.latest;
      const change = this.pending;
      this.pending = undefined;
      if (!(await this.sync(state, change))) return;
    }
  }

  /** One sync of `state`; false when it failed: the backend's rules are unknown, a full sync is retried after retryMs. */
  private async sync(state: NodeState, change: StateChange): Promise<boolean> {
    const { backend, opts } = this;
    const t0 = performance.now();
    try {
      if (backend.kind === "full") await backend.apply(state, change);
      else await applyIncremental(backend, this.applied, state, change);
      this.applied = state;
      const secs = (performance.now() - t0) / 1000;
      opts.log.info("synced", {
        backend: backend.name,
        rev: state.rev,
        services: state.services.size,
        changed: change?.size ?? "all",
        ms: Math.round(secs * 1000),
      });
      opts.onSynced?.(state, secs, change);
      // Pacing bounds the CPU of steady churn. A full sync (start-up, a repair,
      // the retry after a failure) is paced by its own rules (REPAIR_STORM,
      // retryMs): its cost says nothing of the next change's, which would
      // otherwise wait as long as start-up's whole sync took.
      this.nextAt = change === null ? 0 : performance.now() + this.pause(secs * 1000);
      return true;
    } catch (err) {
      opts.log.error("sync failed, will retry with a full sync", { backend: backend.name, rev: state.rev, error: errorMessage(err) });
      opts.onError?.(err);
      if (backend.kind === "incremental") this.applied = null;
      this.pending = null;
      clearTimeout(this.retry);
      this.retryIn(opts.retryMs ?? 1000);
      return false;
    }
  }
}
