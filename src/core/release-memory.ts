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
const STARTUP_SETTLE_MS = 1000;

export function memoryRelease(log: Logger): MemoryRelease {
  let release: { timer: ReturnType<typeof setTimeout>; collect: boolean } | undefined;

  /**
   * Once the syncs settle (none for RELEASE_IDLE_MS), hand the memory they
   * freed back to the system. The runtime does it by itself, but over seconds:
   * until then RSS sits above the steady state (Bun.shrink itself is cheap).
   * Start-up (lists, the first state, the first full transaction) leaves the
   * heap at its high-water mark: once every backend holds its first sync,
   * collect it first, at once (off the critical path: the rules are in).
   */
  const releaseFreedMemory = (collect: boolean) => {
    collect ||= release?.collect ?? false;
    clearTimeout(release?.timer);
    const timer = setTimeout(
      () => {
        release = undefined;
        if (collect) Bun.gc(true);
        Bun.shrink();
      },
      collect ? 0 : RELEASE_IDLE_MS,
    );
    timer.unref();
    release = { timer, collect };
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
    synced: () => releaseFreedMemory(false),
    startedUp(after) {
      releaseFreedMemory(true);
      releaseStartupPages(after);
    },
  };
}
