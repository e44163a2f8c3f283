// detectLocalMode NodeCIDR: pod traffic is traffic from this Node's
// spec.podCIDRs. As kube-proxy 1.36 does it:
//
// - at start-up it waits for the Node to have pod CIDRs before it creates its
//   proxier (cmd/kube-proxy/app/server_linux.go platformSetup,
//   waitForPodCIDR: polled each second, for at most 5 minutes, then an error);
// - the CIDRs are fixed for the life of the process: when the Node names
//   other ones, it exits so that it starts again with them
//   (pkg/proxy/node.go NodePodCIDRHandler: "current PodCIDRs are different
//   than previous PodCIDRs, restarting", exit 1).
//
// kpng does the same: the backends are created with the CIDRs, and a change
// rejects `changed` (main.ts ends the process with exit 1, leaving the rules
// in place for the restarted process to take over).

import type { Brain } from "../brain/brain.ts";
import { KpngError } from "../errors.ts";
import type { Logger } from "../log.ts";

/** kube-proxy's timeoutForNodePodCIDR */
export const POD_CIDRS_WAIT_MS = 5 * 60_000;

type NodeSource = Pick<Brain, "isSynced" | "nodePodCIDRs" | "onFlush">;

/** The Node's pod CIDRs once it has some; rejects (exit 1) after `timeoutMs` without. */
export async function waitForPodCIDRs(brain: NodeSource, nodeName: string, opts: { timeoutMs?: number; log: Logger }): Promise<string[]> {
  const now = () => (brain.isSynced ? brain.nodePodCIDRs(nodeName) : []);
  if (now().length) return now();
  const timeoutMs = opts.timeoutMs ?? POD_CIDRS_WAIT_MS;
  opts.log.info("detectLocalMode NodeCIDR: waiting for the Node's spec.podCIDRs", { node: nodeName, timeoutSeconds: timeoutMs / 1000 });
  const { promise, resolve, reject } = Promise.withResolvers<string[]>();
  const timer = setTimeout(
    () =>
      reject(
        new KpngError(
          "unavailable",
          `node ${nodeName} spec.podCIDRs: none ${timeoutMs ? `after ${timeoutMs / 1000}s` : "in the input"}; detectLocalMode NodeCIDR needs them (are pod CIDRs allocated, kube-controller-manager --allocate-node-cidrs?)`,
        ),
      ),
    timeoutMs,
  );
  const unsubscribe = brain.onFlush(() => {
    if (now().length) resolve(now());
  });
  try {
    return await promise;
  } finally {
    clearTimeout(timer);
    unsubscribe();
  }
}

/**
 * Rejects when the Node names pod CIDRs other than `cidrs` (the rules were
 * rendered with those); a Node deleted or without pod CIDRs for a while
 * changes nothing until it names others. `stop()` ends the watch.
 */
export function watchPodCIDRs(brain: NodeSource, nodeName: string, cidrs: readonly string[]): { changed: Promise<never>; stop(): void } {
  const { promise, reject } = Promise.withResolvers<never>();
  // handled here too: a process that stops waiting on it (--once, a signal) must not die of an unhandled rejection
  promise.catch(() => {});
  const stop = brain.onFlush((touched) => {
    if (!touched.nodes.has(nodeName)) return;
    const next = brain.nodePodCIDRs(nodeName);
    if (!next.length || (next.length === cidrs.length && next.every((c, i) => c === cidrs[i]))) return;
    stop();
    reject(
      new KpngError(
        "failed_precondition",
        `node ${nodeName} spec.podCIDRs changed from ${cidrs.join(",")} to ${next.join(",")}: detectLocalMode NodeCIDR rendered the old ones, exiting to start again with the new ones (as kube-proxy)`,
      ),
    );
  });
  return { changed: promise, stop };
}
