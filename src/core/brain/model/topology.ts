// Topology-aware routing for Cluster-policy traffic (never Local): narrow the
// ready endpoints to the ones hinted for this node, or else for this node's
// zone. Hints are all-or-nothing, as upstream kube-proxy's CategorizeEndpoints:
// if any ready endpoint lacks a hint, or no hint names this node/zone, the
// hints are ignored and every ready endpoint is used.

export interface Hinted {
  forNodes: readonly string[] | undefined;
  forZones: readonly string[] | undefined;
}

export interface NodeInfo {
  name: string;
  /** the node's `topology.kubernetes.io/zone` label, "" when unknown */
  zone: string;
}

function narrow<T>(ready: readonly T[], hints: (e: T) => readonly string[] | undefined, want: string): T[] | null {
  if (!want) return null;
  let names = false;
  for (const e of ready) {
    const h = hints(e);
    if (!h?.length) return null;
    if (h.includes(want)) names = true;
  }
  return names ? ready.filter((e) => hints(e)!.includes(want)) : null;
}

/** `ready` must be non-empty ready endpoints; returns the subset this node should use. */
export function narrowByTopology<T extends Hinted>(ready: readonly T[], node: NodeInfo): readonly T[] {
  return narrow(ready, (e) => e.forNodes, node.name) ?? narrow(ready, (e) => e.forZones, node.zone) ?? ready;
}
