// PolicySpec <-> HCN JSON. The identity of an existing load balancer (read
// back from HNS after a restart) is computed from its JSON with endpoint IDs
// mapped back to addresses, so kpng can adopt what it created before instead
// of deleting and re-creating it.

import { type HcnLoadBalancer, type HcnPortMapping, type HcnRemoteEndpoint, conjureMac, schemaVersion } from "./hns.ts";
import type { PolicySpec } from "./render-service.ts";

export function loadBalancerSettings(spec: PolicySpec, endpointIds: string[]): HcnLoadBalancer {
  const pm: HcnPortMapping = { Protocol: spec.protocol, InternalPort: spec.internalPort, ExternalPort: spec.externalPort };
  if (spec.distribution) pm.DistributionType = spec.distribution;
  if (spec.portFlags) pm.Flags = spec.portFlags;
  const lb: HcnLoadBalancer = { SchemaVersion: schemaVersion, HostComputeEndpoints: endpointIds, PortMappings: [pm] };
  if (spec.sourceVip) lb.SourceVIP = spec.sourceVip;
  if (spec.vip) lb.FrontendVIPs = [spec.vip];
  if (spec.flags) lb.Flags = spec.flags;
  return lb;
}

export function remoteEndpointSettings(ip: string): HcnRemoteEndpoint {
  return { SchemaVersion: schemaVersion, IpConfigurations: [{ IpAddress: ip }], MacAddress: conjureMac("02-11", ip), Flags: 1 };
}

/** Where a load balancer listens: at most one HNS policy may exist per frontend. */
export const frontendOf = (p: { vip: string; flags: number; protocol: number; externalPort: number }) =>
  `${p.vip || "*"}/${p.flags & 2 ? 6 : 4} ${p.protocol}:${p.externalPort}`;

/** Everything that makes two load balancers equal, by endpoint address. */
export function identityOf(spec: Omit<PolicySpec, "kind" | "family">): string {
  return JSON.stringify([
    frontendOf(spec),
    spec.internalPort,
    spec.flags,
    spec.portFlags,
    spec.distribution,
    spec.sourceVip,
    [...spec.endpoints].sort(),
  ]);
}

/** Reads an HNS load balancer back as a spec; undefined when an endpoint ID is unknown (not on our network). */
export function specOf(lb: HcnLoadBalancer, ipOfId: ReadonlyMap<string, string>): Omit<PolicySpec, "kind" | "family"> | undefined {
  const pm = lb.PortMappings?.[0];
  if (!pm) return undefined;
  const endpoints: string[] = [];
  for (const id of lb.HostComputeEndpoints ?? []) {
    const ip = ipOfId.get(id.toLowerCase());
    if (!ip) return undefined;
    endpoints.push(ip);
  }
  return {
    vip: lb.FrontendVIPs?.[0] ?? "",
    protocol: pm.Protocol,
    internalPort: pm.InternalPort ?? 0,
    externalPort: pm.ExternalPort ?? 0,
    flags: lb.Flags ?? 0,
    portFlags: pm.Flags ?? 0,
    distribution: pm.DistributionType ?? 0,
    sourceVip: lb.SourceVIP ?? "",
    endpoints: endpoints.sort(),
  };
}
