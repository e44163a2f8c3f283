// The UDP destinations one service programs, in the shape the shared
// conntrack helper diffs (src/plugins/conntrack.ts). Pure.

import { Protocol, type Endpoint, type Service } from "../../src/gen/localv1/services_pb.ts";
import { canonicalIP, frontendKey, type UdpFrontend } from "../../src/plugins/conntrack.ts";
import { servicePortId, type Family } from "./names.ts";
import { inFamily } from "./render-fixed.ts";
import { hostPort, portEndpoints } from "./render-service.ts";

export function udpFrontends(service: Service, endpoints: ReadonlyMap<string, Endpoint>, family: Family): Map<string, UdpFrontend> {
  const out = new Map<string, UdpFrontend>();
  const fam = family === "v4" ? 4 : 6;
  const ips = (set: { V4: string[]; V6: string[] } | undefined) => ((family === "v4" ? set?.V4 : set?.V6) ?? []).filter((ip) => inFamily(ip, family));
  for (const pm of service.Ports) {
    if (pm.Protocol !== Protocol.UDP || pm.Port <= 0) continue;
    const eps = portEndpoints(servicePortId(service.Namespace, service.Name, "udp", pm.Port), pm, endpoints, family);
    const internal = eps.filter((e) => e.internal).map((e) => hostPort(canonicalIP(e.ip), e.port, family));
    // eTP=Local short-circuits pods to the internal endpoints: both sets are reachable.
    const external = eps.filter((e) => e.external || (service.ExternalTrafficToLocal && e.internal)).map((e) => hostPort(canonicalIP(e.ip), e.port, family));
    const add = (f: UdpFrontend) => out.set(frontendKey(f), f);
    for (const ip of ips(service.IPs?.ClusterIPs)) add({ ip: canonicalIP(ip), family: fam, port: pm.Port, endpoints: internal });
    for (const ip of [...ips(service.IPs?.ExternalIPs), ...ips(service.IPs?.LoadBalancerIPs)]) add({ ip: canonicalIP(ip), family: fam, port: pm.Port, endpoints: external });
    if (pm.NodePort > 0) add({ family: fam, port: pm.NodePort, endpoints: external });
  }
  return out;
}
