// What kpng records as Events on its Node besides its start-up warnings:
// what an operator must see with `kubectl describe node` / `kubectl get
// events` because kpng repaired or could not apply the node's rules.
//
// - SyncFailed (Warning): a backend's sync failed; the feed retries it as a
//   full sync (the fallback: after a failure kpng cannot know what the
//   kernel holds).
// - RulesLost (Warning): someone else changed or removed a backend's rules
//   (Backend.watchRules: a flushed ruleset, a deleted table); a full sync
//   follows.
// - RulesRestored (Normal): the full sync after RulesLost (or SyncFailed)
//   succeeded.
//
// A stuck backend (a sync pending past --healthz timeout) is /healthz's 503
// and a metric, not an event: it has no moment to record, only a duration.
//
// Rate-limited as client-go's event correlator limits a source: per reason
// and backend at most one event per `intervalMs`; the ones held back are
// counted into the next one's note, so a repair loop (two kpngs on a node)
// cannot flood the API server.

import { errorMessage } from "../errors.ts";
import type { EventFields } from "./events.ts";

export type NodeEventFields = Omit<EventFields, "regarding">;

export const REASON_SYNC_FAILED = "SyncFailed";
export const REASON_RULES_LOST = "RulesLost";
export const REASON_RULES_RESTORED = "RulesRestored";
/** the `action` of these events (kube-proxy's start-up events use "StartKubeProxy") */
export const ACTION_SYNC = "SyncProxyRules";

/** one event per reason and backend per this long, at most */
export const EVENT_INTERVAL_MS = 60_000;

export interface BackendEventsOptions {
  /** records one event on this Node (events.ts recordNodeEvent); never rejects */
  record: (f: NodeEventFields) => Promise<void>;
  intervalMs?: number;
  /** ms, monotonic (tests) */
  now?: () => number;
}

export class BackendEvents {
  private readonly last = new Map<string, { at: number; held: number }>();
  /** backends whose next successful sync is a repair worth an event */
  private readonly repairing = new Set<string>();
  private readonly pending = new Set<Promise<void>>();

  constructor(private readonly opts: BackendEventsOptions) {}

  /** A sync of `backend` failed; a full sync follows. */
  failed(backend: string, err: unknown): void {
    this.repairing.add(backend);
    this.emit(backend, {
      type: "Warning",
      reason: REASON_SYNC_FAILED,
      action: ACTION_SYNC,
      note: `kpng backend ${backend}: sync failed, retrying with a full sync: ${errorMessage(err)}`,
    });
  }

  /** Someone else changed `backend`'s rules; a full sync follows. */
  rulesLost(backend: string, reason: string): void {
    this.repairing.add(backend);
    this.emit(backend, {
      type: "Warning",
      reason: REASON_RULES_LOST,
      action: ACTION_SYNC,
      note: `kpng backend ${backend}: its rules were changed by someone else (${reason}); resyncing everything`,
    });
  }

  /** `backend` applied a sync; `full`: the whole state. Records the repair a failure or a loss waited for. */
  synced(backend: string, full: boolean): void {
    if (!full || !this.repairing.delete(backend)) return;
    this.emit(backend, {
      type: "Normal",
      reason: REASON_RULES_RESTORED,
      action: ACTION_SYNC,
      note: `kpng backend ${backend}: a full sync restored the node's rules`,
    });
  }

  /** resolves once every event recorded so far was sent (or given up): `--once` and tests */
  async flush(): Promise<void> {
    while (this.pending.size) await Promise.all([...this.pending]);
  }

  private emit(backend: string, f: NodeEventFields): void {
    const now = (this.opts.now ?? (() => performance.now()))();
    const key = `${f.reason}/${backend}`;
    const l = this.last.get(key);
    if (l && now - l.at < (this.opts.intervalMs ?? EVENT_INTERVAL_MS)) {
      l.held++;
      return;
    }
    const note = l?.held ? `${f.note} (${l.held} more since the last such event)` : f.note;
    this.last.set(key, { at: now, held: 0 });
    const p = this.opts.record({ ...f, note }).finally(() => this.pending.delete(p));
    this.pending.add(p);
  }
}
