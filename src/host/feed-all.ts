// Several backends fed the same revisions (feed.ts, one feed each), and the
// moment start-up is over: every backend holds its first sync. `--once` ends
// there; in process, kube-proxy's rules go and memory is released. Used in
// process (main.ts) and over the API (sidecar.ts).

import type { NodeState, StateChange } from "../core/brain/state.ts";
import type { Revision } from "../core/brain/brain.ts";
import type { Logger } from "../core/log.ts";
import type { Backend } from "./backend.ts";
import { feedBackend, type Feed } from "./feed.ts";

export interface FeedAllOptions {
  log: Logger;
  /** after each successful sync of `backend` (feed.ts's onSynced) */
  onSynced?: (backend: Backend, state: NodeState, seconds: number, change: StateChange) => void;
  /** once, right after the onSynced of the sync that completed every backend's first */
  onStartedUp?: () => void;
  onError?: (backend: Backend, err: unknown) => void;
  onRulesLost?: (backend: Backend, reason: string) => void;
}

/**
 * Counts backends' first syncs: `synced(i)` after each sync of backend `i`
 * says whether that sync was the last first sync (true exactly once; never
 * without backends).
 */
export function firstSyncs(backends: number): { synced(i: number): boolean } {
  const pending = new Set(Array.from({ length: backends }, (_, i) => i));
  return { synced: (i) => pending.delete(i) && pending.size === 0 };
}

export function feedAll(backends: readonly Backend[], opts: FeedAllOptions): Feed {
  const first = firstSyncs(backends.length);
  const feeds = backends.map((b, i) =>
    feedBackend(b, {
      log: opts.log,
      onSynced: (state, seconds, change) => {
        opts.onSynced?.(b, state, seconds, change);
        if (first.synced(i)) opts.onStartedUp?.();
      },
      onError: opts.onError && ((err) => opts.onError?.(b, err)),
      onRulesLost: opts.onRulesLost && ((reason) => opts.onRulesLost?.(b, reason)),
    }),
  );
  return {
    push(rev: Revision) {
      for (const f of feeds) f.push(rev);
    },
    async idle() {
      await Promise.all(feeds.map((f) => f.idle()));
    },
    stop() {
      for (const f of feeds) f.stop();
    },
  };
}
