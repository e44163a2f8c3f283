// Synthetic clusters for API tests and benches, in the shape `kubectl get
// services,endpointslices,nodes -A -o json` prints, on the shared address
// plan. Services are `ns-<i % 10>/svc-<i>`; each has one EndpointSlice with
// `endpoints` pods spread over `nodes` nodes.

import { v4 } from "../fixtures/addresses.ts";

export interface GenOptions {
  services: number;
  endpoints: number;
  nodes?: number;
  /** per-service override of the number of ready endpoints (for edits) */
  readyOf?: (i: number) => number;
}

export const nodeName = (k: number) => `node-${k}`;

export function genCluster(opts: GenOptions): { apiVersion: "v1"; kind: "List"; items: unknown[] } {
  const nodes = opts.nodes ?? 3;
  const items: unknown[] = [];
  for (let k = 1; k <= nodes; k++) {
    items.push({
      apiVersion: "v1",
      kind: "Node",
      metadata: { name: nodeName(k), labels: { "kubernetes.io/hostname": nodeName(k), "topology.kubernetes.io/zone": `zone-${k}` } },
      status: { addresses: [{ type: "InternalIP", address: v4.node(k) }] },
    });
  }
  for (let i = 0; i < opts.services; i++) {
    const ns = `ns-${i % 10}`;
    const name = `svc-${i}`;
    // Cluster IPs wrap after 4096 services; the brain does not need them unique.
    const ip = v4.clusterIP(i + 1);
    items.push({
      apiVersion: "v1",
      kind: "Service",
      metadata: { name, namespace: ns },
      spec: {
        type: "ClusterIP",
        clusterIP: ip,
        clusterIPs: [ip],
        ipFamilies: ["IPv4"],
        ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: "http" }],
      },
    });
    const ready = opts.readyOf?.(i) ?? opts.endpoints;
    const endpoints = [];
    for (let j = 0; j < opts.endpoints; j++) {
      const node = (j % nodes) + 1;
      // Distinct addresses across services (the pod range wraps after 65,536).
      const k = i * opts.endpoints + j;
      endpoints.push({
        addresses: [v4.pod((k >> 8) & 255, k & 255)],
        conditions: { ready: j < ready },
        nodeName: nodeName(node),
        targetRef: { kind: "Pod", name: `${name}-${j}`, namespace: ns },
      });
    }
    items.push({
      apiVersion: "discovery.k8s.io/v1",
      kind: "EndpointSlice",
      metadata: { name: `${name}-abcde`, namespace: ns, labels: { "kubernetes.io/service-name": name } },
      addressType: "IPv4",
      ports: [{ name: "http", protocol: "TCP", port: 8080 }],
      endpoints,
    });
  }
  return { apiVersion: "v1", kind: "List", items };
}

export const genClusterJSON = (opts: GenOptions) => JSON.stringify(genCluster(opts));
