// Picks the source of cluster objects: a file (`--input`) or the API server.

import type { Brain } from "../brain/brain.ts";
import type { Config } from "../config/config.ts";
import { invalid } from "../errors.ts";
import type { Logger } from "../log.ts";
import { startFileSource } from "./file.ts";
import type { SourceStats } from "./kube.ts";

export interface SourceOptions {
  input?: string;
  kubeconfig?: string;
  master?: string;
}

export interface Source {
  close(): void;
  /** API-server sources count what they receive (for metrics); files have nothing to count */
  readonly stats?: SourceStats;
}

export async function startSource(opts: SourceOptions, cfg: Config, brain: Brain, log: Logger): Promise<Source> {
  if (opts.input !== undefined) {
    if (opts.kubeconfig !== undefined || opts.master !== undefined) throw invalid("flag --input: cannot be combined with --kubeconfig or --master");
    return startFileSource({ path: opts.input, brain, log: log.child("file") });
  }
  const { startKubeSource } = await import("./kube.ts");
  return startKubeSource({ kubeconfig: opts.kubeconfig, master: opts.master, brain, log: log.child("kube"), config: cfg });
}

/** The node's InternalIP addresses (one per family), the default for node ports. */
export function nodeIPsFromBrain(brain: Brain, nodeName: string): string[] {
  const addrs = brain.index.nodes.get(nodeName)?.status?.addresses ?? [];
  const internal = addrs.filter((a) => a.type === "InternalIP").map((a) => a.address);
  return internal.length ? internal : addrs.filter((a) => a.type === "ExternalIP").map((a) => a.address);
}
