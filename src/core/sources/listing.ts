// Turns "here is everything now" (a re-read file, a relist after 410 Gone)
// into the upsert/delete events that changed, so an unchanged object costs
// nothing downstream.

import type { ClusterEvent, ClusterView } from "../brain/cluster.ts";
import type { K8sObject, Kind } from "../brain/k8s/objects.ts";

/** `Kind/namespace/name` ("" namespace for Nodes): how the listing and the sources name an object. */
export const objectId = (kind: Kind, namespace: string, name: string) => `${kind}/${namespace}/${name}`;
const idOf = (o: K8sObject) => objectId(o.kind, o.metadata.namespace ?? "", o.metadata.name);

export class Listing {
  /**
   * What was sent last is what the brain's index holds (its events are
   * applied at once): comparing against it costs no map of its own, and a
   * first list does no comparing at all. An object the index does not file
   * (a slice without a service) is sent again on every change, to no effect.
   */
  constructor(private readonly index: ClusterView) {}

  /** Events that turn the last listing of `kind` into `objects`. */
  replace(kind: Kind, objects: readonly K8sObject[]): ClusterEvent[] {
    const events = objects.flatMap((o) => this.upsert(o));
    events.push(...this.missing(kind, new Set(objects.map(idOf))));
    return events;
  }

  /** Deletes of the objects of `kind` whose ids a complete list did not hold. */
  missing(kind: Kind, present: ReadonlySet<string>): ClusterEvent[] {
    const events: ClusterEvent[] = [];
    for (const [namespace, name] of this.index.names(kind)) {
      if (!present.has(objectId(kind, namespace, name))) events.push({ type: "delete", kind, namespace, name });
    }
    return events;
  }

  /** A single watched change as events (none when it changes nothing). */
  upsert(o: K8sObject): ClusterEvent[] {
    const prev = this.index.get(o.kind, o.metadata.namespace ?? "", o.metadata.name);
    return prev && sameJSON(prev, o) ? [] : [{ type: "upsert", object: o }];
  }

  delete(kind: Kind, namespace: string, name: string): ClusterEvent[] {
    return this.index.get(kind, namespace, name) ? [{ type: "delete", kind, namespace, name }] : [];
  }
}

/**
 * Deep equality of two JSON values (validated objects hold nothing else), key
 * order ignored. resourceVersion is not among what the schemas keep, so a
 * relist that brings an object back unchanged compares equal.
 */
export function sameJSON(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJSON(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  let n = 0;
  for (const k in x) {
    if (x[k] === undefined) continue;
    n++;
    if (!sameJSON(x[k], y[k])) return false;
  }
  for (const k in y) if (y[k] !== undefined) n--;
  return n === 0;
}
