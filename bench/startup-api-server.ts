// The API server side of `bun run bench startup`, run by the bench *inside*
// the node's network namespace (`ip netns exec NS bun bench/startup-api-server.ts
// SERVICES POD_V6 DIR`): the in-repo test API server over HTTPS with the
// cluster a real API server would hold, objects shaped as a real 1.36 server
// sends them (uid, creationTimestamp, managedFields, every defaulted field),
// so list and decode cost what they cost against a real cluster.
//
// Prints `ready <kubeconfig>` once listening; then reads commands on stdin:
// `change <n>` switches the last service's slice to generation n (one
// endpoint replaced, as a rollout does), answering `changed <n>`; `stats`
// answers `listMs <ms>`, the time it spent building list answers.
//
// Services are IPv6 single-stack: the address plan's IPv4 service range holds
// only 4,096 cluster IPs. The last service's one endpoint is the test pod
// (POD_V6), so a connect to it proves the rules are in the kernel.

import { createInterface } from "node:readline";
import { v4, v6 } from "../test/fixtures/addresses.ts";
import { FakeApiServer, makeTestCert } from "../test/harness/api-server.ts";

export const ENDPOINTS = 10;
export const NODES = 100;
export const NODE_NAME = "node-0";
export const lastServiceIP = (services: number) => v6.clusterIP(services);

/**
 * RFC 5952 form: the real API server refuses any other in an EndpointSlice
 * (`2001:db8:2:0::3` must be `2001:db8:2::3`), the address plan's node 0 pods
 * are written so.
 */
const canonicalV6 = (ip: string) => new URL(`http://[${ip}]`).hostname.slice(1, -1);

const uid = (i: number, kind: number) => `${kind.toString(16).padStart(8, "0")}-0000-4000-8000-${i.toString(16).padStart(12, "0")}`;
const created = "2026-11-20T10:00:00Z";
const managed = (manager: string, fields: Record<string, unknown>) => [
  { manager, operation: "Update", apiVersion: "v1", time: created, fieldsType: "FieldsV1", fieldsV1: fields },
];

export function service(i: number) {
  const ns = `ns-${i % 50}`;
  const name = `svc-${i}`;
  const ip = v6.clusterIP(i + 1);
  return {
    kind: "Service",
    metadata: {
      name,
      namespace: ns,
      uid: uid(i, 1),
      creationTimestamp: created,
      labels: { app: name, "app.kubernetes.io/part-of": "bench" },
      managedFields: managed("kubectl-client-side-apply", {
        "f:metadata": { "f:labels": { ".": {}, "f:app": {} } },
        "f:spec": {
          "f:ports": {
            ".": {},
            'k:{"port":80,"protocol":"TCP"}': { ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {} },
          },
          "f:selector": {},
          "f:sessionAffinity": {},
          "f:type": {},
        },
      }),
    },
    spec: {
      ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }],
      selector: { app: name },
      clusterIP: ip,
      clusterIPs: [ip],
      type: "ClusterIP",
      sessionAffinity: "None",
      ipFamilies: ["IPv6"],
      ipFamilyPolicy: "SingleStack",
      internalTrafficPolicy: "Cluster",
    },
    status: { loadBalancer: {} },
  };
}

/** The slice of service i; the last service's single endpoint is the test pod. */
export function slice(i: number, services: number, podV6: string, gen = 0) {
  const ns = `ns-${i % 50}`;
  const name = `svc-${i}`;
  const last = i === services - 1;
  const endpoints = [];
  for (let j = 0; j < (last ? 1 : ENDPOINTS); j++) {
    const x = i * ENDPOINTS + j + (j === 0 ? gen * 7919 : 0);
    const node = x % NODES;
    const pod = `${name}-7d9f8c6b5-${(j + (j === 0 ? gen * 31 : 0)).toString(36).padStart(5, "x")}`;
    endpoints.push({
      addresses: [canonicalV6(last && gen === 0 ? podV6 : v6.pod(node, 2 + Math.floor(x / NODES)))],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: `node-${node}`,
      zone: `zone-${node % 3}`,
      targetRef: { kind: "Pod", namespace: ns, name: pod, uid: uid(x, 3) },
    });
  }
  return {
    kind: "EndpointSlice",
    metadata: {
      name: `${name}-abcde`,
      namespace: ns,
      uid: uid(i, 2),
      creationTimestamp: created,
      generateName: `${name}-`,
      generation: 1 + gen,
      labels: {
        app: name,
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        "kubernetes.io/service-name": name,
      },
      annotations: { "endpoints.kubernetes.io/last-change-trigger-time": created },
      ownerReferences: [{ apiVersion: "v1", kind: "Service", name, uid: uid(i, 1), controller: true, blockOwnerDeletion: true }],
      managedFields: managed("endpointslice-controller", {
        "f:addressType": {},
        "f:endpoints": {},
        "f:metadata": { "f:labels": {}, "f:ownerReferences": {} },
        "f:ports": {},
      }),
    },
    addressType: "IPv6",
    endpoints,
    ports: [{ name: "http", protocol: "TCP", port: 8080 }],
  };
}

export function node(k: number) {
  return {
    kind: "Node",
    metadata: {
      name: `node-${k}`,
      uid: uid(k, 4),
      labels: { "kubernetes.io/hostname": `node-${k}`, "topology.kubernetes.io/zone": `zone-${k % 3}` },
    },
    spec: { podCIDRs: [`2001:db8:2:${k.toString(16)}::/64`] },
    status: {
      addresses: [
        { type: "InternalIP", address: v4.node(k) },
        { type: "InternalIP", address: v6.node(k) },
        { type: "Hostname", address: `node-${k}` },
      ],
    },
  };
}

if (import.meta.main) {
  const [servicesArg, podV6, dir] = process.argv.slice(2);
  const services = Number(servicesArg);
  const api = await FakeApiServer.start(makeTestCert(dir));
  for (let k = 0; k < NODES; k++) api.apply(node(k));
  for (let i = 0; i < services; i++) {
    api.apply(service(i));
    api.apply(slice(i, services, podV6));
  }
  api.compact(); // history is for watches resuming; a fresh list needs none
  console.log(`ready ${api.writeKubeconfig(dir)}`);
  for await (const line of createInterface({ input: process.stdin })) {
    const [cmd, n] = line.split(" ");
    if (cmd === "stats") console.log(`listMs ${api.listMs.toFixed(0)}`);
    if (cmd === "change") {
      api.apply(slice(services - 1, services, podV6, Number(n)));
      console.log(`changed ${n}`);
    }
  }
  await api.close();
}
