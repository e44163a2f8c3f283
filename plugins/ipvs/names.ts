// The IPVS backend's vocabulary: the dummy interface, the ipsets and the few
// iptables chains IPVS mode needs. Everything kpng creates is prefixed KPNG-
// so `--cleanup` knows what is ours and a kube-proxy left on the node is never
// touched; only the interface keeps upstream's name (tools and CNI plugins
// look for `kube-ipvs0`).

import type { Family } from "../../src/host/toolkit/index.ts";

/** Dummy interface every service IP is bound to, so the kernel delivers it locally to IPVS. */
export const dummyInterface = "kube-ipvs0";

/**
 * ipsets, one per family. A name is at most 31 characters (IPSET_MAXNAMELEN - 1);
 * the v6 variant inserts "6-" after the prefix, upstream style; the
 * longest (KPNG-6-LOAD-BALANCER-SRC-CIDR) is 29.
 */
export const sets = {
  /** cluster IP,proto:port: masquerade when the source is outside the cluster CIDRs */
  clusterIP: { base: "CLUSTER-IP", type: "hash:ip,port" },
  /** external IP,proto:port of externalTrafficPolicy=Cluster services: masquerade */
  externalIP: { base: "EXTERNAL-IP", type: "hash:ip,port" },
  /** LB ingress IP,proto:port of externalTrafficPolicy=Cluster services: masquerade */
  loadBalancer: { base: "LOAD-BALANCER", type: "hash:ip,port" },
  /** node address,proto:nodePort of externalTrafficPolicy=Cluster services: masquerade */
  nodePort: { base: "NODE-PORT", type: "hash:ip,port" },
  /** LB IP,proto:port guarded by loadBalancerSourceRanges */
  loadBalancerFW: { base: "LOAD-BALANCER-FW", type: "hash:ip,port" },
  /** LB IP,proto:port,allowed source CIDR */
  loadBalancerSourceCIDR: { base: "LOAD-BALANCER-SRC-CIDR", type: "hash:ip,port,net" },
  /** endpoint IP,proto:port,endpoint IP: a local pod reaching itself through its service (hairpin) */
  loopBack: { base: "LOOP-BACK", type: "hash:ip,port,ip" },
  /** destinations with no endpoint under a Cluster policy: REJECT, as kube-proxy does */
  reject: { base: "REJECT", type: "hash:ip,port" },
  /** destinations whose Local policy has no local endpoint: DROP, as kube-proxy does */
  drop: { base: "DROP", type: "hash:ip,port" },
} as const;

export type SetId = keyof typeof sets;
export const setIds = Object.keys(sets) as SetId[];

export const setName = (id: SetId, family: Family) => (family === "v4" ? "KPNG-" : "KPNG-6-") + sets[id].base;

/** Upstream's default maxelem (65536) is too small for node ports x node addresses on big clusters. */
export const setMaxElem = 262144;

/** iptables chains (both families), each flushed and rewritten on a full sync. */
export const chains = {
  /** nat: every service destination (from PREROUTING and OUTPUT) */
  services: "KPNG-SERVICES",
  /** nat: masquerade marked packets and hairpin flows */
  postrouting: "KPNG-POSTROUTING",
  /** nat: sets the masquerade mark bit */
  markMasq: "KPNG-MARK-MASQ",
  /** filter: source ranges, DROP and REJECT in front of IPVS (INPUT runs before IPVS's LOCAL_IN hook) */
  filter: "KPNG-IPVS-FILTER",
  /** filter: let marked and established service traffic through FORWARD */
  forward: "KPNG-FORWARD",
} as const;

export interface BaseJump {
  table: "nat" | "filter";
  chain: string;
  target: string;
  comment: string;
}

/** The jumps from the built-in chains into ours; checked with -C and inserted with -I when missing. */
export const baseJumps: readonly BaseJump[] = [
  { table: "nat", chain: "PREROUTING", target: chains.services, comment: "kpng service portals" },
  { table: "nat", chain: "OUTPUT", target: chains.services, comment: "kpng service portals" },
  { table: "nat", chain: "POSTROUTING", target: chains.postrouting, comment: "kpng postrouting rules" },
  { table: "filter", chain: "INPUT", target: chains.filter, comment: "kpng ipvs access filter" },
  { table: "filter", chain: "FORWARD", target: chains.forward, comment: "kpng forwarding rules" },
];

/**
 * Sysctls IPVS mode depends on (upstream pkg/proxy/ipvs/proxier.go):
 * vs/conntrack lets iptables masquerade IPVS-forwarded packets,
 * expire_nodest_conn / expire_quiescent_template drop connections to removed
 * real servers, ip_forward routes to pods.
 */
export const sysctls: readonly [string, string][] = [
  ["net.ipv4.vs.conntrack", "1"],
  ["net.ipv4.vs.expire_nodest_conn", "1"],
  ["net.ipv4.vs.expire_quiescent_template", "1"],
  ["net.ipv4.ip_forward", "1"],
];
