// Start-up warnings kube-proxy also records as Warning events on its Node
// (its IPVS deprecation). The event code (events.ts) loads only when there
// is one to record.

import type { NodeEventOptions } from "./events.ts";

/** Records each warning on this Node; undefined when there is none. Never rejects (events.ts logs failures). */
export function recordStartWarnings(
  warnings: ReadonlyArray<{ reason: string; note: string }>,
  opts: NodeEventOptions,
): Promise<unknown> | undefined {
  if (!warnings.length) return undefined;
  return import("./events.ts").then((e) => Promise.all(warnings.map((w) => e.recordStartWarning(opts, w))));
}
