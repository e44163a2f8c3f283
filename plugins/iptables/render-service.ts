// One service's rules for one address family: the chains it owns (SVC, SVX,
// EXT, FW, SEP) and its rules in the fixed chains (dispatch, node ports,
// filter REJECT/DROP, firewall). Pure: (service, endpoints, config) -> data.
//
// The shape follows upstream kube-proxy's iptables proxier
// (pkg/proxy/iptables/proxier.go); where kpng's node-local model already made
// a decision (endpoint scopes after traffic policy, topology and terminating
// fallback), the renderer just obeys it.

import type { Config } from "../../src/core/config.ts";
import { Protocol, type Endpoint, type PortMapping, type Service } from "../../src/gen/localv1/services_pb.ts";
import { chains, endpointChain, serviceChain, servicePortId, type Family, type Table } from "./names.ts";
import type { Rule } from "./render-restore.ts";
import { familyCIDRs, inFamily, prefixContains } from "./render-fixed.ts";

export interface OwnedChain {
  table: Table;
  name: string;
  rules: Rule[];
}

export interface ServiceRules {
  /** chains only this service uses, keyed `table/name` */
  chains: Map<string, OwnedChain>;
  /** its rules in the fixed chains */
  shared: Rule[];
}

/** An endpoint as the renderer needs it, for one family and one service port. */
export interface PortEndpoint {
  ip: string;
  port: number;
  internal: boolean;
  external: boolean;
  chain: string;
}

export interface RenderServiceInput {
  service: Service;
  endpoints: ReadonlyMap<string, Endpoint>;
  family: Family;
  config: Config;
}

export const protoName: Partial<Record<Protocol, "tcp" | "udp" | "sctp">> = {
  [Protocol.TCP]: "tcp",
  [Protocol.UDP]: "udp",
  [Protocol.SCTP]: "sctp",
};

/** Default ClientIP affinity timeout (upstream DefaultClientIPServiceAffinitySeconds). */
const defaultAffinitySeconds = 10800;

const ipsOf = (set: { V4: string[]; V6: string[] } | undefined, family: Family) =>
  (family === "v4" ? set?.V4 : set?.V6)?.filter((ip) => inFamily(ip, family)) ?? [];

/** Target port: the endpoint's port of the same name, else the mapping's target port, else the port. */
export function targetPort(ep: Endpoint, pm: PortMapping): number {
  const named = ep.PortOverrides.find((p) => p.Name === pm.Name);
  return named?.Port || pm.TargetPort || pm.Port;
}

/** The endpoints of one service port, de-duplicated by address and port, in a stable order. */
export function portEndpoints(portId: string, pm: PortMapping, endpoints: ReadonlyMap<string, Endpoint>, family: Family): PortEndpoint[] {
  const byChain = new Map<string, PortEndpoint>();
  for (const ep of endpoints.values()) {
    const ip = ipsOf(ep.IPs, family)[0];
    if (!ip) continue;
    const port = targetPort(ep, pm);
    const chain = endpointChain(portId, ip, port);
    const prev = byChain.get(chain);
    const internal = !!ep.Scopes?.Internal || !!prev?.internal;
    const external = !!ep.Scopes?.External || !!prev?.external;
    byChain.set(chain, { ip, port, internal, external, chain });
  }
  return [...byChain.values()].sort((a, b) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : a.port - b.port));
}

export const hostPort = (ip: string, port: number, family: Family) => (family === "v6" ? `[${ip}]:${port}` : `${ip}:${port}`);

export function renderService(input: RenderServiceInput): ServiceRules {
  const { service: svc } = input;
  const out: ServiceRules = { chains: new Map(), shared: [] };
  const own = (table: Table, name: string): Rule[] => {
    const key = `${table}/${name}`;
    let c = out.chains.get(key);
    if (!c) out.chains.set(key, (c = { table, name, rules: [] }));
    return c.rules;
  };
  for (const pm of svc.Ports) renderPort({ input, pm, out, own });
  if (svc.HealthCheckNodePort > 0) {
    out.shared.push({
      table: "filter",
      chain: chains.healthCheck,
      comment: `${svc.Namespace}/${svc.Name} health check node port`,
      match: ["-p", "tcp", "-m", "tcp", "--dport", String(svc.HealthCheckNodePort)],
      target: ["-j", "ACCEPT"],
    });
  }
  return out;
}

interface PortContext {
  input: RenderServiceInput;
  pm: PortMapping;
  out: ServiceRules;
  own: (table: Table, name: string) => Rule[];
}

/** Load-balancing rules over `eps` into `chain`: affinity first, then kube-proxy's 1/(n-i) statistic cascade. */
function balance(rules: Rule[], chain: string, eps: PortEndpoint[], label: string, affinitySeconds: number | undefined) {
  if (affinitySeconds !== undefined) {
    for (const ep of eps) {
      rules.push({
        table: "nat",
        chain,
        comment: `${label} -> ${ep.ip}:${ep.port}`,
        match: ["-m", "recent", "--name", ep.chain, "--rcheck", "--seconds", String(affinitySeconds), "--reap"],
        target: ["-j", ep.chain],
      });
    }
  }
  eps.forEach((ep, i) => {
    const left = eps.length - i;
    rules.push({
      table: "nat",
      chain,
      comment: `${label} -> ${ep.ip}:${ep.port}`,
      match: left > 1 ? ["-m", "statistic", "--mode", "random", "--probability", (1 / left).toFixed(10)] : [],
      target: ["-j", ep.chain],
    });
  });
}

function renderPort({ input, pm, out, own }: PortContext) {
  const { service: svc, family, config } = input;
  const proto = protoName[pm.Protocol];
  if (!proto || pm.Port <= 0) return;
  const portId = servicePortId(svc.Namespace, svc.Name, proto, pm.Port);
  const label = `${svc.Namespace}/${svc.Name}:${pm.Name || pm.Port}`;
  const dport = ["-p", proto, "-m", proto, "--dport", String(pm.Port)];
  const clusterIPs = ipsOf(svc.IPs?.ClusterIPs, family);
  const externalIPs = ipsOf(svc.IPs?.ExternalIPs, family);
  const lbIPs = ipsOf(svc.IPs?.LoadBalancerIPs, family);
  const podCIDRs = familyCIDRs(config.clusterCIDRs, family);
  const affinity = svc.SessionAffinity.case === "ClientIP" ? svc.SessionAffinity.value.TimeoutSeconds || defaultAffinitySeconds : undefined;

  const eps = portEndpoints(portId, pm, input.endpoints, family);
  const internal = eps.filter((e) => e.internal);
  const external = eps.filter((e) => e.external);
  const used = eps.filter((e) => e.internal || e.external);
  // Upstream: no endpoint at all -> REJECT (fail fast); endpoints exist but
  // none for this class under a Local policy -> DROP.
  const internalVerdict = svc.InternalTrafficToLocal && eps.length ? "DROP" : "REJECT";
  const externalVerdict = svc.ExternalTrafficToLocal && eps.length ? "DROP" : "REJECT";

  const svcChain = serviceChain("internal", portId);
  const sameSets = internal.length === external.length && internal.every((e, i) => e.chain === external[i].chain);
  const svxChain = sameSets && internal.length ? svcChain : serviceChain("external", portId);
  const extChain = serviceChain("ext", portId);
  const fwChain = serviceChain("firewall", portId);
  const accessible = pm.NodePort > 0 || externalIPs.length > 0 || lbIPs.length > 0;
  const usesExt = accessible && used.length > 0;
  const ranges = sourceRanges(svc, lbIPs, family);

  for (const ep of used) {
    const rules = own("nat", ep.chain);
    rules.push({ table: "nat", chain: ep.chain, comment: label, match: ["-s", ep.ip], target: ["-j", chains.markMasq] });
    rules.push({
      table: "nat",
      chain: ep.chain,
      comment: label,
      match: ["-p", proto, ...(affinity !== undefined ? ["-m", "recent", "--name", ep.chain, "--set"] : []), "-m", proto],
      target: ["-j", "DNAT", "--to-destination", hostPort(ep.ip, ep.port, family)],
    });
  }

  // Cluster IPs.
  if (internal.length) {
    const rules = own("nat", svcChain);
    for (const ip of clusterIPs) {
      const to = ["-d", ip, ...dport];
      if (config.masqueradeAll) rules.push({ table: "nat", chain: svcChain, comment: `${label} cluster IP`, match: to, target: ["-j", chains.markMasq] });
      else if (podCIDRs.length === 1) rules.push({ table: "nat", chain: svcChain, comment: `${label} cluster IP`, match: ["!", "-s", podCIDRs[0], ...to], target: ["-j", chains.markMasq] });
      else if (podCIDRs.length > 1) rules.push({ table: "nat", chain: svcChain, comment: `${label} cluster IP`, match: to, target: ["-j", chains.markNonPod] });
      out.shared.push({ table: "nat", chain: chains.services, comment: `${label} cluster IP`, match: to, target: ["-j", svcChain] });
    }
    balance(rules, svcChain, internal, label, affinity);
  } else {
    const why = internalVerdict === "DROP" ? "has no local endpoints" : "has no endpoints";
    for (const ip of clusterIPs) out.shared.push({ table: "filter", chain: chains.filterServices, comment: `${label} ${why}`, match: ["-d", ip, ...dport], target: ["-j", internalVerdict] });
  }

  // External destinations: node port, external IPs, LB IPs.
  if (usesExt) {
    if (external.length && svxChain !== svcChain) balance(own("nat", svxChain), svxChain, external, label, affinity);
    const rules = own("nat", extChain);
    const ext = (r: Omit<Rule, "table" | "chain">) => rules.push({ table: "nat", chain: extChain, ...r });
    if (svc.ExternalTrafficToLocal) {
      // Upstream's short-circuit: pods reaching an external destination are
      // treated as if they went out and came back through a load balancer:
      // no traffic policy, no masquerade. Traffic from the node itself is
      // masqueraded and balanced cluster-wide, else replies could not return.
      if (internal.length) for (const cidr of podCIDRs) ext({ comment: `pod traffic for ${label} external destinations`, match: ["-s", cidr], target: ["-j", svcChain] });
      ext({ comment: `masquerade LOCAL traffic for ${label} external destinations`, match: ["-m", "addrtype", "--src-type", "LOCAL"], target: ["-j", chains.markMasq] });
      if (internal.length) ext({ comment: `route LOCAL traffic for ${label} external destinations`, match: ["-m", "addrtype", "--src-type", "LOCAL"], target: ["-j", svcChain] });
    } else {
      ext({ comment: `masquerade traffic for ${label} external destinations`, match: [], target: ["-j", chains.markMasq] });
    }
    // Without external endpoints nothing is DNATed here, and the filter rule below drops/rejects it.
    if (external.length) ext({ comment: `${label} external endpoints`, match: [], target: ["-j", svxChain] });

    for (const ip of externalIPs) out.shared.push({ table: "nat", chain: chains.services, comment: `${label} external IP`, match: ["-d", ip, ...dport], target: ["-j", extChain] });
    for (const ip of lbIPs) {
      const target = ranges.has(ip) ? fwChain : extChain;
      out.shared.push({ table: "nat", chain: chains.services, comment: `${label} loadbalancer IP`, match: ["-d", ip, ...dport], target: ["-j", target] });
    }
    if (ranges.size) {
      const fw = own("nat", fwChain);
      for (const [ip, cidrs] of ranges) {
        for (const cidr of cidrs) fw.push({ table: "nat", chain: fwChain, comment: `${label} loadbalancer IP`, match: ["-d", ip, "-s", cidr], target: ["-j", extChain] });
        // A VIP-like LB IP is often local too: the node's own requests then
        // come from the LB IP itself and must pass (upstream does the same).
        if (cidrs.some((c) => config.nodeIPs.some((n) => prefixContains(c, n)))) fw.push({ table: "nat", chain: fwChain, comment: `${label} loadbalancer IP`, match: ["-d", ip, "-s", ip], target: ["-j", extChain] });
      }
    }
    if (pm.NodePort > 0) out.shared.push({ table: "nat", chain: chains.nodePorts, comment: `${label} node port`, match: ["-p", proto, "-m", proto, "--dport", String(pm.NodePort)], target: ["-j", extChain] });
  }
  if (!external.length && accessible) {
    const why = externalVerdict === "DROP" ? "has no local endpoints" : "has no endpoints";
    for (const ip of [...externalIPs, ...lbIPs]) out.shared.push({ table: "filter", chain: chains.externalServices, comment: `${label} ${why}`, match: ["-d", ip, ...dport], target: ["-j", externalVerdict] });
    if (pm.NodePort > 0) out.shared.push({ table: "filter", chain: chains.filterNodePorts, comment: `${label} ${why}`, match: ["-p", proto, "-m", proto, "--dport", String(pm.NodePort)], target: ["-j", externalVerdict] });
  }
  // What the FW chain did not DNAT still has the LB IP as destination in filter: drop it.
  for (const ip of ranges.keys()) {
    out.shared.push({ table: "filter", chain: chains.firewall, comment: `${label} traffic not accepted by ${fwChain}`, match: ["-d", ip, ...dport], target: ["-j", "DROP"] });
  }
}

/** LB IP -> allowed source CIDRs of its family, for LB IPs that have an IPFilter with source ranges. */
function sourceRanges(svc: Service, lbIPs: string[], family: Family): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const f of svc.IPFilters) {
    const targets = new Set(ipsOf(f.TargetIPs, family));
    // Ranges of the other family only: no filter for this one (upstream filters ranges per family).
    const cidrs = familyCIDRs(f.SourceRanges, family);
    if (!cidrs.length) continue;
    for (const ip of lbIPs) if (targets.has(ip)) out.set(ip, [...(out.get(ip) ?? []), ...cidrs]);
  }
  return out;
}
