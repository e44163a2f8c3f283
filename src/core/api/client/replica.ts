// Rebuilds node-local states from what the wire carries, with the brain's
// identity guarantee: an unchanged service or endpoint keeps its object, so
// `stateOps` and backend feeds stay O(change). After a
// resync (a new stream after a reconnect, or a full state from Next) the new
// snapshot is compared with the last one: unchanged parts are suppressed and
// what disappeared becomes a delete, so a brain restart costs a backend only
// the real differences.

import { equals, fromBinary } from "@bufbuild/protobuf";
import { EndpointSchema, ServiceSchema, Set as SetKind, type Endpoint, type Service } from "../../../gen/localv1/services_pb.ts";
import type { Revision } from "../../brain/brain.ts";
import type { ChangeSet } from "../../wire/ops.ts";
import { decodeEndpoint } from "./decode-endpoint.ts";
import { hash53 } from "../../wire/item-hash.ts";
import type { NodeState, ServiceEndpoints } from "../../brain/state.ts";

interface Draft {
  service: Service | undefined;
  endpoints: Map<string, Endpoint>;
}

/** One complete service as Next delivers it. */
export interface SnapshotEntry {
  service: Service;
  endpoints: Iterable<[string, Endpoint]>;
}

export class Replica {
  state: NodeState | null = null;
  /** a hash of the wire bytes each object was decoded from, to recognise a resent unchanged object (see item-hash.ts) */
  private readonly wire = new WeakMap<Service | Endpoint, number>();

  constructor(readonly nodeName: string) {}

  /** Applies one change set; null when it changed nothing (an unchanged resync). */
  applyChangeSet(cs: ChangeSet): Revision | null {
    const prev = this.state?.services ?? new Map<string, ServiceEndpoints>();
    const drafts = new Map<string, Draft>();
    const draft = (key: string): Draft => {
      let d = drafts.get(key);
      if (!d) {
        const old = cs.reset ? undefined : prev.get(key);
        d = { service: old?.service, endpoints: new Map(old?.endpoints ?? []) };
        drafts.set(key, d);
      }
      return d;
    };
    for (const op of cs.ops) {
      if (op.op === "set") {
        if (op.set === SetKind.ServicesSet) {
          const old = prev.get(op.path)?.service;
          draft(op.path).service = old && this.sameWire(old, op.bytes) ? old : this.decodeService(op.bytes);
        } else if (op.set === SetKind.EndpointsSet) {
          const [svcKey, epKey] = splitEndpointPath(op.path);
          const old = prev.get(svcKey)?.endpoints.get(epKey);
          draft(svcKey).endpoints.set(epKey, old && this.sameWire(old, op.bytes) ? old : this.decodeEndpoint(op.bytes));
        }
      } else if (op.op === "delete") {
        if (op.set === SetKind.ServicesSet) {
          const d = draft(op.path);
          d.service = undefined;
          d.endpoints.clear();
        } else if (op.set === SetKind.EndpointsSet) {
          const [svcKey, epKey] = splitEndpointPath(op.path);
          draft(svcKey).endpoints.delete(epKey);
        }
      }
    }
    if (cs.reset) for (const key of prev.keys()) draft(key); // untouched after a resync = gone
    return this.commit(drafts);
  }

  /** Replaces the whole state (Next); unchanged services and endpoints keep their objects. */
  applySnapshot(entries: Iterable<[string, SnapshotEntry]>): Revision | null {
    const prev = this.state?.services ?? new Map<string, ServiceEndpoints>();
    const drafts = new Map<string, Draft>();
    for (const [key, e] of entries) {
      const old = prev.get(key);
      const service = old && equals(ServiceSchema, old.service, e.service) ? old.service : e.service;
      const endpoints = new Map<string, Endpoint>();
      for (const [ek, ep] of e.endpoints) {
        const o = old?.endpoints.get(ek);
        endpoints.set(ek, o && equals(EndpointSchema, o, ep) ? o : ep);
      }
      drafts.set(key, { service, endpoints });
    }
    for (const key of prev.keys()) if (!drafts.has(key)) drafts.set(key, { service: undefined, endpoints: new Map() });
    return this.commit(drafts);
  }

  /** Forgets everything: the next change set is a first sync for the consumer. */
  clear(): void {
    this.state = null;
  }

  private commit(drafts: Map<string, Draft>): Revision | null {
    const prev = this.state;
    const services = new Map(prev?.services ?? []);
    const change = new Set<string>();
    for (const [key, d] of drafts) {
      const old = services.get(key);
      // Endpoints without their service cannot be used; kpng servers never send them.
      if (!d.service) {
        if (old) {
          services.delete(key);
          change.add(key);
        }
        continue;
      }
      if (old && old.service === d.service && sameEndpoints(old.endpoints, d.endpoints)) continue;
      services.set(key, { service: d.service, endpoints: d.endpoints });
      change.add(key);
    }
    if (prev && change.size === 0) return null;
    this.state = { nodeName: this.nodeName, rev: (prev?.rev ?? 0) + 1, services };
    return { state: this.state, change: prev ? change : null };
  }

  private decodeService(bytes: Uint8Array): Service {
    const msg = fromBinary(ServiceSchema, bytes);
    this.wire.set(msg, hash53(bytes));
    return msg;
  }

  private decodeEndpoint(bytes: Uint8Array): Endpoint {
    const msg = decodeEndpoint(bytes);
    this.wire.set(msg, hash53(bytes));
    return msg;
  }

  private sameWire(obj: Service | Endpoint, bytes: Uint8Array): boolean {
    return this.wire.get(obj) === hash53(bytes);
  }
}

function sameEndpoints(a: ReadonlyMap<string, Endpoint>, b: ReadonlyMap<string, Endpoint>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of b) if (a.get(k) !== v) return false;
  return true;
}

/** `ns/svc/key` -> [`ns/svc`, `key`] */
export function splitEndpointPath(path: string): [string, string] {
  const i = path.lastIndexOf("/");
  return [path.slice(0, i), path.slice(i + 1)];
}
