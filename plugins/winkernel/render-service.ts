// Pure: one service and its endpoints -> the HNS load-balancer policies it
// needs, at the level of IP addresses (endpoint IDs are resolved by the
// backend, which owns the HNS state). Upstream pkg/proxy/winkernel/proxier.go:
// per service port and family,
//   - the cluster IP (endpoints of Scopes.Internal; DSR when enabled);
//   - node ports: one policy with no frontend VIP (every host address),
//     local-routed (Scopes.External; DSR only for eTP=Local);
//   - one per external IP and per LB ingress IP (Scopes.External), the
//     latter with preserve-destination (DSR + MUX) when annotated.
// A class without endpoints gets no policy: HNS cannot reject, and upstream
// leaves the VIP unprogrammed the same way.

import { type Endpoint, FAMILIES, type Family, ipsOf, type PortMapping, type Service, targetPort } from "../../src/host/toolkit/index.ts";
import { distribution, hnsProtocols, lbFlags, portMappingFlags } from "./hns.ts";

export type PolicyKind = "cluster" | "nodeport" | "external" | "ingress";

/** What one HNS load balancer must be, by endpoint address. */
export interface PolicySpec {
  kind: PolicyKind;
  family: Family;
  /** frontend VIP; "" = every host address (node ports) */
  vip: string;
  protocol: number;
  internalPort: number;
  externalPort: number;
  flags: number;
  portFlags: number;
  distribution: number;
  sourceVip: string;
  /** endpoint IPs, sorted */
  endpoints: string[];
}

export interface RenderContext {
  /** Config.winkernel.enableDSR */
  enableDSR: boolean;
  /** source VIP per family (Config.winkernel.sourceVip, else the node IP of that family; "" = none) */
  sourceVip: Record<Family, string>;
}

export interface ServicePolicies {
  policies: Map<string, PolicySpec>;
  /** endpoint IP -> on this node (local endpoints exist in HNS already; remote ones kpng creates) */
  locality: Map<string, boolean>;
  /** endpoints left out because their target port differs from the policy's (HNS has one internal port) */
  skipped: string[];
}

/** kube-proxy's annotation asking LB ingress traffic to keep its destination IP (DSR through the MUX). */
export const preserveDestinationAnnotation = "service.kubernetes.io/preserve-destination";

export const policyKey = (p: Pick<PolicySpec, "kind" | "family" | "vip" | "protocol" | "externalPort">) =>
  `${p.kind} ${p.vip || "*"}/${p.family} ${p.protocol}:${p.externalPort}`;

interface Backends {
  ips: string[];
  port: number;
}

/** Endpoints of one scope and family; HNS balances to one internal port, so the first address's port wins. */
function backends(
  eps: readonly Endpoint[],
  scope: "Internal" | "External",
  family: Family,
  pm: PortMapping,
  out: ServicePolicies,
): Backends {
  const all: { ip: string; port: number }[] = [];
  for (const ep of eps) {
    if (!ep.Scopes?.[scope]) continue;
    const ip = ipsOf(ep.IPs, family)[0];
    if (!ip) continue;
    all.push({ ip, port: targetPort(ep, pm) });
    out.locality.set(ip, ep.Local);
  }
  all.sort((a, b) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : 0));
  const port = all[0]?.port ?? 0;
  const ips: string[] = [];
  for (const b of all) {
    if (b.port === port) ips.push(b.ip);
    else out.skipped.push(`${b.ip}:${b.port}`);
  }
  return { ips: [...new Set(ips)], port };
}

/** one service port in one family: what its policies share, and the result they go to */
interface PortPolicies {
  out: ServicePolicies;
  family: Family;
  protocol: number;
  /** lbFlags.ipv6 in that family, else 0 */
  ipv6: number;
  distribution: number;
  sourceVip: string;
}

export function renderPolicies(svc: Service, endpoints: Iterable<Endpoint>, ctx: RenderContext): ServicePolicies {
  const out: ServicePolicies = { policies: new Map(), locality: new Map(), skipped: [] };
  const eps = [...endpoints];
  const affinity = svc.SessionAffinity.case === "ClientIP" ? distribution.sourceIP : distribution.none;
  const localDSR = ctx.enableDSR && svc.ExternalTrafficToLocal;
  const preserveDIP = svc.Annotations[preserveDestinationAnnotation] === "true";

  for (const pm of svc.Ports) {
    const protocol = hnsProtocols[pm.Protocol];
    if (!protocol) continue; // SCTP: HNS has no SCTP load balancing (upstream skips it too)
    for (const family of FAMILIES) {
      const internal = backends(eps, "Internal", family, pm, out);
      const external = backends(eps, "External", family, pm, out);
      const p: PortPolicies = {
        out,
        family,
        protocol,
        ipv6: family === "v6" ? lbFlags.ipv6 : 0,
        distribution: affinity,
        sourceVip: ctx.sourceVip[family],
      };

      for (const ip of ipsOf(svc.IPs?.ClusterIPs, family))
        addPolicy(p, "cluster", ip, pm.Port, internal, { dsr: ctx.enableDSR, portFlags: 0 });
      const hasFamily = ipsOf(svc.IPs?.ClusterIPs, family).length > 0;
      if (pm.NodePort && hasFamily) {
        addPolicy(p, "nodeport", "", pm.NodePort, external, { dsr: localDSR, portFlags: portMappingFlags.localRoutedVip });
      }
      for (const ip of ipsOf(svc.IPs?.ExternalIPs, family)) {
        addPolicy(p, "external", ip, pm.Port, external, { dsr: localDSR, portFlags: portMappingFlags.vipExternalIp });
      }
      for (const ip of ipsOf(svc.IPs?.LoadBalancerIPs, family)) {
        const portFlags = preserveDIP ? portMappingFlags.useMux | portMappingFlags.preserveDip : 0;
        addPolicy(p, "ingress", ip, pm.Port, external, { dsr: preserveDIP || localDSR, portFlags });
      }
    }
  }
  return out;
}

function addPolicy(
  p: PortPolicies,
  kind: PolicyKind,
  vip: string,
  externalPort: number,
  b: Backends,
  o: { dsr: boolean; portFlags: number },
) {
  if (!b.ips.length) return;
  const spec: PolicySpec = {
    kind,
    family: p.family,
    vip,
    protocol: p.protocol,
    internalPort: b.port,
    externalPort,
    flags: (o.dsr ? lbFlags.dsr : 0) | p.ipv6,
    portFlags: o.portFlags,
    distribution: p.distribution,
    sourceVip: p.sourceVip,
    endpoints: b.ips,
  };
  p.out.policies.set(policyKey(spec), spec);
}

/** Same load balancer (nothing to send) when every field matches. */
export function samePolicy(a: PolicySpec, b: PolicySpec): boolean {
  return (
    a.internalPort === b.internalPort &&
    a.flags === b.flags &&
    a.portFlags === b.portFlags &&
    a.distribution === b.distribution &&
    a.sourceVip === b.sourceVip &&
    a.endpoints.length === b.endpoints.length &&
    a.endpoints.every((e, i) => e === b.endpoints[i])
  );
}
