// Memory a running proxy gives back after its syncs: the heap the syncs freed
// (Bun.gc / Bun.shrink), and once start-up is over, the executable's pages
// only start-up used (release-pages.ts).

import type { Logger } from "./log.ts";
import { releaseExecutablePages } from "./release-pages.ts";

export interface MemoryRelease {
  /** after each backend sync */
  synced(): void;
  /** right after the sync that completed every backend's first; `after`: start-up work that follows that sync (kube-proxy's rules removed) */
  startedUp(after: Promise<void> | undefined): void;
}

const RELEASE_IDLE_MS = 100;
/** no sync for this long: the node is at rest, and its memory is shrunk to the floor */
const QUIET_MS = 10_000;
const STARTUP_SETTLE_MS = 1000;

export function memoryRelease(log: Logger): MemoryRelease {
  let idle: ReturnType<typeof setTimeout> | undefined;
  let quiet: ReturnType<typeof setTimeout> | undefined;

  /**
   * Once the syncs settle (none for RELEASE_IDLE_MS), ask for a collection of
   * what they freed. An asynchronous one: it marks beside the JS thread and
   * keeps the compiled code. `Bun.shrink()` (a full collection that also
   * throws away all compiled code, at a moment the VM picks) blocked a sync
   * for as long as a full collection of the heap takes, which grows with the
   * cluster, and every sync after it ran cold: under steady churn it was
   * most of kpng's CPU and the churn bench's outliers (docs/results/2026-11.md).
   * It runs when the node is at rest (QUIET_MS without a sync), and once
   * after start-up.
   */
  const settleAfterSync = () => {
    clearTimeout(idle);
    clearTimeout(quiet);
    idle = setTimeout(() => Bun.gc(false), RELEASE_IDLE_MS);
    quiet = setTimeout(() => Bun.shrink(), QUIET_MS);
    idle.unref();
    quiet.unref();
  };

  /**
   * Start-up (lists, the first state, the first full transaction) leaves the
   * heap at its high-water mark: once every backend holds its first sync,
   * collect it and shrink, at once (off the critical path: the rules are in).
   */
  const releaseStartup = () => {
    setTimeout(() => {
      Bun.gc(true);
      Bun.shrink();
    }, 0).unref();
  };

  /**
   * The executable's pages that only start-up used leave the resident set
   * twice: at once when every backend holds its first sync (after the
   * collection above: loading touched most of them), and once what follows
   * that sync has run as well: kube-proxy's rules removed, the backends'
   * watches proven, the API watches' first events. Never again: from then on,
   * a page dropped would be one the next change faults back in.
   */
  const releaseStartupPages = (after: Promise<void> | undefined) => {
    const release = (when: string) =>
      log.v(2).info("released the executable's start-up pages", { when, residentKB: releaseExecutablePages() });
    setTimeout(() => release("first sync"), 0).unref();
    const settled = new Promise<void>((resolve) => setTimeout(resolve, STARTUP_SETTLE_MS).unref());
    void Promise.all([after, settled]).then(() => release("settled"));
  };

  return {
    synced: settleAfterSync,
    startedUp(after) {
      releaseStartup();
      releaseStartupPages(after);
    },
  };
}
