// A fake HNS: records every call and keeps what was created, so tests can
// assert call sequences and a restarted backend finds its earlier objects.
// Used on Linux (there is no HNS) and, printing each call, by `--dry-run`.
// IDs are deterministic GUID-shaped counters.

import { KpngError } from "../../src/host/toolkit/index.ts";
import type { HcnLoadBalancer, HnsCall, HnsClient, HnsEndpoint, HnsLoadBalancerInfo } from "./hns.ts";

export interface HnsRecorderOptions {
  /** called with every call, e.g. to print it as a JSON line */
  onCall?: (call: HnsCall) => void;
  /** make a call fail (HNS returned an error HRESULT) */
  fail?: (call: HnsCall) => boolean;
}

export interface HnsRecorder extends HnsClient {
  readonly calls: HnsCall[];
  readonly endpoints: Map<string, HnsEndpoint>;
  readonly loadBalancers: Map<string, HcnLoadBalancer>;
  /** an endpoint the CNI plugin created for a pod on this node */
  addLocalEndpoint(ip: string): string;
  clear(): void;
}

export const fakeGuid = (n: number) => `00000000-0000-0000-0000-${n.toString(16).padStart(12, "0")}`;

export function hnsRecorder(opts: HnsRecorderOptions = {}): HnsRecorder {
  const calls: HnsCall[] = [];
  const endpoints = new Map<string, HnsEndpoint>();
  const loadBalancers = new Map<string, HcnLoadBalancer>();
  let next = 1;
  const record = (c: HnsCall) => {
    calls.push(c);
    opts.onCall?.(c);
    if (opts.fail?.(c)) throw new KpngError("internal", `hns: ${c.call} failed (recorded failure)`);
  };
  const mustExist = (map: Map<string, unknown>, id: string, what: string) => {
    if (!map.has(id)) throw new KpngError("not_found", `hns: ${what} ${id} not found`);
  };
  return {
    calls,
    endpoints,
    loadBalancers,
    addLocalEndpoint(ip) {
      const id = fakeGuid(next++);
      endpoints.set(id, { id, ip, remote: false });
      return id;
    },
    clear: () => void calls.splice(0),
    async listEndpoints() {
      record({ call: "HcnEnumerateEndpoints" });
      return [...endpoints.values()].map((e) => ({ ...e }));
    },
    async createEndpoint(settings) {
      const id = fakeGuid(next++);
      record({ call: "HcnCreateEndpoint", id, settings });
      endpoints.set(id, { id, ip: settings.IpConfigurations[0]!.IpAddress, remote: true });
      return id;
    },
    async deleteEndpoint(id) {
      record({ call: "HcnDeleteEndpoint", id });
      mustExist(endpoints, id, "endpoint");
      endpoints.delete(id);
    },
    async listLoadBalancers(): Promise<HnsLoadBalancerInfo[]> {
      record({ call: "HcnEnumerateLoadBalancers" });
      return [...loadBalancers].map(([id, settings]) => ({ id, settings: structuredClone(settings) }));
    },
    async createLoadBalancer(settings) {
      const id = fakeGuid(next++);
      record({ call: "HcnCreateLoadBalancer", id, settings });
      loadBalancers.set(id, structuredClone(settings));
      return id;
    },
    async updateLoadBalancer(id, settings) {
      record({ call: "HcnModifyLoadBalancer", id, settings });
      mustExist(loadBalancers, id, "load balancer");
      loadBalancers.set(id, structuredClone(settings));
    },
    async deleteLoadBalancer(id) {
      record({ call: "HcnDeleteLoadBalancer", id });
      mustExist(loadBalancers, id, "load balancer");
      loadBalancers.delete(id);
    },
  };
}
