// The one diff between two node-local snapshots, as ordered operations. The
// API's diff stream sends them as Set/Delete ops; the incremental backend feed
// turns them into setService/setEndpoint/... calls. The order is the one
// kpng's clients rely on: service sets, endpoint deletes and sets, service
// deletes last (a full-state client crashes on a service delete while its
// endpoints remain).
//
// Relies on the brain's guarantee that unchanged parts keep their identity.

import type { Endpoint, Service } from "../../gen/localv1/services_pb.ts";
import type { ServiceEndpoints } from "./state.ts";

export type StateOp =
  | { op: "setService"; key: string; service: Service }
  | { op: "deleteService"; key: string; service: Service }
  | { op: "setEndpoint"; key: string; service: Service; endpointKey: string; endpoint: Endpoint }
  | { op: "deleteEndpoint"; key: string; service: Service; endpointKey: string };

type Services = ReadonlyMap<string, ServiceEndpoints>;

/**
 * Operations turning `prev` into `next`, looking only at `keys` (the change
 * set) when given, else at every service of both.
 */
export function stateOps(prev: Services, next: Services, keys?: Iterable<string> | null): StateOp[] {
  const sets: StateOp[] = [];
  const eps: StateOp[] = [];
  const dels: StateOp[] = [];
  const todo = keys ?? new Set([...prev.keys(), ...next.keys()]);
  for (const key of todo) {
    const a = prev.get(key);
    const b = next.get(key);
    if (a === b) continue;
    if (b && a?.service !== b.service) sets.push({ op: "setService", key, service: b.service });
    const service = (b ?? a)!.service;
    if (a) {
      for (const [ek] of a.endpoints) if (!b?.endpoints.has(ek)) eps.push({ op: "deleteEndpoint", key, service, endpointKey: ek });
    }
    if (b) {
      for (const [ek, ep] of b.endpoints)
        if (a?.endpoints.get(ek) !== ep) eps.push({ op: "setEndpoint", key, service, endpointKey: ek, endpoint: ep });
    }
    if (a && !b) dels.push({ op: "deleteService", key, service: a.service });
  }
  return [...sets, ...eps, ...dels];
}
