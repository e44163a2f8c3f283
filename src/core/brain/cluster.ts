// The brain's index of the cluster objects it reads. Applying an event says
// which services it touched, so the brain recomputes only those.

import type { K8sEndpointSlice, K8sNode, K8sObject, K8sService, Kind } from "./k8s/objects.ts";
import { SERVICE_NAME_LABEL } from "./model/endpoints.ts";
import { sharedString } from "./shared-strings.ts";
import { serviceKey, splitServiceKey } from "./state.ts";

export type ClusterEvent = { type: "upsert"; object: K8sObject } | { type: "delete"; kind: Kind; namespace: string; name: string };

export interface Touched {
  /** services whose Service object changed */
  services: Set<string>;
  /** services whose EndpointSlices changed */
  endpoints: Set<string>;
  nodes: Set<string>;
}

/** The brain's index as everyone outside the brain sees it: read only (changes go in through the ingest). */
export interface ClusterView {
  readonly services: ReadonlyMap<string, K8sService>;
  readonly slices: ReadonlyMap<string, readonly K8sEndpointSlice[]>;
  readonly nodes: ReadonlyMap<string, K8sNode>;
  get(kind: Kind, ns: string, name: string): K8sObject | undefined;
  count(kind: Kind): number;
  names(kind: Kind): Iterable<[string, string]>;
}

export class ClusterIndex implements ClusterView {
  readonly services = new Map<string, K8sService>();
  /**
   * service key -> its slices. A list, not a map by name: nearly every service
   * has one slice, and a Map each is memory per service; a change looks
   * through that one service's slices.
   */
  readonly slices = new Map<string, K8sEndpointSlice[]>();
  readonly nodes = new Map<string, K8sNode>();
  /** `ns/slice` -> the service key it was filed under, so a relabelled slice moves */
  private readonly sliceOwner = new Map<string, string>();

  /** Applies one event; returns the service key of a Service's, null for other kinds. */
  apply(ev: ClusterEvent, touched: Touched): string | null {
    return ev.type === "upsert" ? this.upsert(ev.object, touched) : this.remove(ev.kind, ev.namespace, ev.name, touched);
  }

  private upsert(obj: K8sObject, touched: Touched): string | null {
    const ns = obj.metadata.namespace ?? "";
    switch (obj.kind) {
      case "Service": {
        const key = serviceKey(ns, obj.metadata.name);
        this.services.set(key, obj);
        touched.services.add(key);
        return key;
      }
      case "EndpointSlice": {
        const id = serviceKey(ns, obj.metadata.name);
        this.removeSlice(id, touched);
        const svc = obj.metadata.labels?.[SERVICE_NAME_LABEL];
        if (!svc) return null;
        const key = serviceKey(ns, svc);
        shareNames(obj);
        const list = this.slices.get(key);
        if (list) list.push(obj);
        else this.slices.set(key, [obj]);
        this.sliceOwner.set(id, key);
        touched.endpoints.add(key);
        return null;
      }
      case "Node":
        this.nodes.set(obj.metadata.name, obj);
        touched.nodes.add(obj.metadata.name);
        return null;
    }
  }

  private remove(kind: Kind, ns: string, name: string, touched: Touched): string | null {
    switch (kind) {
      case "Service": {
        const key = serviceKey(ns, name);
        if (this.services.delete(key)) touched.services.add(key);
        return key;
      }
      case "EndpointSlice":
        this.removeSlice(serviceKey(ns, name), touched);
        return null;
      case "Node":
        if (this.nodes.delete(name)) touched.nodes.add(name);
        return null;
    }
  }

  private removeSlice(id: string, touched: Touched) {
    const owner = this.sliceOwner.get(id);
    if (!owner) return;
    this.sliceOwner.delete(id);
    const list = this.slices.get(owner);
    const [, name] = splitServiceKey(id);
    const at = list?.findIndex((s) => s.metadata.name === name) ?? -1;
    if (at >= 0) list!.splice(at, 1);
    if (list?.length === 0) this.slices.delete(owner);
    touched.endpoints.add(owner);
  }

  /** the object held under kind, namespace ("" for Nodes) and name */
  get(kind: Kind, ns: string, name: string): K8sObject | undefined {
    switch (kind) {
      case "Service":
        return this.services.get(serviceKey(ns, name));
      case "EndpointSlice": {
        const owner = this.sliceOwner.get(serviceKey(ns, name));
        return owner === undefined ? undefined : this.slices.get(owner)?.find((s) => s.metadata.name === name);
      }
      case "Node":
        return this.nodes.get(name);
    }
  }

  /** how many objects of kind are held */
  count(kind: Kind): number {
    return kind === "Service" ? this.services.size : kind === "EndpointSlice" ? this.sliceOwner.size : this.nodes.size;
  }

  /** [namespace, name] of every object of kind held */
  *names(kind: Kind): Iterable<[string, string]> {
    const keys = kind === "Service" ? this.services.keys() : kind === "EndpointSlice" ? this.sliceOwner.keys() : null;
    if (!keys) for (const name of this.nodes.keys()) yield ["", name];
    else for (const key of keys) yield splitServiceKey(key);
  }
}

/** The slice's node names and zones become the pool's copies (equal strings: a change of nothing but memory). */
function shareNames(slice: K8sEndpointSlice) {
  const eps = slice.endpoints;
  if (!eps) return;
  for (let i = 0; i < eps.length; i++) {
    const ep = eps[i];
    if (ep.nodeName !== undefined) ep.nodeName = sharedString(ep.nodeName);
    if (ep.zone !== undefined) ep.zone = sharedString(ep.zone);
  }
}

export const newTouched = (): Touched => ({ services: new Set(), endpoints: new Set(), nodes: new Set() });
