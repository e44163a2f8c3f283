// The brain's index of the cluster objects it reads. Applying an event says
// which services it touched, so the brain recomputes only those.

import type { K8sEndpointSlice, K8sNode, K8sObject, K8sService, Kind } from "./k8s/objects.ts";
import { SERVICE_NAME_LABEL } from "./model/endpoints.ts";
import { serviceKey } from "./state.ts";

export type ClusterEvent = { type: "upsert"; object: K8sObject } | { type: "delete"; kind: Kind; namespace: string; name: string };

export interface Touched {
  /** services whose Service object changed */
  services: Set<string>;
  /** services whose EndpointSlices changed */
  endpoints: Set<string>;
  nodes: Set<string>;
}

export class ClusterIndex {
  readonly services = new Map<string, K8sService>();
  /** service key -> slice name -> slice */
  readonly slices = new Map<string, Map<string, K8sEndpointSlice>>();
  readonly nodes = new Map<string, K8sNode>();
  /** `ns/slice` -> the service key it was filed under, so a relabelled slice moves */
  private readonly sliceOwner = new Map<string, string>();

  apply(ev: ClusterEvent, touched: Touched): void {
    if (ev.type === "upsert") this.upsert(ev.object, touched);
    else this.remove(ev.kind, ev.namespace, ev.name, touched);
  }

  private upsert(obj: K8sObject, touched: Touched) {
    const ns = obj.metadata.namespace ?? "";
    switch (obj.kind) {
      case "Service": {
        const key = serviceKey(ns, obj.metadata.name);
        this.services.set(key, obj);
        touched.services.add(key);
        return;
      }
      case "EndpointSlice": {
        const id = serviceKey(ns, obj.metadata.name);
        this.removeSlice(id, touched);
        const svc = obj.metadata.labels?.[SERVICE_NAME_LABEL];
        if (!svc) return;
        const key = serviceKey(ns, svc);
        let m = this.slices.get(key);
        if (!m) this.slices.set(key, (m = new Map()));
        m.set(obj.metadata.name, obj);
        this.sliceOwner.set(id, key);
        touched.endpoints.add(key);
        return;
      }
      case "Node":
        this.nodes.set(obj.metadata.name, obj);
        touched.nodes.add(obj.metadata.name);
        return;
    }
  }

  private remove(kind: Kind, ns: string, name: string, touched: Touched) {
    switch (kind) {
      case "Service": {
        const key = serviceKey(ns, name);
        if (this.services.delete(key)) touched.services.add(key);
        return;
      }
      case "EndpointSlice":
        this.removeSlice(serviceKey(ns, name), touched);
        return;
      case "Node":
        if (this.nodes.delete(name)) touched.nodes.add(name);
        return;
    }
  }

  private removeSlice(id: string, touched: Touched) {
    const owner = this.sliceOwner.get(id);
    if (!owner) return;
    this.sliceOwner.delete(id);
    const m = this.slices.get(owner);
    m?.delete(id.slice(id.indexOf("/") + 1));
    if (m && m.size === 0) this.slices.delete(owner);
    touched.endpoints.add(owner);
  }
}

export const newTouched = (): Touched => ({ services: new Set(), endpoints: new Set(), nodes: new Set() });
