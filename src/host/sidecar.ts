// Backends fed over the API instead of in process: the same Backend code,
// the same feed (coalescing, retry as a full sync), with revisions rebuilt by
// the client library. `kpng backend --api ADDR` and `run()` (run.ts) both
// end up here.

import { watchStates, type ClientOptions } from "../core/api/client/client.ts";
import type { Backend } from "./backend.ts";
import { feedAll } from "./feed-all.ts";
import { createLogger } from "../core/log.ts";

export interface SidecarOptions extends ClientOptions {
  backends: Backend[];
  /** return after every backend applied its first sync */
  once?: boolean;
}

/** Feeds backends from the API until `signal` aborts (or, with `once`, after the first sync). */
export async function runSidecar(opts: SidecarOptions): Promise<void> {
  const log = opts.log ?? createLogger("kpng-backend");
  const stop = new AbortController();
  const onAbort = () => stop.abort(opts.signal?.reason);
  if (opts.signal?.aborted) return;
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  const feeds = feedAll(opts.backends, {
    log,
    onStartedUp: () => {
      if (opts.once) stop.abort();
    },
  });
  try {
    for await (const rev of watchStates({ ...opts, log, signal: stop.signal })) feeds.push(rev);
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
    await feeds.idle();
    feeds.stop();
  }
}
