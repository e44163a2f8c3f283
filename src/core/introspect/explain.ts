// Why each endpoint of a Service is used or left out, per scope. Computed on
// request (`kpng get`) from the same candidates the brain computes with, by
// upstream kube-proxy's rules (CategorizeEndpoints, model/endpoints.ts): the
// hot path never pays for reasons nobody asks for. A test holds this against
// endpointsModel's choices.

import type { Candidate, ScopeOptions } from "../brain/model/endpoints.ts";
import { narrowByTopology, type NodeInfo } from "../brain/model/topology.ts";

export type Reason = "NotReady" | "Terminating" | "OtherNode" | "TopologyNode" | "TopologyZone" | "NoExternalTraffic";

export interface ScopeUse {
  used: boolean;
  reason?: Reason;
  message?: string;
}

const USED: ScopeUse = { used: true };
const out = (reason: Reason, message: string): ScopeUse => ({ used: false, reason, message });

/** a candidate that is neither used nor a fallback: not ready and, if terminating, not serving */
const notReady = (c: Candidate): ScopeUse =>
  c.terminating && !c.serving ? out("NotReady", "terminating and no longer serving") : out("NotReady", "not ready");

/** a ready endpoint elsewhere took precedence over this terminating one */
const terminating = (c: Candidate, where: string): ScopeUse =>
  c.serving ? out("Terminating", `terminating: ready endpoints ${where}exist, so it is no fallback`) : notReady(c);

/** Each candidate's use in one traffic class, `local` = its policy is Local. */
export function explainScope(fam: readonly Candidate[], local: boolean, node: NodeInfo): ScopeUse[] {
  if (local) {
    const anyLocalReady = fam.some((c) => c.local && c.ready);
    return fam.map((c) => {
      if (!c.local) return out("OtherNode", `on node ${c.ep.nodeName || "(none)"}: the traffic policy is Local`);
      if (c.ready) return USED;
      if (anyLocalReady) return c.terminating ? terminating(c, "on this node ") : notReady(c);
      return c.serving && c.terminating ? USED : notReady(c);
    });
  }
  const ready = fam.filter((c) => c.ready);
  if (!ready.length) return fam.map((c) => (c.serving && c.terminating ? USED : notReady(c)));
  const narrowed = new Set(narrowByTopology(ready, node, (c) => c.ep.hints));
  // node hints win when they apply (topology.ts): the same narrowing without a zone says whether they did
  const byNode = narrowed.size < ready.length && narrowByTopology(ready, { name: node.name, zone: "" }, (c) => c.ep.hints) !== ready;
  return fam.map((c) => {
    if (narrowed.has(c)) return USED;
    if (!c.ready) return c.terminating ? terminating(c, "") : notReady(c);
    return byNode
      ? out("TopologyNode", `topology hints give it to other nodes (${(c.ep.hints?.forNodes ?? []).map((h) => h.name).join(",")})`)
      : out("TopologyZone", `topology hints give it to other zones (${(c.ep.hints?.forZones ?? []).map((h) => h.name).join(",")})`);
  });
}

export interface Explained {
  candidate: Candidate;
  internal: ScopeUse;
  external: ScopeUse;
}

/** Every candidate with its use in both scopes; each IP family on its own, as the brain computes them. */
export function explainEndpoints(cands: readonly Candidate[], opts: ScopeOptions): Explained[] {
  const result: Explained[] = [];
  for (const family of ["v4", "v6"] as const) {
    const fam = cands.filter((c) => c.family === family);
    if (!fam.length) continue;
    const internal = explainScope(fam, opts.internalLocal, opts.node);
    const external = opts.external ? explainScope(fam, opts.externalLocal, opts.node) : undefined;
    fam.forEach((c, i) =>
      result.push({
        candidate: c,
        internal: internal[i],
        external: external?.[i] ?? out("NoExternalTraffic", "the Service has no node port, external or load-balancer IP"),
      }),
    );
  }
  return result;
}
