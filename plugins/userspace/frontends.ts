// Pure: node-local state -> the frontends the userspace proxy serves. A
// frontend is one address, protocol and port a client connects to (a cluster
// IP, an external or load-balancer IP, or a node IP with a node port), with
// the endpoints ("ip:port" of the frontend's family) it relays to, taken
// from the scope the brain gave each endpoint: Scopes.Internal for cluster
// IPs, Scopes.External for the others (upstream's clusterPolicyChain /
// externalPolicyChain split). The relays and the address keeper act on this
// value and nothing else.

import {
  affinitySeconds,
  allIPs,
  cidrsOf,
  type Endpoint,
  type Family,
  hostPort,
  ipFamily,
  ipsOf,
  isPort,
  type NodeState,
  type PortMapping,
  Protocol,
  protocolName,
  type Service,
  type ServiceEndpoints,
  targetPort,
} from "../../src/host/toolkit/index.ts";

/** the protocols a relay serves: Bun has no SCTP sockets */
export type Proto = "tcp" | "udp";
export type FrontendKind = "cluster" | "external" | "nodeport";

export interface Frontend {
  /** `proto/ip/port`: the identity a relay is kept under */
  key: string;
  proto: Proto;
  family: Family;
  /** the address clients reach: service IP, or a node IP for a node port */
  ip: string;
  port: number;
  kind: FrontendKind;
  /** `namespace/name:portName` (logs) */
  service: string;
  /** "ip:port" / "[ip6]:port", in the brain's order, without duplicates */
  endpoints: string[];
  /** ClientIP affinity timeout; undefined = none */
  affinitySeconds?: number;
  /** loadBalancerSourceRanges for this address (LB IPs only); undefined = anyone */
  sourceRanges?: string[];
  /**
   * eTP=Local on an external frontend: clients in the pod network (`from`,
   * the --cluster-cidr of the family) or on this node itself go to the
   * internal endpoints instead, as upstream's short-circuit rules send them
   * to the cluster-wide chain (they would else lose traffic to remote pods).
   */
  shortCircuit?: { from: string[]; endpoints: string[] };
}

export interface PlanOptions {
  /** where node ports listen: the node's primary IPs */
  nodeIPs: readonly string[];
  /** the pod network, for eTP=Local's short-circuit */
  clusterCIDRs?: readonly string[];
}

/** whether a relay for `f` has anywhere to send a client */
export const hasEndpoints = (f: Frontend) => f.endpoints.length > 0 || (f.shortCircuit?.endpoints.length ?? 0) > 0;

export interface FrontendPlan {
  frontends: Map<string, Frontend>;
  /** service ports the proxy cannot serve, with why (logged once per sync) */
  skipped: string[];
}

const relayed = (p: Protocol): Proto | undefined => {
  const name = protocolName(p);
  return name === "tcp" || name === "udp" ? name : undefined;
};
export const frontendKey = (proto: Proto, ip: string, port: number) => `${proto}/${ip}/${port}`;

/** Endpoints of one family and scope for one service port, as host:port, deduplicated. */
function endpointsFor(endpoints: Iterable<Endpoint>, pm: PortMapping, family: Family, scope: "Internal" | "External"): string[] {
  const out = new Set<string>();
  for (const ep of endpoints) {
    if (!ep.Scopes?.[scope]) continue;
    const ip = ipsOf(ep.IPs, family)[0];
    const port = targetPort(ep, pm);
    if (ip !== undefined && isPort(port)) out.add(hostPort(ip, port));
  }
  return [...out];
}

/**
 * Every frontend of the state. Node ports listen on `nodeIPs` (the node's
 * primary IPs, as nft mode's default), in the families the service has a
 * cluster IP in (single-stack services get no node port in the other family,
 * as upstream).
 */
export function planFrontends(state: NodeState, opts: PlanOptions): FrontendPlan {
  const frontends = new Map<string, Frontend>();
  const skipped: string[] = [];
  for (const [key, entry] of state.services) {
    const p = planService(key, entry, opts);
    for (const f of p.frontends) frontends.set(f.key, f);
    skipped.push(...p.skipped);
  }
  return { frontends, skipped };
}

/** The frontends of one service (a sync re-plans only the services that changed). */
export function planService(
  key: string,
  { service, endpoints }: ServiceEndpoints,
  opts: PlanOptions,
): { frontends: Frontend[]; skipped: string[] } {
  const frontends: Frontend[] = [];
  const skipped: string[] = [];
  for (const pm of service.Ports) {
    const label = `${key}:${pm.Name || pm.Port}`;
    const proto = relayed(pm.Protocol);
    if (!proto) {
      skipped.push(
        `${label}: protocol ${Protocol[pm.Protocol] ?? pm.Protocol} is not relayed (SCTP sockets are missing from this kernel and from Bun)`,
      );
      continue;
    }
    if (!isPort(pm.Port)) continue;
    frontends.push(...servicePortFrontends(service, [...endpoints.values()], pm, proto, opts, label));
  }
  return { frontends, skipped };
}

function servicePortFrontends(svc: Service, eps: Endpoint[], pm: PortMapping, proto: Proto, opts: PlanOptions, label: string): Frontend[] {
  const nodeIPs = opts.nodeIPs;
  const out: Frontend[] = [];
  const affinity = affinitySeconds(svc);
  const ips = svc.IPs;
  const clusterIPs = allIPs(ips?.ClusterIPs);
  const families = new Set(clusterIPs.map((ip) => ipFamily(ip)!));
  const add = (ip: string, port: number, kind: FrontendKind, sourceRanges?: string[]) => {
    const family = ipFamily(ip);
    if (!family) return;
    const key = frontendKey(proto, ip, port);
    if (out.some((f) => f.key === key)) return;
    const endpoints = endpointsFor(eps, pm, family, kind === "cluster" ? "Internal" : "External");
    const f: Frontend = { key, proto, family, ip, port, kind, service: label, endpoints, affinitySeconds: affinity, sourceRanges };
    if (kind !== "cluster" && svc.ExternalTrafficToLocal) {
      const internal = endpointsFor(eps, pm, family, "Internal");
      if (internal.length) f.shortCircuit = { from: cidrsOf(opts.clusterCIDRs, family), endpoints: internal };
    }
    out.push(f);
  };
  for (const ip of clusterIPs) add(ip, pm.Port, "cluster");
  const lbIPs = new Set(allIPs(ips?.LoadBalancerIPs));
  for (const ip of allIPs(ips?.ExternalIPs)) add(ip, pm.Port, "external");
  for (const ip of lbIPs) add(ip, pm.Port, "external", rangesFor(svc, ip));
  if (isPort(pm.NodePort)) {
    for (const ip of nodeIPs) {
      const fam = ipFamily(ip);
      // a service with no cluster IP (none here) serves external IPs only
      if (fam && families.has(fam)) add(ip, pm.NodePort, "nodeport");
    }
  }
  return out;
}

/** the source ranges of the IPFilter naming this LB IP; [] (nobody) when they are all of the other family */
function rangesFor(svc: Service, ip: string): string[] | undefined {
  const fam = ipFamily(ip);
  for (const filter of svc.IPFilters) {
    const targets = allIPs(filter.TargetIPs);
    if (!targets.includes(ip)) continue;
    return fam ? cidrsOf(filter.SourceRanges, fam) : [];
  }
  return undefined;
}

/** What an endpoint list change means for the relay: same frontend, another set. */
export const sameFrontend = (a: Frontend, b: Frontend) =>
  a.affinitySeconds === b.affinitySeconds &&
  a.endpoints.length === b.endpoints.length &&
  a.endpoints.every((e, i) => e === b.endpoints[i]) &&
  JSON.stringify(a.sourceRanges) === JSON.stringify(b.sourceRanges) &&
  JSON.stringify(a.shortCircuit) === JSON.stringify(b.shortCircuit) &&
  a.service === b.service;
