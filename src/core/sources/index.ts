// Picks the source of cluster objects: a file (`--input`), a central brain's
// global stream (`--api`, the node agent) or the API server.

import type { Brain, NodeView } from "../brain/brain.ts";
import type { Config } from "../config/config.ts";
import { invalid } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { RestClientObserver } from "../kube-http/access.ts";
import { startFileSource } from "./file.ts";
import type { GlobalSourceStats } from "./global.ts";
import type { ClientSecurity } from "../api/tls/client.ts";
import type { SourceStats } from "./kube.ts";

export interface SourceOptions {
  input?: string;
  kubeconfig?: string;
  master?: string;
  /** brains' addresses: follow their globalv1 stream (node agent) */
  api?: readonly string[];
  /** where API-server requests are reported (rest_client_* metrics) */
  restClient?: RestClientObserver;
  /** TLS and credentials for TCP brains */
  security?: ClientSecurity;
  /** watch every Node (a central brain), not only this node's */
  allNodes?: boolean;
  /** the agent's stream stats, as soon as it starts (before the first change set) */
  onGlobalStats?: (stats: GlobalSourceStats) => void;
}

export interface Source {
  close(): void;
  /** API-server sources count what they receive (for metrics); files have nothing to count */
  readonly stats?: SourceStats;
  /** the node agent's stream from its brains (--api) */
  readonly globalStats?: GlobalSourceStats;
}

export async function startSource(opts: SourceOptions, cfg: Config, brain: Brain, log: Logger): Promise<Source> {
  if (opts.api?.length) {
    if (opts.input !== undefined || opts.kubeconfig !== undefined || opts.master !== undefined)
      throw invalid("flag --api: cannot be combined with --input, --kubeconfig or --master");
    const { startGlobalSource } = await import("./global.ts");
    return startGlobalSource({ apis: opts.api, security: opts.security, onStats: opts.onGlobalStats, brain, log: log.child("global") });
  }
  if (opts.input !== undefined) {
    if (opts.kubeconfig !== undefined || opts.master !== undefined)
      throw invalid("flag --input: cannot be combined with --kubeconfig or --master");
    return startFileSource({ path: opts.input, brain, log: log.child("file") });
  }
  const { startKubeSource } = await import("./kube.ts");
  return startKubeSource({
    kubeconfig: opts.kubeconfig,
    master: opts.master,
    allNodes: opts.allNodes,
    brain,
    log: log.child("kube"),
    config: cfg,
    restClient: opts.restClient,
  });
}

/**
 * Upstream kube-proxy waits for its Node to exist and have an address before
 * it programs anything (pkg/proxy/node.go NewNodeManager: a poll every second,
 * for at most 5 minutes, then it fails; before 1.29 server.go getNodeIPs
 * backed off for ~30 s and went on with loopback). kpng follows the Node and
 * re-programs in place when it shows up, so it waits less and never fails:
 * what is bounded is only how long the first sync waits. 10 s: while it
 * waits nothing is programmed, cluster IPs included, so a Node registered
 * late (or never, as on a control plane without kubelets) costs Service
 * traffic that long; a kubelet registers its Node within seconds of
 * starting, and node ports follow a later registration in place.
 */
export const NODE_IPS_WAIT_MS = 10_000;

/** how often the wait for the node's IPs looks at the brain's Node before the first state exists */
const NODE_IPS_POLL_MS = 50;

/**
 * Resolves once the node's IPs are known, or after `timeoutMs` (logged):
 * with a cluster source the Node may be registered after kpng starts.
 * Returns the IPs (empty after a timeout). Known once the brain holds the
 * Node with an address, not once a node-local state does: the Node's list
 * (one object) is in long before the Services' and EndpointSlices' at scale
 * (50,000 services: ~0.3 s against 36 s on a loaded host), and a wait on the
 * first state timed out there, logging a Node "not found" that had been
 * listed. Checked at each revision and every NODE_IPS_POLL_MS before the
 * first (nothing is published before every kind is listed).
 */
export async function waitForNodeIPs(view: NodeView, opts: { timeoutMs?: number; log: Logger }): Promise<readonly string[]> {
  const timeoutMs = opts.timeoutMs ?? NODE_IPS_WAIT_MS;
  const known = () => {
    const ips = view.state?.nodeIPs.length ? view.state.nodeIPs : view.currentNodeIPs();
    return ips.length ? ips : undefined;
  };
  if (known()) return known()!;
  opts.log.info("waiting for the Node's InternalIP/ExternalIP", { node: view.nodeName, timeoutSeconds: timeoutMs / 1000 });
  const { promise, resolve } = Promise.withResolvers<readonly string[]>();
  const timer = setTimeout(() => {
    opts.log.warn("Node not found or without an address: node ports answer nowhere until it has one (or set --node-ip)", {
      node: view.nodeName,
      waitedSeconds: timeoutMs / 1000,
    });
    resolve([]);
  }, timeoutMs);
  const check = () => {
    if (known()) resolve(known()!);
  };
  const unsubscribe = view.subscribe(check);
  const poll = setInterval(check, NODE_IPS_POLL_MS);
  try {
    return await promise;
  } finally {
    clearTimeout(timer);
    clearInterval(poll);
    unsubscribe();
  }
}

/**
 * Before the first sync: node ports and health checks need the node's IPs. A
 * cluster source may register the Node after kpng starts, so wait for it
 * (bounded, or until `stopped`); a file is the whole cluster, so a Node
 * missing from it is only worth a warning. IPs given by flag need neither.
 * Either way the IPs follow the Node later.
 */
export async function nodeIPsBeforeFirstSync(
  view: NodeView,
  opts: { input?: string; nodeIPs: readonly string[]; stopped?: Promise<void>; log: Logger },
): Promise<void> {
  if (opts.input === undefined && !opts.nodeIPs.length)
    await Promise.race([waitForNodeIPs(view, { log: opts.log }), ...(opts.stopped ? [opts.stopped] : [])]);
  else if (view.state && !view.state.nodeIPs.length)
    opts.log.warn("the input file has no addresses for this Node: node ports answer nowhere until it does (or set --node-ip)", {
      node: view.nodeName,
      file: opts.input,
    });
}
