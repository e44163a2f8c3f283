// The one cluster every deployed case serves: a Service for each behaviour the
// issue lists, endpoints in the topology's pod namespaces, and the checks a
// client outside the node makes against it, all in one probe run.
//
//   pod0, pod1, pod2: local endpoints (node-a); "elsewhere" is pod2's address
//   claimed by node-b, so node-a has no local endpoint for that service.

import type { K8sEndpointSlice, K8sNode, K8sService } from "../../src/core/brain/k8s/objects.ts";
import { v4 } from "../fixtures/addresses.ts";
import { asSent, node, slice, svc } from "../fixtures/k8s.ts";
import type { Probe, ProbeResult, Topology } from "../harness/netns.ts";

export const NODE = "node-a";
export type K8sObject = K8sService | K8sEndpointSlice | K8sNode;

/** what the pods' servers listen on */
export const podPorts = { tcp: [8080], udp: [5353] };
/** a second address of the client namespace, outside the LoadBalancer's source ranges */
export const deniedClient = v4.client(2);

export const ips = {
  clusterIP: v4.clusterIP(10),
  nodePort: v4.clusterIP(11),
  lb: v4.clusterIP(12),
  lbIngress: v4.external(10),
  localYes: v4.clusterIP(13),
  localNo: v4.clusterIP(14),
  affinity: v4.clusterIP(15),
  empty: v4.clusterIP(16),
};
export const nodePorts = { tcp: 30080, udp: 30053, localYes: 30081, localNo: 30082, lb: 30083 };

const tcp = (port: number, nodePort?: number) => ({ name: "http", protocol: "TCP" as const, port, targetPort: 8080, nodePort });
const httpSlice = [{ name: "http", protocol: "TCP" as const, port: 8080 }];

const apiVersions: Record<K8sObject["kind"], string> = { Service: "v1", Node: "v1", EndpointSlice: "discovery.k8s.io/v1" };

/** Objects as `kubectl get -o json` prints them: a List of manifests with their apiVersion (what --input reads). */
export const asList = (objects: Iterable<K8sObject>) => ({
  apiVersion: "v1",
  kind: "List",
  items: [...objects].map((o) => ({ apiVersion: apiVersions[o.kind], ...asSent(o) })),
});

/** The Node object for node-a with these InternalIPs. */
export const nodeObject = (nodeIPs: string[]) => node(NODE, { ips: nodeIPs });

/** Every object of the cluster, the Node with `nodeIPs`. */
export function clusterObjects(topo: Topology, nodeIPs = [topo.node.v4]): K8sObject[] {
  const ep = (i: number, onNode = NODE) => ({ ip: topo.pods[i].v4, node: onNode, pod: `pod${i}` });
  return [
    nodeObject(nodeIPs),
    node("node-b", { ips: [v4.node(1)] }),
    svc({ name: "cluster-ip", clusterIPs: [ips.clusterIP], ports: [tcp(80)] }),
    slice({ service: "cluster-ip", ports: httpSlice, endpoints: [ep(0), ep(1)] }),
    svc({
      name: "node-port",
      type: "NodePort",
      clusterIPs: [ips.nodePort],
      ports: [tcp(80, nodePorts.tcp), { name: "dns", protocol: "UDP", port: 53, targetPort: 5353, nodePort: nodePorts.udp }],
    }),
    slice({ service: "node-port", ports: [...httpSlice, { name: "dns", protocol: "UDP", port: 5353 }], endpoints: [ep(0)] }),
    svc({
      name: "lb",
      type: "LoadBalancer",
      clusterIPs: [ips.lb],
      ports: [tcp(80, nodePorts.lb)],
      lbIngress: [{ ip: ips.lbIngress }],
      sourceRanges: [`${topo.client.v4}/32`],
    }),
    slice({ service: "lb", ports: httpSlice, endpoints: [ep(1)] }),
    svc({ name: "local-yes", type: "NodePort", clusterIPs: [ips.localYes], ports: [tcp(80, nodePorts.localYes)], eTP: "Local" }),
    slice({ service: "local-yes", ports: httpSlice, endpoints: [ep(2)] }),
    svc({ name: "local-no", type: "NodePort", clusterIPs: [ips.localNo], ports: [tcp(80, nodePorts.localNo)], eTP: "Local" }),
    slice({ service: "local-no", ports: httpSlice, endpoints: [ep(2, "node-b")] }),
    svc({ name: "affinity", clusterIPs: [ips.affinity], ports: [tcp(80)], affinity: true }),
    slice({ service: "affinity", ports: httpSlice, endpoints: [ep(0), ep(1), ep(2)] }),
    svc({ name: "empty", clusterIPs: [ips.empty], ports: [tcp(80)] }),
  ];
}

/**
 * `n` more ClusterIP services of 10 endpoints each, on node-b (not probed):
 * a cluster big enough that a first load into empty tables goes in batches
 * (plugins/nft/executor.ts, FIRST_LOAD_SPLIT_ELEMENTS).
 */
export function fillerObjects(n: number): K8sObject[] {
  return Array.from({ length: n }, (_, i) => {
    const name = `filler-${i}`;
    const endpoints = Array.from({ length: 10 }, (_, k) => ({ ip: v4.pod(1 + (i % 250), 1 + k), node: "node-b", pod: `${name}-${k}` }));
    return [
      svc({ ns: "filler", name, clusterIPs: [v4.clusterIP(100 + i)], ports: [tcp(80)] }),
      slice({ ns: "filler", service: name, ports: httpSlice, endpoints }),
    ];
  }).flat();
}

export interface Check {
  name: string;
  probes: Probe[];
  /** what the results should read as (see verdict) */
  want: string;
  /** probes a node port on the node's IP (those depend on kpng knowing the node's IPs) */
  nodePort?: boolean;
}

const drop = 0.5; // seconds to wait for an answer that must not come

/** The behaviour checks, each named like the rule it checks; `nodeIP` is where node ports are probed. */
export function checks(topo: Topology, nodeIP = topo.node.v4): Check[] {
  const client = topo.client.v4;
  const repeat = (n: number, p: Probe) => Array.from({ length: n }, () => p);
  return [
    {
      name: "ClusterIP: a client outside the node reaches an endpoint",
      probes: repeat(4, { ip: ips.clusterIP, port: 80 }),
      want: "pod0|pod1",
    },
    { name: "NodePort TCP on the node's IP, default flags", nodePort: true, probes: [{ ip: nodeIP, port: nodePorts.tcp }], want: "pod0" },
    {
      name: "NodePort UDP on the node's IP, default flags",
      nodePort: true,
      probes: [{ ip: nodeIP, port: nodePorts.udp, proto: "udp" }],
      want: "pod0",
    },
    {
      name: "LoadBalancer IP: a client inside loadBalancerSourceRanges is served",
      probes: [{ ip: ips.lbIngress, port: 80 }],
      want: "pod1",
    },
    {
      name: "LoadBalancer IP: a client outside loadBalancerSourceRanges is dropped",
      probes: [{ ip: ips.lbIngress, port: 80, src: deniedClient, timeout: drop }],
      want: "timeout",
    },
    {
      name: "eTP=Local with a local endpoint: served, the client's source kept",
      probes: [{ ip: nodeIP, port: nodePorts.localYes }],
      want: `pod2 from ${client}`,
      nodePort: true,
    },
    {
      name: "eTP=Local without a local endpoint: node port traffic dropped",
      nodePort: true,
      probes: [{ ip: nodeIP, port: nodePorts.localNo, timeout: drop }],
      want: "timeout",
    },
    { name: "eTP=Local without a local endpoint: the ClusterIP still serves", probes: [{ ip: ips.localNo, port: 80 }], want: "pod2" },
    {
      name: "ClientIP affinity: every connection of a client goes to one endpoint",
      probes: repeat(8, { ip: ips.affinity, port: 80 }),
      want: "one endpoint",
    },
    { name: "a service with no endpoints: connections rejected", probes: [{ ip: ips.empty, port: 80 }], want: "refused" },
  ];
}

/** How a check's results read: the answering pods ("pod0|pod1"), an error, or "one endpoint" for affinity. */
export function verdict(c: Check, results: ProbeResult[]): string {
  const failed = results.find((r) => !r.ok);
  if (failed && !failed.ok) return failed.error;
  const ok = results.filter((r): r is Extract<ProbeResult, { ok: true }> => r.ok);
  const who = [...new Set(ok.map((r) => r.who))].sort();
  if (c.want === "one endpoint") return who.length === 1 ? "one endpoint" : `spread over ${who.join(",")}`;
  if (c.want.includes(" from ")) return `${who.join("|")} from ${[...new Set(ok.map((r) => r.source))].join(",")}`;
  // "pod0|pod1": any of them may answer, nothing else
  const allowed = c.want.split("|");
  return who.every((w) => allowed.includes(w)) ? c.want : who.join("|");
}

/** Runs every check in one probe process; returns name -> verdict. */
export async function runChecks(topo: Topology, list: Check[]): Promise<Record<string, string>> {
  const results = await topo.probeMany(
    topo.client.ns,
    list.flatMap((c) => c.probes),
  );
  const out: Record<string, string> = {};
  let i = 0;
  for (const c of list) {
    out[c.name] = verdict(c, results.slice(i, i + c.probes.length));
    i += c.probes.length;
  }
  return out;
}

export const wanted = (list: Check[]) => Object.fromEntries(list.map((c) => [c.name, c.want]));

/**
 * runChecks again until every verdict is the wanted one (`want`, else each
 * check's own), or `timeoutMs` has passed: for a change that reaches kpng as
 * several watch events, of which a sync may hold only some, and for a relay
 * in kpng's own process (userspace) that a loaded machine answers later than
 * a probe's 1 s. Returns the last verdicts.
 */
export async function settledChecks(
  topo: Topology,
  list: Check[],
  timeoutMs: number,
  wants: Record<string, string> = wanted(list),
): Promise<Record<string, string>> {
  const want = JSON.stringify(wants);
  const end = performance.now() + timeoutMs;
  let got = await runChecks(topo, list);
  while (JSON.stringify(got) !== want && performance.now() < end) {
    await Bun.sleep(100);
    got = await runChecks(topo, list);
  }
  return got;
}
