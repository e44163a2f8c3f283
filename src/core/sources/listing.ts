// Turns "here is everything now" (a re-read file, a relist after 410 Gone)
// into the upsert/delete events that changed, so an unchanged object costs
// nothing downstream.

import type { ClusterEvent } from "../brain/cluster.ts";
import type { K8sObject, Kind } from "../brain/k8s/objects.ts";

const idOf = (o: K8sObject) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;

export class Listing {
  /** id -> fingerprint of the object last sent */
  private readonly seen = new Map<string, bigint | number>();

  /** Events that turn the last listing of `kind` into `objects`. */
  replace(kind: Kind, objects: readonly K8sObject[]): ClusterEvent[] {
    const events: ClusterEvent[] = [];
    const now = new Set<string>();
    for (const o of objects) {
      const id = idOf(o);
      now.add(id);
      const fp = fingerprint(o);
      if (this.seen.get(id) === fp) continue;
      this.seen.set(id, fp);
      events.push({ type: "upsert", object: o });
    }
    for (const id of this.seen.keys()) {
      if (!id.startsWith(kind + "/") || now.has(id)) continue;
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
    return this.seen.delete(`${kind}/${namespace}/${name}`) ? [{ type: "delete", kind, namespace, name }] : [];
  }
}

// Not resourceVersion: a hand-edited `kubectl get -o yaml` dump keeps it. A
// 64-bit hash rather than the JSON itself, which would keep a second copy of
// the whole cluster in memory.
const fingerprint = (o: K8sObject) => Bun.hash(JSON.stringify(o));
