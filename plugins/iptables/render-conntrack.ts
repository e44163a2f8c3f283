// The UDP destinations one service programs, in the shape the shared
// conntrack helper diffs (src/host/toolkit/conntrack.ts). Pure.

import {
  canonicalIP,
  type Endpoint,
  type Family,
  frontendKey,
  hostPort,
  ipsOf,
  ipVersion,
  Protocol,
  type Service,
  type UdpFrontend,
} from "../../src/host/toolkit/index.ts";
import { servicePortId } from "./names.ts";
import { portEndpoints } from "./render-service.ts";

export function udpFrontends(service: Service, endpoints: ReadonlyMap<string, Endpoint>, family: Family): Map<string, UdpFrontend> {
  const out = new Map<string, UdpFrontend>();
  const fam = ipVersion(family);
  for (const pm of service.Ports) {
    if (pm.Protocol !== Protocol.UDP || pm.Port <= 0) continue;
    const eps = portEndpoints(servicePortId(service.Namespace, service.Name, "udp", pm.Port), pm, endpoints, family);
    const internal = eps.filter((e) => e.internal).map((e) => hostPort(canonicalIP(e.ip), e.port));
    // eTP=Local short-circuits pods to the internal endpoints: both sets are reachable.
    const external = eps
      .filter((e) => e.external || (service.ExternalTrafficToLocal && e.internal))
      .map((e) => hostPort(canonicalIP(e.ip), e.port));
    for (const ip of ipsOf(service.IPs?.ClusterIPs, family))
      add(out, { ip: canonicalIP(ip), family: fam, port: pm.Port, endpoints: internal });
    for (const ip of [...ipsOf(service.IPs?.ExternalIPs, family), ...ipsOf(service.IPs?.LoadBalancerIPs, family)])
      add(out, { ip: canonicalIP(ip), family: fam, port: pm.Port, endpoints: external });
    if (pm.NodePort > 0) add(out, { family: fam, port: pm.NodePort, endpoints: external });
  }
  return out;
}

const add = (out: Map<string, UdpFrontend>, f: UdpFrontend) => out.set(frontendKey(f), f);
