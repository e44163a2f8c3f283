// Turns "here is everything now" (a re-read file, a relist after 410 Gone)
// into the upsert/delete events that changed, so an unchanged object costs
// nothing downstream.

import type { ClusterEvent } from "../brain/cluster.ts";
import type { K8sObject, Kind } from "../brain/k8s/objects.ts";

/** `Kind/namespace/name` ("" namespace for Nodes): how the listing and the sources name an object. */
export const objectId = (kind: Kind, namespace: string, name: string) => `${kind}/${namespace}/${name}`;
const idOf = (o: K8sObject) => objectId(o.kind, o.metadata.namespace ?? "", o.metadata.name);

export class Listing {
  /** id -> fingerprint of the object last sent */
  private readonly seen = new Map<string, bigint | number>();

  /** Events that turn the last listing of `kind` into `objects`. */
  replace(kind: Kind, objects: readonly K8sObject[]): ClusterEvent[] {
    const events = objects.flatMap((o) => this.upsert(o));
    events.push(...this.missing(kind, new Set(objects.map(idOf))));
    return events;
  }

  /** Deletes of the objects of `kind` whose ids a complete list did not hold. */
  missing(kind: Kind, present: ReadonlySet<string>): ClusterEvent[] {
    const events: ClusterEvent[] = [];
    for (const id of this.seen.keys()) {
      if (!id.startsWith(kind + "/") || present.has(id)) continue;
      this.seen.delete(id);
      const [, namespace, name] = id.split("/");
      events.push({ type: "delete", kind, namespace, name });
    }
    return events;
  }

  /** Record a single watched change, returning the event (or nothing when it changes nothing). */
  upsert(o: K8sObject): ClusterEvent[] {
    const id = idOf(o);
    const fp = fingerprint(o);
    if (this.seen.get(id) === fp) return [];
    this.seen.set(id, fp);
    return [{ type: "upsert", object: o }];
  }

  delete(kind: Kind, namespace: string, name: string): ClusterEvent[] {
    return this.seen.delete(objectId(kind, namespace, name)) ? [{ type: "delete", kind, namespace, name }] : [];
  }
}

// Not resourceVersion: a hand-edited `kubectl get -o yaml` dump keeps it. A
// 64-bit hash rather than the JSON itself, which would keep a second copy of
// the whole cluster in memory.
const fingerprint = (o: K8sObject) => Bun.hash(JSON.stringify(o));
