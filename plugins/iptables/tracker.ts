// The backend's own copy of the desired state, fed by the incremental calls,
// and the set of services touched since the last sync. A call that repeats
// what is already known (a brain restart re-sending every set) marks
// nothing: unchanged services are never rewritten.

import { type Endpoint, sameEndpoint, sameService, type Service, serviceKey } from "../../src/host/toolkit/index.ts";

export interface TrackedService {
  service: Service;
  endpoints: ReadonlyMap<string, Endpoint>;
}

export class ChangeTracker {
  private readonly services = new Map<string, Service>();
  private readonly endpoints = new Map<string, Map<string, Endpoint>>();
  private dirty = new Set<string>();
  private endpointCount = 0;

  setService(service: Service) {
    const key = serviceKey(service.Namespace, service.Name);
    const old = this.services.get(key);
    if (old && (old === service || sameService(old, service))) return;
    this.services.set(key, service);
    this.dirty.add(key);
  }

  deleteService(namespace: string, name: string) {
    const key = serviceKey(namespace, name);
    const had = this.services.delete(key);
    // Endpoints go with their service: the brain deletes them first anyway.
    const eps = this.endpoints.get(key);
    this.endpointCount -= eps?.size ?? 0;
    if (this.endpoints.delete(key) || had) this.dirty.add(key);
  }

  setEndpoint(namespace: string, serviceName: string, key: string, endpoint: Endpoint) {
    const sk = serviceKey(namespace, serviceName);
    let eps = this.endpoints.get(sk);
    if (!eps) this.endpoints.set(sk, (eps = new Map()));
    const old = eps.get(key);
    if (old && (old === endpoint || sameEndpoint(old, endpoint))) return;
    if (!old) this.endpointCount++;
    eps.set(key, endpoint);
    this.dirty.add(sk);
  }

  deleteEndpoint(namespace: string, serviceName: string, key: string) {
    const sk = serviceKey(namespace, serviceName);
    const eps = this.endpoints.get(sk);
    if (!eps?.delete(key)) return;
    this.endpointCount--;
    if (!eps.size) this.endpoints.delete(sk);
    this.dirty.add(sk);
  }

  /** Services touched since the last call, then forgets them. */
  takeDirty(): Set<string> {
    const d = this.dirty;
    this.dirty = new Set();
    return d;
  }

  /** The service with its endpoints; undefined when the service is not (or no longer) known. */
  get(key: string): TrackedService | undefined {
    const service = this.services.get(key);
    return service && { service, endpoints: this.endpoints.get(key) ?? new Map() };
  }

  keys(): IterableIterator<string> {
    return this.services.keys();
  }

  get size() {
    return this.services.size;
  }

  /** endpoints of every known service */
  get endpointTotal() {
    return this.endpointCount;
  }
}
