// Topology-aware routing for Cluster-policy traffic (never Local): narrow the
// ready endpoints to the ones hinted for this node, or else for this node's
// zone. Hints are all-or-nothing, as upstream kube-proxy's CategorizeEndpoints:
// if any ready endpoint lacks a hint, or no hint names this node/zone, the
// hints are ignored and every ready endpoint is used.

/** an endpoint's hints as its EndpointSlice holds them */
export interface Hints {
  readonly forNodes?: ReadonlyArray<{ readonly name: string }> | null;
  readonly forZones?: ReadonlyArray<{ readonly name: string }> | null;
}

export interface NodeInfo {
  name: string;
  /** the node's `topology.kubernetes.io/zone` label, "" when unknown */
  zone: string;
}

/** whether `hints` names `want` */
function names(hints: ReadonlyArray<{ readonly name: string }>, want: string): boolean {
  for (let i = 0; i < hints.length; i++) if (hints[i].name === want) return true;
  return false;
}

function narrow<T>(ready: readonly T[], hintsOf: (e: T) => Hints | undefined, which: "forNodes" | "forZones", want: string): T[] | null {
  if (!want) return null;
  let named = false;
  for (let i = 0; i < ready.length; i++) {
    const h = hintsOf(ready[i])?.[which];
    if (!h?.length) return null;
    if (!named && names(h, want)) named = true;
  }
  return named ? ready.filter((e) => names(hintsOf(e)![which]!, want)) : null;
}

/** `ready` must be non-empty ready endpoints, `hintsOf` gives each one's hints; returns the subset this node should use. */
export function narrowByTopology<T>(ready: readonly T[], node: NodeInfo, hintsOf: (e: T) => Hints | undefined): readonly T[] {
  return narrow(ready, hintsOf, "forNodes", node.name) ?? narrow(ready, hintsOf, "forZones", node.zone) ?? ready;
}
