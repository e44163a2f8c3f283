// Node-local state -> what the maps should hold, per service, as plain data
// (no ids yet: plan.ts gives them). A service port makes per family up to two
// groups of endpoints, each with its frontends:
//
//   internal: the cluster IPs -> the endpoints of the internal scope
//   external: node IP + node port, external IPs, LB IPs -> the endpoints of
//             the external scope; with externalTrafficPolicy Local and an
//             internal endpoint, the internal ones, as kube-proxy
//             short-circuits traffic from the node itself (every client of a
//             socket-level balancer is on the node)
//
// A group without endpoints still has its frontends: the programs refuse
// (ECONNREFUSED, kube-proxy's reject), or, where a Local policy leaves none,
// fail with EPERM (kube-proxy drops).

import {
  affinitySeconds,
  type Endpoint,
  FAMILIES,
  type Family,
  ipFamily,
  type IPVersion,
  ipsOf,
  ipVersion,
  isPort,
  Protocol,
  servedInFamily,
  type ServiceEndpoints,
  targetPort,
} from "../../src/host/toolkit/index.ts";
import type { BackendValue, FrontKey } from "./maps.ts";
import { GROUP_DROP } from "./names.ts";

export interface GroupSpec {
  /** stable name: service key, family, protocol, port and scope */
  name: string;
  /** endpoints, sorted by address and port, without duplicates */
  endpoints: BackendValue[];
  affinity: number;
  flags: number;
  frontends: FrontKey[];
}

const PROTO: Partial<Record<Protocol, { name: string; num: number }>> = {
  [Protocol.TCP]: { name: "tcp", num: 6 },
  [Protocol.UDP]: { name: "udp", num: 17 },
  [Protocol.SCTP]: { name: "sctp", num: 132 },
};

const byAddrPort = (a: BackendValue, b: BackendValue) => (a.addr < b.addr ? -1 : a.addr > b.addr ? 1 : a.port - b.port);

const frontKeys = (family: IPVersion, proto: number, ips: string[], port: number): FrontKey[] =>
  ips.map((addr) => ({ family, addr, port, proto }));

export function renderService(key: string, se: ServiceEndpoints, nodeIPs: readonly string[]): GroupSpec[] {
  const out: GroupSpec[] = [];
  for (const family of FAMILIES) renderFamily(out, key, se, family, nodeIPs);
  return out;
}

function renderFamily(
  out: GroupSpec[],
  key: string,
  { service: svc, endpoints }: ServiceEndpoints,
  family: Family,
  nodeIPs: readonly string[],
) {
  if (!servedInFamily(svc, family)) return;
  const version = ipVersion(family);
  const clusterIPs = [...new Set(ipsOf(svc.IPs?.ClusterIPs, family))];
  const extIPs = [...new Set([...ipsOf(svc.IPs?.ExternalIPs, family), ...ipsOf(svc.IPs?.LoadBalancerIPs, family)])];
  const nodeAddrs = [...new Set(nodeIPs.filter((ip) => ipFamily(ip) === family))];
  const affinity = affinitySeconds(svc) ?? 0;
  const eps: { ep: Endpoint; addr: string }[] = [];
  for (const ep of endpoints.values()) {
    const addr = ipsOf(ep.IPs, family)[0];
    if (addr !== undefined) eps.push({ ep, addr });
  }
  for (const port of svc.Ports) {
    const proto = PROTO[port.Protocol];
    if (!proto || !isPort(port.Port)) continue;
    const internal = new Map<string, BackendValue>();
    const external = new Map<string, BackendValue>();
    for (const { ep, addr } of eps) {
      const tp = targetPort(ep, port);
      if (!isPort(tp)) continue;
      const b = { addr, port: tp };
      if (ep.Scopes?.Internal) internal.set(`${addr}|${tp}`, b);
      if (ep.Scopes?.External) external.set(`${addr}|${tp}`, b);
    }
    const group = `${key}|${version}|${proto.name}|${port.Name || port.Port}|`;
    if (clusterIPs.length)
      out.push({
        name: `${group}internal`,
        endpoints: [...internal.values()].sort(byAddrPort),
        affinity,
        flags: svc.InternalTrafficToLocal ? GROUP_DROP : 0,
        frontends: frontKeys(version, proto.num, clusterIPs, port.Port),
      });
    const extFronts = [
      ...frontKeys(version, proto.num, extIPs, port.Port),
      ...(isPort(port.NodePort) ? frontKeys(version, proto.num, nodeAddrs, port.NodePort) : []),
    ];
    if (!extFronts.length) continue;
    const shortCircuit = svc.ExternalTrafficToLocal && internal.size > 0;
    out.push({
      name: `${group}external`,
      endpoints: [...(shortCircuit ? internal : external).values()].sort(byAddrPort),
      affinity,
      flags: svc.ExternalTrafficToLocal ? GROUP_DROP : 0,
      frontends: extFronts,
    });
  }
}
