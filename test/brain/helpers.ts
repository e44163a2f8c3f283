import { Brain } from "../../src/core/brain/brain.ts";
import type { K8sObject, Kind } from "../../src/core/brain/k8s/objects.ts";
import { kinds } from "../../src/core/brain/k8s/objects.ts";
import type { NodeState, ServiceEndpoints } from "../../src/core/brain/state.ts";

/** A brain holding `objects`, every kind synced. */
export function brainWith(objects: K8sObject[], opts: { serviceProxyName?: string } = {}): Brain {
  const brain = new Brain(opts);
  brain.apply(objects.map((object) => ({ type: "upsert" as const, object })));
  for (const k of kinds) brain.markSynced(k as Kind);
  brain.flush();
  return brain;
}

export function localState(objects: K8sObject[], nodeName = "node-1", opts: { serviceProxyName?: string } = {}): NodeState {
  const state = brainWith(objects, opts).view(nodeName).state;
  if (!state) throw new Error("no state");
  return state;
}

/**
 * Endpoints of one service as `ip -> flags`: I internal, E external,
 * L local, T terminating. Reads like the rules in the tests.
 */
export function scopes(se: ServiceEndpoints | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const ep of se?.endpoints.values() ?? []) {
    const ip = [...(ep.IPs?.V4 ?? []), ...(ep.IPs?.V6 ?? [])][0];
    out[ip] = (ep.Scopes?.Internal ? "I" : "") + (ep.Scopes?.External ? "E" : "") + (ep.Local ? "L" : "") + (ep.Terminating ? "T" : "");
  }
  return out;
}
